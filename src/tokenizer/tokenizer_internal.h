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

// How the text before each piece of the model gets the SentencePiece space (U+2581) in front of it: the
// "dummy prefix".
enum class Prefix {
  none,
  every_section,  // every section between added tokens (tokenizers' Prepend normalizer, llama.cpp)
  every_section_unless_space,  // the same unless it starts with a space (Metaspace prepend_scheme "always")
  first_section,               // the text's first section only (sentencepiece's add_dummy_prefix)
  first_section_unless_space,  // the same unless it starts with a space (Metaspace prepend_scheme "first")
};

// The kinds of token a SentencePiece vocabulary has (sentencepiece's ModelProto.SentencePiece.Type, which
// GGUF's tokenizer.ggml.token_type copies).
enum class PieceType { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

// What a reader gathers from a tokenizer file (any of the formats) before the tables are built.
struct RawTokenizer {
  std::vector<std::pair<std::string, int64_t>> vocab;       // symbol, id
  std::vector<std::pair<std::string, std::string>> merges;  // left, right symbols, by rank
  std::vector<size_t> merge_lines;                          // where each merge came from
  std::vector<RawAdded> added;
  bool nfc = false;  // the normalizer is NFC
  // The pre-tokenizer's splits, in order (see pretokenizer.h); a ByteLevel with use_regex is one of them.
  std::vector<SplitStep> splits;
  int byte_level = 0;  // how many ByteLevel pre-tokenizers (byte-level BPE: exactly one)
  // Character-level BPE (no pre_tokenizer, no merges, the Fuse decoder): each symbol is one character and
  // stands for itself, as the tokenizer.json tools/convert_nanogpt.py --meta writes for a nanoGPT
  // character model.
  bool char_level = false;
  // A pre-token that is a whole token is that token, unmerged (tokenizers' BPE ignore_merges, Llama 3's).
  bool ignore_merges = false;

  // SentencePiece BPE: symbols are characters (the vocabulary spells each token as its text, with U+2581 for
  // a space), a character the vocabulary lacks becomes its <0xNN> byte tokens (byte_fallback) or the
  // unknown token.
  bool sentencepiece = false;
  bool byte_fallback = false;
  int64_t unk_id = -1;                  // the unknown token, or -1
  bool fuse_unk = false;                // consecutive unknown tokens are one
  bool escape_spaces = false;           // ' ' becomes U+2581 before the model sees the text
  Prefix prefix = Prefix::none;         // the dummy prefix
  bool metaspace = false;               // the pre_tokenizer is Metaspace
  bool split_on_space = false;          // Metaspace split: each U+2581 starts a new pre-token
  bool strip_prefix_on_decode = false;  // decode() drops one leading space (Strip / Metaspace decoder)
  // The merges come from the scores instead of `merges` (sentencepiece's BPE, GGUF "llama", llama2.c): two
  // adjacent tokens merge when their concatenation is a token, the highest score first. One per vocab entry.
  std::vector<float> scores;
  std::vector<PieceType> types;      // one per vocab entry when the file gives them
  int64_t bos_id = -1, eos_id = -1;  // the file's beginning and end of text, when it names them

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
// llama2.c's tokenizer.bin (tokenizer_spm_files.cpp).
RawTokenizer read_llama2c_tokenizer(std::string_view bytes, const std::string& where);
// sentencepiece's tokenizer.model (tokenizer_spm_files.cpp).
RawTokenizer read_sentencepiece_model(std::string_view bytes, const std::string& where);
// The U+2581 SentencePiece puts for a space.
inline constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";

// A name or value as JSON spells it (escaped, so that a message stays one line), cut at 60 characters.
std::string json_quote(const nlohmann::json& v);

// The key of the merge table (Tokenizer::merge_slots_): inline, since encoding looks it up for every pair.
inline uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace tokenizer_detail
}  // namespace minigpt
