// The entry points libminigpt-cuda.so exports (src/cuda/cuda_module.h): thin wrappers over the backend's
// factory in cuda_backend.cpp. src/cuda/module.map makes them the module's only exported symbols.
#include "cuda/cuda_module.h"

#ifndef MINIGPT_CUDA_ABI
#error "MINIGPT_CUDA_ABI must be defined (CMakeLists.txt computes it)"
#endif

extern "C" {

const char* minigpt_cuda_abi() { return MINIGPT_CUDA_ABI; }

bool minigpt_cuda_available(std::string* why) { return minigpt::cuda_available(why); }

void minigpt_cuda_make_backend(const minigpt::CudaOptions* options, std::shared_ptr<minigpt::Backend>* out) {
  *out = minigpt::make_cuda_backend(*options);
}

void minigpt_cuda_devices(std::vector<minigpt::CudaDeviceInfo>* out) { *out = minigpt::cuda_devices(); }

}  // extern "C"
