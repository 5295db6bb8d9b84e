#include "common.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cpu/sysinfo.h"
#include "formats/llama2c.h"
#include "formats/llmc.h"
#include "minigpt/error.h"
#include "minigpt/registry.h"

namespace minigpt::cli {

std::string backend_names() {
  std::string s;
  for (const BackendInfo& b : backends()) s += (s.empty() ? "" : ", ") + b.name;
  return s;
}

CLI::Validator backend_validator() {
  return CLI::Validator(
      [](std::string& name) -> std::string {
        if (find_backend(name) != nullptr) return "";
        return "unknown backend '" + name + "' (this build has: " + backend_names() + ")";
      },
      "BACKEND", "backend");
}

const char* const kModelHelp =
    "Model: a Hugging Face directory (config.json, model.safetensors, tokenizer files), a GGUF file or an "
    "llm.c checkpoint (.bin) (default: the shipped model, models/shakespeare-char)";
const char* const kThreadsHelp = "CPU threads (default 0 = all cores)";
const char* const kDtypeHelp =
    "Weight dtype to compute in: f32, f16, bf16, or stored (default: as in the file)";
std::string backend_help() { return "Backend to run on: " + backend_names() + " (default cpu)"; }

namespace {
bool g_value_refused = false;
}  // namespace

std::string refuse(std::string message) {
  g_value_refused = true;
  return message;
}

bool value_refused() { return g_value_refused; }

CLI::Validator in_range(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        // main.cpp's decimal check has run: s is a decimal integer within 64 bits.
        const long long v = std::strtoll(s.c_str(), nullptr, 10);
        if (v >= lo && v <= hi) return std::string();
        return refuse(s + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      },
      "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

void add_model_options(CLI::App& app, ModelOptions& o, bool model_required) {
  auto* m = app.add_option("-m,--model", o.dir, kModelHelp);
  if (model_required) m->required();
  app.add_option("-t,--threads", o.threads, kThreadsHelp)->check(in_range(0, 1024));
  app.add_option("--dtype", o.dtype, kDtypeHelp)->check(CLI::IsMember({"f32", "f16", "bf16", "stored"}));
  app.add_option("--backend", o.backend, backend_help())->check(backend_validator());
  app.add_option("--device", o.device, "Device index of the backend (a CUDA device; default 0)")
      ->check(in_range(0, 1024));
  add_cache_type_option(app, o.cache_type);
  add_bf16_math_option(app, o.bf16_math);
}

void add_bf16_math_option(CLI::App& app, std::string& bf16_math) {
  app.add_option(
         "--bf16-math", bf16_math,
         "How BF16 weights are multiplied: f32 (widened: transformers' F32 product of the same weights), "
         "bf16 (the activations rounded to BF16 too: faster on CPUs with AVX-512 BF16 or AMX; logits "
         "move by ~1e-2) or auto (default: MINIGPT_BF16_MATH if set, else bf16 where the CPU runs it "
         "faster; `info --system` says which)")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}));
}

Bf16Math bf16_math(const std::string& value) {
  if (value == "f32") return Bf16Math::F32;
  if (value == "bf16") return Bf16Math::Bf16;
  if (value == "auto" || value.empty()) return Bf16Math::Auto;
  throw Error(ErrorKind::Argument, "--bf16-math: '" + value + "' is not one of auto, f32, bf16");
}

void add_cache_type_option(CLI::App& app, std::string& cache_type) {
  app.add_option(
         "--cache-type", cache_type,
         "KV cache dtype: f32, f16 or bf16 (default: the backend's, f32 on cpu, f16 on cuda; llama.cpp's "
         "-ctk/-ctv)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
}

std::optional<DType> float_dtype(const std::string& s, const char* flag, const std::string& none) {
  if (s == "f32") return DType::F32;
  if (s == "f16") return DType::F16;
  if (s == "bf16") return DType::BF16;
  if (s == none) return std::nullopt;
  throw Error(ErrorKind::Argument, std::string(flag) + ": '" + s + "' is not one of f32, f16, bf16" +
                                       (none.empty() ? "" : ", " + none));
}

std::optional<DType> cache_dtype(const std::string& cache_type) {
  return float_dtype(cache_type, "--cache-type", "");
}

std::filesystem::path resolve_model_dir(const ModelOptions& o) {
  namespace fs = std::filesystem;
  if (!o.dir.empty()) return o.dir;
  const fs::path shipped = fs::path("models") / "shakespeare-char";
  std::vector<fs::path> candidates = {shipped};
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = '\0';
    candidates.push_back(fs::path(exe).parent_path().parent_path() / shipped);  // build/minigpt -> ./models
  }
#ifdef MINIGPT_SOURCE_DIR
  candidates.push_back(fs::path(MINIGPT_SOURCE_DIR) / shipped);
#endif
  for (const auto& c : candidates) {
    if (fs::exists(c / "config.json")) return c;
  }
  throw Error(ErrorKind::Io, "no -m given and the shipped model models/shakespeare-char was not found");
}

void warn_threads(int threads) {
  const int cpus = cpu_count();
  if (threads <= cpus) return;
  std::fprintf(stderr,
               "minigpt: warning: -t %d is more threads than the %d CPU%s this process may run on; they will "
               "take turns, which is slower than -t %d\n",
               threads, cpus, cpus == 1 ? "" : "s", cpus);
}

LoadOptions load_options(const ModelOptions& o) {
  if (o.backend == "cpu") warn_threads(o.threads);
  LoadOptions lo;
  lo.n_threads = o.threads;
  lo.weight_dtype = float_dtype(o.dtype, "--dtype", "stored");
  // The registry's backend: an unknown name or one that cannot run here is a one-line error (its probe's
  // reason: no CUDA in this build, no GPU, no driver).
  BackendOptions bo;
  bo.n_threads = o.threads;
  bo.device = o.device;
  bo.kv_dtype = cache_dtype(o.cache_type);
  bo.bf16_math = bf16_math(o.bf16_math);
  lo.backend = make_backend(o.backend, bo);
  return lo;
}

void add_tokenizer_option(CLI::App& app, std::string& tokenizer) {
  app.add_option(
         "--tokenizer", tokenizer,
         "Tokenizer instead of the model's own: a directory (tokenizer.json, vocab.json + merges.txt, or "
         "tokenizer.model), a GGUF file, a sentencepiece tokenizer.model or llama2.c's tokenizer.bin; needed "
         "for "
         "an llm.c checkpoint")
      ->check(nonempty_path());
}

CLI::Validator nonempty_path() {
  return CLI::Validator(
      [](std::string& s) -> std::string { return s.empty() ? refuse("the path is empty") : std::string(); },
      "");
}

Tokenizer load_tokenizer(const std::string& tokenizer, const ModelSource& model) {
  return tokenizer.empty() ? Tokenizer::load(model) : Tokenizer::load(std::filesystem::path(tokenizer));
}

Tokenizer load_tokenizer(const std::string& tokenizer, const ModelSource& model, int64_t n_vocab) {
  return Tokenizer::load_for_model(model, n_vocab, tokenizer);
}

void check_tokenizer_source(const std::string& tokenizer, const ModelSource& model) {
  if (tokenizer.empty() && model.format() == ModelFormat::Llmc) throw llmc_no_tokenizer_error(model.path());
  if (tokenizer.empty() && model.format() == ModelFormat::Llama2c)
    throw llama2c_no_tokenizer_error(model.path());
}

void check_output_not_input(const std::string& flag, const std::string& out, const ModelOptions& m,
                            const std::filesystem::path& model,
                            const std::vector<std::filesystem::path>& others) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (out.empty() || !fs::exists(out, ec)) return;  // a new file replaces nothing
  std::vector<fs::path> inputs = others;
  auto add = [&](const fs::path& p) {
    if (fs::is_directory(p, ec)) {
      for (const auto& e : fs::directory_iterator(p, ec)) inputs.push_back(e.path());
    } else {
      inputs.push_back(p);
    }
  };
  add(model);
  if (!m.tokenizer.empty()) add(m.tokenizer);
  for (const fs::path& f : inputs) {
    if (fs::equivalent(out, f, ec)) {
      throw Error(ErrorKind::Argument,
                  flag + " " + out + ": is '" + f.string() + "', which this run reads (write it elsewhere)");
    }
  }
}

namespace {
[[noreturn]] void stdout_failed(int e) {
  throw Error(ErrorKind::Io, std::string("writing to stdout failed: ") + std::strerror(e != 0 ? e : EIO));
}
}  // namespace

void write_stdout(std::string_view s) {
  errno = 0;
  if (!s.empty() && std::fwrite(s.data(), 1, s.size(), stdout) != s.size()) stdout_failed(errno);
  if (std::fflush(stdout) != 0) stdout_failed(errno);
}

void finish_stdout() {
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) stdout_failed(errno);
}

}  // namespace minigpt::cli
