// libFuzzer target: the reference file of `minigpt perplexity --kl-divergence` (src/run/kl_divergence.h):
// any bytes give a header and records whose every count and id is in range, or an Error.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "minigpt/error.h"
#include "run/kl_divergence.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    minigpt::LogitsReader r(in, size, "fuzz");
    const auto& h = r.header();
    if (int64_t(r.tokens().size()) != h.n_tokens || h.top_k < 1 || h.top_k > h.n_vocab) std::abort();
    for (int64_t i = 0; i < h.n_scored; ++i) {
      const auto& rec = r.next();
      for (int32_t id : rec.ids)
        if (id < 0 || id >= h.n_vocab) std::abort();
      if (!(rec.logp_target <= 0.0f)) std::abort();
    }
  } catch (const minigpt::Error&) {
  }
  return 0;
}
