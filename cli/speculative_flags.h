// The speculative-decoding flags `generate` and `chat` share (docs/speculative.md): --prompt-lookup,
// --draft-model (llama.cpp's --model-draft), --draft-max, --draft-min, --lookup-ngram-min/max.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "common.h"
#include "minigpt/generate.h"

namespace minigpt::cli {

struct SpeculativeFlags {
  bool prompt_lookup = false;
  std::string draft_model;  // a model path, loaded with the target's backend and threads
  int64_t draft_max = 8;
  int64_t draft_min = 0;
  int64_t ngram_min = 1;
  int64_t ngram_max = 4;
};

void add_speculative_flags(CLI::App& app, SpeculativeFlags& f);

// The options the flags ask for, the draft model loaded on the target's backend (`target`: the target's load
// options; the draft keeps its stored dtype); Error(Argument) for values out of range, both sources at once,
// or a draft of another vocabulary (`n_vocab`: the target's).
SpeculativeOptions speculative_options(const SpeculativeFlags& f, const LoadOptions& target, int64_t n_vocab);

}  // namespace minigpt::cli
