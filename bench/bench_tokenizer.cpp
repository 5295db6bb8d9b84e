// Tokenizer throughput: encode (and decode) a file single-threaded, median of N runs, in MB/s.
// Usage: bench_tokenizer [MODEL] [FILE] [RUNS] [--ids]   (defaults: tests/fixtures GPT-2, tinyshakespeare, 9)
// MODEL: anything Tokenizer::load() reads (a directory, a GGUF file, tokenizer.model, tokenizer.bin). --ids
// also prints the FNV-1a 64 of the ids (bench/compare_tokenizers.py checks them against the reference's).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "minigpt/error.h"
#include "minigpt/tokenizer.h"

int main(int argc, char** argv) {
  std::string model = argc > 1 ? argv[1] : MINIGPT_SOURCE_DIR "/tests/fixtures/gpt2-tokenizer";
  std::string file = argc > 2 ? argv[2] : MINIGPT_SOURCE_DIR "/tests/fixtures/data/tinyshakespeare.txt";
  int runs = argc > 3 ? std::max(1, std::atoi(argv[3])) : 9;
  try {
    using clock = std::chrono::steady_clock;
    auto t0 = clock::now();
    minigpt::Tokenizer tok = minigpt::Tokenizer::load(model);
    double load_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    std::ifstream f(file, std::ios::binary);
    if (!f) throw minigpt::Error(minigpt::ErrorKind::Io, file + ": cannot open");
    std::ostringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();

    std::vector<double> enc_s, dec_s;
    std::vector<int32_t> ids;
    for (int r = 0; r < runs; ++r) {
      auto a = clock::now();
      ids = tok.encode(text);
      auto b = clock::now();
      std::string back = tok.decode(ids);
      auto c = clock::now();
      // A normalizer (NFC) may change the text; anything else must come back as it was.
      if (back != text && !tok.has_normalizer())
        throw minigpt::Error(minigpt::ErrorKind::Argument, "round trip failed");
      enc_s.push_back(std::chrono::duration<double>(b - a).count());
      dec_s.push_back(std::chrono::duration<double>(c - b).count());
    }
    std::sort(enc_s.begin(), enc_s.end());
    std::sort(dec_s.begin(), dec_s.end());
    double mb = text.size() / 1e6;
    std::printf(
        "load %.1f ms; %zu bytes -> %zu ids; encode median %.2f ms = %.1f MB/s (best %.1f); "
        "decode median %.2f ms = %.1f MB/s  [%d runs, 1 thread]\n",
        load_ms, text.size(), ids.size(), enc_s[runs / 2] * 1e3, mb / enc_s[runs / 2], mb / enc_s[0],
        dec_s[runs / 2] * 1e3, mb / dec_s[runs / 2], runs);
    if (argc > 4 && std::string(argv[4]) == "--ids") {
      uint64_t h = 0xCBF29CE484222325ull;  // as tools/reference/make_tokenizer_reference.py's fnv1a64
      for (int32_t id : ids)
        for (int k = 0; k < 4; ++k) h = (h ^ ((uint32_t(id) >> (8 * k)) & 0xFF)) * 0x100000001B3ull;
      std::printf("ids fnv1a64 %016llx\n", static_cast<unsigned long long>(h));
    }
    return 0;
  } catch (const minigpt::Error& e) {
    std::fprintf(stderr, "bench_tokenizer: error: %s\n", e.what());
    return 1;
  }
}
