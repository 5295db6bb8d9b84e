// The CUDA entry points of a build without nvcc: they say so instead of failing to link.
#include "minigpt/backend.h"
#include "minigpt/error.h"

namespace minigpt {

namespace {
constexpr const char* kNoCuda = "this minigpt was built without CUDA (nvcc not found at build time)";
}

std::shared_ptr<Backend> make_cuda_backend(int) { throw Error(ErrorKind::Unsupported, kNoCuda); }
std::shared_ptr<Backend> make_cuda_backend(const CudaOptions&) { throw Error(ErrorKind::Unsupported, kNoCuda); }

bool cuda_available(std::string* why) {
  if (why) *why = kNoCuda;
  return false;
}

}  // namespace minigpt
