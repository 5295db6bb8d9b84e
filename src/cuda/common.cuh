// What every file of the CUDA backend shares: checked calls (file:line, the call, CUDA's own words),
// element loads and stores of the three float types, and the per-step values kernels read.
//
// Included by the kernels (.cu, nvcc, C++17) and by the backend (cuda_backend.cpp, the host compiler, C++20,
// as backend.h needs): the device-side helpers are compiled only by nvcc (__CUDACC__).
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "minigpt/config.h"
#include "minigpt/error.h"
#include "minigpt/tensor.h"

namespace minigpt::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t s, const char* call, const char* file, int line);

// Throws Error(Device) "CUDA error at file:line: call: message (name)".
#define CUDA_CHECK(expr)                                                             \
  do {                                                                               \
    const cudaError_t cuda_check_err_ = (expr);                                      \
    if (cuda_check_err_ != cudaSuccess) {                                            \
      ::minigpt::cuda::throw_cuda_error(cuda_check_err_, #expr, __FILE__, __LINE__); \
    }                                                                                \
  } while (0)
#define CUBLAS_CHECK(expr)                                                                  \
  do {                                                                                      \
    const cublasStatus_t cublas_check_status_ = (expr);                                     \
    if (cublas_check_status_ != CUBLAS_STATUS_SUCCESS) {                                    \
      ::minigpt::cuda::throw_cublas_error(cublas_check_status_, #expr, __FILE__, __LINE__); \
    }                                                                                       \
  } while (0)
// After a <<<>>> launch: a bad configuration (grid, shared memory) shows up here, not at the launch.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

// Programmatic dependent launch (compute capability 9.0 and newer). On a stream that has it on, a kernel
// queued by launch() below may be scheduled while the kernel before it is still running, so that its start,
// and its reads of what no kernel writes (the weights), overlap the end of that kernel instead of following
// it: a decode step is ~110 kernels of a few microseconds each, most of it launch and ramp-up.
// So every kernel that launch() queues calls pdl_wait() before it reads or writes anything another kernel
// reads or writes: the wait returns once the kernel before has finished and its writes are visible (and is a
// no-op after an ordinary launch). Then pdl_trigger() lets the next one be scheduled. The kernels launched
// with <<<>>> and cuBLAS's follow the stream order as always.
void set_pdl(cudaStream_t stream, bool on);  // off for every stream until set
bool pdl(cudaStream_t stream);

// A per-step integer (pos0): read from device memory when `dev` is set, which is how a recorded CUDA
// graph sees a new value on every replay; else the value passed at launch.
struct StepValue {
  const int32_t* dev = nullptr;
  int32_t value = 0;
#ifdef __CUDACC__
  __device__ __forceinline__ int32_t get() const { return dev ? *dev : value; }
#endif
};

#ifdef __CUDACC__

// Element access for F32, F16 (__half) and BF16 (__nv_bfloat16) storage.
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// The L2 lines of [p, p + bytes) requested now, a lane per 128-byte line (a warp's share of a row of weights
// fetched while the kernel before still runs).
__device__ __forceinline__ void prefetch_l2(const void* p, int64_t bytes, int lane) {
  const char* c = static_cast<const char*>(p);
  for (int64_t b = int64_t(lane) * 128; b < bytes; b += 32 * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(c + b));
}

// kernel<<<grid, block, smem, stream>>>(args...), with programmatic dependent launch where pdl(stream) says.
// The kernel must call pdl_wait() first (see set_pdl).
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            Args... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = pdl(stream) ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...));
}

// The activations, as the CPU backend computes them (accurate tanhf / erff, no fast-math intrinsics).
__device__ __forceinline__ float activate(float x, Activation act) {
  switch (act) {
    case Activation::GeluTanh:
      return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case Activation::GeluErf:
      return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
    case Activation::Relu:
      return x > 0.0f ? x : 0.0f;
    case Activation::Silu:  // x / (1 + e^-x): for x < -88, e^-x = inf and the quotient -0
      return x / (1.0f + expf(-x));
  }
  return x;
}

// The end of a warp-per-output GEMV: each of the kT sums reduced over the warp, then lane 0 writes
// y[t][n] = act((y[t][n] if accumulate) + bias[n] + sum).
template <int kT>
__device__ __forceinline__ void gemv_store(float (&acc)[kT], int lane, float* y, int64_t ldy, int64_t n,
                                           const float* bias, bool accumulate, bool has_act, Activation act) {
#pragma unroll
  for (int t = 0; t < kT; ++t) acc[t] = warp_sum(acc[t]);
  if (lane != 0) return;
  const float b = bias ? bias[n] : 0.0f;
#pragma unroll
  for (int t = 0; t < kT; ++t) {
    float v = acc[t] + b;
    if (accumulate) v += y[t * ldy + n];
    if (has_act) v = activate(v, act);
    y[t * ldy + n] = v;
  }
}

#endif  // __CUDACC__

inline unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

}  // namespace minigpt::cuda
