// The first int32 (little-endian) of each kind of file llm.c writes: how a path is told to be an llm.c file
// (src/formats/model_source.cpp) before src/arch/llmc.h reads one.
#pragma once

#include <cstdint>

namespace minigpt {

inline constexpr int32_t kLlmcMagic = 20240326;           // a model checkpoint (write_model)
inline constexpr int32_t kLlmcStateMagic = 20240327;      // train_gpt2.py's write_state: a debugging dump
inline constexpr int32_t kLlmcTokenizerMagic = 20240328;  // write_tokenizer: token bytes, decoding only

inline bool is_llmc_magic(int32_t m) {
  return m == kLlmcMagic || m == kLlmcStateMagic || m == kLlmcTokenizerMagic;
}

}  // namespace minigpt
