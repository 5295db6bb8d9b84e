// libFuzzer target: the llm.c checkpoint reader (src/formats/llmc.h) on arbitrary bytes. A minigpt::Error is
// the expected answer to bad input; a crash, a sanitizer report, a tensor outside the input or a header the
// reader accepted with an inconsistent config is a bug.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "arch/llmc.h"
#include "minigpt/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = minigpt::LlmcFile::from_memory(data, size, "fuzz.bin");
    const minigpt::LlmcHeader& h = f->header();
    if (h.n_vocab > h.n_vocab_padded || h.n_embd % h.n_head != 0) std::abort();
    uint64_t end = 1024;
    for (const auto& t : f->tensors()) {
      // In file order, back to back (wte's padding rows after it), each inside the input.
      if (t.offset < end || t.offset > size || t.nbytes > size - t.offset) std::abort();
      end = t.offset + t.nbytes;
      std::vector<uint8_t> buf(t.nbytes);
      f->read(t, buf.data());
    }
    if (end != size) std::abort();
    minigpt::llmc_config(h).validate("fuzz.bin");
  } catch (const minigpt::Error&) {
  }
  return 0;
}
