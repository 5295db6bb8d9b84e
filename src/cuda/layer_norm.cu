// norm: one block per row. LayerNorm: the mean, then the variance around it (two passes, as the CPU backend
// does, so no cancellation from E[x^2] - E[x]^2 on rows with a large mean). RMSNorm: the mean of the squares
// (one pass, as transformers' LlamaRMSNorm), no mean subtracted.
#include "cuda/kernels.cuh"

namespace minigpt::cuda {
namespace {

constexpr int kThreads = 256;

// The sum of `v` over the block, returned to every thread. `shared` holds kThreads / 32 floats.
__device__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  __syncthreads();  // `shared` may still be read from a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) total += shared[w];
  return total;
}

template <bool kRms>
__global__ void __launch_bounds__(kThreads)
    norm_kernel(float* out, int64_t ldo, const float* in, int64_t ldi, const float* w, const float* b,
                int64_t C, float eps) {
  __shared__ float shared[kThreads / 32];
  pdl_wait();
  pdl_trigger();
  const float* x = in + int64_t(blockIdx.x) * ldi;
  float* y = out + int64_t(blockIdx.x) * ldo;
  float mean = 0.0f;  // RMSNorm: none
  if (!kRms) {
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < C; i += kThreads) s += x[i];
    mean = block_sum(s, shared) / float(C);
  }
  float v = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += kThreads) v += (x[i] - mean) * (x[i] - mean);
  const float rstd = 1.0f / sqrtf(block_sum(v, shared) / float(C) + eps);
  if (b) {
    for (int64_t i = threadIdx.x; i < C; i += kThreads) y[i] = (x[i] - mean) * rstd * w[i] + b[i];
  } else {
    for (int64_t i = threadIdx.x; i < C; i += kThreads) y[i] = (x[i] - mean) * rstd * w[i];
  }
}

}  // namespace

void norm(float* out, int64_t ldo, const float* in, int64_t ldi, const float* w, const float* b, int64_t T,
          int64_t C, NormKind kind, float eps, cudaStream_t stream) {
  if (kind == NormKind::Rms) {
    launch(norm_kernel<true>, unsigned(T), kThreads, 0, stream, out, ldo, in, ldi, w, b, C, eps);
  } else {
    launch(norm_kernel<false>, unsigned(T), kThreads, 0, stream, out, ldo, in, ldi, w, b, C, eps);
  }
}

}  // namespace minigpt::cuda
