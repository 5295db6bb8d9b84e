// libFuzzer target: `minigpt serve`'s /v1/chat/completions body parser (parse_chat_request), with
// chatml-tiny's tokenizer and chat template (Qwen2.5's ChatML, tests/fixtures/models/chatml-tiny): messages,
// content parts and chat_template_kwargs from the client go through the template. Every input is either a
// checked request or an ApiError with a 4xx status; a parsed request has one prompt that fits the context and
// the vocabulary.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "chat/chat_template.h"
#include "minigpt/config.h"
#include "server/server.h"

namespace {
struct ChatModel {
  minigpt::Tokenizer tok = minigpt::Tokenizer::load(MINIGPT_SOURCE_DIR "/tests/fixtures/models/chatml-tiny");
  minigpt::Config config =
      minigpt::load_config(MINIGPT_SOURCE_DIR "/tests/fixtures/models/chatml-tiny/config.json");
  minigpt::ChatTemplate tmpl =
      *minigpt::load_chat_template(MINIGPT_SOURCE_DIR "/tests/fixtures/models/chatml-tiny", tok);
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ChatModel s;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  minigpt::server::RequestLimits lim;
  lim.n_ctx = s.config.n_ctx;
  try {
    const auto r = minigpt::server::parse_chat_request(body, s.tok, s.config, lim, &s.tmpl);
    if (!r.chat || r.prompts.size() != 1 || r.n < 1 || r.n > lim.max_choices) std::abort();
    if (r.max_tokens < 0 || r.max_tokens > lim.n_ctx || r.gen.max_new_tokens < 1) std::abort();
    if (int64_t(r.prompts[0].size()) > lim.n_ctx) std::abort();
    for (int32_t id : r.prompts[0]) {
      if (id < 0 || id >= s.config.n_vocab) std::abort();
    }
    if (r.logprobs && (*r.logprobs < 0 || *r.logprobs > 20)) std::abort();
  } catch (const minigpt::server::ApiError& e) {
    if (e.status() < 400 || e.status() >= 500) std::abort();
  }
  return 0;
}
