// The seam between the core and the CUDA backend module (libminigpt-cuda.so).
//
// The CUDA backend is built as a separate shared module so that a CPU-only run neither maps nor needs the
// CUDA libraries: the core (cuda_loader.cpp) dlopens the module on the first call of make_cuda_backend()
// cuda_available() or cuda_devices(), and finds these extern "C" entry points in it (src/cuda/module.cpp
// defines them; everything else in the module is local to it). They pass C++ types: the module is built by
// the same compiler from the same tree, which minigpt_cuda_abi() lets the loader check, and minigpt::Error
// thrown inside the module reaches the caller as minigpt::Error.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda.h"
#include "minigpt/backend.h"

namespace minigpt::cuda_module {
// The module's file name: looked for as $MINIGPT_CUDA_MODULE, else beside the executable, else on the
// library search path.
inline constexpr const char* kFileName = "libminigpt-cuda.so";
}  // namespace minigpt::cuda_module

extern "C" {
// A digest of the interface headers the module was built against (backend.h, cuda.h, tensor.h, config.h,
// error.h, this file) and of the compiler: the loader refuses a module whose digest differs from its own.
const char* minigpt_cuda_abi();
// cuda_available() of the module.
bool minigpt_cuda_available(std::string* why);
// *out = make_cuda_backend(*options); throws minigpt::Error as it does.
void minigpt_cuda_make_backend(const minigpt::CudaOptions* options, std::shared_ptr<minigpt::Backend>* out);
// *out = cuda_devices() of the module (empty when its cuda_available() is false); throws minigpt::Error.
void minigpt_cuda_devices(std::vector<minigpt::CudaDeviceInfo>* out);
}
