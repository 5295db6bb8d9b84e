// libFuzzer target: SentencePiece tokenizer files on arbitrary bytes. First byte even -> the rest is
// llama2.c's tokenizer.bin; odd -> a sentencepiece tokenizer.model (protobuf). A tokenizer that loads is then
// used: fixed texts are encoded, every id is in range, and the ids decode without throwing (SentencePiece
// with byte fallback need not give the text back when the vocabulary lacks pieces, so the decode is not
// compared).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "minigpt/error.h"
#include "minigpt/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    minigpt::Tokenizer tok = (data[0] & 1) == 0 ? minigpt::Tokenizer::from_llama2c(rest)
                                                : minigpt::Tokenizer::from_sentencepiece(rest);
    for (std::string_view text : {"Hello world", " two  spaces", "caf\xC3\xA9 \xE2\x82\xAC 1234", ""}) {
      const auto ids = tok.encode(text);
      for (int32_t id : ids)
        if (id < 0 || id >= tok.n_vocab()) std::abort();  // an id outside the vocabulary: a bug
      (void)tok.decode(ids);
    }
  } catch (const minigpt::Error&) {
    // a clear refusal is the expected outcome for most inputs
  }
  return 0;
}
