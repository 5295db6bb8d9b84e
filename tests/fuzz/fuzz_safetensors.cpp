// libFuzzer target: the safetensors header + offsets parser on arbitrary bytes.
// A minigpt::Error is the expected answer to bad input; anything else (a crash, a sanitizer report, another
// exception, a tensor pointing outside the input) is a bug.
#include <cstdint>
#include <cstdlib>

#include "formats/safetensors.h"
#include "minigpt/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = minigpt::SafeTensorsFile::from_memory(data, size, "fuzz.safetensors");
    size_t total = 0;
    for (const auto& t : f->tensors()) {
      // Every tensor must lie inside the input: touch its first and last byte (ASan checks the rest).
      if (t.data < data || t.data + t.nbytes > data + size) std::abort();
      if (t.nbytes > 0) total += t.data[0] + t.data[t.nbytes - 1];
      if (uint64_t(t.numel()) * minigpt::st_dtype_size(t.dtype) != t.nbytes) std::abort();
    }
    (void)f->find("wte.weight");
    return int(total & 0);
  } catch (const minigpt::Error&) {
  }
  return 0;
}
