// libFuzzer target: `minigpt serve`'s /v1/completions body parser (src/server/server.h), with the shipped
// model's tokenizer and configuration. Every input is either a checked request or an ApiError with a 4xx
// status; a parsed request always fits the context and the vocabulary.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "minigpt/config.h"
#include "server/server.h"

namespace {
struct Shipped {
  minigpt::Tokenizer tok = minigpt::Tokenizer::load(MINIGPT_SOURCE_DIR "/models/shakespeare-char");
  minigpt::Config config = minigpt::load_config(MINIGPT_SOURCE_DIR "/models/shakespeare-char/config.json");
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Shipped s;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  minigpt::server::RequestLimits lim;
  lim.n_ctx = s.config.n_ctx;
  try {
    const auto r = minigpt::server::parse_completion_request(body, s.tok, s.config, lim);
    if (r.prompts.empty() || r.n < 1 || int64_t(r.prompts.size()) * r.n > lim.max_choices) std::abort();
    if (r.max_tokens < 0 || r.max_tokens > lim.n_ctx || r.gen.max_new_tokens < 1) std::abort();
    for (const auto& p : r.prompts) {
      if (int64_t(p.size()) > lim.n_ctx) std::abort();
      for (int32_t id : p) {
        if (id < 0 || id >= s.config.n_vocab) std::abort();
      }
    }
    if (r.logprobs && (*r.logprobs < 0 || *r.logprobs > lim.max_top_logprobs)) std::abort();
  } catch (const minigpt::server::ApiError& e) {
    if (e.status() < 400 || e.status() >= 500) std::abort();
  }
  return 0;
}
