// The sampling and length flags `generate` and `chat` share, named as transformers' generate() names them,
// and which of them the command line gives: the model's own defaults (generation_config.json, a GGUF file's
// general.sampling.*) fill in the others (apply_generation_defaults(), minigpt/generate.h).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "minigpt/generate.h"
#include "minigpt/generation_config.h"

namespace minigpt::cli {

struct SamplingFlags {
  GenerateOptions gen;
  std::vector<std::string> logit_bias;  // --logit-bias as given, parsed by parse_logit_bias()
  std::optional<uint64_t> seed;
};

// -n, --temperature, --top-k, --top-p, --min-p, --repetition-penalty, --repeat-last-n, --presence-penalty,
// --frequency-penalty, --logit-bias, --seed, --stop, --ignore-eos.
// `n_help`: -n's help (the default differs by command); null: generate's.
void add_sampling_flags(CLI::App& app, SamplingFlags& f, const char* n_help = nullptr);

// Whether the flag setting `name` (temperature, top_k, top_p, min_p, repetition_penalty, repeat_last_n,
// max_new_tokens) is on the command line: the model's defaults fill in the others.
std::function<bool(const char*)> flags_given(const CLI::App& app);

// On stderr: the settings taken from the model's file, and those minigpt does not apply (one line each).
void note_generation_defaults(const GenerationDefaults& d);

}  // namespace minigpt::cli
