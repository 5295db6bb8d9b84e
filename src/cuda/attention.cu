// attention: causal softmax(scale q k^T) v per head over the KV cache, in F32 arithmetic on K/V widened from
// the cache dtype. Online softmax (running max m, running sum l, output rescaled when m grows), the
// CPU backend's algorithm on the GPU, so neither kernel ever holds a row of scores.
#include <cmath>

#include "cuda/kernels.cuh"

namespace minigpt::cuda {
namespace {

constexpr int kTile = 32;                       // keys per step: one per lane
constexpr int kChunks = int(kMaxHeadDim / 32);  // head dims per lane: d = lane + 32 i
constexpr int kPrefillWarps = 8;                // queries per block (one per warp) sharing each K/V tile
constexpr int kDecodeWarps = 4;

size_t prefill_smem(int64_t D) {
  return size_t(kTile * (D + 1) + kTile * D + kPrefillWarps * D) * sizeof(float);
}
// q_s takes D rounded up to 4 floats: the compiler reads q_s in aligned float4s, past D to the next multiple
// of 4 (values it then ignores), and those reads must not touch `red`, which other warps write meanwhile
// (compute-sanitizer's racecheck flagged exactly that at D = 33).
__host__ __device__ inline int64_t round4(int64_t D) { return (D + 3) / 4 * 4; }
size_t decode_smem(int64_t D) {
  return size_t(round4(D) + kTile * (D + 1) + kTile * D + kDecodeWarps * (D + 2)) * sizeof(float);
}

// One warp per query, a block per (8 queries, head). Each 32-key tile of K and V is loaded once into shared
// memory (widened to F32; K rows padded to D + 1 floats so that lane j reading row j is conflict-free) and
// used by every query of the block; lane j scores key j, then the warp folds the tile into its output.
template <typename KV>
__global__ void __launch_bounds__(kPrefillWarps * 32)
    attention_prefill_kernel(float* out, int64_t ldo, const float* __restrict__ q, int64_t ldq,
                             const KV* __restrict__ kc, const KV* __restrict__ vc, int64_t ldc, int T,
                             StepValue pos0_v, int D, float scale, int group) {
  extern __shared__ float smem[];
  float* k_s = smem;                   // [kTile][D + 1]
  float* v_s = k_s + kTile * (D + 1);  // [kTile][D]
  float* q_s = v_s + kTile * D;        // [kPrefillWarps][D], pre-scaled
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int h = blockIdx.y;
  const int64_t pos0 = pos0_v.get();
  const int t0 = blockIdx.x * kPrefillWarps;
  const int t = t0 + warp;
  const bool active = t < T;
  const int64_t p = pos0 + t;                                // this warp's query sees keys 0 .. p
  const int64_t n_keys = pos0 + min(T, t0 + kPrefillWarps);  // keys any query of the block sees
  for (int d = lane; d < D; d += 32)
    q_s[warp * D + d] = active ? scale * q[int64_t(t) * ldq + h * D + d] : 0.0f;

  float m = -INFINITY, l = 0.0f, o[kChunks];
#pragma unroll
  for (int i = 0; i < kChunks; ++i) o[i] = 0.0f;
  for (int64_t j0 = 0; j0 < n_keys; j0 += kTile) {
    __syncthreads();  // the previous tile is consumed (and q_s written, on the first pass)
    for (int idx = threadIdx.x; idx < kTile * D; idx += kPrefillWarps * 32) {
      const int r = idx / D, d = idx % D;
      const int64_t key = j0 + r;
      float kk = 0.0f, vv = 0.0f;
      if (key < n_keys) {
        kk = to_float(kc[key * ldc + (h / group) * D + d]);
        vv = to_float(vc[key * ldc + (h / group) * D + d]);
      }
      k_s[r * (D + 1) + d] = kk;
      v_s[r * D + d] = vv;
    }
    __syncthreads();
    if (!active || j0 > p) continue;  // warp-uniform; every warp still reaches both barriers
    float s = -INFINITY;
    if (j0 + lane <= p) {
      const float* kr = k_s + lane * (D + 1);
      const float* qr = q_s + warp * D;
      float acc = 0.0f;
      for (int d = 0; d < D; ++d) acc += qr[d] * kr[d];
      s = acc;
    }
    const float m_new = fmaxf(m, warp_max(s));  // finite: key j0 <= p is valid
    const float corr = expf(m - m_new);         // 0 on the first tile (m = -inf)
    const float pj = expf(s - m_new);           // 0 for masked keys
    l = l * corr + warp_sum(pj);
#pragma unroll
    for (int i = 0; i < kChunks; ++i) o[i] *= corr;
    const int n_valid = int(min(int64_t(kTile), p - j0 + 1));
    for (int jj = 0; jj < n_valid; ++jj) {
      const float pjj = __shfl_sync(0xffffffffu, pj, jj);
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        const int d = lane + 32 * i;
        if (d < D) o[i] += pjj * v_s[jj * D + d];
      }
    }
    m = m_new;
  }
  if (!active) return;
  const float inv = 1.0f / l;
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int d = lane + 32 * i;
    if (d < D) out[int64_t(t) * ldo + h * D + d] = o[i] * inv;
  }
}

// Keys per split: whole tiles while the keys so far fit n_splits of them (then only the first splits have
// work, and the merge reads only those), more past that.
__device__ inline int64_t split_chunk(int64_t n_keys, int n_splits) {
  return max(int64_t(kTile), (n_keys + n_splits - 1) / n_splits);
}

// A block per (split, head). The split's keys go in 32-key tiles: all the block's threads load a tile of K
// and V into shared memory (widened to F32, coalesced loads all in flight at once; K rows padded to D + 1
// floats so that lane j reading row j is conflict-free), every warp scores the tile's keys (lane j key j: the
// same scores and running max in each warp), and warp w folds in the values of keys w, w + 4, ... of the tile
// for every head dim. The warps then merge their (m, l, o) in shared memory and write the split's partial
// result: [m, l, o[0 .. D)] with o not yet divided by l.
// (The first version had each warp read its own tiles straight from the cache, lane j walking key j's row: at
// depth 512 the dependent loads of one warp were most of a layer's decode time.)
template <typename KV>
__global__ void __launch_bounds__(kDecodeWarps * 32)
    attention_decode_kernel(float* partial, const float* __restrict__ q, const KV* __restrict__ kc,
                            const KV* __restrict__ vc, int64_t ldc, StepValue pos0_v, int D, float scale,
                            int n_splits, int group) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ float smem[];
  float* q_s = smem;                   // [D] (+ padding to a multiple of 4), pre-scaled
  float* k_s = q_s + round4(D);        // [kTile][D + 1]
  float* v_s = k_s + kTile * (D + 1);  // [kTile][D]
  float* red = v_s + kTile * D;        // [kDecodeWarps][D + 2]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int split = blockIdx.x, h = blockIdx.y;
  const int64_t n_keys = int64_t(pos0_v.get()) + 1;
  const int64_t chunk = split_chunk(n_keys, n_splits);
  const int64_t begin = int64_t(split) * chunk;
  if (begin >= n_keys) return;  // a split past the keys so far: the merge does not read it
  const int64_t end = min(n_keys, begin + chunk);
  const KV* kh = kc + (h / group) * D;
  const KV* vh = vc + (h / group) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) q_s[d] = scale * q[h * D + d];

  float m = -INFINITY, l = 0.0f, o[kChunks];
#pragma unroll
  for (int i = 0; i < kChunks; ++i) o[i] = 0.0f;
  for (int64_t j0 = begin; j0 < end; j0 += kTile) {
    const int n_valid = int(min(int64_t(kTile), end - j0));  // block-uniform
    __syncthreads();  // the previous tile is consumed (and q_s written, on the first pass)
    for (int idx = threadIdx.x; idx < n_valid * D; idx += kDecodeWarps * 32) {
      const int r = idx / D, d = idx - r * D;
      k_s[r * (D + 1) + d] = to_float(kh[(j0 + r) * ldc + d]);
      v_s[r * D + d] = to_float(vh[(j0 + r) * ldc + d]);
    }
    __syncthreads();
    float s = -INFINITY;
    if (lane < n_valid) {
      // Four running sums: one chain of D dependent FMAs was the longest wait of a tile.
      const float* kr = k_s + lane * (D + 1);
      float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
      int d = 0;
      for (; d + 4 <= D; d += 4) {
        a0 += q_s[d] * kr[d];
        a1 += q_s[d + 1] * kr[d + 1];
        a2 += q_s[d + 2] * kr[d + 2];
        a3 += q_s[d + 3] * kr[d + 3];
      }
      for (; d < D; ++d) a0 += q_s[d] * kr[d];
      s = (a0 + a1) + (a2 + a3);
    }
    const float m_new = fmaxf(m, warp_max(s));  // finite: key j0 is valid
    const float corr = expf(m - m_new);         // 0 on the first tile (m = -inf)
    const float pj = expf(s - m_new);           // 0 past n_valid
    // Each warp's l counts only the keys it folds in, so that the merge below adds every key once.
    l = l * corr + warp_sum(lane % kDecodeWarps == warp ? pj : 0.0f);
#pragma unroll
    for (int i = 0; i < kChunks; ++i) o[i] *= corr;
    for (int jj = warp; jj < n_valid; jj += kDecodeWarps) {
      const float pjj = __shfl_sync(0xffffffffu, pj, jj);
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        const int d = lane + 32 * i;
        if (d < D) o[i] += pjj * v_s[jj * D + d];
      }
    }
    m = m_new;
  }
  float* r = red + warp * (D + 2);
  if (lane == 0) {
    r[0] = m;
    r[1] = l;
  }
#pragma unroll
  for (int i = 0; i < kChunks; ++i) {
    const int d = lane + 32 * i;
    if (d < D) r[2 + d] = o[i];
  }
  __syncthreads();
  // Every warp saw the same keys (at least one), so the same finite m; the general merge all the same.
  float M = -INFINITY;
  for (int w = 0; w < kDecodeWarps; ++w) M = fmaxf(M, red[w * (D + 2)]);
  float* dst = partial + (int64_t(h) * n_splits + split) * (D + 2);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.0f;
    for (int w = 0; w < kDecodeWarps; ++w) {
      const float mw = red[w * (D + 2)];
      if (mw != -INFINITY) acc += red[w * (D + 2) + 2 + d] * expf(mw - M);
    }
    dst[2 + d] = acc;
  }
  if (threadIdx.x == 0) {
    float L = 0.0f;
    for (int w = 0; w < kDecodeWarps; ++w) {
      const float mw = red[w * (D + 2)];
      if (mw != -INFINITY) L += red[w * (D + 2) + 1] * expf(mw - M);
    }
    dst[0] = M;
    dst[1] = L;
  }
}

// out[h] = sum_s o_s exp(m_s - M) / sum_s l_s exp(m_s - M) over the splits that hold keys, one block per
// head. Split 0 always holds key 0, so M is finite and the sum positive.
__global__ void attention_merge_kernel(float* out, const float* __restrict__ partial, StepValue pos0_v, int D,
                                       int n_splits) {
  pdl_wait();
  pdl_trigger();
  const int h = blockIdx.x;
  const float* ph = partial + int64_t(h) * n_splits * (D + 2);
  const int64_t n_keys = int64_t(pos0_v.get()) + 1;
  const int64_t chunk = split_chunk(n_keys, n_splits);
  const int used = int((n_keys + chunk - 1) / chunk);
  float M = -INFINITY;
  for (int s = 0; s < used; ++s) M = fmaxf(M, ph[s * (D + 2)]);
  float L = 0.0f;
  for (int s = 0; s < used; ++s) {
    const float ms = ph[s * (D + 2)];
    if (ms != -INFINITY) L += ph[s * (D + 2) + 1] * expf(ms - M);
  }
  const float inv = 1.0f / L;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.0f;
    for (int s = 0; s < used; ++s) {
      const float ms = ph[s * (D + 2)];
      if (ms != -INFINITY) acc += ph[s * (D + 2) + 2 + d] * expf(ms - M);
    }
    out[h * D + d] = acc * inv;
  }
}

template <typename KV>
void prefill_typed(float* out, int64_t ldo, const float* q, int64_t ldq, const void* kc, const void* vc,
                   int64_t ldc, int64_t T, StepValue pos0, int64_t H, int64_t Hkv, int64_t D, float scale,
                   cudaStream_t stream) {
  const dim3 grid{blocks_for(T, kPrefillWarps), unsigned(H)};
  attention_prefill_kernel<KV><<<grid, kPrefillWarps * 32, prefill_smem(D), stream>>>(
      out, ldo, q, ldq, static_cast<const KV*>(kc), static_cast<const KV*>(vc), ldc, int(T), pos0, int(D),
      scale, int(H / Hkv));
  CUDA_CHECK_LAUNCH();
}

template <typename KV>
void decode_typed(float* partial, const float* q, const void* kc, const void* vc, int64_t ldc, StepValue pos0,
                  int64_t H, int64_t Hkv, int64_t D, float scale, int64_t n_splits, cudaStream_t stream) {
  const dim3 grid{unsigned(n_splits), unsigned(H)};
  launch(attention_decode_kernel<KV>, grid, kDecodeWarps * 32, decode_smem(D), stream, partial, q,
         static_cast<const KV*>(kc), static_cast<const KV*>(vc), ldc, pos0, int(D), scale, int(n_splits),
         int(H / Hkv));
}

template <typename KV>
void raise_smem_limit() {
  CUDA_CHECK(cudaFuncSetAttribute(attention_prefill_kernel<KV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(prefill_smem(kMaxHeadDim))));
  CUDA_CHECK(cudaFuncSetAttribute(attention_decode_kernel<KV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(decode_smem(kMaxHeadDim))));
}

}  // namespace

void attention_init() {
  raise_smem_limit<float>();
  raise_smem_limit<__half>();
  raise_smem_limit<__nv_bfloat16>();
}

void attention_prefill(float* out, int64_t ldo, const float* q, int64_t ldq, const void* k_cache,
                       const void* v_cache, DType kv_dtype, int64_t ld_cache, int64_t T, StepValue pos0,
                       int64_t H, int64_t Hkv, int64_t D, float scale, cudaStream_t stream) {
  switch (kv_dtype) {
    case DType::F32:
      return prefill_typed<float>(out, ldo, q, ldq, k_cache, v_cache, ld_cache, T, pos0, H, Hkv, D, scale,
                                  stream);
    case DType::F16:
      return prefill_typed<__half>(out, ldo, q, ldq, k_cache, v_cache, ld_cache, T, pos0, H, Hkv, D, scale,
                                   stream);
    case DType::BF16:
      return prefill_typed<__nv_bfloat16>(out, ldo, q, ldq, k_cache, v_cache, ld_cache, T, pos0, H, Hkv, D,
                                          scale, stream);
    default:
      throw Error(ErrorKind::Argument, "cuda attention: the cache must be F32, F16 or BF16");
  }
}

// One split per 32 cache rows (at most 64), so that up to a cache of 2048 rows a split is one tile, loaded in
// one round of memory latency, however deep the sequence; the splits with no key yet end at once, and the
// merge reads only the others (a fixed chunk of S / n_splits keys cost shallow steps 5%: H200, tg128 at
// depth 0, 2100 -> 2000 tok/s).
int64_t attention_decode_splits(int64_t S) { return std::min<int64_t>(64, std::max<int64_t>(1, S / 32)); }

void attention_decode(float* out, const float* q, const void* k_cache, const void* v_cache, DType kv_dtype,
                      int64_t ld_cache, StepValue pos0, int64_t H, int64_t Hkv, int64_t D, float scale,
                      int64_t n_splits, float* partial, cudaStream_t stream) {
  switch (kv_dtype) {
    case DType::F32:
      decode_typed<float>(partial, q, k_cache, v_cache, ld_cache, pos0, H, Hkv, D, scale, n_splits, stream);
      break;
    case DType::F16:
      decode_typed<__half>(partial, q, k_cache, v_cache, ld_cache, pos0, H, Hkv, D, scale, n_splits, stream);
      break;
    case DType::BF16:
      decode_typed<__nv_bfloat16>(partial, q, k_cache, v_cache, ld_cache, pos0, H, Hkv, D, scale, n_splits,
                                  stream);
      break;
    default:
      throw Error(ErrorKind::Argument, "cuda attention: the cache must be F32, F16 or BF16");
  }
  launch(attention_merge_kernel, unsigned(H), 128, 0, stream, out, partial, pos0, int(D), int(n_splits));
}

}  // namespace minigpt::cuda
