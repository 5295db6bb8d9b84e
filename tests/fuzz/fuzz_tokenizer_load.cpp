// libFuzzer target: tokenizer loading from tokenizer.json, or vocab.json + merges.txt, on arbitrary bytes.
// Input: first byte even -> the rest is tokenizer.json; odd -> vocab.json, a NUL byte, merges.txt (and,
// after another NUL byte, tokenizer_config.json).
// A tokenizer that loads is then used: fixed texts are encoded and decoded back. Byte-level BPE loses nothing
// but what the normalizer (NFC) changes and the white space added tokens' lstrip / rstrip take, so the text
// and its decode must agree once both lose their white space and are normalized.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "minigpt/error.h"
#include "minigpt/tokenizer.h"

namespace {
std::string essence(const minigpt::Tokenizer& tok, std::string_view text) {
  std::string s;
  for (char c : text)
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') s += c;  // the fixed texts' only white space
  return tok.normalize(s);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    minigpt::Tokenizer tok = [&] {
      if ((data[0] & 1) == 0) return minigpt::Tokenizer::from_tokenizer_json(rest);
      const size_t nul = rest.find('\0');
      const std::string_view vocab = rest.substr(0, nul);
      std::string_view merges = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
      // A second NUL: tokenizer_config.json after it (its added_tokens_decoder, add_prefix_space).
      const size_t nul2 = merges.find('\0');
      const std::string_view config =
          nul2 == std::string_view::npos ? std::string_view() : merges.substr(nul2 + 1);
      merges = merges.substr(0, nul2);
      return minigpt::Tokenizer::from_vocab_merges(vocab, merges, "vocab.json", "merges.txt", config);
    }();
    static const std::string_view kTexts[] = {"Hello world, it's 2024!\n  \t x",
                                              "<|endoftext|>ab<|endoftext|>",
                                              "\xc3\xa9t\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80",
                                              "cafe\xcc\x81  <mask> 1\xe2\x85\xa3\xd9\xa2   x"};
    for (std::string_view text : kTexts) {
      for (bool special : {false, true}) {
        std::vector<int32_t> ids;
        try {
          ids = tok.encode(text, special);
        } catch (const minigpt::Error&) {
          if (!tok.char_level()) throw;  // a character-level vocabulary may lack one of the text's characters
          continue;
        }
        const std::string back = tok.decode(ids);
        if (!tok.has_normalizer() && back == text) continue;  // the usual case: nothing lost at all
        if (essence(tok, back) != essence(tok, text)) std::abort();
      }
    }
    for (int32_t id = 0; id < tok.n_vocab() && id < 512; ++id) {
      try {
        (void)tok.token_bytes(id);
        (void)tok.token_symbol(id);
      } catch (const minigpt::Error&) {  // a hole in the vocabulary
      }
    }
  } catch (const minigpt::Error&) {
  }
  return 0;
}
