// libFuzzer target: the llama2.c checkpoint reader (src/formats/llama2c.h) on arbitrary bytes, and the legacy
// header probe that classifies a file without a magic number. A minigpt::Error is the expected answer to bad
// input; a crash, a sanitizer report, a tensor outside the input, a header accepted with inconsistent fields
// or a probe that disagrees with the reader is a bug.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "formats/llama2c.h"
#include "minigpt/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint64_t implied = 0;
  const bool legacy = minigpt::probe_llama2c_legacy(data, size, size, &implied);
  try {
    auto f = minigpt::Llama2cFile::from_memory(data, size, "fuzz.bin");
    const minigpt::Llama2cHeader& h = f->header();
    if (h.dim % h.n_heads != 0 || h.head_size() % 2 != 0 || h.n_heads % h.n_kv_heads != 0) std::abort();
    if (h.version == 2 && (h.group_size < 1 || h.dim % h.group_size != 0)) std::abort();
    // A legacy file the reader accepts is one the probe recognises, and the other way round.
    if ((h.version == 0) != legacy) std::abort();
    uint64_t end = h.header_bytes;
    for (const auto& t : f->tensors()) {
      // In file order, each inside the input (version 0's rotary tables lie between two of them).
      if (t.offset < end || t.offset > size || t.nbytes > size - t.offset) std::abort();
      end = t.offset + t.nbytes;
      if (t.quantized()) {
        if (t.scale_offset != end || t.n_scales * uint64_t(h.group_size) != uint64_t(t.numel())) std::abort();
        end += 4 * t.n_scales;
      }
      if (end > size) std::abort();
      std::vector<float> buf(size_t(t.numel()));
      f->read(t, buf.data());
    }
    if (end > size) std::abort();
  } catch (const minigpt::Error&) {
    if (legacy) std::abort();  // the probe said this is a legacy checkpoint: the reader must read it
  }
  return 0;
}
