// The CPU backend's own kernels, where OpenBLAS has nothing for the job (16-bit weights) or is slow
// (transcendentals). Each has a plain reference next to it that the unit tests compare against.
// Vector paths: AVX2 + FMA + F16C (x86-64-v3, e.g. AMD Zen, Intel Haswell and later), chosen at compile
// time (-march=native); elsewhere the plain loops run.
//
// Matrices here are row-major [N, K] with row stride ldw: y[n] = sum_k W[n, k] x[k] (the OutIn layout).
#pragma once

#include <cstdint>

namespace minigpt::cpu {

// y[n] (+)= sum_k W[n, k] * x[k] for n in [0, N): 16-bit weights (BF16 or F16) widened to F32 in registers,
// F32 activations and accumulation, so the result is the F32 product of the stored weights.
void gemv_bf16(float* y, const uint16_t* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate);
void gemv_f16(float* y, const uint16_t* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate);
void gemv_f32(float* y, const float* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate);

// y[n] (+)= sum_k x[k] * W[k, n] for n in [0, N) with W row-major [K, ldw] (GPT-2's Conv1D layout, used
// straight from the file): columns in blocks, each block swept down all K rows.
void gemv_inout_f32(float* y, const float* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate);

// dst[r, c] = float(src[r, c]) for a 16-bit block (is_bf16 selects BF16 or F16).
void widen_rows(float* dst, int64_t ld_dst, const uint16_t* src, int64_t ld_src, int64_t rows, int64_t cols, bool is_bf16);

// x = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in place; within a few ulp of the std::tanh result.
void gelu_tanh(float* x, int64_t n);

// The plain versions the tests check the kernels against (double accumulation).
namespace reference {
void gemv_bf16(float* y, const uint16_t* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate);
void gemv_f16(float* y, const uint16_t* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate);
void gemv_f32(float* y, const float* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate);
void gemv_inout_f32(float* y, const float* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate);
void gelu_tanh(float* x, int64_t n);
}  // namespace reference

}  // namespace minigpt::cpu
