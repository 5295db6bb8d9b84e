// Quantized weights (GGUF blocks, held as the file holds them: [N, K] rows of blocks): the decode GEMV, the
// widening to F16 hi + lo halves that a batch's cuBLAS GEMMs take, and the embedding rows of a quantized
// token table. The values come from piece() / slice8(), the same formulas as the CPU's dequantizer
// (src/quant/dequant.cpp, checked bit for bit against the gguf package): the product is the F32 product of
// the dequantized weights (to ~2^-21 for a batch), as the CPU's prefill on widened tiles.
#include "cuda/kernels.cuh"

namespace minigpt::cuda {
namespace {

__device__ inline float half_at(const uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(p[0] | (p[1] << 8))));
}
__device__ inline uint32_t u32_at(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}
// The six-bit scale and min of sub-block j of a Q4_K / Q5_K block's 12 scale bytes.
__device__ inline void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// y[l] = value 32 p + l of the block at b (p < values per block / 32).
__device__ void piece(QuantType t, const uint8_t* b, int p, float* y) {
  switch (t) {
    case QuantType::Q8_0: {
      const float d = half_at(b);
      for (int l = 0; l < 32; ++l) y[l] = d * float(int8_t(b[2 + l]));
      break;
    }
    case QuantType::Q4_0: {
      const float d = half_at(b);
      for (int l = 0; l < 16; ++l) {
        y[l] = d * float(int(b[2 + l] & 0xF) - 8);
        y[l + 16] = d * float(int(b[2 + l] >> 4) - 8);
      }
      break;
    }
    case QuantType::Q4_1: {
      const float d = half_at(b), m = half_at(b + 2);
      for (int l = 0; l < 16; ++l) {
        y[l] = d * float(b[4 + l] & 0xF) + m;
        y[l + 16] = d * float(b[4 + l] >> 4) + m;
      }
      break;
    }
    case QuantType::Q5_0:
    case QuantType::Q5_1: {
      const bool one = t == QuantType::Q5_1;
      const float d = half_at(b), m = one ? half_at(b + 2) : 0.0f;
      const uint32_t qh = u32_at(b + (one ? 4 : 2));
      const uint8_t* qs = b + (one ? 8 : 6);
      const int offset = one ? 0 : 16;
      for (int l = 0; l < 16; ++l) {
        const int lo = (qs[l] & 0xF) | int(((qh >> l) & 1u) << 4);
        const int hi = (qs[l] >> 4) | int(((qh >> (l + 16)) & 1u) << 4);
        y[l] = d * float(lo - offset) + m;
        y[l + 16] = d * float(hi - offset) + m;
      }
      break;
    }
    case QuantType::Q4_K:
    case QuantType::Q5_K: {
      // piece p: chunk c = p / 2 of 64 values, its low (p even) or high nibbles; scale and min p
      const bool five = t == QuantType::Q5_K;
      const float d = half_at(b), dmin = half_at(b + 2);
      int sc, m;
      scale_min_k4(p, b + 4, &sc, &m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      const uint8_t* q = b + (five ? 48 : 16) + 32 * (p / 2);
      for (int l = 0; l < 32; ++l) {
        int v = p % 2 == 0 ? q[l] & 0xF : q[l] >> 4;
        if (five) v |= ((b[16 + l] >> p) & 1) << 4;
        y[l] = d1 * float(v) - m1;
      }
      break;
    }
    case QuantType::Q6_K: {
      // piece p: half h = p / 4 of 128 values, group k = p % 4 in it
      const int h = p / 4, k = p % 4;
      const uint8_t* ql = b + 64 * h + 32 * (k & 1);
      const uint8_t* qh = b + 128 + 32 * h;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
      const float d = half_at(b + 208);
      for (int l = 0; l < 32; ++l) {
        const int v = ((k < 2 ? ql[l] & 0xF : ql[l] >> 4) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
        y[l] = d * float(sc[(128 * h + 32 * k + l) / 16]) * float(v);
      }
      break;
    }
  }
}

// The piece i of a row (i < K / 32) at w + row * row_bytes.
__device__ inline void row_piece(const QuantFormat& f, const uint8_t* w, int64_t row, int64_t i, float* y) {
  const int per_block = f.block / 32;
  piece(f.type, w + row * f.row_bytes + (i / per_block) * f.block_bytes, int(i % per_block), y);
}

constexpr int kGemvThreads = 128;  // 4 warps = 4 output rows per block

// Values per block and bytes per block of each type (check_layout holds the format to them).
__host__ __device__ constexpr int block_values(QuantType t) {
  return t == QuantType::Q4_K || t == QuantType::Q5_K || t == QuantType::Q6_K ? 256 : 32;
}
__host__ __device__ constexpr int block_bytes(QuantType t) {
  switch (t) {
    case QuantType::Q8_0:
      return 34;
    case QuantType::Q4_0:
      return 18;
    case QuantType::Q4_1:
      return 20;
    case QuantType::Q5_0:
      return 22;
    case QuantType::Q5_1:
      return 24;
    case QuantType::Q4_K:
      return 144;
    case QuantType::Q5_K:
      return 176;
    case QuantType::Q6_K:
      return 210;
  }
  return 0;
}

// y[j] = value v0 + j (j < 8, v0 a multiple of 8) of piece p of the block at b: piece()'s formulas, for the
// eight values one lane of the GEMV takes.
template <QuantType Q>
__device__ __forceinline__ void slice8(const uint8_t* b, int p, int v0, float* y) {
  if constexpr (Q == QuantType::Q8_0) {
    const float d = half_at(b);
#pragma unroll
    for (int j = 0; j < 8; ++j) y[j] = d * float(int8_t(b[2 + v0 + j]));
  } else if constexpr (Q == QuantType::Q4_0 || Q == QuantType::Q4_1) {
    constexpr bool one = Q == QuantType::Q4_1;
    const float d = half_at(b), m = one ? half_at(b + 2) : 0.0f;
    const uint8_t* qs = b + (one ? 4 : 2) + v0 % 16;
    const bool high = v0 >= 16;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int q = high ? qs[j] >> 4 : qs[j] & 0xF;
      y[j] = one ? d * float(q) + m : d * float(q - 8);
    }
  } else if constexpr (Q == QuantType::Q5_0 || Q == QuantType::Q5_1) {
    constexpr bool one = Q == QuantType::Q5_1;
    const float d = half_at(b), m = one ? half_at(b + 2) : 0.0f;
    const uint32_t qh = u32_at(b + (one ? 4 : 2));
    const uint8_t* qs = b + (one ? 8 : 6) + v0 % 16;
    const bool high = v0 >= 16;
    constexpr int offset = one ? 0 : 16;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      // value v = v0 + j: nibble of byte v % 16 (low for v < 16), fifth bit qh bit v
      const int q = (high ? qs[j] >> 4 : qs[j] & 0xF) | int(((qh >> (v0 + j)) & 1u) << 4);
      y[j] = d * float(q - offset) + m;
    }
  } else if constexpr (Q == QuantType::Q4_K || Q == QuantType::Q5_K) {
    constexpr bool five = Q == QuantType::Q5_K;
    const float d = half_at(b), dmin = half_at(b + 2);
    int sc, m;
    scale_min_k4(p, b + 4, &sc, &m);
    const float d1 = d * float(sc), m1 = dmin * float(m);
    const uint8_t* q = b + (five ? 48 : 16) + 32 * (p / 2) + v0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      int v = p % 2 == 0 ? q[j] & 0xF : q[j] >> 4;
      if (five) v |= ((b[16 + v0 + j] >> p) & 1) << 4;
      y[j] = d1 * float(v) - m1;
    }
  } else {
    static_assert(Q == QuantType::Q6_K);
    const int h = p / 4, k = p % 4;
    const uint8_t* ql = b + 64 * h + 32 * (k & 1) + v0;
    const uint8_t* qh = b + 128 + 32 * h + v0;
    // values v0 .. v0 + 7 share one of the 16-value scales
    const float ds =
        half_at(b + 208) * float(reinterpret_cast<const int8_t*>(b + 192)[(128 * h + 32 * k + v0) / 16]);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int v = ((k < 2 ? ql[j] & 0xF : ql[j] >> 4) | (((qh[j] >> (2 * k)) & 3) << 4)) - 32;
      y[j] = ds * float(v);
    }
  }
}

// A warp per output row; four lanes per 32-value piece (eight values each), so a warp reads eight pieces of
// the row per pass, each lane's bytes next to its neighbours'. x: 8 floats per lane per row t (float4 loads
// where aligned).
template <QuantType Q, int kT>
__global__ void __launch_bounds__(kGemvThreads)
    gemv_quant_kernel(float* y, int64_t ldy, const float* __restrict__ x, int64_t ldx,
                      const uint8_t* __restrict__ w, int64_t row_bytes, const float* __restrict__ bias,
                      int64_t N, int64_t K, bool accumulate, bool has_act, Activation act, bool vec) {
  constexpr int kPer = block_values(Q) / 32;  // pieces per block
  constexpr int kBytes = block_bytes(Q);
  const int lane = threadIdx.x % 32;
  const int64_t n = int64_t(blockIdx.x) * (kGemvThreads / 32) + threadIdx.x / 32;
  if (n >= N) return;
  const uint8_t* row = w + n * row_bytes;
  prefetch_l2(row, row_bytes, lane);  // before the wait: no kernel writes the weights
  pdl_wait();
  pdl_trigger();
  const int v0 = 8 * (lane % 4);
  float acc[kT];
#pragma unroll
  for (int t = 0; t < kT; ++t) acc[t] = 0.0f;
  for (int64_t i = lane / 4; i < K / 32; i += 8) {
    float v[8];
    slice8<Q>(row + (i / kPer) * kBytes, int(i % kPer), v0, v);
#pragma unroll
    for (int t = 0; t < kT; ++t) {
      const float* xt = x + t * ldx + 32 * i + v0;
      float s = 0.0f;
      if (vec) {
        const float4 a = *reinterpret_cast<const float4*>(xt), c = *reinterpret_cast<const float4*>(xt + 4);
        s = v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * c.x + v[5] * c.y + v[6] * c.z +
            v[7] * c.w;
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) s += v[j] * xt[j];
      }
      acc[t] += s;
    }
  }
  gemv_store<kT>(acc, lane, y, ldy, n, bias, accumulate, has_act, act);
}

// W[r, k] = hi[r, k] + lo[r, k] in F16 halves (hi = round(W), lo = round(W - hi)): four threads per 32-value
// piece, eight values each (slice8), so a warp writes eight neighbouring pieces in a row per pass.
template <QuantType Q>
__global__ void widen_quant16_kernel(__half* hi, __half* lo, int64_t ld, const uint8_t* __restrict__ w,
                                     int64_t row_bytes, int64_t rows, int64_t K, bool vec) {
  constexpr int kPer = block_values(Q) / 32;
  constexpr int kBytes = block_bytes(Q);
  const int64_t slices = K / 8;
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < rows * slices;
       g += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = g / slices, s = g % slices, i = s / 4;
    float v[8];
    slice8<Q>(w + r * row_bytes + (i / kPer) * kBytes, int(i % kPer), 8 * int(s % 4), v);
    __align__(16) __half h[8], l[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      h[j] = __float2half_rn(v[j]);
      l[j] = __float2half_rn(v[j] - __half2float(h[j]));
    }
    const int64_t o = r * ld + 8 * s;
    if (vec) {
      *reinterpret_cast<uint4*>(hi + o) = *reinterpret_cast<const uint4*>(h);
      *reinterpret_cast<uint4*>(lo + o) = *reinterpret_cast<const uint4*>(l);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        hi[o + j] = h[j];
        lo[o + j] = l[j];
      }
    }
  }
}

// out[t] = W[tokens[t]] (+ wpe[pos0 + t]): one thread per piece of a token's row.
__global__ void embed_quant_kernel(float* out, int64_t ldo, const int32_t* tokens, StepValue pos0,
                                   const uint8_t* __restrict__ w, QuantFormat f, const float* wpe,
                                   int64_t ld_wpe, int64_t C) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.y;
  const int64_t pieces = C / 32;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < pieces;
       i += int64_t(gridDim.x) * blockDim.x) {
    float v[32];
    row_piece(f, w, tokens[t], i, v);
    float* o = out + t * ldo + 32 * i;
    const float* p = wpe ? wpe + (int64_t(pos0.get()) + t) * ld_wpe + 32 * i : nullptr;
#pragma unroll
    for (int l = 0; l < 32; ++l) o[l] = p ? v[l] + p[l] : v[l];
  }
}

void check_format(const QuantFormat& f, int64_t K, const char* what) {
  if (f.block < 32 || f.block % 32 != 0 || K % f.block != 0 || f.row_bytes != (K / f.block) * f.block_bytes) {
    throw Error(ErrorKind::Argument, std::string(what) + ": K = " + std::to_string(K) +
                                         " is not a whole number of blocks of the format");
  }
}

}  // namespace

template <QuantType Q>
void gemv_quant_typed(float* y, int64_t ldy, const float* x, int64_t ldx, const uint8_t* w, int64_t row_bytes,
                      const float* bias, int64_t T, int64_t N, int64_t K, bool accumulate, bool has_act,
                      Activation act, bool vec, cudaStream_t stream) {
  using Kernel = void (*)(float*, int64_t, const float*, int64_t, const uint8_t*, int64_t, const float*,
                          int64_t, int64_t, bool, bool, Activation, bool);
  const Kernel kKernels[4] = {gemv_quant_kernel<Q, 1>, gemv_quant_kernel<Q, 2>, gemv_quant_kernel<Q, 3>,
                              gemv_quant_kernel<Q, 4>};
  launch(kKernels[T - 1], blocks_for(N, kGemvThreads / 32), kGemvThreads, 0, stream, y, ldy, x, ldx, w,
         row_bytes, bias, N, K, accumulate, has_act, act, vec);
}

void gemv_quant(float* y, int64_t ldy, const float* x, int64_t ldx, const void* w, const QuantFormat& f,
                const float* bias, int64_t T, int64_t N, int64_t K, bool accumulate, const Activation* act,
                cudaStream_t stream) {
  check_format(f, K, "cuda gemv_quant");
  if (f.block != block_values(f.type) || f.block_bytes != block_bytes(f.type)) {
    throw Error(ErrorKind::Argument, "cuda gemv_quant: the format's block is not its type's");
  }
  const auto* wb = static_cast<const uint8_t*>(w);
  const bool has_act = act != nullptr;
  const Activation a = act ? *act : Activation::Relu;
  if (T < 1 || T > 4) {
    throw Error(ErrorKind::Argument, "cuda gemv_quant: " + std::to_string(T) + " rows (at most 4)");
  }
  const bool vec = ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
#define MINIGPT_GEMV_QUANT(Q)                                                                              \
  case QuantType::Q:                                                                                       \
    gemv_quant_typed<QuantType::Q>(y, ldy, x, ldx, wb, f.row_bytes, bias, T, N, K, accumulate, has_act, a, \
                                   vec, stream);                                                           \
    break;
  switch (f.type) {
    MINIGPT_GEMV_QUANT(Q8_0)
    MINIGPT_GEMV_QUANT(Q4_0)
    MINIGPT_GEMV_QUANT(Q4_1)
    MINIGPT_GEMV_QUANT(Q5_0)
    MINIGPT_GEMV_QUANT(Q5_1)
    MINIGPT_GEMV_QUANT(Q4_K)
    MINIGPT_GEMV_QUANT(Q5_K)
    MINIGPT_GEMV_QUANT(Q6_K)
  }
#undef MINIGPT_GEMV_QUANT
  CUDA_CHECK_LAUNCH();
}

void widen_quant16(void* hi, void* lo, int64_t ld, const void* w, const QuantFormat& f, int64_t rows,
                   int64_t K, cudaStream_t stream) {
  check_format(f, K, "cuda widen_quant16");
  if (f.block != block_values(f.type) || f.block_bytes != block_bytes(f.type)) {
    throw Error(ErrorKind::Argument, "cuda widen_quant16: the format's block is not its type's");
  }
  constexpr int kThreads = 256;
  auto* h = static_cast<__half*>(hi);
  auto* l = static_cast<__half*>(lo);
  const auto* wb = static_cast<const uint8_t*>(w);
  auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vec = ld % 8 == 0 && aligned16(hi) && aligned16(lo);
  const unsigned grid = blocks_for(rows * (K / 8), kThreads);
#define MINIGPT_WIDEN_QUANT(Q)                                                    \
  case QuantType::Q:                                                              \
    widen_quant16_kernel<QuantType::Q>                                            \
        <<<grid, kThreads, 0, stream>>>(h, l, ld, wb, f.row_bytes, rows, K, vec); \
    break;
  switch (f.type) {
    MINIGPT_WIDEN_QUANT(Q8_0)
    MINIGPT_WIDEN_QUANT(Q4_0)
    MINIGPT_WIDEN_QUANT(Q4_1)
    MINIGPT_WIDEN_QUANT(Q5_0)
    MINIGPT_WIDEN_QUANT(Q5_1)
    MINIGPT_WIDEN_QUANT(Q4_K)
    MINIGPT_WIDEN_QUANT(Q5_K)
    MINIGPT_WIDEN_QUANT(Q6_K)
  }
#undef MINIGPT_WIDEN_QUANT
  CUDA_CHECK_LAUNCH();
}

void embed_quant(float* out, int64_t ldo, const int32_t* tokens, int64_t T, StepValue pos0, const void* w,
                 const QuantFormat& f, const float* wpe, int64_t ld_wpe, int64_t C, cudaStream_t stream) {
  check_format(f, C, "cuda embed_quant");
  constexpr int kThreads = 64;
  const dim3 grid(blocks_for(C / 32, kThreads), unsigned(T));
  launch(embed_quant_kernel, grid, kThreads, 0, stream, out, ldo, tokens, pos0,
         static_cast<const uint8_t*>(w), f, wpe, ld_wpe, C);
  CUDA_CHECK_LAUNCH();
}

}  // namespace minigpt::cuda
