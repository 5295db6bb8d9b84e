// libFuzzer target: the id list of `minigpt tokenize --decode` (tools/cli/id_list.h).
#include <cstdint>
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
  return 0;
}
