// The id list `minigpt tokenize --decode` reads; its own header so that tests/fuzz can call it.
#pragma once

#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "minigpt/error.h"

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

}  // namespace minigpt::cli
