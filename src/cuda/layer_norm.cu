// norm: one block per row. LayerNorm: the mean, then the variance around it (two passes, as the CPU backend
// does, so no cancellation from E[x^2] - E[x]^2 on rows with a large mean). RMSNorm: the mean of the squares
// (one pass, as transformers' LlamaRMSNorm), no mean subtracted. norm_heads: the same per head of a row.
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
                int64_t C, float eps, int heads) {
  __shared__ float shared[kThreads / 32];
  pdl_wait();
  pdl_trigger();
  // Block r normalizes part r % heads (C wide) of row r / heads: a whole row when heads is 1.
  const int64_t row = int64_t(blockIdx.x) / heads, part = int64_t(blockIdx.x) % heads;
  const float* x = in + row * ldi + part * C;
  float* y = out + row * ldo + part * C;
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
    launch(norm_kernel<true>, unsigned(T), kThreads, 0, stream, out, ldo, in, ldi, w, b, C, eps, 1);
  } else {
    launch(norm_kernel<false>, unsigned(T), kThreads, 0, stream, out, ldo, in, ldi, w, b, C, eps, 1);
  }
}

void norm_heads(float* x, int64_t ldx, int64_t T, int64_t H, int64_t D, const float* w, NormKind kind,
                float eps, cudaStream_t stream) {
  if (T == 0) return;
  if (kind == NormKind::Rms) {
    launch(norm_kernel<true>, unsigned(T * H), kThreads, 0, stream, x, ldx, static_cast<const float*>(x), ldx,
           w, static_cast<const float*>(nullptr), D, eps, int(H));
  } else {
    launch(norm_kernel<false>, unsigned(T * H), kThreads, 0, stream, x, ldx, static_cast<const float*>(x),
           ldx, w, static_cast<const float*>(nullptr), D, eps, int(H));
  }
}

}  // namespace minigpt::cuda
