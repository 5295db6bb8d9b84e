#include "tokenizer/pretokenizer.h"

#include <string>

#include "minigpt/error.h"
#include "tokenizer/unicode_extra.h"

namespace minigpt::tokenizer_detail {
namespace {

// GPT-2's pattern, 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+, with
// \s spelled out as Unicode's White_Space property, which is what the reference engines (Oniguruma
// in HF tokenizers, fancy-regex in tiktoken) use. PCRE2's UCP \s also matches U+180E (Mongolian
// vowel separator, no longer White_Space since Unicode 6.3), which would split differently.
#define MINIGPT_WS       \
  "\\t\\n\\x{0B}\\f\\r " \
  "\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
// Letters and numbers are widened by those assigned after the Unicode version of PCRE2's tables
// (unicode_extra.h), as the reference engine knows them.
#define MINIGPT_L "\\p{L}" MINIGPT_EXTRA_L
#define MINIGPT_N "\\p{N}" MINIGPT_EXTRA_N
constexpr const char* kPattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?[" MINIGPT_L "]+| ?[" MINIGPT_N "]+| ?[^" MINIGPT_WS MINIGPT_L MINIGPT_N
    "]+"
    "|[" MINIGPT_WS "]+(?![^" MINIGPT_WS "])|[" MINIGPT_WS "]+";
// Rust's char::is_numeric, which tokenizers' Digits uses: \p{N} of PCRE2's tables, widened by the numeric
// characters of later Unicode versions (unicode_extra.h, from tokenizers itself).
constexpr const char* kNumeric = "[\\p{N}" MINIGPT_EXTRA_NUMERIC "]";
constexpr const char* kNumericRun = "[\\p{N}" MINIGPT_EXTRA_NUMERIC "]+";
#undef MINIGPT_WS
#undef MINIGPT_L
#undef MINIGPT_N

// Compiles `pattern` (UTF, UCP) and JIT-compiles it when PCRE2 can; `what` names it in the error.
pcre2_code* compile(const char* pattern, const char* what, bool& jit) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &err_offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error(ErrorKind::Unsupported, std::string("tokenizer: PCRE2 cannot compile ") + what + ": " +
                                            reinterpret_cast<const char*>(msg));
  }
  // Without JIT (a PCRE2 built without it) the interpreter gives the same splits, only slower.
  jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return code;
}

}  // namespace

PreTokenizer::PreTokenizer(Digits digits) : digits_(digits) {
  code_ = compile(kPattern, "the GPT-2 pattern", jit_);
  if (digits_ != Digits::none) {
    try {
      digits_code_ =
          compile(digits_ == Digits::individual ? kNumeric : kNumericRun, "the Digits pattern", digits_jit_);
    } catch (...) {
      pcre2_code_free(code_);
      throw;
    }
  }
}

PreTokenizer::~PreTokenizer() {
  pcre2_code_free(code_);
  pcre2_code_free(digits_code_);  // null is fine
}

PreTokenizer::Match::Match(const PreTokenizer& pre)
    : pre_(pre), data_(pcre2_match_data_create_from_pattern(pre.code_, nullptr)) {
  if (!data_) throw std::bad_alloc();
  if (pre.digits_code_) {
    digits_data_ = pcre2_match_data_create_from_pattern(pre.digits_code_, nullptr);
    if (!digits_data_) {
      pcre2_match_data_free(data_);
      throw std::bad_alloc();
    }
  }
}

PreTokenizer::Match::~Match() {
  pcre2_match_data_free(data_);
  pcre2_match_data_free(digits_data_);
}

bool PreTokenizer::Match::next_numeric(std::string_view text, size_t pos, size_t& begin, size_t& end) {
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = pre_.digits_jit_
               ? pcre2_jit_match(pre_.digits_code_, subject, text.size(), pos, 0, digits_data_, nullptr)
               : pcre2_match(pre_.digits_code_, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, digits_data_,
                             nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    throw Error(ErrorKind::Unsupported, "tokenizer: PCRE2 match (Digits) failed at byte offset " +
                                            std::to_string(pos) + ": " + reinterpret_cast<const char*>(msg));
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(digits_data_);
  begin = ov[0];
  end = ov[1];
  return true;
}

size_t PreTokenizer::Match::next(std::string_view text, size_t pos) {
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = pre_.jit_ ? pcre2_jit_match(pre_.code_, subject, text.size(), pos, 0, data_, nullptr)
                     : pcre2_match(pre_.code_, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, data_, nullptr);
  if (rc < 0) {
    // Every character is whitespace, a letter, a number or something else, so some alternative
    // always matches; a failure here is a resource limit (match limit, JIT stack).
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    throw Error(ErrorKind::Unsupported, "tokenizer: PCRE2 match failed at byte offset " +
                                            std::to_string(pos) + ": " + reinterpret_cast<const char*>(msg));
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data_);
  // The match always starts at pos (see above); if it ever did not, the skipped bytes still become
  // a piece of their own so that no input is lost.
  return ov[0] > pos ? ov[0] : ov[1];
}

}  // namespace minigpt::tokenizer_detail
