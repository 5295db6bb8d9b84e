// Options several subcommands share: where the model is, and how to load it.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "minigpt/model.h"
#include "minigpt/tokenizer.h"
#include "usage.h"

namespace minigpt::cli {

// What `minigpt --version` prints (and `minigpt info --system`).
inline constexpr const char* kVersion = "minigpt 0.1.0";

struct ModelOptions {
  std::string dir;  // empty: the shipped model
  int threads = 0;  // 0: all cores
  std::string dtype = "stored";
  std::string backend = "cpu";  // a name of the backend registry (minigpt/registry.h)
  int device = 0;
  std::string cache_type;          // --cache-type f32|f16|bf16; empty: the backend's default
  std::string bf16_math = "auto";  // --bf16-math auto|f32|bf16
  std::string tokenizer;  // --tokenizer DIR: where the tokenizer is (an llm.c checkpoint has none); empty:
                          // the model's
};

// The registry's backend names, "cpu, cuda".
std::string backend_names();
// Accepts a name of the backend registry; otherwise "unknown backend 'x' (this build has: cpu, cuda)".
CLI::Validator backend_validator();

// -m's help text, the same in every command that takes a model.
extern const char* const kModelHelp;
// -t's, --dtype's and --backend's, the same in every command (bench takes lists of the first two).
extern const char* const kThreadsHelp;
extern const char* const kDtypeHelp;
std::string backend_help();
// Accepts an integer in [lo, hi]; otherwise refuse()s it ("V is outside [lo, hi]"): exit 1, as for any value
// of the flag's form that it refuses (CLI::Range's error exits 2, as a command line that cannot be read).
CLI::Validator in_range(int64_t lo, int64_t hi);

// Adds -m, -t, --dtype, --backend, --device, --cache-type, --bf16-math to `app`.
void add_model_options(CLI::App& app, ModelOptions& o, bool model_required);
// "f32", "f16", "bf16" -> that dtype; `none` ("stored", or "" for an option not given) -> nullopt; anything
// else: Error(Argument) "FLAG: 'x' is not one of f32, f16, bf16[, none]".
std::optional<DType> float_dtype(const std::string& s, const char* flag, const std::string& none);
// --cache-type f32|f16|bf16, and its dtype (nullopt for an empty string: the backend's default).
void add_cache_type_option(CLI::App& app, std::string& cache_type);
std::optional<DType> cache_dtype(const std::string& cache_type);
// --bf16-math auto|f32|bf16: how BF16 weights are multiplied (Bf16Math); bf16_math() reads the value.
void add_bf16_math_option(CLI::App& app, std::string& bf16_math);
Bf16Math bf16_math(const std::string& value);
// The model directory: -m, or models/shakespeare-char (here, beside the executable, or in the source tree).
std::filesystem::path resolve_model_dir(const ModelOptions& o);
// The options' backend and load settings; warns (warn_threads) when -t asks the CPU for more threads than
// it has CPUs.
LoadOptions load_options(const ModelOptions& o);
// One line on stderr when `threads` CPU threads are more than the CPUs this process may run on (cpu_count):
// a legal request, but the threads take turns on the CPUs, each op waiting for the last of them.
void warn_threads(int threads);
// Adds --tokenizer DIR, for the commands that encode text.
void add_tokenizer_option(CLI::App& app, std::string& tokenizer);
// The tokenizer of --tokenizer DIR when given, else the model's own (`model`: a directory or a GGUF file).
Tokenizer load_tokenizer(const std::string& tokenizer, const ModelSource& model);
// The same for a loaded model of `n_vocab` tokens: a tokenizer with more tokens than that (a --tokenizer that
// is not the model's) is an Error(Config) naming it, before any text is encoded into ids the model lacks; so
// is a --tokenizer with over 1024 fewer (more than a padded vocabulary's unused rows: its text would be
// empty).
Tokenizer load_tokenizer(const std::string& tokenizer, const ModelSource& model, int64_t n_vocab);
// Refuses an llm.c checkpoint without --tokenizer before its weights are loaded (load_tokenizer would,
// after).
void check_tokenizer_source(const std::string& tokenizer, const ModelSource& model);
// Refuses an output that would replace a file this run reads: the model (its file, or any file of its
// directory), the --tokenizer source (likewise), or one of `others` (a text file). Each is read before the
// output is written, so the run would succeed and the user's file be gone: Error(Argument) "FLAG OUT: is
// 'F', which this run reads (write it elsewhere)".
void check_output_not_input(const std::string& flag, const std::string& out, const ModelOptions& m,
                            const std::filesystem::path& model,
                            const std::vector<std::filesystem::path>& others = {});
// A validator for options that name a path: an empty one ("--tokenizer $DIR" with DIR unset) is refused
// rather than taken as not given.
CLI::Validator nonempty_path();

// Writes `s` to stdout and flushes it; throws Error(Io) when the write fails (a full disk, /dev/full, a
// closed pipe), so that no command reports success having written nothing.
void write_stdout(std::string_view s);
// Flushes stdout and throws Error(Io) if any write to it failed (for output written with printf).
void finish_stdout();

}  // namespace minigpt::cli
