// attention: causal softmax(scale q k^T) v per head over the KV cache, in F32 arithmetic on K/V widened from
// the cache dtype (prefill with an F16 cache: on tensor cores, with F32's accuracy; see below). Online
// softmax (running max m, running sum l, output rescaled when m grows), the CPU backend's algorithm on the
// GPU, so no kernel ever holds a row of scores.
#include <mma.h>

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
                             StepValue pos0_v, int D, float scale, int group, int64_t window) {
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
  const int64_t p = pos0 + t;                                // this warp's query sees keys lo .. p
  const int64_t n_keys = pos0 + min(T, t0 + kPrefillWarps);  // keys any query of the block sees
  // A sliding window: this query's first key, and the block's first tile (its first query's first key).
  const int64_t lo = window > 0 ? max(int64_t(0), p - window + 1) : 0;
  const int64_t first = window > 0 ? max(int64_t(0), pos0 + t0 - window + 1) / kTile * kTile : 0;
  for (int d = lane; d < D; d += 32)
    q_s[warp * D + d] = active ? scale * q[int64_t(t) * ldq + h * D + d] : 0.0f;

  float m = -INFINITY, l = 0.0f, o[kChunks];
#pragma unroll
  for (int i = 0; i < kChunks; ++i) o[i] = 0.0f;
  for (int64_t j0 = first; j0 < n_keys; j0 += kTile) {
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
    // warp-uniform; every warp still reaches both barriers
    if (!active || j0 > p || j0 + kTile <= lo) continue;
    float s = -INFINITY;
    if (j0 + lane <= p && j0 + lane >= lo) {
      const float* kr = k_s + lane * (D + 1);
      const float* qr = q_s + warp * D;
      float acc = 0.0f;
      for (int d = 0; d < D; ++d) acc += qr[d] * kr[d];
      s = acc;
    }
    const float m_new = fmaxf(m, warp_max(s));  // finite: some key of the tile is in lo .. p
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

// Prefill on tensor cores, for an F16 cache and head dims that are multiples of 16 up to 128: a block of
// kFaWarps warps, 16 queries each, walks 64-key tiles of K and V (F16, as cached) in shared memory;
// S = Q K^T and O += P V are 16x16x16 F16 MMAs with F32 accumulation. Q (scaled) and P are F32 values,
// so each goes in as two F16 terms, hi = f16(x) and lo = f16(x - hi): the products with the cache's
// exactly-F16 K and V are exact in F32 and their sum carries ~22 bits of x, which keeps the result within
// the scalar kernel's F32 rounding instead of F16's (the same 2e-5 tolerance in the tests). The online
// softmax (m, l per row) runs on the scores in shared memory, two lanes a row; O lives in shared memory,
// rescaled per row before each tile's P V is added to it.
constexpr int kFaWarps = 2;
constexpr int kFaRows = 16 * kFaWarps;  // queries per block
constexpr int kFaKeys = 64;             // keys per tile
constexpr int kFaMaxChunks = 8;         // head dim / 16

struct FaLayout {
  int ldkv, lds, ldp, ldo;      // row strides: K/V tiles (halves), S (floats), P (halves), O (floats)
  size_t k, v, s, p, o, total;  // byte offsets, each 128-aligned
};
__host__ __device__ inline size_t fa_up(size_t x) { return (x + 127) / 128 * 128; }
__host__ __device__ inline FaLayout fa_layout(int D) {
  FaLayout L{};
  L.ldkv = D + 8;  // + 16 bytes: consecutive rows start 4 banks apart
  L.lds = kFaKeys + 4;
  L.ldp = kFaKeys + 8;
  L.ldo = D + 4;
  L.k = 0;  // before the first tile: Q's hi terms (kFaRows <= kFaKeys rows)
  L.v = fa_up(L.k + size_t(kFaKeys) * L.ldkv * 2);  // before the first tile: Q's lo terms
  L.s = fa_up(L.v + size_t(kFaKeys) * L.ldkv * 2);
  L.p = fa_up(L.s + size_t(kFaRows) * L.lds * 4);  // kFaRows rows of hi terms, then kFaRows of lo terms
  L.o = fa_up(L.p + size_t(2 * kFaRows) * L.ldp * 2);
  L.total = fa_up(L.o + size_t(kFaRows) * L.ldo * 4);
  return L;
}

namespace wmma = nvcuda::wmma;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major>;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// DC = head dim / 16. Blocks run latest queries first (they have the most keys), so that the short ones
// fill in behind them.
template <int DC>
__global__ void __launch_bounds__(kFaWarps * 32)
    attention_prefill_mma_kernel(float* out, int64_t ldo, const float* __restrict__ q, int64_t ldq,
                                 const __half* __restrict__ kc, const __half* __restrict__ vc, int64_t ldc,
                                 int T, StepValue pos0_v, float scale, int group) {
  constexpr int D = 16 * DC;
  extern __shared__ __align__(128) unsigned char fa_smem[];
  const FaLayout L = fa_layout(D);
  __half* k_s = reinterpret_cast<__half*>(fa_smem + L.k);
  __half* v_s = reinterpret_cast<__half*>(fa_smem + L.v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* s_w = reinterpret_cast<float*>(fa_smem + L.s) + warp * 16 * L.lds;
  __half* phi_w = reinterpret_cast<__half*>(fa_smem + L.p) + warp * 16 * L.ldp;
  __half* plo_w = phi_w + kFaRows * L.ldp;
  float* o_w = reinterpret_cast<float*>(fa_smem + L.o) + warp * 16 * L.ldo;
  const int h = blockIdx.y, hk = h / group;
  const int t0 = int(gridDim.x - 1 - blockIdx.x) * kFaRows;
  const int64_t pos0 = pos0_v.get();
  const int64_t n_keys = pos0 + min(T, t0 + kFaRows);  // keys any query of the block sees
  const int wt0 = t0 + warp * 16;                      // the warp's first query
  const bool active = wt0 < T;
  const int64_t p_warp = pos0 + min(T - 1, wt0 + 15);  // the last key any query of the warp sees
  // Lane pair (2r, 2r + 1) keeps row r's running max and sum (the same values in both lanes).
  const int r = lane >> 1, part = lane & 1;
  const int64_t p_row = pos0 + min(T - 1, wt0 + r);

  for (int idx = threadIdx.x; idx < kFaRows * D; idx += kFaWarps * 32) {
    const int row = idx / D, d = idx % D, t = t0 + row;
    const float x = t < T ? scale * q[int64_t(t) * ldq + int64_t(h) * D + d] : 0.0f;
    const __half hi = __float2half_rn(x);
    k_s[row * L.ldkv + d] = hi;
    v_s[row * L.ldkv + d] = __float2half_rn(x - __half2float(hi));
  }
  for (int idx = lane; idx < 16 * D; idx += 32) o_w[(idx / D) * L.ldo + idx % D] = 0.0f;
  __syncthreads();
  FragA qhi[DC], qlo[DC];
#pragma unroll
  for (int c = 0; c < DC; ++c) {
    wmma::load_matrix_sync(qhi[c], k_s + warp * 16 * L.ldkv + c * 16, L.ldkv);
    wmma::load_matrix_sync(qlo[c], v_s + warp * 16 * L.ldkv + c * 16, L.ldkv);
  }
  float m = -INFINITY, l = 0.0f;
  constexpr int kVec = D / 8;  // 16-byte loads per cache row
  for (int64_t j0 = 0; j0 < n_keys; j0 += kFaKeys) {
    __syncthreads();  // the previous tile (or Q's staging) is consumed
    for (int idx = threadIdx.x; idx < kFaKeys * kVec; idx += kFaWarps * 32) {
      const int row = idx / kVec, c8 = (idx % kVec) * 8;
      const int64_t key = j0 + row;
      uint4 kk = make_uint4(0, 0, 0, 0), vv = kk;  // rows past the keys: zeros, never the cache's garbage
      if (key < n_keys) {
        kk = *reinterpret_cast<const uint4*>(kc + key * ldc + int64_t(hk) * D + c8);
        vv = *reinterpret_cast<const uint4*>(vc + key * ldc + int64_t(hk) * D + c8);
      }
      *reinterpret_cast<uint4*>(k_s + row * L.ldkv + c8) = kk;
      *reinterpret_cast<uint4*>(v_s + row * L.ldkv + c8) = vv;
    }
    __syncthreads();
    if (!active || j0 > p_warp) continue;  // warp-uniform; every warp still reaches both barriers
      // S = (Q_hi + Q_lo) K^T over the 16-key chunks any query of the warp sees.
#pragma unroll
    for (int n = 0; n < kFaKeys / 16; ++n) {
      if (j0 + n * 16 > p_warp) break;
      FragAcc acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int c = 0; c < DC; ++c) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> kb;
        wmma::load_matrix_sync(kb, k_s + n * 16 * L.ldkv + c * 16, L.ldkv);
        wmma::mma_sync(acc, qhi[c], kb, acc);
        wmma::mma_sync(acc, qlo[c], kb, acc);
      }
      wmma::store_matrix_sync(s_w + n * 16, acc, L.lds, wmma::mem_row_major);
    }
    __syncwarp();
    // Online softmax of row r over this tile: keys j = 2 jj + part (masked past p_row, never read there).
    const float* srow = s_w + r * L.lds;
    float mx = -INFINITY;
    for (int jj = 0; jj < kFaKeys / 2; ++jj) {
      const int j = 2 * jj + part;
      if (j0 + j <= p_row) mx = fmaxf(mx, srow[j]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_new = fmaxf(m, mx);    // finite: key 0 is in the first tile, and every row sees it
    const float corr = expf(m - m_new);  // 0 on the first tile (m = -inf)
    float sum = 0.0f;
    for (int jj = 0; jj < kFaKeys / 2; ++jj) {
      const int j = 2 * jj + part;
      const float pj = j0 + j <= p_row ? expf(srow[j] - m_new) : 0.0f;
      sum += pj;
      const __half hi = __float2half_rn(pj);
      phi_w[r * L.ldp + j] = hi;
      plo_w[r * L.ldp + j] = __float2half_rn(pj - __half2float(hi));
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * corr + sum;
    m = m_new;
    for (int d = part; d < D; d += 2) o_w[r * L.ldo + d] *= corr;
    __syncwarp();
    // O += (P_hi + P_lo) V
    const int n_chunks = int(min(int64_t(kFaKeys / 16), (p_warp - j0) / 16 + 1));
#pragma unroll
    for (int n = 0; n < DC; ++n) {
      FragAcc acc;
      wmma::load_matrix_sync(acc, o_w + n * 16, L.ldo, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kFaKeys / 16; ++kk) {
        if (kk >= n_chunks) break;
        FragA pa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> vb;
        wmma::load_matrix_sync(vb, v_s + kk * 16 * L.ldkv + n * 16, L.ldkv);
        wmma::load_matrix_sync(pa, phi_w + kk * 16, L.ldp);
        wmma::mma_sync(acc, pa, vb, acc);
        wmma::load_matrix_sync(pa, plo_w + kk * 16, L.ldp);
        wmma::mma_sync(acc, pa, vb, acc);
      }
      wmma::store_matrix_sync(o_w + n * 16, acc, L.ldo, wmma::mem_row_major);
    }
    __syncwarp();
  }
  if (!active) return;
  for (int rr = 0; rr < 16; ++rr) {
    const int t = wt0 + rr;
    if (t >= T) break;  // warp-uniform
    const float inv = 1.0f / __shfl_sync(0xffffffffu, l, 2 * rr);
    for (int d = lane; d < D; d += 32) out[int64_t(t) * ldo + int64_t(h) * D + d] = o_w[rr * L.ldo + d] * inv;
  }
}

// Whether the tensor-core kernel takes this prefill: an F16 cache, D a multiple of 16 up to 128, rows that
// 16-byte loads can read.
bool prefill_mma_fits(DType kv_dtype, const void* kc, const void* vc, int64_t ldc, int64_t D) {
  return kv_dtype == DType::F16 && D % 16 == 0 && D <= 16 * kFaMaxChunks && ldc % 8 == 0 &&
         reinterpret_cast<uintptr_t>(kc) % 16 == 0 && reinterpret_cast<uintptr_t>(vc) % 16 == 0;
}

template <int DC>
void prefill_mma_dc(float* out, int64_t ldo, const float* q, int64_t ldq, const void* kc, const void* vc,
                    int64_t ldc, int64_t T, StepValue pos0, int64_t H, int64_t Hkv, float scale,
                    cudaStream_t stream) {
  const dim3 grid{blocks_for(T, kFaRows), unsigned(H)};
  attention_prefill_mma_kernel<DC><<<grid, kFaWarps * 32, fa_layout(16 * DC).total, stream>>>(
      out, ldo, q, ldq, static_cast<const __half*>(kc), static_cast<const __half*>(vc), ldc, int(T), pos0,
      scale, int(H / Hkv));
  CUDA_CHECK_LAUNCH();
}

void prefill_mma(float* out, int64_t ldo, const float* q, int64_t ldq, const void* kc, const void* vc,
                 int64_t ldc, int64_t T, StepValue pos0, int64_t H, int64_t Hkv, int64_t D, float scale,
                 cudaStream_t stream) {
  switch (D / 16) {
#define MINIGPT_FA_CASE(dc) \
  case dc:                  \
    return prefill_mma_dc<dc>(out, ldo, q, ldq, kc, vc, ldc, T, pos0, H, Hkv, scale, stream);
    MINIGPT_FA_CASE(1)
    MINIGPT_FA_CASE(2)
    MINIGPT_FA_CASE(3)
    MINIGPT_FA_CASE(4)
    MINIGPT_FA_CASE(5)
    MINIGPT_FA_CASE(6)
    MINIGPT_FA_CASE(7)
    MINIGPT_FA_CASE(8)
#undef MINIGPT_FA_CASE
    default:
      throw Error(ErrorKind::Argument,
                  "cuda attention: no tensor-core kernel for head dim " + std::to_string(D));
  }
}

template <int DC>
void raise_mma_smem_limit() {
  CUDA_CHECK(cudaFuncSetAttribute(attention_prefill_mma_kernel<DC>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(fa_layout(16 * DC).total)));
  if constexpr (DC > 1) raise_mma_smem_limit<DC - 1>();
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
// (Were each warp to read its own tiles straight from the cache, lane j walking key j's row, the dependent
// loads of one warp would be most of a layer's decode time at depth 512.)
template <typename KV>
__global__ void __launch_bounds__(kDecodeWarps * 32)
    attention_decode_kernel(float* partial, const float* __restrict__ q, const KV* __restrict__ kc,
                            const KV* __restrict__ vc, int64_t ldc, StepValue pos0_v, int D, float scale,
                            int n_splits, int group, int64_t window) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ float smem[];
  float* q_s = smem;                   // [D] (+ padding to a multiple of 4), pre-scaled
  float* k_s = q_s + round4(D);        // [kTile][D + 1]
  float* v_s = k_s + kTile * (D + 1);  // [kTile][D]
  float* red = v_s + kTile * D;        // [kDecodeWarps][D + 2]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int split = blockIdx.x, h = blockIdx.y;
  // The keys lo .. n_keys - 1: all so far, or a sliding window's last `window`.
  const int64_t n_keys = int64_t(pos0_v.get()) + 1;
  const int64_t lo = window > 0 ? max(int64_t(0), n_keys - window) : 0;
  const int64_t chunk = split_chunk(n_keys - lo, n_splits);
  const int64_t begin = lo + int64_t(split) * chunk;
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
      // Four running sums: one chain of D dependent FMAs would be the longest wait of a tile.
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
                                       int n_splits, int64_t window) {
  pdl_wait();
  pdl_trigger();
  const int h = blockIdx.x;
  const float* ph = partial + int64_t(h) * n_splits * (D + 2);
  const int64_t n_keys = int64_t(pos0_v.get()) + 1;
  const int64_t count = window > 0 ? min(n_keys, window) : n_keys;  // as the decode kernel splits them
  const int64_t chunk = split_chunk(count, n_splits);
  const int used = int((count + chunk - 1) / chunk);
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
                   int64_t window, cudaStream_t stream) {
  const dim3 grid{blocks_for(T, kPrefillWarps), unsigned(H)};
  attention_prefill_kernel<KV><<<grid, kPrefillWarps * 32, prefill_smem(D), stream>>>(
      out, ldo, q, ldq, static_cast<const KV*>(kc), static_cast<const KV*>(vc), ldc, int(T), pos0, int(D),
      scale, int(H / Hkv), window);
  CUDA_CHECK_LAUNCH();
}

template <typename KV>
void decode_typed(float* partial, const float* q, const void* kc, const void* vc, int64_t ldc, StepValue pos0,
                  int64_t H, int64_t Hkv, int64_t D, float scale, int64_t n_splits, int64_t window,
                  cudaStream_t stream) {
  const dim3 grid{unsigned(n_splits), unsigned(H)};
  launch(attention_decode_kernel<KV>, grid, kDecodeWarps * 32, decode_smem(D), stream, partial, q,
         static_cast<const KV*>(kc), static_cast<const KV*>(vc), ldc, pos0, int(D), scale, int(n_splits),
         int(H / Hkv), window);
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
  raise_mma_smem_limit<kFaMaxChunks>();
  raise_smem_limit<float>();
  raise_smem_limit<__half>();
  raise_smem_limit<__nv_bfloat16>();
}

void attention_prefill(float* out, int64_t ldo, const float* q, int64_t ldq, const void* k_cache,
                       const void* v_cache, DType kv_dtype, int64_t ld_cache, int64_t T, StepValue pos0,
                       int64_t H, int64_t Hkv, int64_t D, float scale, bool tensor_cores, int64_t window,
                       cudaStream_t stream) {
  // (a sliding window runs on the scalar kernel, which masks the keys before each query's window)
  if (tensor_cores && window == 0 && prefill_mma_fits(kv_dtype, k_cache, v_cache, ld_cache, D)) {
    return prefill_mma(out, ldo, q, ldq, k_cache, v_cache, ld_cache, T, pos0, H, Hkv, D, scale, stream);
  }
  switch (kv_dtype) {
    case DType::F32:
      return prefill_typed<float>(out, ldo, q, ldq, k_cache, v_cache, ld_cache, T, pos0, H, Hkv, D, scale,
                                  window, stream);
    case DType::F16:
      return prefill_typed<__half>(out, ldo, q, ldq, k_cache, v_cache, ld_cache, T, pos0, H, Hkv, D, scale,
                                   window, stream);
    case DType::BF16:
      return prefill_typed<__nv_bfloat16>(out, ldo, q, ldq, k_cache, v_cache, ld_cache, T, pos0, H, Hkv, D,
                                          scale, window, stream);
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
                      int64_t n_splits, int64_t window, float* partial, cudaStream_t stream) {
  switch (kv_dtype) {
    case DType::F32:
      decode_typed<float>(partial, q, k_cache, v_cache, ld_cache, pos0, H, Hkv, D, scale, n_splits, window,
                          stream);
      break;
    case DType::F16:
      decode_typed<__half>(partial, q, k_cache, v_cache, ld_cache, pos0, H, Hkv, D, scale, n_splits, window,
                           stream);
      break;
    case DType::BF16:
      decode_typed<__nv_bfloat16>(partial, q, k_cache, v_cache, ld_cache, pos0, H, Hkv, D, scale, n_splits,
                                  window, stream);
      break;
    default:
      throw Error(ErrorKind::Argument, "cuda attention: the cache must be F32, F16 or BF16");
  }
  launch(attention_merge_kernel, unsigned(H), 128, 0, stream, out, partial, pos0, int(D), int(n_splits),
         window);
}

}  // namespace minigpt::cuda
