#include "tokenizer/pretokenizer.h"

#include <new>
#include <string>

#include "minigpt/error.h"
#include "tokenizer/tokenizer_pre.h"
#include "tokenizer/unicode_extra.h"

namespace minigpt::tokenizer_detail {
namespace {

// Unicode's White_Space property, which is what the reference engines (Oniguruma in HF tokenizers,
// fancy-regex in tiktoken) take \s to be. PCRE2's UCP \s also matches U+180E (Mongolian vowel separator, no
// longer White_Space since Unicode 6.3), which would split differently.
constexpr const char* kWs =
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}"
    "\\x{3000}";
// Letters and numbers are widened by those assigned after the Unicode version of PCRE2's tables
// (unicode_extra.h), as the reference engine knows them.
constexpr const char* kL = "\\p{L}" MINIGPT_EXTRA_L;
constexpr const char* kN = "\\p{N}" MINIGPT_EXTRA_N;

// Rust's char::is_numeric, which tokenizers' Digits uses: \p{N} of PCRE2's tables, widened by the numeric
// characters of later Unicode versions (unicode_extra.h, from tokenizers itself).
constexpr const char* kNumeric = "[\\p{N}" MINIGPT_EXTRA_NUMERIC "]";
constexpr const char* kNumericRun = "[\\p{N}" MINIGPT_EXTRA_NUMERIC "]+";

// Compiles `pattern` (UTF and UCP, or bytes) and JIT-compiles it when PCRE2 can.
pcre2_code* compile(const SplitStep& step, bool& jit) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  const uint32_t options = step.utf ? PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK : 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(step.pattern.data()), step.pattern.size(),
                                   options, &err, &err_offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    std::string shown = step.pattern.size() > 60 ? step.pattern.substr(0, 57) + "..." : step.pattern;
    throw Error(ErrorKind::Unsupported, "tokenizer: PCRE2 cannot compile the split pattern \"" + shown +
                                            "\" at offset " + std::to_string(err_offset) + ": " +
                                            reinterpret_cast<const char*>(msg));
  }
  // Without JIT (a PCRE2 built without it) the interpreter gives the same splits, only slower.
  jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return code;
}

}  // namespace

std::string translate_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() * 2);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      auto put_class = [&](const std::string& members) {
        if (in_class) {
          out += members;
        } else {
          out += "[" + members + "]";
        }
      };
      if (e == 's') {
        put_class(kWs);
        ++i;
        continue;
      }
      if (e == 'S') {
        if (in_class)
          throw Error(ErrorKind::Unsupported,
                      "tokenizer: split pattern: \\S inside a character class is not supported");
        out += std::string("[^") + kWs + "]";
        ++i;
        continue;
      }
      if (e == 'p' && p.substr(i + 2, 3) == "{L}") {
        put_class(kL);
        i += 4;
        continue;
      }
      if (e == 'p' && p.substr(i + 2, 3) == "{N}") {
        put_class(kN);
        i += 4;
        continue;
      }
      out += c;
      out += e;
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' first in the class (after an optional '^') is a member, in Oniguruma as in PCRE2.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

SplitStep gpt2_step() { return {translate_pattern(kGpt2Split)}; }

SplitStep digits_step(Digits digits) { return {digits == Digits::individual ? kNumeric : kNumericRun}; }

SplitStep punctuation_step(bool contiguous) {
  // Rust's is_ascii_punctuation (!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~) or Unicode's punctuation categories.
  const std::string cls = "[\\p{P}!-/:-@\\[-`{-~]";
  return {contiguous ? cls + "+" : cls};
}

SplitStep byte_digits_step(bool individual) {
  const std::string cls = "[0-9\\xB2\\xB3\\xB9\\xBC-\\xBE]";
  return {individual ? cls : cls + "+", /*utf=*/false};
}

PreTokenizer::PreTokenizer(const std::vector<SplitStep>& steps) {
  try {
    for (const SplitStep& s : steps) {
      Step step;
      step.code = compile(s, step.jit);
      steps_.push_back(step);
    }
  } catch (...) {
    for (Step& s : steps_) pcre2_code_free(s.code);
    throw;
  }
}

PreTokenizer::~PreTokenizer() {
  for (Step& s : steps_) pcre2_code_free(s.code);
}

PreTokenizer::Match::Match(const PreTokenizer& pre) : pre_(pre) {
  data_.reserve(pre.steps_.size());
  for (const Step& s : pre.steps_) {
    pcre2_match_data* d = pcre2_match_data_create_from_pattern(s.code, nullptr);
    if (!d) {
      for (pcre2_match_data* x : data_) pcre2_match_data_free(x);
      throw std::bad_alloc();
    }
    data_.push_back(d);
  }
}

PreTokenizer::Match::~Match() {
  for (pcre2_match_data* d : data_) pcre2_match_data_free(d);
}

bool PreTokenizer::Match::find(size_t level, std::string_view text, size_t pos, size_t& begin, size_t& end) {
  const Step& s = pre_.steps_[level];
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  // Empty matches split nothing (tokenizers drops empty pieces): never asked for.
  int rc = s.jit ? pcre2_jit_match(s.code, subject, text.size(), pos, PCRE2_NOTEMPTY, data_[level], nullptr)
                 : pcre2_match(s.code, subject, text.size(), pos, PCRE2_NOTEMPTY | PCRE2_NO_UTF_CHECK,
                               data_[level], nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    // A resource limit (match limit, JIT stack), not a property of the text.
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    throw Error(ErrorKind::Unsupported, "tokenizer: PCRE2 match failed at byte offset " +
                                            std::to_string(pos) + ": " + reinterpret_cast<const char*>(msg));
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data_[level]);
  begin = ov[0];
  end = ov[1];
  return true;
}

}  // namespace minigpt::tokenizer_detail
