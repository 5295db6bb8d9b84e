// Splits text into pre-tokens: GPT-2's pattern with PCRE2 (UTF + UCP, JIT-compiled), after the splits of
// an optional Digits pre-tokenizer (StarCoder's Sequence[Digits, ByteLevel]).
#pragma once

#include <cstddef>
#include <string_view>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace minigpt::tokenizer_detail {

// tokenizers' Digits pre-tokenizer, which splits before ByteLevel's pattern runs: off, each numeric
// character on its own (individual_digits = true), or each run of them (false). Numeric is Rust's
// char::is_numeric (general categories Nd, Nl, No), which the pieces of tokenizers follow.
enum class Digits { none, contiguous, individual };

class PreTokenizer {
 public:
  explicit PreTokenizer(Digits digits = Digits::none);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  Digits digits() const { return digits_; }

  // Calls on_piece(std::string_view) for each pre-token of `text`, in order; the pieces cover the
  // text exactly. `text` must already be valid UTF-8 (the check is not repeated here).
  template <typename F>
  void split(std::string_view text, F&& on_piece) const {
    Match m(*this);
    if (digits_ == Digits::none) {
      split_gpt2(m, text, on_piece);
      return;
    }
    // Digits first: the text between numeric characters goes through GPT-2's pattern on its own, each
    // numeric character (individual) or run of them (contiguous) too.
    size_t pos = 0;
    while (pos < text.size()) {
      size_t begin = 0, end = 0;
      if (!m.next_numeric(text, pos, begin, end)) break;
      split_gpt2(m, text.substr(pos, begin - pos), on_piece);
      split_gpt2(m, text.substr(begin, end - begin), on_piece);
      pos = end;
    }
    split_gpt2(m, text.substr(pos), on_piece);
  }

 private:
  // Per-call match state: pcre2 match data may not be shared between threads.
  class Match {
   public:
    explicit Match(const PreTokenizer& pre);
    ~Match();
    Match(const Match&) = delete;
    Match& operator=(const Match&) = delete;
    size_t next(std::string_view text, size_t pos);  // end of the pre-token starting at pos
    // The first numeric character (or run) at or after pos: [begin, end); false if there is none.
    bool next_numeric(std::string_view text, size_t pos, size_t& begin, size_t& end);

   private:
    const PreTokenizer& pre_;
    pcre2_match_data* data_;
    pcre2_match_data* digits_data_ = nullptr;
  };

  template <typename F>
  static void split_gpt2(Match& m, std::string_view text, F& on_piece) {
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = m.next(text, pos);
      on_piece(text.substr(pos, end - pos));
      pos = end;
    }
  }

  pcre2_code* code_ = nullptr;
  bool jit_ = false;
  Digits digits_ = Digits::none;
  pcre2_code* digits_code_ = nullptr;  // one numeric character, or a run of them
  bool digits_jit_ = false;
};

}  // namespace minigpt::tokenizer_detail
