// ggml's block-quantized tensor types: dequantization, bit for bit as the reference (the `gguf` Python
// package's gguf.quants, which follows ggml-quants.c) computes it in float32; Q2_K and Q3_K as
// ggml-quants.c's dequantize_row_q{2,3}_K.
#pragma once

#include <cstdint>

#include "minigpt/ggml_type.h"

namespace minigpt {

// Whether dequantize() handles `type`: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K,
// Q5_K, Q6_K.
bool can_dequantize(GgmlType type);
// dst[0, n) = the n values held by the blocks at src (n a multiple of the type's block size; src holds
// n / block_size * block_bytes bytes).
void dequantize(GgmlType type, const uint8_t* src, float* dst, int64_t n);

}  // namespace minigpt
