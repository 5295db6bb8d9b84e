// The checked-call failures of common.cuh: one line saying where, which call and what CUDA said.
#include <string>

#include "cuda/common.cuh"

namespace minigpt::cuda {

void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  std::string msg = std::string("CUDA error at ") + file + ":" + std::to_string(line) + ": " + call + ": " +
                    cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")";
  if (e == cudaErrorMemoryAllocation) msg += "; hint: the model and KV cache do not fit in the GPU's memory";
  throw Error(ErrorKind::Device, msg);
}

void throw_cublas_error(cublasStatus_t s, const char* call, const char* file, int line) {
  throw Error(ErrorKind::Device, std::string("cuBLAS error at ") + file + ":" + std::to_string(line) + ": " +
                                     call + ": " + cublasGetStatusString(s) + " (" + cublasGetStatusName(s) +
                                     ")");
}

}  // namespace minigpt::cuda
