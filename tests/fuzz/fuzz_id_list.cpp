// libFuzzer target: the id list of `minigpt tokenize --decode` and generate's --logit-bias values
// (cli/id_list.h).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "id_list.h"
#include "minigpt/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view s(reinterpret_cast<const char*>(data), size);
  try {
    const auto ids = minigpt::cli::parse_ids(s);
    // Both spellings of the same ids read back as those ids: "a b c" and "[a, b, c]".
    std::string again, listed = "[";
    for (int32_t id : ids) {
      if (id < 0) std::abort();
      again += std::to_string(id) + " ";
      listed += (listed.size() > 1 ? ", " : "") + std::to_string(id);
    }
    if (minigpt::cli::parse_ids(again) != ids) std::abort();
    if (minigpt::cli::parse_ids(listed + "]") != ids) std::abort();
  } catch (const minigpt::Error&) {
  }
  try {
    // A bias that parses is an id >= 0 with a finite bias or -inf, and prints and parses back the same.
    const auto [id, bias] = minigpt::cli::parse_logit_bias(s);
    if (id < 0 || std::isnan(bias) || bias == INFINITY) std::abort();
    char again[64];
    std::snprintf(again, sizeof again, "%d%+.9g", id, double(bias));
    const auto back = minigpt::cli::parse_logit_bias(again);
    if (back.first != id || !(back.second == bias)) std::abort();
  } catch (const minigpt::Error&) {
  }
  return 0;
}
