// A model's own generation defaults: generation_config.json beside a Hugging Face model, or the
// general.sampling.* keys llama.cpp's converter writes from it into a GGUF file. `generate`, `chat`, `serve`
// and the Python package take them for every sampling setting the user does not give, through one merge
// (apply_generation_defaults(), minigpt/generate.h), as llama.cpp does with a GGUF file's keys; the
// eos_token_id of generation_config.json ends generation in place of config.json's, as in transformers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "minigpt/error.h"
#include "minigpt/model_source.h"
#include "minigpt/sampler.h"

namespace minigpt {

struct GenerationDefaults {
  std::optional<float> temperature;         // generation_config.json temperature, general.sampling.temp
  std::optional<int64_t> top_k;             // top_k, general.sampling.top_k (0: off)
  std::optional<float> top_p;               // top_p, general.sampling.top_p
  std::optional<float> min_p;               // min_p, general.sampling.min_p
  std::optional<float> repetition_penalty;  // repetition_penalty (or penalty_repeat), .penalty_repeat
  std::optional<int64_t> repeat_last_n;     // general.sampling.penalty_last_n (GGUF only: transformers
                                            // ignores a generation_config.json's penalty_last_n)
  // Never in a file: `serve`'s --presence-penalty and --frequency-penalty, request defaults as the others.
  std::optional<float> presence_penalty, frequency_penalty;
  std::vector<int64_t> eos_token_ids;  // generation_config.json's eos_token_id (an id or a list)
  // generation_config.json only (llama.cpp's converter copies neither): do_sample false makes greedy the
  // default, as transformers' generate() decodes then; max_new_tokens (or max_length, which counts the
  // prompt) the default length.
  std::optional<bool> do_sample;
  std::optional<int64_t> max_new_tokens, max_length;
  // Settings of generation_config.json that transformers applies and minigpt does not (suppress_tokens,
  // no_repeat_ngram_size, num_beams > 1, ...), each given a value that changes the tokens: `generate` and
  // `serve` name them on stderr, since transformers' tokens may then differ from minigpt's.
  std::vector<std::string> not_applied;
  // Sampling settings whose value sampling cannot take (top_p 1.5, a string): (name as apply() asks, the
  // one-line message naming the file and field). apply() throws that message for one the user does not
  // give; a flag or a request field that gives it makes the file's value irrelevant.
  std::vector<std::pair<std::string, std::string>> unusable;
  std::string source;  // the file they came from; empty when there is none

  bool empty() const {
    return !temperature && !top_k && !top_p && !min_p && !repetition_penalty && !repeat_last_n &&
           !presence_penalty && !frequency_penalty && eos_token_ids.empty() && !do_sample &&
           !max_new_tokens && !max_length;
  }
  // The default number of new tokens for a prompt of `prompt_tokens`: max_new_tokens, else max_length less
  // the prompt (at least 1), else nullopt.
  std::optional<int64_t> default_new_tokens(int64_t prompt_tokens) const {
    if (max_new_tokens) return *max_new_tokens;
    if (max_length) return std::max<int64_t>(1, *max_length - prompt_tokens);
    return std::nullopt;
  }
  // The sampling settings given, as "temperature 0.7, top_k 20" (empty when none).
  std::string describe() const;
  // Sets in `p` each value given here whose `given(name)` is false (name: temperature, top_k, top_p, min_p,
  // repetition_penalty, repeat_last_n, presence_penalty, frequency_penalty).
  template <typename Given>
  void apply(SamplingParams& p, Given&& given) const {
    for (const auto& [name, message] : unusable)
      if (!given(name.c_str())) throw Error(ErrorKind::Config, message);
    if (do_sample == false && !given("temperature")) p.temperature = 0;
    if (temperature && do_sample != false && !given("temperature")) p.temperature = *temperature;
    if (top_k && !given("top_k")) p.top_k = *top_k;
    if (top_p && !given("top_p")) p.top_p = *top_p;
    if (min_p && !given("min_p")) p.min_p = *min_p;
    if (repetition_penalty && !given("repetition_penalty")) p.repetition_penalty = *repetition_penalty;
    if (repeat_last_n && !given("repeat_last_n")) p.repeat_last_n = *repeat_last_n;
    if (presence_penalty && !given("presence_penalty")) p.presence_penalty = *presence_penalty;
    if (frequency_penalty && !given("frequency_penalty")) p.frequency_penalty = *frequency_penalty;
  }
};

// `model` a directory: its generation_config.json if there is one (nothing otherwise); a GGUF file (by its
// bytes, whatever its name): its general.sampling.{temp,top_k,top_p,min_p,penalty_repeat,penalty_last_n};
// an llm.c checkpoint: none. Throws
// Error(Format/Config) naming the file when the JSON does not parse, or a field other than the sampling
// settings (do_sample, max_new_tokens, max_length, eos_token_id) has a wrong type or value. A sampling
// setting out of range (temperature < 0, top_p or min_p outside [0, 1], repetition_penalty <= 0) or of a
// wrong type goes to `unusable`; a top_k below 0 is off (llama.cpp's reading), a top_p of 0 keeps the top
// token (transformers').
GenerationDefaults read_generation_defaults(const std::filesystem::path& model);
GenerationDefaults read_generation_defaults(const ModelSource& model);

// The same from generation_config.json's text; `source` names it in errors.
GenerationDefaults parse_generation_config(const std::string& json_text, const std::string& source);

}  // namespace minigpt
