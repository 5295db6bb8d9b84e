#include "prompt_cache_flags.h"

#include <cstdio>

#include "run/prompt_cache.h"

namespace minigpt::cli {

void add_prompt_cache_flags(CLI::App& app, PromptCacheFlags& f) {
  auto* file =
      app.add_option("--prompt-cache", f.file,
                     "Keep the prompt's keys and values in this file: a later run whose prompt begins "
                     "with the same tokens evaluates only the rest (the file names the model; "
                     "another model's is refused)");
  app.add_flag("--prompt-cache-ro", f.read_only, "With --prompt-cache: use the file, never write it")
      ->needs(file);
}

void use_prompt_cache(const PromptCacheFlags& f, Session& session, const std::string& model_name,
                      GenerateCallbacks& cb) {
  if (f.file.empty()) return;
  if (!session.exports_kv()) {
    std::fprintf(stderr,
                 "minigpt: --prompt-cache: not used: this model's keys and values cannot be exported on the "
                 "%s backend (a windowed layer keeps only its last positions, or the backend cannot)\n",
                 session.model().backend().name().c_str());
    return;
  }
  struct State {
    PromptFileModel model;
    std::vector<int32_t> prompt, held;
  };
  auto st = std::make_shared<State>();
  st->model = prompt_file_model(session, model_name);
  const std::string file = f.file;
  const bool read_only = f.read_only;
  cb.restore_prompt = [st, file](Session& s, std::span<const int32_t> prompt) {
    st->prompt.assign(prompt.begin(), prompt.end());
    const PromptRestore r = restore_prompt_cache(s, file, prompt, st->model);
    st->held = r.tokens;
    std::fprintf(stderr, "minigpt: --prompt-cache %s: %lld of the prompt's %zu tokens restored\n",
                 file.c_str(), (long long)r.restored, prompt.size());
    return r.restored;
  };
  cb.on_prefilled = [st, file, read_only, &session, then = std::move(cb.on_prefilled)] {
    if (!read_only && st->held != st->prompt) save_prompt_cache(session, file, st->prompt, st->model);
    if (then) then();
  };
}

}  // namespace minigpt::cli
