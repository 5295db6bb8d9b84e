// The id list `minigpt tokenize --decode` reads; its own header so that tests/fuzz can call it.
#pragma once

#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "minigpt/error.h"

namespace minigpt::cli {

// Strict: decimal digits only, separated by whitespace; a bad token is named with its position.
inline std::vector<int32_t> parse_ids(std::string_view s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (true) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i >= s.size()) break;
    size_t start = i;
    while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) ++i;
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
  }
  return ids;
}

}  // namespace minigpt::cli
