// The CUDA backend's kernels, one launcher per op (one .cu file each). Pointers are device pointers,
// matrices row-major with leading dimensions in elements; every launcher queues on `stream` and checks
// the launch. The CUDA backend (cuda_backend.cpp) checks shapes and devices before calling these.
//
// Dimension letters as in backend.h: T tokens, C n_embd, H heads, D head dim, N/K a linear's out/in width.
#pragma once

#include "cuda/common.cuh"

namespace minigpt::cuda {

// out[t] = wte[tokens[t]] + wpe[pos0 + t]         wte: [V, C] in `wte_dtype`; wpe: [S, C] F32, or null for
// no learned positions (out[t] = wte[tokens[t]]; pos0 unused)
void embed(float* out, int64_t ldo, const int32_t* tokens, int64_t T, StepValue pos0, const void* wte,
           DType wte_dtype, int64_t ld_wte, const float* wpe, int64_t ld_wpe, int64_t C, cudaStream_t stream);

// A norm per row, as Backend::norm says: Layer, out = (in - mean) / sqrt(var + eps) * w + b (two passes, like
// the CPU backend); Rms, out = in / sqrt(mean(in^2) + eps) * w + b. b may be null (no bias).
void norm(float* out, int64_t ldo, const float* in, int64_t ldi, const float* w, const float* b, int64_t T,
          int64_t C, NormKind kind, float eps, cudaStream_t stream);

// The same norm of each D-wide head of x in place (Backend::norm_heads), weights w [D], no bias.  x: [T, H *
// D]
void norm_heads(float* x, int64_t ldx, int64_t T, int64_t H, int64_t D, const float* w, NormKind kind,
                float eps, cudaStream_t stream);

// x = act(x)                                        x: [T, F]
void activation(float* x, int64_t ldx, int64_t T, int64_t F, Activation act, cudaStream_t stream);

// out[t][i] = act(gu[t][i]) * gu[t][F + i], in place when out is gu        out: [T, F]; gu: [T, 2F]
void gated_act(float* out, int64_t ldo, const float* gu, int64_t ldg, int64_t T, int64_t F, Activation act,
               cudaStream_t stream);

// The decode path of linear(): y[t] = act((y[t] if accumulate) + b + W x[t]) for T <= kGemvMaxRows, one warp
// per output, each weight read once for all T rows; F32 activations and accumulation, W [N, K] in `w_dtype`.
constexpr int64_t kGemvMaxRows = 4;
void gemv(float* y, int64_t ldy, const float* x, int64_t ldx, const void* w, DType w_dtype, int64_t ldw,
          const float* bias, int64_t T, int64_t N, int64_t K, bool accumulate, const Activation* act,
          cudaStream_t stream);

// Quantized weights as the file holds them: [N, K] rows of GGUF blocks, `row_bytes` apart
// (src/cuda/quant.cu).
enum class QuantType { Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K };
struct QuantFormat {
  QuantType type;
  int block;        // values per block (32, or 256 for the K types)
  int block_bytes;  // bytes per block
  int64_t row_bytes;
};
// The decode GEMV on quantized rows (as gemv(): T <= kGemvMaxRows, bias, residual and activation fused), each
// block widened to F32 in registers: the F32 product of the dequantized weights.
void gemv_quant(float* y, int64_t ldy, const float* x, int64_t ldx, const void* w, const QuantFormat& f,
                const float* bias, int64_t T, int64_t N, int64_t K, bool accumulate, const Activation* act,
                cudaStream_t stream);
// W[r, k] = hi[r, k] + lo[r, k] for r < rows, hi = round_f16(W), lo = round_f16(W - hi)
//                                                           hi, lo: rows of `ld` F16 values
void widen_quant16(void* hi, void* lo, int64_t ld, const void* w, const QuantFormat& f, int64_t rows,
                   int64_t K, cudaStream_t stream);
// embed() with a quantized token table (C a multiple of the block)
void embed_quant(float* out, int64_t ldo, const int32_t* tokens, int64_t T, StepValue pos0, const void* w,
                 const QuantFormat& f, const float* wpe, int64_t ld_wpe, int64_t C, cudaStream_t stream);

// out = (out if accumulate else 0) + bias (if any)   out: [T, N]; the GEMM then adds in W^T with beta = 1
void bias_fill(float* out, int64_t ldo, const float* bias, int64_t T, int64_t N, bool accumulate,
               cudaStream_t stream);

// x = hi + lo with hi = round16(x), lo = round16(x - hi): two 16-bit GEMMs on (hi, lo) give the product of
// the 16-bit weights with (nearly) the F32 activations.     hi, lo: [T, K] contiguous in `dtype` (F16/BF16)
void split16(void* hi, void* lo, DType dtype, const float* x, int64_t ldx, int64_t T, int64_t K,
             cudaStream_t stream);

// k_cache[pos0 + t] = k[t], v_cache[pos0 + t] = v[t], rounded to `kv_dtype`    k, v: [T, C] F32
// (here C is the cache row's width, Hkv * D; the caches are one sequence's [S, C] rows)
void store_kv(void* k_cache, void* v_cache, DType kv_dtype, int64_t ld_cache, const float* k, int64_t ldk,
              const float* v, int64_t ldv, int64_t T, int64_t C, StepValue pos0, cudaStream_t stream);

// Attention of T >= 1 queries at pos0 .. pos0+T-1 over keys 0 .. pos0+t of one sequence's caches (query head
// h reads KV head h / (H / Hkv): columns of the cache rows from (h / (H / Hkv)) * D) (flash-attention style:
// a block of queries of one head walks tiles of keys in shared memory with an online softmax; O(T)
// memory). tensor_cores: the MMA kernel where it applies (F16 cache, D % 16 == 0, D <= 128).
constexpr int64_t kMaxHeadDim = 256;
void attention_prefill(float* out, int64_t ldo, const float* q, int64_t ldq, const void* k_cache,
                       const void* v_cache, DType kv_dtype, int64_t ld_cache, int64_t T, StepValue pos0,
                       int64_t H, int64_t Hkv, int64_t D, float scale, bool tensor_cores, int64_t window,
                       cudaStream_t stream);

// Attention of one query at pos0 (flash-decoding): the keys 0 .. pos0 split into `n_splits` ranges per
// head, each reduced by one block to (max, sum, unnormalised output), then merged by a second kernel.
// The grid depends only on n_splits, never on pos0, so a recorded graph replays at any position.
// partial: [H, n_splits, D + 2] F32 scratch.
int64_t attention_decode_splits(int64_t S);
void attention_decode(float* out, const float* q, const void* k_cache, const void* v_cache, DType kv_dtype,
                      int64_t ld_cache, StepValue pos0, int64_t H, int64_t Hkv, int64_t D, float scale,
                      int64_t n_splits, int64_t window, float* partial, cudaStream_t stream);

// out[t] += wpe[pos0 + t]                                 out: [T, C]; wpe: [S, C] F32
void add_positions(float* out, int64_t ldo, int64_t T, StepValue pos0, const float* wpe, int64_t ld_wpe,
                   int64_t C, cudaStream_t stream);

// Rotary positions in place on x: [T, H * D] (token t at position pos0 + t), as Backend::rope says; with
// inv_freq (device, rotary_dim / 2 floats: Backend::rope_freqs) the frequencies given, else from theta.
void rope(float* x, int64_t ldx, int64_t T, StepValue pos0, int64_t H, int64_t D, int64_t rotary_dim,
          float theta, const float* inv_freq, RopeLayout layout, cudaStream_t stream);

// Raises the dynamic shared memory limit of the attention kernels (heads up to kMaxHeadDim); once per device.
void attention_init();

}  // namespace minigpt::cuda
