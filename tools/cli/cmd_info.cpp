// minigpt info -m DIR: what a model directory holds.
#include <cstdio>

#include "command.h"
#include "minigpt/error.h"
#include "minigpt/model.h"
#include "minigpt/tokenizer.h"

namespace minigpt::cli {
namespace {

struct InfoOptions {
  std::string model_dir;
};

int run_info(const InfoOptions& o) {
  auto m = Model::load(o.model_dir, LoadOptions::threads(1));
  const Config& c = m->config();
  std::printf("model:        %s\n", o.model_dir.c_str());
  std::printf("architecture: gpt2 (%lld layers, %lld heads, n_embd %lld, n_inner %lld)\n", (long long)c.n_layer,
              (long long)c.n_head, (long long)c.n_embd, (long long)c.n_inner);
  std::printf("context:      %lld tokens\n", (long long)c.n_ctx);
  std::printf("vocabulary:   %lld tokens\n", (long long)c.n_vocab);
  std::printf("activation:   %s\n", c.activation_name.c_str());
  std::printf("positions:    %s\n", c.position_encoding == PositionEncoding::Learned ? "learned" : "sinusoidal");
  std::printf("lm head:      %s\n", c.tie_word_embeddings ? "tied to wte" : "separate");
  std::printf("parameters:   %lld (%.1fM)\n", (long long)m->n_params(), double(m->n_params()) / 1e6);
  for (const auto& [dtype, bytes] : m->stored_bytes()) {
    std::printf("weights %-5s %zu bytes (%.1f MB)\n", (dtype + ":").c_str(), bytes, double(bytes) / 1e6);
  }
  std::printf("bos / eos:    %lld / %lld\n", (long long)c.bos_token_id, (long long)c.eos_token_id);
  try {
    const Tokenizer tok = Tokenizer::load(o.model_dir);
    const auto eos = tok.eos_id();
    std::printf("tokenizer:    byte-level BPE, %d tokens%s\n", tok.n_vocab(),
                eos ? (", <|endoftext|> = " + std::to_string(*eos)).c_str() : "");
  } catch (const Error& e) {
    std::printf("tokenizer:    none (%s)\n", e.what());
  }
  return 0;
}

const bool registered = register_command("info", "Show a model's config, size and context length", [](CLI::App& app) {
  auto o = std::make_shared<InfoOptions>();
  app.add_option("-m,--model", o->model_dir, "Model directory (config.json + model.safetensors)")->required();
  return [o] { return run_info(*o); };
});

}  // namespace
}  // namespace minigpt::cli
