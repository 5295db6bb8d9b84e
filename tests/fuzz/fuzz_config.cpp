// libFuzzer target: config.json reading (parse_config + validate) and generation_config.json reading
// (parse_generation_config) on arbitrary text.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "minigpt/config.h"
#include "minigpt/error.h"
#include "minigpt/generation_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const minigpt::Config c = minigpt::parse_config(text, "config.json");
    // What parse_config accepts must survive its own writer and reader unchanged.
    const minigpt::Config d = minigpt::parse_config(minigpt::config_to_json(c), "config.json (round trip)");
    if (d.n_layer != c.n_layer || d.n_head != c.n_head || d.n_embd != c.n_embd || d.n_ctx != c.n_ctx ||
        d.n_vocab != c.n_vocab || d.n_inner != c.n_inner || d.activation != c.activation ||
        d.position_encoding != c.position_encoding || d.eos_token_id != c.eos_token_id ||
        (c.eos_token_ids.size() > 1 && d.eos_token_ids != c.eos_token_ids))
      std::abort();
  } catch (const minigpt::Error&) {
  }
  try {
    // What parse_generation_config accepts is in the ranges sampling takes.
    const minigpt::GenerationDefaults g = minigpt::parse_generation_config(text, "generation_config.json");
    minigpt::SamplingParams p;
    g.apply(p, [](const char*) { return false; });
    p.validate();  // throws Error(Argument): a range parse_generation_config let through
    for (const int64_t id : g.eos_token_ids)
      if (id < 0) std::abort();
    if ((g.max_new_tokens && *g.max_new_tokens < 1) || (g.max_length && *g.max_length < 1)) std::abort();
  } catch (const minigpt::Error& e) {
    if (e.kind() == minigpt::ErrorKind::Argument) std::abort();
  }
  return 0;
}
