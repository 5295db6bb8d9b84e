// The CUDA backend on one GPU: cuBLAS for batched matrix products, own kernels for the rest (GEMV for
// decode, flash-style attention). It lives in a module (libminigpt-cuda.so) loaded on first use, so a
// CPU-only run never maps the CUDA libraries.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "minigpt/backend.h"

namespace minigpt {

struct CudaOptions {
  int device = 0;
  DType kv_dtype = DType::F16;  // F16, BF16 or F32
  // Record the decode step (one token of one sequence) as a CUDA graph and replay it. Default: on, unless
  // the environment sets MINIGPT_CUDA_GRAPHS=0.
  bool graphs = true;
  // Programmatic dependent launch on compute capability 9.0 and newer: each decode kernel may start while
  // the one before it ends (src/cuda/common.cuh, set_pdl). Default: on, unless MINIGPT_CUDA_PDL=0.
  bool pdl = true;
  // Prefill attention on tensor cores where it applies (an F16 cache, head dim a multiple of 16 up to 128;
  // src/cuda/attention.cu), else the scalar F32 kernel. Default: on, unless MINIGPT_CUDA_MMA_ATTENTION=0.
  bool mma_attention = true;
};
// Throws Error(Unsupported) when this build has no CUDA or when there is no usable device or driver.
std::shared_ptr<Backend> make_cuda_backend(int device = 0);
std::shared_ptr<Backend> make_cuda_backend(const CudaOptions& options);
// Whether make_cuda_backend can succeed: built with CUDA, and a driver and a device are present. When not,
// `why` (if given) receives the reason in one line.
bool cuda_available(std::string* why = nullptr);

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  size_t memory_bytes = 0;
  double peak_bandwidth_gb_s = 0.0;  // as its maker states it (memory clock x bus width)
};
// The devices the driver reports (empty when cuda_available() is false).
std::vector<CudaDeviceInfo> cuda_devices();

}  // namespace minigpt
