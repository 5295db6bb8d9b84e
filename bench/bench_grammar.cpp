// xgrammar's cost on a real vocabulary, as minigpt uses it (bench/grammar.sh runs it;
// docs/structured-output.md gives the figures): building its tokenizer table from minigpt's Tokenizer,
// compiling a JSON Schema (its cache off, so each compile is a request's), and the per-token mask along a
// fixed valid JSON text tokenized by minigpt (each step: fill the next token's bitmask, then accept the
// text's next token). With --dump DIR it also writes the vocabulary (each id's bytes in hex, "-" for a
// special token or none) and the text's ids, which bench/grammar_llguidance.py reads to time llguidance on
// the same tokens. Usage: bench_grammar TOKENIZER(.gguf or dir) SCHEMA.json TEXT.json [--repeat N] [--dump
// DIR]
//        bench_grammar --parse-gbnf FILE...   (whether xgrammar's EBNF reader takes each GBNF grammar)
#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "minigpt/tokenizer.h"

namespace {

using clock_type = std::chrono::steady_clock;
double us_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t).count();
}

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[size_t(q * double(v.size() - 1) + 0.5)];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "--parse-gbnf") {
    for (int i = 2; i < argc; ++i) {
      try {
        xgrammar::Grammar::FromEBNF(read(argv[i]), "root");
        std::printf("%s: ok\n", argv[i]);
      } catch (const std::exception& e) {
        std::string m = e.what();
        std::replace(m.begin(), m.end(), '\n', ' ');
        std::printf("%s: refused: %s\n", argv[i], m.c_str());
      }
    }
    return 0;
  }
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s TOKENIZER SCHEMA.json TEXT.json [--repeat N] [--dump DIR]\n", argv[0]);
    return 2;
  }
  int repeat = 5;
  std::string dump;
  for (int i = 4; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--repeat") repeat = std::stoi(argv[i + 1]);
    if (std::string(argv[i]) == "--dump") dump = argv[i + 1];
  }
  try {
    const minigpt::Tokenizer tok = minigpt::Tokenizer::load(argv[1]);
    const std::string schema = read(argv[2]);
    const std::string text = read(argv[3]);
    const std::vector<int32_t> ids = tok.encode(text);
    const int n_vocab = tok.n_vocab();

    // The table as src/run/xgrammar_constraint.cpp builds it.
    auto t = clock_type::now();
    std::vector<std::string> vocab(static_cast<size_t>(n_vocab));
    for (int32_t id = 0; id < n_vocab; ++id) {
      if (tok.is_special(id)) continue;
      try {
        vocab[size_t(id)] = tok.token_bytes(id);
      } catch (const std::exception&) {
      }
    }
    std::vector<int32_t> stop;
    if (tok.eos_id()) stop.push_back(*tok.eos_id());
    xgrammar::TokenizerInfo info(vocab, xgrammar::VocabType::RAW, n_vocab, stop);
    const double info_us = us_since(t);
    const int threads = int(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));

    std::printf("vocabulary: %s, %d ids; text: %zu bytes, %zu tokens; %d compiler threads\n", argv[1],
                n_vocab, text.size(), ids.size(), threads);
    std::printf("xgrammar tokenizer table: %.1f ms\n", info_us / 1000);

    std::vector<double> compile_us;
    std::vector<double> mask_us;
    std::vector<double> first_us;
    std::vector<uint32_t> bitmask(size_t(xgrammar::GetBitmaskSize(n_vocab)));
    int64_t shape[1] = {int64_t(bitmask.size())};
    DLTensor dl{};
    dl.data = bitmask.data();
    dl.device = DLDevice{kDLCPU, 0};
    dl.ndim = 1;
    dl.dtype = xgrammar::GetBitmaskDLType();
    dl.shape = shape;
    size_t allowed_sum = 0;
    for (int r = 0; r < repeat; ++r) {
      xgrammar::GrammarCompiler compiler(info, threads, /*cache_enabled=*/false);
      t = clock_type::now();
      const xgrammar::CompiledGrammar g = compiler.CompileJSONSchema(schema);
      compile_us.push_back(us_since(t));
      xgrammar::GrammarMatcher m(g);
      for (size_t i = 0; i <= ids.size(); ++i) {
        t = clock_type::now();
        m.FillNextTokenBitmask(&dl);
        const double us = us_since(t);
        if (i == 0) first_us.push_back(us);
        mask_us.push_back(us);
        if (r == 0)
          for (const uint32_t w : bitmask) allowed_sum += size_t(__builtin_popcount(w));
        const int32_t next = i < ids.size() ? ids[i] : stop.empty() ? -1 : stop[0];
        if (next < 0) break;
        if (!m.AcceptToken(next)) {
          std::fprintf(stderr, "xgrammar refused token %zu (id %d, %s) of the text\n", i, next,
                       tok.token_symbol(next).c_str());
          return 1;
        }
      }
      if (!m.IsTerminated()) {
        std::fprintf(stderr, "xgrammar: the text did not end the grammar\n");
        return 1;
      }
    }
    std::printf("xgrammar schema compile: median %.1f ms, min %.1f, max %.1f (%d runs, cache off)\n",
                quantile(compile_us, 0.5) / 1000, quantile(compile_us, 0) / 1000,
                quantile(compile_us, 1) / 1000, repeat);
    std::printf("xgrammar first mask: median %.1f us\n", quantile(first_us, 0.5));
    double total = 0;
    for (const double us : mask_us) total += us;
    std::printf(
        "xgrammar mask per token: median %.1f us, mean %.1f, p90 %.1f, p99 %.1f, max %.1f (%zu masks: "
        "%.1f ms per text); allowed per step: mean %.0f ids\n",
        quantile(mask_us, 0.5), total / double(mask_us.size()), quantile(mask_us, 0.9),
        quantile(mask_us, 0.99), quantile(mask_us, 1), mask_us.size(), total / 1000 / repeat,
        double(allowed_sum) / double(ids.size() + 1));

    if (!dump.empty()) {
      std::filesystem::create_directories(dump);
      std::ofstream v(std::filesystem::path(dump) / "vocab.txt");
      for (const std::string& s : vocab) {
        if (s.empty()) {
          v << "-\n";
          continue;
        }
        static const char* hex = "0123456789abcdef";
        for (const unsigned char c : s) v << hex[c >> 4] << hex[c & 15];
        v << '\n';
      }
      std::ofstream d(std::filesystem::path(dump) / "ids.txt");
      for (const int32_t id : ids) d << id << '\n';
      std::ofstream e(std::filesystem::path(dump) / "eos.txt");
      for (const int32_t id : stop) e << id << '\n';
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_grammar: %s\n", e.what());
    return 1;
  }
  return 0;
}
