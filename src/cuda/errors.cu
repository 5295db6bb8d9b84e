// The checked-call failures of common.cuh (one line saying where, which call and what CUDA said), and which
// streams launch with programmatic dependent launch.
#include <mutex>
#include <set>
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

namespace {
std::mutex pdl_mutex;
std::set<cudaStream_t> pdl_streams;
}  // namespace

void set_pdl(cudaStream_t stream, bool on) {
  std::lock_guard<std::mutex> lock(pdl_mutex);
  if (on) {
    pdl_streams.insert(stream);
  } else {
    pdl_streams.erase(stream);
  }
}

bool pdl(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(pdl_mutex);
  return pdl_streams.count(stream) != 0;
}

}  // namespace minigpt::cuda
