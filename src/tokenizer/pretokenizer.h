// Splits text into pre-tokens: a sequence of regular expressions (PCRE2, JIT-compiled), each applied to the
// pieces the one before it made, as `tokenizers`' Sequence of Split pre-tokenizers with behavior Isolated
// (a match is a piece, and so is the text between two matches) and as llama.cpp's list of regexes per
// tokenizer.ggml.pre. ByteLevel's GPT-2 pattern, Digits and Punctuation are such steps too.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace minigpt::tokenizer_detail {

// tokenizers' Digits pre-tokenizer: off, each numeric character on its own (individual_digits = true), or
// each run of them (false). Numeric is Rust's char::is_numeric (general categories Nd, Nl, No).
enum class Digits { none, contiguous, individual };

// One split: `pattern` in PCRE2's syntax (see translate_pattern), matched over UTF-8 text (utf) or over bytes
// (a step after ByteLevel, which sees byte symbols: falcon's Digits and "[0-9]{3}").
struct SplitStep {
  std::string pattern;
  bool utf = true;
};

// A regex as tokenizer.json (Oniguruma) or llama.cpp spell it, in PCRE2's syntax with the classes of the
// reference: \s and \S as Unicode White_Space, \p{L} and \p{N} widened by the letters and numbers assigned
// after PCRE2's Unicode tables (unicode_extra.h). Throws Error(Unsupported) for \S inside a class.
std::string translate_pattern(std::string_view pattern);
// The steps of the named pieces of tokenizers' pre-tokenizers.
SplitStep gpt2_step();                        // ByteLevel(use_regex = true)
SplitStep digits_step(Digits digits);         // Digits
SplitStep punctuation_step(bool contiguous);  // Punctuation (Rust's is_ascii_punctuation || is_punctuation)
// Digits after ByteLevel: over the byte symbols, of which those of 0-9 and of bytes 0xB2, 0xB3, 0xB9, 0xBC,
// 0xBD and 0xBE ('²', '³', '¹', '¼', '½', '¾') are numeric.
SplitStep byte_digits_step(bool individual);

class PreTokenizer {
 public:
  // No steps: the text is one piece.
  explicit PreTokenizer(const std::vector<SplitStep>& steps = {});
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Calls on_piece(std::string_view) for each pre-token of `text`, in order; the pieces cover the text
  // exactly, and none is empty. `text` must already be valid UTF-8 (the check is not repeated here).
  template <typename F>
  void split(std::string_view text, F&& on_piece) const {
    if (text.empty()) return;
    if (steps_.empty()) {
      on_piece(text);
      return;
    }
    Match m(*this);
    split_level(m, 0, text, on_piece);
  }

 private:
  struct Step {
    pcre2_code* code = nullptr;
    bool jit = false;
  };
  // Per-call match state: pcre2 match data may not be shared between threads.
  class Match {
   public:
    explicit Match(const PreTokenizer& pre);
    ~Match();
    Match(const Match&) = delete;
    Match& operator=(const Match&) = delete;
    // The first match of step `level` in text at or after pos: [begin, end); false if there is none.
    bool find(size_t level, std::string_view text, size_t pos, size_t& begin, size_t& end);

   private:
    const PreTokenizer& pre_;
    std::vector<pcre2_match_data*> data_;
  };

  template <typename F>
  void split_level(Match& m, size_t level, std::string_view text, F& on_piece) const {
    if (level == steps_.size()) {
      on_piece(text);
      return;
    }
    size_t pos = 0;
    while (pos < text.size()) {
      size_t begin = 0, end = 0;
      if (!m.find(level, text, pos, begin, end)) break;
      if (begin > pos) split_level(m, level + 1, text.substr(pos, begin - pos), on_piece);
      split_level(m, level + 1, text.substr(begin, end - begin), on_piece);
      pos = end;
    }
    if (pos < text.size()) split_level(m, level + 1, text.substr(pos), on_piece);
  }

  std::vector<Step> steps_;
};

}  // namespace minigpt::tokenizer_detail
