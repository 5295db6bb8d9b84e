#include "speculative_flags.h"

#include "minigpt/error.h"
#include "minigpt/model_source.h"

namespace minigpt::cli {

void add_speculative_flags(CLI::App& app, SpeculativeFlags& f) {
  auto* lookup =
      app.add_flag("--prompt-lookup", f.prompt_lookup,
                   "Speculative decoding by prompt lookup: draft the tokens that followed the last "
                   "n-gram's latest earlier occurrence in the prompt or output (same output, faster "
                   "where the output quotes its input)");
  auto* draft = app.add_option("--draft-model,--model-draft", f.draft_model,
                               "Speculative decoding with this smaller model (same vocabulary) drafting: "
                               "same output, faster where it agrees with the model")
                    ->check(nonempty_path());
  lookup->excludes(draft);
  app.add_option("--draft-max", f.draft_max,
                 "Tokens drafted per step at most (default 8; adapts to acceptance)")
      ->check(in_range(1, 64));
  app.add_option("--draft-min", f.draft_min,
                 "Tokens drafted per step at least (default 0: plain steps while drafts are refused)")
      ->check(in_range(0, 64));
  app.add_option("--lookup-ngram-min", f.ngram_min, "Prompt lookup's shortest n-gram (default 1)")
      ->check(in_range(1, 64));
  app.add_option("--lookup-ngram-max", f.ngram_max, "Prompt lookup's longest n-gram (default 4)")
      ->check(in_range(1, 64));
}

SpeculativeOptions speculative_options(const SpeculativeFlags& f, const LoadOptions& target,
                                       int64_t n_vocab) {
  SpeculativeOptions s;
  s.prompt_lookup = f.prompt_lookup;
  s.draft_max = f.draft_max;
  s.draft_min = f.draft_min;
  s.ngram_min = f.ngram_min;
  s.ngram_max = f.ngram_max;
  s.validate();
  if (!f.draft_model.empty()) {
    LoadOptions d = target;  // the same backend: one thread pool for both models
    d.weight_dtype.reset();  // the draft runs as stored: --dtype is the target's
    try {
      s.draft_model = Model::load(ModelSource::open(f.draft_model), d);
    } catch (const Error& e) {
      throw Error(e.kind(), std::string("--draft-model: ") + e.what());
    }
    if (s.draft_model->config().n_vocab != n_vocab) {
      throw Error(ErrorKind::Argument, "--draft-model: " + f.draft_model + " has a vocabulary of " +
                                           std::to_string(s.draft_model->config().n_vocab) +
                                           " tokens, the model " + std::to_string(n_vocab) +
                                           " tokens: a draft must share the model's vocabulary");
    }
  }
  return s;
}

}  // namespace minigpt::cli
