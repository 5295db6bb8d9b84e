// ggml's block quantizers: float32 values to the bytes of a GGUF tensor of a given type, bit for bit as the
// references compute them:
//   Q8_0, Q4_0, Q4_1, Q5_0, Q5_1  as the `gguf` Python package's gguf.quants.quantize (numpy, float32
//                                 arithmetic; the same bytes as ggml's quantize_row_*_ref),
//   Q2_K, Q3_K, Q4_K, Q5_K, Q6_K  as ggml's quantize_row_q{2,3,4,5,6}_K_ref (ggml-quants.c), which
//                                 llama-quantize runs when no importance matrix is given,
//   F16, BF16                     round to nearest even (numpy's astype(float16); ggml's fp32 -> bf16, NaN
//                                 quieted), F32 a copy.
// (tools/reference/make_quantize_reference.py writes the expected bytes; tests/test_quantize.cpp compares;
// tests/test_llama_cpp_interop.cpp compares whole files with llama-quantize's, every preset.)
#pragma once

#include <cstdint>

#include "minigpt/ggml_type.h"

namespace minigpt {

// Whether quantize() writes `type`: the types dequantize() reads (quant/quant.h).
bool can_quantize(GgmlType type);
// The bytes n values of `type` take (n a multiple of its block size).
uint64_t quantized_size(GgmlType type, int64_t n);
// dst[0, quantized_size(type, n)) = the blocks holding src[0, n). n must be a multiple of the type's block
// size (32 for Q*_0/Q*_1, 256 for the K types); Error(Unsupported) otherwise or for a type it cannot write.
void quantize(GgmlType type, const float* src, uint8_t* dst, int64_t n);

}  // namespace minigpt
