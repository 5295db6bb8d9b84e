// `generate --prompt-cache FILE` over a Session: the model's identity for the file (run/prompt_file.h), the
// longest prefix of a prompt that the file holds restored into sequence 0, and the session's prompt written
// back.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "minigpt/session.h"
#include "run/prompt_file.h"

namespace minigpt {

// The identity of the keys and values a session of this model makes: a hash of the config's shape, the
// weights' formats and the norms' and biases' values (F32 on every backend: a fine-tune or another random
// model differs there), with the cache's dtype and bytes per position; `name` (the model's file or folder)
// begins its description.
PromptFileModel prompt_file_model(const Session& session, const std::string& name);

struct PromptRestore {
  int64_t restored = 0;         // positions of the prompt sequence 0 now holds
  std::vector<int32_t> tokens;  // the file's tokens (empty: no file)
};
// When `file` exists: checks that it is this model's (Error(Argument) naming both) and whole (Error(Format)),
// resets sequence 0 and writes into it the longest prefix of `prompt` the file holds, less the prompt's
// last token (its logits start generation). No file: nothing restored.
PromptRestore restore_prompt_cache(Session& session, const std::filesystem::path& file,
                                   std::span<const int32_t> prompt, const PromptFileModel& model);
// Writes `file` (atomically) with the first prompt.size() positions of sequence 0 and their tokens.
void save_prompt_cache(const Session& session, const std::filesystem::path& file,
                       std::span<const int32_t> prompt, const PromptFileModel& model);

}  // namespace minigpt
