// The CPU backend's own kernels, where OpenBLAS has nothing for the job (16-bit weights) or is slow
// (transcendentals). Each has a plain reference next to it that the unit tests compare against.
// The kernels are compiled once per instruction-set level (src/cpu/kernels_impl.inc, one object per level,
// each in its own namespace minigpt::cpu::<level> with its own -m flags) and the best level this CPU runs
// is chosen at first use from CPUID: generic (plain loops), avx2 (AVX2 + FMA + F16C, x86-64-v3), avx512
// and avx512bf16 (the AVX2 code with the wider ISA open to the compiler's own vectorisation, and AVX-512
// kernels where written), amx (avx512bf16 with AMX tiles for the BF16 GEMM). The environment variable
// MINIGPT_CPU=generic|avx2|avx512|avx512bf16|amx forces a level (an unknown one, or one this CPU cannot
// run, is an Error of kind Argument). The functions below forward through the chosen
// level's KernelTable: one indirect call each.
//
// Matrices here are row-major [N, K] with row stride ldw: y[n] = sum_k W[n, k] x[k] (the OutIn layout).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace minigpt::cpu {

// y[n] (+)= sum_k W[n, k] * x[k] for n in [0, N), all F32.
void gemv_f32(float* y, const float* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate);

// The 4-row packed layout of a 16-bit [N, K] matrix: rows padded to a multiple of 4 and columns to a
// multiple of 16 (zeros), and for each block of 4 rows the 16-column chunks of its rows interleaved:
// element (r, k) at ((r / 4) * (Kp / 16) + k / 16) * 64 + (r % 4) * 16 + k % 16. A GEMV then reads the
// matrix as one sequential stream; separate row streams of 1.5 KB (K = 768 in 16 bits) are too short for
// the hardware prefetchers and cost a third of the bandwidth.
struct Packed16 {
  static int64_t padded_rows(int64_t n) { return (n + 3) / 4 * 4; }
  static int64_t padded_cols(int64_t k) { return (k + 15) / 16 * 16; }
  static int64_t offset(int64_t r, int64_t k, int64_t kp) {
    return ((r / 4) * (kp / 16) + k / 16) * 64 + (r % 4) * 16 + k % 16;
  }
};
// y[n] (+)= sum_k W[n, k] x[k] for the rows [r0, r0 + n) of a packed matrix (r0 a multiple of 4): 16-bit
// weights (BF16 or F16) widened to F32 in registers, F32 activations and accumulation, so the result is
// the F32 product of the stored weights.
void gemv_packed16(float* y, const uint16_t* w, int64_t kp, const float* x, int64_t r0, int64_t n, int64_t k,
                   bool accumulate, bool is_bf16);
// dst[i, c] = float(W[r0 + i, c]) for i in [0, rows), c in [0, k): rows of a packed matrix widened to F32.
void widen_packed_rows(float* dst, int64_t ld_dst, const uint16_t* w, int64_t kp, int64_t r0, int64_t rows,
                       int64_t k, bool is_bf16);

// dst[r, c] = float(src[r, c]) for a 16-bit block (is_bf16 selects BF16 or F16).
void widen_rows(float* dst, int64_t ld_dst, const uint16_t* src, int64_t ld_src, int64_t rows, int64_t cols,
                bool is_bf16);
// dst[r, c] = src[r, c] rounded to the 16-bit type (is_bf16 selects BF16 or F16) as minigpt::f32_to_bf16 and
// f32_to_f16 round it (to nearest even; NaN stays NaN): the 16-bit KV cache's stores.
void narrow_rows(uint16_t* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows, int64_t cols,
                 bool is_bf16);

// Causal attention of one head for nq <= 4 consecutive queries at positions p0 .. p0+nq-1, query i
// seeing keys 0 .. p0+i. K is stored transposed, kt[d * S + j] (so 8 keys' scores are one FMA per head
// dimension, no horizontal sums), V as v[j * D + d]. Keys are taken in blocks with an online softmax, so
// memory does not grow with the context. o rows are `ldo` apart, q rows `ldq` apart.
void attention_block(float* o, int64_t ldo, const float* q, int64_t ldq, int64_t nq, int64_t p0,
                     const float* kt, const float* v, int64_t S, int64_t D, float scale);

// attention_block for one query (a decode step: position n - 1, keys 0 .. n - 1) read straight from a 16-bit
// cache (is_bf16 selects BF16 or F16), K^T rows S apart, V rows D apart: the same result as widening the n
// keys and values to F32 and calling attention_block, without the copy. Returns false, having done nothing,
// where the kernel level has no such path (generic, or D not a multiple of 8): then widen and call
// attention_block.
bool attention_row16(float* o, const float* q, int64_t n, const uint16_t* kt, const uint16_t* v, int64_t S,
                     int64_t D, float scale, bool is_bf16);

// The KV cache's element type, for the kernels that read it directly.
enum class KvKind { F32, F16, BF16 };

// Decode attention of G query heads that share one KV head (grouped-query attention; G = 1 without it),
// over keys 0 .. n - 1 of K^T (rows S apart) and V (rows D apart) in `kind`, read straight from the cache
// (16-bit values widened in registers): each key and value is read once for all G heads. The result is
// left unnormalized, so that a caller may split the keys over threads and merge the parts: for each head g
// (q and o rows ldq and ldo apart) m[g] = max_j s_gj (s_gj = scale q_g . k_j), l[g] = sum_j exp(s_gj -
// m[g]), o_g = sum_j exp(s_gj - m[g]) v_j; o_g / l[g] is the attention's output. D a multiple of 8 (false,
// having done nothing, otherwise); only where attention_decode_available().
bool attention_decode_available();
bool attention_decode(float* o, int64_t ldo, float* m, float* l, const float* q, int64_t ldq, int64_t G,
                      int64_t n, const void* kt, const void* v, int64_t S, int64_t D, float scale,
                      KvKind kind);

// The same for any number of queries (a prefill): tiles of kPrefillTileQueries queries x 128 keys with the
// scores and the P V product register-blocked (6 queries x 16 keys / 16 output columns), so that the K and
// V strips are read from L1 once per 6 queries. Falls back to attention_block where D is not a multiple of 8.
// A caller splitting a prefill over threads does best in multiples of kPrefillTileQueries.
inline constexpr int64_t kPrefillTileQueries = 36;
void attention_prefill(float* o, int64_t ldo, const float* q, int64_t ldq, int64_t nq, int64_t p0,
                       const float* kt, const float* v, int64_t S, int64_t D, float scale);

// x = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in place; within a few ulp of the std::tanh result.
void gelu_tanh(float* x, int64_t n);
// x = x sigmoid(x) = x / (1 + exp(-x)) (SiLU), in place; within a few ulp of the std::exp result.
void silu(float* x, int64_t n);

// Several rows of activations at once (batched decode: nx sequences, every weight read from memory once).
// Row t of x is x + t * ldx, row t of y is y + t * ldy, for t < nx.
// y[t][i] (+)= sum_k W[r0 + i, k] x[t][k], i < n, on a Packed16 matrix (r0 a multiple of 4): each 4-row
// block of W streamed once and reused from L1 for all nx rows of x.
void gemv_packed16_rows(float* y, int64_t ldy, const uint16_t* w, int64_t kp, const float* x, int64_t ldx,
                        int64_t nx, int64_t r0, int64_t n, int64_t k, bool accumulate, bool is_bf16);
// y[t][i] (+)= sum_k W[i, k] x[t][k], W F32 [N, K] (OutIn) with row stride ldw.
void gemv_f32_rows(float* y, int64_t ldy, const float* w, int64_t ldw, const float* x, int64_t ldx,
                   int64_t nx, int64_t n, int64_t k, bool accumulate);

// Quantized weights: GGUF blocks (see kernels_quant_gemv.inc for each type's layout) interleaved by groups of
// 4 rows (QuantInterleave), against activations quantized per 32 values (QAct, made by quantize_acts): the
// integer dot products llama.cpp uses. The kinds with kernels; the other GGUF types are widened to F32 rows
// by the backend.
// (Q5_0, Q5_1, Q4_1 last: the kinds' numbers are bits of KernelTable::qgemm_kinds.)
enum class QKind { Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q5_0, Q5_1, Q4_1 };
// The held layout of a quantized [N, K] matrix: rows padded to a multiple of 4 (zero bytes, which every
// type reads as zero values), and for each group of 4 rows its blocks in the order (block j, row r):
// block j of row n at ((n / 4) * nb + j) * 4 + n % 4 blocks from the start, nb = K / block.
struct QuantInterleave {
  static int64_t padded_rows(int64_t n) { return (n + 3) / 4 * 4; }
  static int64_t block_index(int64_t n, int64_t j, int64_t nb) { return ((n / 4) * nb + j) * 4 + n % 4; }
};
// How a kind's kernels take a 4-row group's blocks j (the 4 blocks of `bytes` each, in the same bytes):
//   Blocks: block j of rows 0..3 in turn, each as the file holds it (Q5_K, Q6_K).
//   SplitScales (Q8_0, Q4_0): the 4 blocks' F16 scales (8 bytes, converted in one instruction), then the 4
//     rows' values in turn.
//   Q4KPacked (Q4_K; 576 bytes): d of rows 0..3 (8 bytes), dmin of rows 0..3 (8), the first scale word (bytes
//     4..7 of the block) of rows 0..3 (16), the second (16), the third (16), then the quants (qs, bytes
//     16..143) as 16 runs of 32 bytes: run 4c + p holds qs bytes [32c + 8p, 32c + 8p + 8) of rows 0..3 in
//     turn. A kernel then reads 4 rows' quants in one register against one 8-byte run of activations, and
//     decodes the 4 rows' scales in one pass (AVX2 from L2: 23.5 against 14.5 GB/s).
//   Planes (Q5_0, Q5_1, Q4_1; 4 x 22, 24, 20 bytes): each field of the 4 blocks as one plane: the 4 F16 d (8
//     bytes), the 4 F16 m (8; Q5_1, Q4_1), the fifth bits (16; Q5_0, Q5_1), then the 4 rows' qs (16 bytes
//     each). Byte b of the fifth bits holds those of values b and b + 16 of the 4 rows: row r's value
//     b + 16 h at bit 4 (r % 2) + 2 h + r / 2. A kernel reads the 4 rows' quants as one 64-byte register
//     (AVX2: two of rows 0, 1 and 2, 3) and their fifth bits as one 16-byte load: AVX-512 tests it into a
//     mask per nibble half (vptestmb), AVX2 moves each register's bits to bit 4 of its bytes with one shift
//     (the two 128-bit lanes of a row pair hold the same bit numbers apart by 4, taken up by shifting one
//     lane's copy once per block).
enum class QuantLayout { Blocks, SplitScales, Q4KPacked, Planes };
inline QuantLayout quant_layout(QKind kind) {
  return kind == QKind::Q8_0 || kind == QKind::Q4_0                          ? QuantLayout::SplitScales
         : kind == QKind::Q4_K                                               ? QuantLayout::Q4KPacked
         : kind == QKind::Q5_0 || kind == QKind::Q5_1 || kind == QKind::Q4_1 ? QuantLayout::Planes
                                                                             : QuantLayout::Blocks;
}
// dst (padded_rows(n) * nb blocks, the padding zeroed) = the n rows of nb blocks of `bytes` at src
// (row-major, as a GGUF file holds them) in the QuantInterleave order, each group of 4 blocks j in `layout`.
void interleave_quant_rows(uint8_t* dst, const uint8_t* src, int64_t n, int64_t nb, int64_t bytes,
                           QuantLayout layout);
// The blocks of row n of a QuantInterleave matrix gathered in order into dst (nb * bytes bytes), as the
// file holds them.
void gather_quant_row(uint8_t* dst, const uint8_t* w, int64_t n, int64_t nb, int64_t bytes,
                      QuantLayout layout);
// One row of quantized activations: q[k] int8 (32-byte aligned), d[k / block] F32 scales, s[k / 16] sums
// of 16 consecutive q; for Q8_0 weights (acts_int16) instead q16[k] int16 (64-byte aligned) and d per 32,
// q and s unused.
struct QAct {
  const int8_t* q;
  const float* d;
  const int16_t* s;
  const int16_t* q16;
};
// For each block of `block` values of x (32 for the kinds of 32-value blocks, 256 for the K types, as
// llama.cpp's Q8_0 and Q8_K; k a multiple of it): d = max|x| / 127, q = x * (127 / max|x|) rounded to nearest
// even (every level gives the same bytes), s the sums of 16 q.
void quantize_acts(const float* x, int64_t k, int8_t* q, float* d, int16_t* s, int64_t block);
// The same in 16 bits, per 32 values (k a multiple of 32): d = max|x| / 32767, q = x * (32767 / max|x|)
// rounded to nearest even, the same at every level.
void quantize_acts16(const float* x, int64_t k, int16_t* q, float* d);
// Whether a kind's kernels take 16-bit activations (QAct::q16, quantize_acts16): Q8_0's. Its weights carry 8
// bits, as many as int8 activations, whose rounding then doubled the product's error: on the shipped model's
// validation split (perplexity --kl-divergence against F32) Q8_0 with int8 activations had mean KLD 7.2e-4
// and the same top token at 98.48% (llama.cpp's Q8_0: 7.3e-4, 98.52%); with 16-bit ones 3.7e-4 and 98.91%,
// transformers' figure on the dequantized weights, and greedy tokens equal to its. The step of a 16-bit block
// is 1/258 of an 8-bit one's. The other kinds keep int8 (their weights' 4-6 bits dominate the error). Decode
// speed did not change (memory-bound; the kernel is ~10% slower from cache).
inline bool acts_int16(QKind kind) { return kind == QKind::Q8_0; }
// The activation block a kind's kernels take.
inline int64_t act_block_size(QKind kind) {
  return kind == QKind::Q4_K || kind == QKind::Q5_K || kind == QKind::Q6_K ? 256 : 32;
}
// y[t][i] (+)= sum_k W[r0 + i, k] xq_t[k] for i < n, t < nx (row t of y at y + t * ldy), W a QuantInterleave
// matrix of K = k (a multiple of the kind's block: 32, or 256 for the K types), r0 a multiple of 4. The
// weights are prefetched quant_prefetch_bytes() ahead of the reads (the level's table takes the distance as
// its last argument, 0 for none).
void gemv_quant(QKind kind, float* y, int64_t ldy, const uint8_t* w, int64_t r0, const QAct* x, int64_t nx,
                int64_t n, int64_t k, bool accumulate);
// How far ahead of its reads (bytes) a quantized GEMV prefetches the weights (_mm_prefetch, AVX2 and AVX-512
// levels). Each thread's weights are one sequential stream (QuantInterleave), which the hardware prefetchers
// alone leave waiting on DRAM. See kernels.cpp for the measurements behind the distance.
int64_t quant_prefetch_bytes();

// The prefill product of quantized weights as an int8 GEMM (VNNI's vpdpbusd: 16 rows x 4 bytes per
// instruction; AVX2's vpmaddubsw + vpmaddwd, 8 rows x 4 bytes), where the level has it (qgemm_available). The
// weights are repacked a panel of 16 rows at a time (qgemm_pack), every kind into one form: per 32 columns,
// the rows' values as signed bytes in groups of 4 columns (row r's at 4 r of each 64 bytes), with F32 scales
// such that
//   w = dw q + ow       (Q4_0, Q5_0 with their -8, -16 in q: ow = 0; Q4_1, Q5_1: dw = d, ow = m;
//                        Q4_K, Q5_K: dw = d sc_j, ow = -dmin m_j)
//   w = dw_h q          (Q6_K: a scale per 16 columns h, q - 32 in q)
// and -128 sum(q) for each (the activations are offset to unsigned bytes, xu = q + 128, as vpdpbusd
// multiplies unsigned by signed; that term takes the offset back). The activations are quantized per 32
// (quantize_acts, block 32, for every kind); xo = dx sum(xq) per block serves the ow term. The block
// products are exact integers; their F32 sum is in another order than the GEMV's (and the K kinds'
// activations are quantized per 32 here, per 256 there).
inline constexpr int64_t kQgemmRows = 16;
inline constexpr int64_t kQgemmBlockBytes = 512 + 5 * 64;  // values, dw, corr, dw_2, corr_2, ow
inline int64_t qgemm_panel_bytes(int64_t k) { return k / 32 * kQgemmBlockBytes; }
bool qgemm_available();
// Whether prefill runs weights of this kind through qgemm at this level: every kind but Q8_0, whose
// prefill, as its decode, keeps its activations' precision (acts_int16): q8gemm with VNNI, else its blocks
// widened to F32 for fgemm / sgemm. (With VNNI Q8_0 ran here 1.4x faster than through q8gemm, at the int8
// activations' accuracy.)
bool qgemm_takes(QKind kind);
// panel = rows [r0, r0 + rows) (rows <= 16; the rest zero) of a QuantInterleave matrix of K = k.
void qgemm_pack(uint8_t* panel, QKind kind, const uint8_t* w, int64_t r0, int64_t rows, int64_t k);
// y[t][r] += sum_k W[r, k] x_t[k] for r < rows, t < nt: xu row t at xu + t * ldxu (k bytes), its scales
// dx at xd + t * ldxd and dx sum(xq) at xo + t * ldxd (k / 32 of each), row t of y at y + t * ldy. Only
// where qgemm_available().
void qgemm(QKind kind, float* y, int64_t ldy, const uint8_t* panel, const uint8_t* xu, int64_t ldxu,
           const float* xd, const float* xo, int64_t ldxd, int64_t nt, int64_t rows, int64_t k);

// Q8_0's prefill product as a 16-bit integer GEMM, where the level has it (q8gemm_available: VNNI's
// vpdpwssd, 16 tokens x 2 products per instruction; elsewhere Q8_0's blocks are widened to F32 tiles for
// fgemm / sgemm, which ran 1.35x slower than it: pp512, 124M, 2 threads, Zen 5, MINIGPT_CPU=avx512 against
// avx512bf16). With VNNI but without AVX-512 (AVX-VNNI) there is none: vpmaddwd + vpaddd would match fgemm's
// 16 products per instruction at best. The activations are quantized as the GEMV's (quantize_acts16) and
// packed by q8gemm_pack_x in blocks of 32 tokens: per 32-column block (kQ8gemmXBlockBytes), for each of its
// 16 column pairs the 32 tokens' pairs of int16 (128 bytes), then the 32 tokens' scales (F32). The weights, 8
// rows at a time (q8gemm_pack_w), per 32-column block (kQ8gemmWBlockBytes): for each column pair the 8 rows'
// pairs of int16 (32 bytes), then the 8 rows' scales (F32). Each block's product is an exact integer, scaled
// by dw dx and summed in F32 in k order.
inline constexpr int64_t kQ8gemmRows = 8;
inline constexpr int64_t kQ8gemmXBlockBytes = 16 * 128 + 32 * 4;
inline constexpr int64_t kQ8gemmWBlockBytes = 16 * 32 + 8 * 4;
inline int64_t q8gemm_x_bytes(int64_t nt, int64_t k) {
  return (nt + 31) / 32 * (k / 32) * kQ8gemmXBlockBytes;
}
inline int64_t q8gemm_panel_bytes(int64_t k) { return k / 32 * kQ8gemmWBlockBytes; }
bool q8gemm_available();
// Tokens [t0, t1) (t0 a multiple of 32) of x [nt, k] (row t at x + t * ldx) into xp (q8gemm_x_bytes(nt, k),
// 64-byte aligned; the last block's missing tokens zero), so that threads can share the work.
void q8gemm_pack_x(uint8_t* xp, const float* x, int64_t ldx, int64_t nt, int64_t k, int64_t t0, int64_t t1);
// panel = rows [r0, r0 + rows) (r0 a multiple of 4, rows <= 8; the rest zero) of a Q8_0 QuantInterleave
// matrix of K = k.
void q8gemm_pack_w(uint8_t* panel, const uint8_t* w, int64_t r0, int64_t rows, int64_t k);
// y[t][r] (+)= sum_k W[r, k] x_t[k] for r < rows, t < nt, row t of y at y + t * ldy (+= where accumulate,
// else y is only written: the caller need not clear it).
void q8gemm(float* y, int64_t ldy, const uint8_t* panel, const uint8_t* xp, int64_t nt, int64_t rows,
            int64_t k, bool accumulate);

// The prefill product of unquantized weights with AVX-512 (fgemm_available; elsewhere OpenBLAS's sgemm):
// y[t][r] += sum_k W[r][k] x_t[k] for r < rows, t < nt, W row-major F32 (row r at w + r * ldw), the tokens'
// activations packed by fgemm_pack_x. Each output is F32 sums in k order, one per block of at most 768
// columns (equal blocks), added to y block after block.
bool fgemm_available();
// Whether the backend's prefill of unquantized weights runs fgemm, not OpenBLAS's sgemm (cpu_info.cpp):
// MINIGPT_SGEMM=minigpt|openblas says; by default fgemm where the level has it and OpenBLAS's kernels (chosen
// at its load from the CPU, or OPENBLAS_CORETYPE) are not AVX-512 ones. Throws Error(Argument) for another
// MINIGPT_SGEMM value.
bool own_sgemm();
// xp = x [nt, k] (row t at x + t * ldx) as blocks of 32 tokens, each k-major ([k][32], the last block's
// missing tokens zero): fgemm_packed_floats(nt, k) floats, 64-byte aligned. Tokens [t0, t1) of it (t0 a
// multiple of 32), so that threads can share the work.
inline int64_t fgemm_packed_floats(int64_t nt, int64_t k) { return (nt + 31) / 32 * 32 * k; }
void fgemm_pack_x(float* xp, const float* x, int64_t ldx, int64_t nt, int64_t k, int64_t t0, int64_t t1);
void fgemm(float* y, int64_t ldy, const float* w, int64_t ldw, int64_t rows, const float* xp, int64_t nt,
           int64_t k);

// BF16 weights in BF16 arithmetic, where the level has it (bf16_available: AVX-512 BF16's vdpbf16ps, 32
// products per instruction, the weights used as stored): the activations rounded to BF16 once per product
// (to nearest even; denormals to zero, as the instruction's conversion does), products of pairs of columns
// added to F32 accumulators. Each product of two BF16 values is exact in F32, so the result differs from
// the F32 product of the stored weights (gemv_packed16; fgemm or sgemm on widened rows) only by the
// activations' rounding, at most 2^-8 of sum |w x|, and the F32 summation.
bool bf16_available();
// Whether a CPU backend multiplies BF16 weights in BF16 (the kernels below) or widens them to F32 (the exact
// F32 product of the stored weights, as for F16): `want` (--bf16-math f32 or bf16), or for nullopt (auto)
// MINIGPT_BF16_MATH=f32 or bf16, and where that is unset, bf16 where bf16_available() and the CPU runs BF16
// arithmetic faster than F32's (AMD's cores, AMX: as llama.cpp computes BF16 weights; prefill ~1.9x the
// widened GEMM on a Zen 4), f32 on Intel's cores without AMX (vdpbf16ps at half the F32 FMAs' rate), read
// when a backend is made. Throws Error(Argument) for another value of the variable, or for bf16 where
// !bf16_available().
bool bf16_math(std::optional<bool> want = std::nullopt);
// Row t of x [nt, k] (row stride ldx) rounded to BF16 at xb + t * ldxb, then zeros up to
// Packed16::padded_cols(k) (ldxb at least that). The same bytes at every level.
void to_bf16_rows(uint16_t* xb, int64_t ldxb, const float* x, int64_t ldx, int64_t nt, int64_t k);
// The batched-decode GEMV: y[t][i] (+)= sum_k W[r0 + i, k] x_t[k] for i < n, t < nx (row t of y at
// y + t * ldy), W a BF16 Packed16 matrix with padded columns kp (r0 a multiple of 4), x_t the BF16 row
// xb + t * ldxb made by to_bf16_rows. Only where bf16_available().
void gemv_bf16_rows(float* y, int64_t ldy, const uint16_t* w, int64_t kp, const uint16_t* xb, int64_t ldxb,
                    int64_t nx, int64_t r0, int64_t n, int64_t k, bool accumulate);
// The prefill GEMM's activations: x [nt, k] (row t at x + t * ldx) rounded to BF16 as blocks of 32 tokens,
// each pair-major (for each pair of columns, the 32 tokens' pairs; the last block's missing tokens and the
// columns past k zero): bgemm_packed_halves(nt, k) 16-bit values, 64-byte aligned. Tokens [t0, t1) of it (t0
// a multiple of 32), so that threads can share the work.
inline int64_t bgemm_packed_halves(int64_t nt, int64_t k) {
  return (nt + 31) / 32 * 32 * Packed16::padded_cols(k);
}
void bgemm_pack_x(uint16_t* xp, const float* x, int64_t ldx, int64_t nt, int64_t k, int64_t t0, int64_t t1);
// y[t][i] += sum_k W[r0 + i, k] x_t[k] for i < rows, t < nt: W a BF16 Packed16 matrix with padded columns kp
// (r0 a multiple of 4; the padding rows of the last block are read), the activations packed by
// bgemm_pack_x. Only where bf16_available().
void bgemm(float* y, int64_t ldy, const uint16_t* w, int64_t kp, int64_t r0, int64_t rows, const uint16_t* xp,
           int64_t nt, int64_t k);

// One level's kernels (the functions above, same meaning and signatures).
struct KernelTable {
  const char* name;
  void (*gemv_f32)(float*, const float*, int64_t, const float*, int64_t, int64_t, bool);
  void (*gemv_packed16)(float*, const uint16_t*, int64_t, const float*, int64_t, int64_t, int64_t, bool,
                        bool);
  void (*widen_packed_rows)(float*, int64_t, const uint16_t*, int64_t, int64_t, int64_t, int64_t, bool);
  void (*widen_rows)(float*, int64_t, const uint16_t*, int64_t, int64_t, int64_t, bool);
  void (*narrow_rows)(uint16_t*, int64_t, const float*, int64_t, int64_t, int64_t, bool);
  void (*attention_block)(float*, int64_t, const float*, int64_t, int64_t, int64_t, const float*,
                          const float*, int64_t, int64_t, float);
  bool (*attention_row16)(float*, const float*, int64_t, const uint16_t*, const uint16_t*, int64_t, int64_t,
                          float, bool);
  void (*attention_prefill)(float*, int64_t, const float*, int64_t, int64_t, int64_t, const float*,
                            const float*, int64_t, int64_t, float);
  // null at the levels without it
  bool (*attention_decode)(float*, int64_t, float*, float*, const float*, int64_t, int64_t, int64_t,
                           const void*, const void*, int64_t, int64_t, float, KvKind);
  void (*gelu_tanh)(float*, int64_t);
  void (*silu)(float*, int64_t);
  void (*gemv_packed16_rows)(float*, int64_t, const uint16_t*, int64_t, const float*, int64_t, int64_t,
                             int64_t, int64_t, int64_t, bool, bool);
  void (*gemv_f32_rows)(float*, int64_t, const float*, int64_t, const float*, int64_t, int64_t, int64_t,
                        int64_t, bool);
  void (*quantize_acts)(const float*, int64_t, int8_t*, float*, int16_t*, int64_t);
  void (*quantize_acts16)(const float*, int64_t, int16_t*, float*);
  void (*gemv_quant)(QKind, float*, int64_t, const uint8_t*, int64_t, const QAct*, int64_t, int64_t, int64_t,
                     bool, int64_t);
  // null at the levels without it
  void (*qgemm)(QKind, float*, int64_t, const uint8_t*, const uint8_t*, int64_t, const float*, const float*,
                int64_t, int64_t, int64_t, int64_t);
  // The kinds qgemm takes (bit 1 << kind): those it beats widening to F32 for sgemm on.
  unsigned qgemm_kinds;
  // null at the levels without it
  void (*fgemm)(float*, int64_t, const float*, int64_t, int64_t, const float*, int64_t, int64_t);
  void (*fgemm_pack_x)(float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t);
  // null at the levels without it
  void (*q8gemm)(float*, int64_t, const uint8_t*, const uint8_t*, int64_t, int64_t, int64_t, bool);
  void (*q8gemm_pack_x)(uint8_t*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t);
  void (*q8gemm_pack_w)(uint8_t*, const uint8_t*, int64_t, int64_t, int64_t);
  void (*to_bf16_rows)(uint16_t*, int64_t, const float*, int64_t, int64_t, int64_t);
  // null at the levels without AVX-512 BF16
  void (*gemv_bf16_rows)(float*, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t,
                         int64_t, int64_t, int64_t, bool);
  void (*bgemm)(float*, int64_t, const uint16_t*, int64_t, int64_t, int64_t, const uint16_t*, int64_t,
                int64_t);
  void (*bgemm_pack_x)(uint16_t*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t);
};

// The level in use (chosen on first call: MINIGPT_CPU, else the best this CPU runs; throws Error
// (Argument) for a bad MINIGPT_CPU).
const KernelTable& kernels();
const char* kernel_level_name();
// The levels this binary holds and this CPU runs, lowest first ("generic" always).
std::vector<std::string> supported_levels();
// Every level name, lowest first, whether or not this binary holds it and this CPU runs it (for tests that
// show a level they cannot run as skipped, with kernels_for's reason).
std::vector<std::string> all_levels();
// The features we care about that this CPU has, e.g. "avx2 fma f16c".
std::string cpu_features();
// A given level's table, for tests: throws Error (Argument) for an unknown level, one this binary lacks,
// or one this CPU cannot run (naming the missing feature).
const KernelTable& kernels_for(std::string_view level);

// The plain versions the tests check the kernels against (double accumulation).
namespace reference {
void gemv_bf16(float* y, const uint16_t* w, int64_t ldw, const float* x, int64_t n, int64_t k,
               bool accumulate);
void gemv_f16(float* y, const uint16_t* w, int64_t ldw, const float* x, int64_t n, int64_t k,
              bool accumulate);
void gemv_f32(float* y, const float* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate);
void gelu_tanh(float* x, int64_t n);
void silu(float* x, int64_t n);  // x / (1 + exp(-x)) in double, rounded once
}  // namespace reference

}  // namespace minigpt::cpu
