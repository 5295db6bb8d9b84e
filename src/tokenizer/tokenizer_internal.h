// What the tokenizer's source files share: the raw tokenizer the file readers fill (tokenizer_files.cpp)
// and the tables are built from (tokenizer.cpp), and the small helpers more than one of them uses.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/pretokenizer.h"

namespace minigpt {

class GgufFile;

namespace tokenizer_detail {
// An added token as a file gives it (tokenizer.json's added_tokens; see Tokenizer::AddedToken).
struct RawAdded {
  std::string content;
  int64_t id = 0;
  bool special = true, normalized = false, lstrip = false, rstrip = false;
};

// What a reader gathers from a tokenizer file (any of the formats) before the tables are built.
struct RawTokenizer {
  std::vector<std::pair<std::string, int64_t>> vocab;       // symbol, id
  std::vector<std::pair<std::string, std::string>> merges;  // left, right symbols, by rank
  std::vector<size_t> merge_lines;                          // where each merge came from
  std::vector<RawAdded> added;
  bool nfc = false;              // the normalizer is NFC
  Digits digits = Digits::none;  // a Digits pre-tokenizer before ByteLevel
  int byte_level = 0;            // how many ByteLevel pre-tokenizers (exactly one is accepted)
  // Character-level BPE (no pre_tokenizer, no merges, the Fuse decoder): each symbol is one character and
  // stands for itself, as the tokenizer.json tools/convert_nanogpt.py --meta writes for a nanoGPT
  // character model.
  bool char_level = false;
  // The post_processor's "single" template: the special tokens it puts before and after the text, as
  // (name in special_tokens, id); checked against the vocabulary by build().
  std::vector<std::pair<std::string, int64_t>> template_prefix, template_suffix;
  bool has_template = false;
};

// The readers of the file formats (tokenizer_files.cpp); `where` names the file in error messages.
RawTokenizer read_tokenizer_json(std::string_view text, const std::string& where);
RawTokenizer read_vocab_merges(std::string_view vocab_json, std::string_view merges_txt,
                               const std::string& vocab_where, const std::string& merges_where);
// tokenizer_config.json beside vocab.json + merges.txt: its added tokens replace raw's.
void read_tokenizer_config(std::string_view text, const std::string& where, RawTokenizer& raw);
// A GGUF file's tokenizer.ggml.* keys.
RawTokenizer read_gguf_tokenizer(const GgufFile& f);

// A name or value as JSON spells it (escaped, so that a message stays one line), cut at 60 characters.
std::string json_quote(const nlohmann::json& v);

// The key of the merge table (Tokenizer::merge_slots_): inline, since encoding looks it up for every pair.
inline uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace tokenizer_detail
}  // namespace minigpt
