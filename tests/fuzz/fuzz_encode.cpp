// libFuzzer target: GPT-2's tokenizer on arbitrary bytes. Valid UTF-8 must encode and decode back to
// itself; invalid UTF-8 must be refused with a minigpt::Error. Streamed decoding must equal
// utf8_sanitize(decode(ids)). Uses tests/fixtures/gpt2-tokenizer (or $MINIGPT_FUZZ_TOKENIZER).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "minigpt/error.h"
#include "minigpt/tokenizer.h"

namespace {
const minigpt::Tokenizer& tokenizer() {
  static const minigpt::Tokenizer tok = [] {
    const char* env = std::getenv("MINIGPT_FUZZ_TOKENIZER");
    const std::filesystem::path dir = env ? env : MINIGPT_SOURCE_DIR "/tests/fixtures/gpt2-tokenizer";
    if (!std::filesystem::exists(dir)) {
      std::fprintf(stderr, "fuzz_encode: %s not found, using the 256-byte tokenizer\n", dir.c_str());
      return minigpt::Tokenizer::byte_level();
    }
    return minigpt::Tokenizer::load(dir);
  }();
  return tok;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const minigpt::Tokenizer& tok = tokenizer();
  if (size < 1) return 0;
  const bool special = data[0] & 1;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  (void)minigpt::utf8_sanitize(text);
  try {
    const auto ids = tok.encode(text, special);
    if (tok.decode(ids) != text) std::abort();
    for (int32_t id : ids)
      if (id < 0 || id >= tok.n_vocab()) std::abort();
    minigpt::StreamDecoder sd(tok);
    std::string streamed;
    for (int32_t id : ids) streamed += sd.push(id);
    streamed += sd.flush();
    if (streamed != text) std::abort();  // text was valid UTF-8, so nothing is replaced
  } catch (const minigpt::Error&) {
  }
  return 0;
}
