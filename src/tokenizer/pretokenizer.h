// Splits text into GPT-2 pre-tokens with PCRE2 (UTF + UCP, JIT-compiled).
#pragma once

#include <cstddef>
#include <string_view>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace minigpt::tokenizer_detail {

class PreTokenizer {
 public:
  PreTokenizer();
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Calls on_piece(std::string_view) for each pre-token of `text`, in order; the pieces cover the
  // text exactly. `text` must already be valid UTF-8 (the check is not repeated here).
  template <typename F>
  void split(std::string_view text, F&& on_piece) const {
    Match m(*this);
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = m.next(text, pos);
      on_piece(text.substr(pos, end - pos));
      pos = end;
    }
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

   private:
    const PreTokenizer& pre_;
    pcre2_match_data* data_;
  };

  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

}  // namespace minigpt::tokenizer_detail
