// libFuzzer target: the structured-output entry points (minigpt/constraint.h) as serve's clients and the
// CLI's flags reach them: the first byte picks a JSON Schema (odd) or a GBNF grammar (even), the rest is its
// text, compiled for a real byte-level BPE vocabulary (the chatml-tiny fixture's). Every input either
// compiles or is an Error(Argument); one that compiles is then followed for a few tokens (the first each
// mask allows), which must never throw.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "minigpt/constraint.h"
#include "minigpt/error.h"
#include "minigpt/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const minigpt::Tokenizer tok =
      minigpt::Tokenizer::load(std::string(MINIGPT_SOURCE_DIR) + "/tests/fixtures/models/chatml-tiny");
  static const minigpt::GrammarCompiler compiler(tok, tok.n_vocab());
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::shared_ptr<const minigpt::Grammar> g;
  try {
    g = data[0] & 1 ? compiler.json_schema(text) : compiler.gbnf(text);
  } catch (const minigpt::Error& e) {
    if (e.kind() != minigpt::ErrorKind::Argument) std::abort();
    return 0;
  }
  const int64_t eos[1] = {0};
  std::unique_ptr<minigpt::Constraint> c = g->start(eos);
  std::vector<uint32_t> mask(minigpt::bitmask_words(tok.n_vocab()));
  for (int step = 0; step < 8 && !c->finished(); ++step) {
    c->fill_allowed(mask);
    int32_t next = -1;
    for (size_t w = 0; w < mask.size() && next < 0; ++w)
      if (mask[w] != 0) next = int32_t(w * 32 + size_t(__builtin_ctz(mask[w])));
    if (next < 0 || next >= tok.n_vocab()) break;  // a grammar no token can continue
    c->accept(next);
  }
  return 0;
}
