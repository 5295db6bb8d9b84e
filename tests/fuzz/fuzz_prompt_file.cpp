// libFuzzer target: the file of `generate --prompt-cache` (src/run/prompt_file.h): any bytes give a header
// whose sizes and offsets match the input, tokens in the vocabulary and keys and values of the size the
// header says, or an Error; nothing is read outside the input.
#include <cstdint>
#include <cstdlib>

#include "io/io.h"
#include "minigpt/error.h"
#include "run/prompt_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const minigpt::ByteSource src = minigpt::ByteSource::in_memory(data, size, "fuzz");
    const minigpt::PromptFileHeader h = minigpt::read_prompt_file_header(src);
    if (h.kv_offset + uint64_t(h.n_tokens) * h.model.position_bytes != size) std::abort();
    const int64_t n = h.n_tokens / 2;
    const minigpt::PromptFileBody b = minigpt::read_prompt_file_body(src, h, n);
    if (int64_t(b.tokens.size()) != n || b.kv.size() != uint64_t(n) * h.model.position_bytes) std::abort();
    for (int32_t t : b.tokens)
      if (t < 0 || t >= h.model.n_vocab) std::abort();
  } catch (const minigpt::Error&) {
  }
  return 0;
}
