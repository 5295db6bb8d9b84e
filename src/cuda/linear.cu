// The kernels of linear(): GEMV for decode (memory-bound: every weight read once, in 16-byte loads),
// the bias fill and the activation split that go around cuBLAS's GEMM for batches.
#include "cuda/kernels.cuh"

namespace minigpt::cuda {
namespace {

constexpr int kGemvThreads = 128;  // 4 warps = 4 output rows per block: N = 768 still fills 132 SMs

template <typename W, int kT>
__global__ void __launch_bounds__(kGemvThreads)
    gemv_kernel(float* y, int64_t ldy, const float* __restrict__ x, int64_t ldx, const W* __restrict__ w,
                int64_t ldw, const float* __restrict__ bias, int64_t N, int64_t K, bool accumulate,
                bool has_act, Activation act, bool vec) {
  const int lane = threadIdx.x % 32;
  const int64_t n = int64_t(blockIdx.x) * (kGemvThreads / 32) + threadIdx.x / 32;
  if (n >= N) return;
  const W* wr = w + n * ldw;
  prefetch_l2(wr, K * int64_t(sizeof(W)), lane);  // before the wait: no kernel writes the weights
  pdl_wait();
  pdl_trigger();
  float acc[kT];
#pragma unroll
  for (int t = 0; t < kT; ++t) acc[t] = 0.0f;
  if (vec) {
    // 16 bytes of weights per lane per iteration; x (tiny, L1-resident) in float4s alongside.
    constexpr int kVec = 16 / sizeof(W);
#pragma unroll 4
    for (int64_t k0 = int64_t(lane) * kVec; k0 < K; k0 += 32 * kVec) {
      const uint4 raw = *reinterpret_cast<const uint4*>(wr + k0);
      const W* wv = reinterpret_cast<const W*>(&raw);
      float wf[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) wf[j] = to_float(wv[j]);
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        const float4* xv = reinterpret_cast<const float4*>(x + t * ldx + k0);
#pragma unroll
        for (int j = 0; j < kVec / 4; ++j) {
          const float4 xx = xv[j];
          acc[t] += wf[4 * j] * xx.x + wf[4 * j + 1] * xx.y + wf[4 * j + 2] * xx.z + wf[4 * j + 3] * xx.w;
        }
      }
    }
  } else {
    for (int64_t k = lane; k < K; k += 32) {
      const float wk = to_float(wr[k]);
#pragma unroll
      for (int t = 0; t < kT; ++t) acc[t] += wk * x[t * ldx + k];
    }
  }
  gemv_store<kT>(acc, lane, y, ldy, n, bias, accumulate, has_act, act);
}

template <typename W>
void gemv_typed(float* y, int64_t ldy, const float* x, int64_t ldx, const void* w_void, int64_t ldw,
                const float* bias, int64_t T, int64_t N, int64_t K, bool accumulate, const Activation* act,
                cudaStream_t stream) {
  const W* w = static_cast<const W*>(w_void);
  constexpr int64_t kVec = 16 / sizeof(W);
  auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vec = K % kVec == 0 && ldw % kVec == 0 && ldx % 4 == 0 && aligned16(w) && aligned16(x);
  const bool has_act = act != nullptr;
  const Activation a = act ? *act : Activation::Relu;
  if (T < 1 || T > kGemvMaxRows) {
    throw Error(ErrorKind::Argument, "cuda gemv: " + std::to_string(T) + " rows (at most 4)");
  }
  using Kernel = void (*)(float*, int64_t, const float*, int64_t, const W*, int64_t, const float*, int64_t,
                          int64_t, bool, bool, Activation, bool);
  const Kernel kKernels[4] = {gemv_kernel<W, 1>, gemv_kernel<W, 2>, gemv_kernel<W, 3>, gemv_kernel<W, 4>};
  launch(kKernels[T - 1], blocks_for(N, kGemvThreads / 32), kGemvThreads, 0, stream, y, ldy, x, ldx, w, ldw,
         bias, N, K, accumulate, has_act, a, vec);
}

__global__ void bias_fill_kernel(float* out, int64_t ldo, const float* bias, int64_t N, bool accumulate) {
  float* row = out + int64_t(blockIdx.y) * ldo;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < N;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float b = bias ? bias[i] : 0.0f;
    row[i] = accumulate ? row[i] + b : b;
  }
}

template <typename H>
__global__ void split16_kernel(H* hi, H* lo, const float* x, int64_t ldx, int64_t K) {
  const int64_t t = blockIdx.y;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < K;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float v = x[t * ldx + i];
    const H h = from_float<H>(v);
    hi[t * K + i] = h;
    lo[t * K + i] = from_float<H>(v - to_float(h));
  }
}

}  // namespace

void gemv(float* y, int64_t ldy, const float* x, int64_t ldx, const void* w, DType w_dtype, int64_t ldw,
          const float* bias, int64_t T, int64_t N, int64_t K, bool accumulate, const Activation* act,
          cudaStream_t stream) {
  switch (w_dtype) {
    case DType::F32:
      return gemv_typed<float>(y, ldy, x, ldx, w, ldw, bias, T, N, K, accumulate, act, stream);
    case DType::F16:
      return gemv_typed<__half>(y, ldy, x, ldx, w, ldw, bias, T, N, K, accumulate, act, stream);
    case DType::BF16:
      return gemv_typed<__nv_bfloat16>(y, ldy, x, ldx, w, ldw, bias, T, N, K, accumulate, act, stream);
    default:
      throw Error(ErrorKind::Argument, "cuda gemv: weights must be F32, F16 or BF16");
  }
}

void bias_fill(float* out, int64_t ldo, const float* bias, int64_t T, int64_t N, bool accumulate,
               cudaStream_t stream) {
  constexpr int kThreads = 256;
  bias_fill_kernel<<<dim3(blocks_for(N, kThreads), unsigned(T)), kThreads, 0, stream>>>(out, ldo, bias, N,
                                                                                        accumulate);
  CUDA_CHECK_LAUNCH();
}

void split16(void* hi, void* lo, DType dtype, const float* x, int64_t ldx, int64_t T, int64_t K,
             cudaStream_t stream) {
  constexpr int kThreads = 256;
  const dim3 grid(blocks_for(K, kThreads), unsigned(T));
  if (dtype == DType::BF16) {
    split16_kernel<<<grid, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(hi),
                                                  static_cast<__nv_bfloat16*>(lo), x, ldx, K);
  } else if (dtype == DType::F16) {
    split16_kernel<<<grid, kThreads, 0, stream>>>(static_cast<__half*>(hi), static_cast<__half*>(lo), x, ldx,
                                                  K);
  } else {
    throw Error(ErrorKind::Argument, "cuda split16: dtype must be F16 or BF16");
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace minigpt::cuda
