// Tokenizers: byte-level BPE (GPT-2, GPT-NeoX / Pythia, OPT, StarCoder, Llama 3, Qwen2 and the pre-tokenizers
// llama.cpp names), SentencePiece BPE (Llama 2, Mistral, Phi-3, TinyLlama, llama2.c) and character-level BPE.
//
// Files: tokenizer.json; vocab.json + merges.txt (+ tokenizer_config.json); a GGUF file's tokenizer.ggml.*
// (model "gpt2" with the pre-tokenizers of src/tokenizer/tokenizer_pre.cpp, model "llama" with scores); a
// sentencepiece tokenizer.model; llama2.c's tokenizer.bin. A file is told by its contents, never its name.
//
// Behaviour, decided once here:
// - Input text must be valid UTF-8. encode() throws Error(ErrorKind::Argument, "... byte offset N")
//   otherwise: Hugging Face `tokenizers` only accepts str, so there is no reference behaviour to copy,
//   and an error is better than a silent U+FFFD substitution.
// - Added tokens (`added_tokens` of tokenizer.json; `<|endoftext|>` for vocab.json + merges.txt; control and
//   user-defined tokens of a GGUF file or tokenizer.model) split the text before anything else, as
//   `tokenizers` does: leftmost, then longest. A special one ("special": true, a control token) is recognised
//   only with allow_special = true (tiktoken's `allowed_special="all"`); otherwise its text is ordinary text
//   (tiktoken's `disallowed_special=()`, `tokenizers`' encode_special_tokens = True, llama.cpp's
//   parse_special = false). A non-special one (GPT-NeoX's runs of spaces, a user-defined token) is part of
//   the vocabulary and always recognised.
//   Their flags as `tokenizers` applies them: "normalized": false tokens are matched in the text as given,
//   first; then each piece between them is normalized and "normalized": true tokens (their content
//   normalized too) are matched in it; "lstrip" / "rstrip" take the Unicode white space before / after the
//   token into it. "single_word": true is refused (Error(Unsupported)). A flag the file leaves out is false,
//   but "special", which is true (as before the flags were read). decode() gives an added token's content.
// - The normalizer of tokenizer.json: none, NFC (GPT-NeoX, Qwen2), SentencePiece's Prepend("▁") and
//   Replace(" ", "▁") (Llama 2), or a Sequence of them. NFC is `tokenizers`' own: Unicode 9.0's (ICU's
//   NFC restricted to the code points of Unicode 9.0, see src/tokenizer/normalizer.h). decode() returns the
//   normalized text: "é" encodes as "é" does. Other normalizers are refused (Error(Unsupported)).
// - Pre-tokenization: a sequence of regex splits on PCRE2 (UTF, UCP, JIT), as `tokenizers`' Split with
//   behavior Isolated: ByteLevel's GPT-2 regex, Split (Llama 3's, Qwen2's, DeepSeek's patterns), Digits,
//   Punctuation; \s spelled as Unicode White_Space and \p{L} / \p{N} widened by the letters and numbers
//   assigned after PCRE2's Unicode tables (src/tokenizer/unicode_extra.h), so that the splits match HF
//   tokenizers over all code points. A split after ByteLevel sees byte symbols (Digits, ASCII-digit
//   patterns: falcon's). Metaspace (SentencePiece's space, prepend_scheme, split) for a SentencePiece BPE.
// - Byte-level BPE: a vocabulary that lacks the symbols of bytes valid UTF-8 never holds (0xC0, 0xC1,
//   0xF5..0xFF: GPT-NeoX's) loads; one that lacks any other byte is refused.
// - SentencePiece BPE: the symbols are characters, a space is U+2581 ("▁"), the dummy prefix puts one
//   before the text (tokenizers' Prepend: every section between added tokens, as llama.cpp; Metaspace's
//   "first" / "always": unless it starts with a space; sentencepiece's add_dummy_prefix: the text's start).
//   A character the vocabulary lacks becomes its <0xNN> byte tokens (byte_fallback) or the unknown token
//   (consecutive ones fused with fuse_unk, as sentencepiece does). Merges come from tokenizer.json's list
//   (by rank) or from the scores (GGUF "llama", tokenizer.model, tokenizer.bin): two adjacent tokens merge
//   when their concatenation is a normal or user-defined token, the highest score first, the leftmost of
//   equal scores, as sentencepiece and llama.cpp do.
// - Character-level BPE, as tools/convert_nanogpt.py --meta writes for a nanoGPT character model (and
//   `tokenizers` saves for BPE(vocab, merges=[]) with decoders.Fuse()): no pre_tokenizer, no merges, the
//   Fuse decoder, every symbol one character standing for itself. encode() gives one id per character; a
//   character the vocabulary lacks is Error(Argument) naming it (`tokenizers` drops it silently, nanoGPT's
//   stoi[c] raises); an unk_token is refused.
// - The BPE model: ignore_merges (a pre-token that is a token is not merged: Llama 3), byte_fallback and
//   fuse_unk are read; dropout, continuing_subword_prefix and end_of_word_suffix must be unset.
// - The post_processor of tokenizer.json (what `tokenizers` adds around the ids when asked to add
//   special tokens) is applied by encode_with_specials() only; encode() returns the ids of the text
//   alone. Accepted: none (null), ByteLevel (it only moves offsets, ids are unchanged),
//   TemplateProcessing (its "single" template: special tokens before and after exactly one sequence
//   "A"; "pair" is ignored, minigpt never encodes pairs), and a Sequence of these with at most one
//   TemplateProcessing. Any other processor (BertProcessing, RobertaProcessing, ...) is refused with
//   Error(Unsupported), a malformed template or one naming ids the tokenizer lacks with Error(Format). A
//   GGUF file's add_bos_token / add_eos_token are such a template.
// - Every refusal is one line naming the file and the component ("normalizer 'NFKC' is not supported").
// - decode() returns raw bytes: a sequence of ids may end inside a multi-byte character. A SentencePiece
//   token decodes with U+2581 as a space and a <0xNN> token as its byte; decode() drops the dummy prefix's
//   space at the start of the text (tokenizers' Strip / Metaspace decoder, sentencepiece's DecodeIds). Use
//   StreamDecoder to print text while generating.
// - A Tokenizer is immutable after load; encode() and decode() may be called from many threads at
//   once. The cache of repeated pre-tokens lives inside one encode() call (no shared mutable state).
#pragma once

#include <cstdint>
#include <filesystem>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "minigpt/model_source.h"
#include "minigpt/string_table.h"

namespace minigpt {

class GgufFile;

namespace tokenizer_detail {
class PreTokenizer;   // the compiled split patterns (PCRE2), see src/tokenizer/pretokenizer.h
struct RawTokenizer;  // what either file format holds, before the tables are built
class PieceCache;     // the ids of the pre-tokens one encode() call has seen
}  // namespace tokenizer_detail

class Tokenizer {
 public:
  // Reads `dir`/tokenizer.json if it exists, else `dir`/vocab.json + `dir`/merges.txt, else
  // `dir`/tokenizer.model; when `dir` is a file, the tokenizer of that GGUF file, or a sentencepiece
  // tokenizer.model, or a llama2.c tokenizer.bin (told by their contents; an llm.c checkpoint has none:
  // Error(Unsupported) asking for a tokenizer given apart). Throws Error (Io, Format, Unsupported) naming the
  // file. A directory with no weights is fine.
  static Tokenizer load(const std::filesystem::path& dir);
  // The same from a path already opened (a GGUF file's metadata is not parsed again).
  static Tokenizer load(const ModelSource& source);
  // The tokenizer of a loaded model of `n_vocab` tokens: that of `tokenizer` (a directory or GGUF file, as
  // `--tokenizer` names it) when not empty, else the model's own. A tokenizer with more tokens than n_vocab
  // (one that is not the model's) is an Error(Config) naming it, before any text is encoded into ids the
  // model lacks; so is a separate `tokenizer` with over 1024 fewer (more than a padded vocabulary's unused
  // rows: its text would be empty).
  static Tokenizer load_for_model(const ModelSource& model, int64_t n_vocab,
                                  const std::string& tokenizer = {});
  // The same from file contents in memory (load() reads the files and calls these); `source` names the
  // file in error messages.
  static Tokenizer from_tokenizer_json(std::string_view text, const std::string& source = "tokenizer.json");
  // `tokenizer_config`: tokenizer_config.json's text, or empty when there is none (its added_tokens_decoder
  // replaces the <|endoftext|> default, as in transformers' GPT2Tokenizer).
  static Tokenizer from_vocab_merges(std::string_view vocab_json, std::string_view merges_txt,
                                     const std::string& vocab_source = "vocab.json",
                                     const std::string& merges_source = "merges.txt",
                                     std::string_view tokenizer_config = {},
                                     const std::string& config_source = "tokenizer_config.json");
  // The 256 byte symbols and no merges, no special tokens: id == byte value.
  static Tokenizer byte_level();
  // The tokenizer a GGUF file carries (tokenizer.ggml.*); load() calls this for a GGUF file.
  static Tokenizer from_gguf(const GgufFile& f);
  // llama2.c's tokenizer.bin (tokenizer.py's export of a sentencepiece model: the longest token's length,
  // then per token its score, length and bytes; no count: the file's end is the vocabulary's). Ids 0, 1, 2
  // are <unk>, <s>, </s>; the <0xNN> tokens are byte fallback.
  static Tokenizer from_llama2c(std::string_view bytes, const std::string& source = "tokenizer.bin");
  // A sentencepiece model (tokenizer.model, a ModelProto) of type BPE, read with libsentencepiece.
  static Tokenizer from_sentencepiece(std::string_view bytes, const std::string& source = "tokenizer.model");

  // The ids of `text` alone: `tokenizers`' Tokenizer.encode(text, add_special_tokens=False) (which
  // recognises added tokens in the text, as allow_special = true does), tiktoken's encode().
  std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const;
  // encode(), then the post_processor's template around the ids: what `tokenizers`' Tokenizer.encode(text)
  // (add_special_tokens=True, its default) and a transformers tokenizer's __call__ return, e.g. "<s>"
  // before the text for OPT or Llama 3. The same as encode() for GPT-2 (its post_processor is ByteLevel)
  // and for vocab.json + merges.txt. An empty text gives the template's special tokens alone.
  std::vector<int32_t> encode_with_specials(std::string_view text, bool allow_special = false) const;
  // The template applied to ids already encoded: special_prefix() + ids + special_suffix().
  std::vector<int32_t> add_special_tokens(std::span<const int32_t> ids) const;
  // The ids the template puts before and after the text (empty without a TemplateProcessing).
  std::span<const int32_t> special_prefix() const { return special_prefix_; }
  std::span<const int32_t> special_suffix() const { return special_suffix_; }
  // The pre-tokens of `text` (views into it), Digits' splits included; encode() merges each one on its own.
  // As `tokenizers`' pre_tokenizer.pre_tokenize_str: the text as given (not normalized), added tokens not
  // split off.
  std::vector<std::string_view> pre_tokenize(std::string_view text) const;
  // The normalizer's output (NFC for GPT-NeoX), or the text itself when tokenizer.json has no normalizer;
  // `tokenizers`' normalizer.normalize_str. Throws Error(Argument) for invalid UTF-8.
  std::string normalize(std::string_view text) const;
  bool has_normalizer() const { return nfc_; }
  // Throws Error(Argument) for an id outside [0, n_vocab()) or one no token has.
  std::string decode(std::span<const int32_t> ids) const;
  // The bytes one token stands for (a special token: its text).
  std::string token_bytes(int32_t id) const;
  // The token as the vocabulary spells it ("Ġworld"); always valid UTF-8, for display and JSON.
  std::string token_symbol(int32_t id) const;
  int32_t n_vocab() const { return n_vocab_; }
  // A character-level BPE (see above): no byte alphabet, no merges.
  bool char_level() const { return char_level_; }
  // A SentencePiece BPE (see above): characters and U+2581, byte fallback.
  bool sentencepiece() const { return spm_; }
  // Whether decode() drops the dummy prefix's space at the start of a text.
  bool strips_leading_space() const { return strip_prefix_; }
  // A byte-level BPE split by GPT-2's regex alone (or after Digits), without ignore_merges: what GGUF's
  // tokenizer.ggml.pre "gpt-2" says, the one form minigpt's converter writes.
  bool gpt2_split() const { return gpt2_split_; }
  std::optional<int32_t> special_id(std::string_view text) const;
  // Whether `id` is an added token marked special (<|endoftext|>, <|im_start|>; a GGUF file's control
  // tokens): what transformers' decode(skip_special_tokens=True) and llama-server leave out of the text.
  bool is_special(int32_t id) const;
  // The file's end and beginning of text: a GGUF file's tokenizer.ggml.eos_token_id / bos_token_id,
  // sentencepiece's </s> / <s> (tokenizer.model, tokenizer.bin); else <|endoftext|> when the vocabulary has
  // it, which GPT-2 uses as both.
  std::optional<int32_t> eos_id() const {
    return eos_ >= 0 ? std::optional<int32_t>(eos_) : special_id("<|endoftext|>");
  }
  std::optional<int32_t> bos_id() const { return bos_ >= 0 ? std::optional<int32_t>(bos_) : eos_id(); }

  // The BPE merge of one pre-token, exposed for tests: the O(n log n) heap merge used for long
  // pre-tokens, the in-place scan used for short ones (at most 48 bytes), and a slow obvious
  // reference. All three must agree.
  enum class BpeImpl { reference, scan, heap };
  std::vector<int32_t> bpe_for_test(std::string_view piece, BpeImpl impl) const;

 private:
  Tokenizer() = default;
  static Tokenizer build(const tokenizer_detail::RawTokenizer& raw, const std::string& where);
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  std::vector<std::pair<uint64_t, Merge>> build_sentencepiece(
      const tokenizer_detail::RawTokenizer& raw, const std::unordered_map<std::string, int32_t>& sym_to_id,
      const std::string& where);
  // An added token, with the flags `tokenizers` applies.
  struct AddedToken {
    std::string content;  // as the file gives it: what decode() gives and special_id() looks up
    std::string match;    // what is matched: content, normalized when the token is and there is a normalizer
    int32_t id = 0;
    bool special = true;      // recognised only with allow_special
    bool normalized = false;  // matched in the normalized text (second pass), not the text as given
    bool lstrip = false, rstrip = false;
  };
  // The added tokens matched in one pass: indices into added_, longest match first, and which bytes can
  // start one.
  struct AddedPass {
    std::vector<uint32_t> tokens;
    bool starts[256] = {};
    bool any_plain = false;  // holds a non-special token (so the pass runs without allow_special)
    bool active(bool allow_special) const { return allow_special ? !tokens.empty() : any_plain; }
  };
  void index_added();
  template <typename OnText>
  void split_added(std::string_view text, const AddedPass& pass, bool allow_special, OnText&& on_text,
                   std::vector<int32_t>& out) const;
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  // The merges over initial symbols (ids; -1 an unknown character, which merges with nothing).
  void merge_short(int32_t* syms, size_t n, std::vector<int32_t>& out) const;
  void merge_long(const int32_t* syms, size_t n, std::vector<int32_t>& out) const;
  void check_missing_bytes(std::string_view piece, const std::vector<int32_t>& out, size_t from) const;
  // SentencePiece BPE of one pre-token (normalized: U+2581 for spaces).
  void spm_bpe(std::string_view piece, std::vector<int32_t>& out) const;
  // A section of text between added tokens: the dummy prefix, U+2581 for spaces, Metaspace's split, spm_bpe.
  void encode_sentencepiece(std::string_view text, bool at_start, std::vector<int32_t>& out,
                            tokenizer_detail::PieceCache& cache, std::list<std::string>& keep) const;
  // `at_start`: the text begins the whole input (the dummy prefix's "first" rules).
  void encode_ordinary(std::string_view text, bool at_start, std::vector<int32_t>& out,
                       tokenizer_detail::PieceCache& cache, std::list<std::string>& keep) const;
  const Merge* find_merge(int32_t left, int32_t right) const;

  int32_t n_vocab_ = 0;
  int32_t byte_ids_[256] = {};  // byte value -> id of its one-byte token
  StringTable id_bytes_;        // id -> bytes; empty = no token (a hole)
  StringTable id_symbols_;      // id -> symbol as the vocabulary spells it
  std::vector<bool> has_id_;    // id -> a token has it
  bool char_level_ = false;     // character-level BPE: char_ids_ instead of bytes and merges
  StringIdMap char_ids_;        // character (UTF-8) -> id
  // (left << 32 | right) -> rank, merged id: open addressing, the hottest lookup of encode().
  struct MergeSlot {
    uint64_t key = UINT64_MAX;  // UINT64_MAX: empty (ids are < 2^24, so no pair has it)
    Merge merge{};
  };
  std::vector<MergeSlot> merge_slots_;
  size_t n_merges_ = 0;
  void add_merge(uint64_t key, Merge m);
  std::vector<AddedToken> added_;         // in the file's order
  AddedPass raw_pass_, normalized_pass_;  // "normalized": false tokens, then true ones
  bool nfc_ = false;                      // the normalizer is NFC
  bool ignore_merges_ = false;            // a pre-token that is a token is that token (piece_ids_)
  bool missing_bytes_ = false;            // byte_ids_ has a -1 that valid UTF-8 can need
  bool gpt2_split_ = false;
  // SentencePiece BPE (spm_): a character's id (ascii_ids_ for ASCII, piece_ids_ for the rest; -1 none), the
  // ids of the <0xNN> tokens (-1 none), the unknown token, and how the text gets its U+2581.
  bool spm_ = false;
  bool fuse_unk_ = false, escape_spaces_ = false, split_on_space_ = false, strip_prefix_ = false;
  uint8_t prefix_ = 0;  // a tokenizer_detail::Prefix
  // No mergeable token has U+2581 after another character: a merge never crosses the start of a word (a run
  // of U+2581 and what follows it), so each word is merged on its own (and cached), with the same ids.
  bool spm_split_words_ = false;
  int32_t unk_id_ = -1;
  int32_t bos_ = -1, eos_ = -1;  // the file's, or -1
  int32_t ascii_ids_[128] = {};
  int32_t byte_fallback_ids_[256] = {};
  // The tokens by their bytes (byte-level, for ignore_merges) or text (SentencePiece: the mergeable ones).
  StringIdMap piece_ids_;
  std::vector<int32_t> special_prefix_, special_suffix_;  // the post_processor's template around the text
  // Shared so that a Tokenizer copies cheaply; the compiled pattern is immutable.
  std::shared_ptr<const tokenizer_detail::PreTokenizer> pre_;
};

// Turns ids into text while generating: emits only complete UTF-8 characters, holds the bytes of a
// character split across tokens, and emits U+FFFD for each maximal invalid byte sequence (the
// replacement policy of Python's bytes.decode(errors="replace")).
//
// `text_start`: the first id begins a text (a prompt's first token), so a SentencePiece tokenizer's dummy
// prefix space is dropped from it as decode() drops it; false (the default) for ids that continue a text
// (a reply after its prompt), whose leading space is a real one.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool text_start = false)
      : tokenizer_(&tokenizer), strip_(text_start && tokenizer.strips_leading_space()) {}
  std::string push(int32_t id);
  // What is still held, as U+FFFD (it can only be an incomplete character); resets the decoder.
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool strip_ = false;  // the next byte is the dummy prefix's space, if it is one
  std::string pending_;
};

// Replaces each maximal invalid UTF-8 subsequence of `bytes` by U+FFFD (Python's errors="replace").
std::string utf8_sanitize(std::string_view bytes);

}  // namespace minigpt
