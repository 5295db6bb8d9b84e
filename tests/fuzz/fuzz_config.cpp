// libFuzzer target: config.json reading (parse_config + validate) on arbitrary text.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "minigpt/config.h"
#include "minigpt/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const minigpt::Config c = minigpt::parse_config(text, "config.json");
    // What parse_config accepts must survive its own writer and reader unchanged.
    const minigpt::Config d = minigpt::parse_config(minigpt::config_to_json(c), "config.json (round trip)");
    if (d.n_layer != c.n_layer || d.n_head != c.n_head || d.n_embd != c.n_embd || d.n_ctx != c.n_ctx ||
        d.n_vocab != c.n_vocab || d.n_inner != c.n_inner || d.activation != c.activation ||
        d.position_encoding != c.position_encoding)
      std::abort();
  } catch (const minigpt::Error&) {
  }
  return 0;
}
