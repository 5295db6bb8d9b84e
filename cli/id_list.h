// The id list `minigpt tokenize --decode` reads; its own header so that tests/fuzz can call it.
#pragma once

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "minigpt/error.h"
#include "usage.h"

namespace minigpt::cli {

// Strict: decimal ids separated by whitespace, or by commas as transformers prints them ("[15496, 11, 995]",
// "15496,11,995"), the whole list optionally in one pair of square brackets. A bad token, an empty entry
// ("1,,2", "1,") or an unpaired bracket is named with its byte offset.
inline std::vector<int32_t> parse_ids(std::string_view s) {
  auto fail = [](const std::string& what, size_t at) {
    throw Error(ErrorKind::Argument, "--decode: " + what + " at byte offset " + std::to_string(at));
  };
  auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  size_t b = 0, e = s.size();
  while (b < e && space(s[b])) ++b;
  while (e > b && space(s[e - 1])) --e;
  if (b < e && s[b] == '[') {
    if (s[e - 1] != ']' || e - b < 2) fail("'[' without its closing ']'", b);
    ++b, --e;
  } else if (b < e && s[e - 1] == ']') {
    fail("']' without an opening '['", e - 1);
  }
  std::vector<int32_t> ids;
  size_t i = b;
  bool need_id = false;  // after a comma
  while (true) {
    while (i < e && space(s[i])) ++i;
    if (i >= e) break;
    if (s[i] == ',')
      fail(ids.empty() && !need_id ? "',' before the first id" : "',' with no id before it", i);
    const size_t start = i;
    while (i < e && !space(s[i]) && s[i] != ',') ++i;
    std::string_view tok = s.substr(start, i - start);
    int64_t v = 0;
    bool ok = tok.size() <= 10;
    for (char c : tok) {
      if (c < '0' || c > '9') ok = false;
      if (ok) v = v * 10 + (c - '0');
    }
    if (!ok || v > INT32_MAX)
      throw Error(ErrorKind::Argument, "--decode: \"" + std::string(tok.substr(0, 40)) + "\" (id #" +
                                           std::to_string(ids.size() + 1) + ", byte offset " +
                                           std::to_string(start) +
                                           ") is not a token id (a decimal integer from 0 to 2147483647)");
    ids.push_back(static_cast<int32_t>(v));
    need_id = false;
    while (i < e && space(s[i])) ++i;
    if (i < e && s[i] == ',') {
      need_id = true;
      ++i;
      const size_t comma = i - 1;
      while (i < e && space(s[i])) ++i;
      if (i >= e) fail("',' with no id after it", comma);
    }
  }
  return ids;
}

// generate's --logit-bias, as llama.cpp writes it: TOKEN_ID+BIAS or TOKEN_ID-BIAS ("15043+1", "198-inf":
// never). The id is 1-10 decimal digits up to 2^31 - 1, the bias a decimal number (or inf), nothing else.
inline std::pair<int32_t, float> parse_logit_bias(std::string_view s) {
  // Not of the form TOKEN_ID+BIAS: a command line that cannot be read (exit 2); a bias out of range: a
  // refused value (exit 1).
  const auto fail = [&](const std::string& why, bool usage = true) {
    const std::string m = "--logit-bias: \"" + std::string(s.substr(0, 40)) + "\" " + why +
                          " (TOKEN_ID+BIAS or TOKEN_ID-BIAS, e.g. 15043+1 or 198-inf)";
    if (usage) throw UsageError(m);
    throw Error(ErrorKind::Argument, m);
  };
  size_t i = 0;
  int64_t id = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    if (i == 10) fail("has a token id of more than 10 digits", false);
    id = id * 10 + (s[i++] - '0');
  }
  if (i == 0) fail("does not start with a token id");
  if (id > INT32_MAX) fail("has a token id above 2147483647", false);
  if (i == s.size() || (s[i] != '+' && s[i] != '-')) fail("has no + or - after the token id");
  const bool minus = s[i++] == '-';
  const std::string num(s.substr(i));
  // strtod would also skip spaces, take a second sign, hex and nan: a digit or '.' first, or exactly inf
  const bool digits = !num.empty() && (std::isdigit(static_cast<unsigned char>(num[0])) || num[0] == '.');
  if (!digits && num != "inf") fail("has no number after the sign");
  char* end = nullptr;
  const double v = std::strtod(num.c_str(), &end);
  if (end != num.c_str() + num.size() || (digits && num.find_first_of("xXnN") != std::string::npos)) {
    fail("has no number after the sign");
  }
  if (!minus && std::isinf(v))
    fail("is +inf: a bias must be finite, or -inf (never choose the token)", false);
  // FLT_MAX + half its last place: what a float rounds to infinity from
  if (digits && !(std::fabs(v) < 0x1.ffffffp+127)) fail("has a bias beyond a 32-bit float", false);
  return {static_cast<int32_t>(id), static_cast<float>(minus ? -v : v)};
}

}  // namespace minigpt::cli
