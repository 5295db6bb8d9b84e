// generate's --prompt-cache FILE and --prompt-cache-ro (llama.cpp's flags, docs/generate.md): the prompt's
// keys and values kept in a file across runs (src/run/prompt_cache.h), so that a run whose prompt begins
// with the file's evaluates only the rest.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "minigpt/generate.h"
#include "minigpt/session.h"

namespace minigpt::cli {

struct PromptCacheFlags {
  std::string file;        // --prompt-cache; empty: none
  bool read_only = false;  // --prompt-cache-ro: restore, never write
};

void add_prompt_cache_flags(CLI::App& app, PromptCacheFlags& f);

// Hooks the file into a run's callbacks: restore_prompt restores the longest prefix the file holds (a file
// of another model, a truncated or corrupt one: an Error that ends the run before anything is evaluated),
// and on_prefilled writes the prompt's keys and values back (unless read-only or the file already holds
// exactly this prompt), then calls what on_prefilled did before. `model_name` names the model in the file.
// A session whose keys and values cannot be exported (Session::exports_kv) goes without, with a note.
void use_prompt_cache(const PromptCacheFlags& f, Session& session, const std::string& model_name,
                      GenerateCallbacks& cb);

}  // namespace minigpt::cli
