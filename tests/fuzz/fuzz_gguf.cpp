// libFuzzer target: the GGUF reader (src/formats/gguf.h) on arbitrary bytes, then the family's reader of its
// metadata (arch's parse_gguf: windows, soft-caps, rotary bases, head widths), the config's checks and the
// layer description made from it. A minigpt::Error is the expected answer to bad input; a crash, a
// sanitizer report or a tensor outside the input is a bug.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "arch/arch.h"
#include "formats/gguf.h"
#include "minigpt/block.h"
#include "minigpt/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = minigpt::GgufFile::from_memory(data, size, "fuzz.gguf");
    for (const auto& t : f->tensors()) {
      if (t.offset > size || t.nbytes > size - t.offset) std::abort();
      const auto* info = minigpt::ggml_type_info(uint32_t(t.type));
      // nbytes = blocks x block bytes, compared without a product that could wrap
      if (info == nullptr || t.nbytes % uint64_t(info->block_bytes) != 0 ||
          t.nbytes / uint64_t(info->block_bytes) != uint64_t(t.numel() / info->block_size))
        std::abort();
      std::vector<uint8_t> buf(t.nbytes);
      f->read(t, buf.data());
    }
    if (const auto name = f->get_string("general.architecture")) {
      if (const minigpt::arch::Architecture* a = minigpt::arch::find_gguf(*name)) {
        minigpt::Config c;
        c.arch = a->model_type;
        c.n_vocab = 16;  // from the tensors, in the loader
        a->parse_gguf(*f, c);
        c.validate("fuzz.gguf");
        (void)minigpt::describe_block(c);
      }
    }
  } catch (const minigpt::Error&) {
  }
  return 0;
}
