// The pre-tokenizers GGUF files name in tokenizer.ggml.pre (llama.cpp's LLAMA_VOCAB_PRE_TYPE_*), as the data
// of the families' tokenizers: each name's splits in the spelling of the family's tokenizer.json (tokenizers'
// Sequence of Split / Digits / Punctuation / ByteLevel), whose ids llama.cpp's vectors
// (models/ggml-vocab-*.gguf.out) come from, with its normalizer and BPE options. A GGUF file's tokenizer is
// read through it (tokenizer_files.cpp); no other layer needs it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace minigpt::tokenizer_detail {

struct TokenizerPre {
  std::vector<std::string_view> names;  // the tokenizer.ggml.pre values
  // Split patterns (behavior Isolated), in order, over the text, in tokenizers' (Oniguruma) spelling; Digits
  // is \p{N} (individual) or \p{N}+, ByteLevel's own regex is the GPT-2 pattern below.
  std::vector<std::string_view> splits;
  // Split patterns after ByteLevel, over the byte symbols (falcon: Digits, then "[0-9][0-9][0-9]"): "digits+"
  // stands for Digits(individual_digits = false) over byte symbols.
  std::vector<std::string_view> byte_splits;
  bool nfc = false;            // the normalizer is NFC
  bool ignore_merges = false;  // BPE ignore_merges
};

// GPT-2's pattern (ByteLevel with use_regex).
inline constexpr std::string_view kGpt2Split =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// The entry naming `name`, or null.
const TokenizerPre* find_tokenizer_pre(std::string_view name);
// Every name, comma-separated, for a message.
std::string tokenizer_pre_names();

}  // namespace minigpt::tokenizer_detail
