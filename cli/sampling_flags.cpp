#include "sampling_flags.h"

#include <cstdio>

namespace minigpt::cli {

void add_sampling_flags(CLI::App& app, SamplingFlags& f, const char* n_help) {
  GenerateOptions& g = f.gen;
  app.add_option("-n,--max-new-tokens", g.max_new_tokens,
                 n_help != nullptr
                     ? n_help
                     : "Tokens to generate at most (default 128; -1 = until the context is full, "
                       "as llama.cpp's -n -1)");
  app.add_option("--temperature,--temp", g.sampling.temperature,
                 "Sampling temperature; 0 = greedy (default 1.0)");
  app.add_option("--top-k", g.sampling.top_k, "Keep the k most likely tokens; 0 = off (default 50)");
  app.add_option("--top-p", g.sampling.top_p, "Nucleus sampling mass in (0, 1] (default 1.0 = off)");
  app.add_option("--min-p", g.sampling.min_p,
                 "Drop tokens below min_p x the top probability (default 0 = off)");
  app.add_option("--repetition-penalty,--repeat-penalty", g.sampling.repetition_penalty,
                 "CTRL repetition penalty (default 1.0 = off)");
  app.add_option("--repeat-last-n", g.sampling.repeat_last_n,
                 "The repetition penalty's window, as llama.cpp's: the last N tokens (default -1 = the whole "
                 "sequence, as transformers; 0 = none)");
  app.add_option("--presence-penalty", g.sampling.presence_penalty,
                 "The OpenAI API's: minus this from the logit of every token generated so far "
                 "(default 0 = off)");
  app.add_option("--frequency-penalty", g.sampling.frequency_penalty,
                 "The OpenAI API's: minus this x the times a token was generated so far (default 0 = off)");
  app.add_option(
         "--logit-bias", f.logit_bias,
         "Add BIAS to a token's logit, as llama.cpp: TOKEN_ID+BIAS or TOKEN_ID-BIAS (15043+1; 198-inf: "
         "never); repeatable")
      ->allow_extra_args(false);
  // "-1" (which CLI11 would read as 2^64 - 1) is refused by main.cpp's check of every integer option.
  app.add_option_function<uint64_t>(
      "--seed", [&f](const uint64_t& s) { f.seed = s; }, "Random seed (default: random)");
  app.add_option("--stop", g.stop, "Stop before this string (repeatable)")->allow_extra_args(false);
  app.add_flag("--ignore-eos", g.ignore_eos, "Keep generating past the end-of-text token");
}

std::function<bool(const char*)> flags_given(const CLI::App& app) {
  return [&app](const char* name) {
    static const std::pair<const char*, const char*> kFlags[] = {
        {"temperature", "--temperature"},
        {"top_k", "--top-k"},
        {"top_p", "--top-p"},
        {"min_p", "--min-p"},
        {"repetition_penalty", "--repetition-penalty"},
        {"repeat_last_n", "--repeat-last-n"},
        {"max_new_tokens", "--max-new-tokens"}};
    for (const auto& [key, flag] : kFlags)
      if (std::string_view(key) == name) return app.count(flag) > 0;
    return false;
  };
}

void note_generation_defaults(const GenerationDefaults& d) {
  if (!d.describe().empty()) {
    std::fprintf(stderr, "minigpt: %s: %s (flags override)\n", d.source.c_str(), d.describe().c_str());
  }
  if (!d.not_applied.empty()) {
    std::string names;
    for (const std::string& n : d.not_applied) names += (names.empty() ? "" : ", ") + n;
    std::fprintf(stderr, "minigpt: %s: not applied: %s (transformers applies them: its tokens may differ)\n",
                 d.source.c_str(), names.c_str());
  }
}

}  // namespace minigpt::cli
