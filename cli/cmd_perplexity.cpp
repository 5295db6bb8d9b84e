// minigpt perplexity: how well a model predicts a text, by llama.cpp's chunk recipe or transformers' strided
// windows (minigpt/perplexity.h).
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "command.h"
#include "common.h"
#include "io/io.h"
#include "minigpt/error.h"
#include "minigpt/generate.h"
#include "minigpt/perplexity.h"
#include "minigpt/tokenizer.h"
#include "run/kl_divergence.h"

namespace minigpt::cli {
namespace {

using json = nlohmann::json;

struct PerplexityCliOptions {
  ModelOptions model;
  std::string file;
  std::optional<int64_t> ctx_size;
  std::optional<int64_t> stride;
  std::optional<int64_t> chunks;
  int64_t batch = 512;
  bool json_out = false;
  bool progress = true;
  std::string save_logits;
  std::string kl_base;
  int64_t top_k = 256;
};

// "[=====>     ] 12/330 chunks, 4.1 s left" on stderr, redrawn in place (only on a terminal).
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled, const char* unit)
      : enabled_(enabled && ::isatty(STDERR_FILENO)), unit_(unit), t0_(std::chrono::steady_clock::now()) {}
  void update(int64_t done, int64_t total) {
    if (!enabled_) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    const int width = 30, filled = int(double(width) * double(done) / double(total));
    std::string bar(size_t(filled), '=');
    if (filled < width) bar += '>' + std::string(size_t(width - filled - 1), ' ');
    std::fprintf(stderr, "\r[%s] %lld/%lld %s, %.1f s left ", bar.c_str(), (long long)done, (long long)total,
                 unit_, done > 0 ? s / double(done) * double(total - done) : 0.0);
    if (done == total) std::fprintf(stderr, "\r%*s\r", width + 60, "");
    std::fflush(stderr);
  }

 private:
  bool enabled_;
  const char* unit_;
  std::chrono::steady_clock::time_point t0_;
};

int run_perplexity(const PerplexityCliOptions& o) {
  if (o.stride && o.chunks) throw UsageError("--stride and --chunks are two recipes: pick one");
  // Checked before anything is read, so that the message names the flag, not the text file.
  if (o.stride && *o.stride < 1)
    throw Error(ErrorKind::Argument, "--stride must be at least 1, not " + std::to_string(*o.stride));
  if (o.chunks && *o.chunks < 1)
    throw Error(ErrorKind::Argument, "--chunks must be at least 1, not " + std::to_string(*o.chunks));
  if (!o.save_logits.empty() && !o.kl_base.empty()) {
    throw UsageError("--save-logits writes a reference, --kl-divergence compares with one: pick one");
  }
  if (o.top_k < 1 || o.top_k > (int64_t(1) << 20)) {
    throw Error(ErrorKind::Argument, "--kl-top-k: " + std::to_string(o.top_k) + " is outside [1, 1048576]");
  }
  if (o.file.empty() && o.kl_base.empty()) {
    throw UsageError("-f/--file is required (the text to score)");
  }
  // The reference of --kl-divergence: its tokens and recipe are used (-f, if given, must give the same
  // tokens).
  std::ifstream kl_in;
  std::unique_ptr<LogitsReader> kl_ref;
  if (!o.kl_base.empty()) {
    // Checked before opening: an ifstream waits on a FIFO for a writer, forever.
    require_regular_file(o.kl_base, "reference logits file");
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(o.kl_base, ec);
    kl_in.open(o.kl_base, std::ios::binary);
    if (ec || !kl_in)
      throw Error(ErrorKind::Io, o.kl_base + ": cannot open: " + (ec ? ec.message() : std::strerror(errno)));
    kl_ref = std::make_unique<LogitsReader>(kl_in, size, o.kl_base);
    if (o.stride || o.chunks || o.ctx_size) {
      throw UsageError("--kl-divergence takes the recipe (-c, --stride, --chunks) from " + o.kl_base);
    }
  }
  if (o.batch < 1 || o.batch > 65536) {
    throw Error(ErrorKind::Argument,
                "-b/--batch-size: " + std::to_string(o.batch) + " is outside [1, 65536]");
  }
  const auto dir = resolve_model_dir(o.model);
  const ModelSource source = ModelSource::open(dir);  // classified, a GGUF parsed, once for every reader
  // --save-logits may not replace what this run reads: the text, the model, its tokenizer (each is read
  // before the reference is written, so the run would succeed and the file be gone).
  if (!o.save_logits.empty()) {
    std::vector<std::filesystem::path> text;
    if (!o.file.empty()) text.push_back(o.file);
    check_output_not_input("--save-logits", o.save_logits, o.model, dir, text);
  }
  // The text first: a missing file is reported before the model is loaded.
  const std::string text =
      o.file.empty() ? std::string() : read_regular_file(o.file, kMaxTextBytes, "text file");
  if (!o.file.empty()) check_tokenizer_source(o.model.tokenizer, source);
  auto model = Model::load(source, load_options(o.model));
  // Only a text needs the tokenizer (a --kl-divergence run takes the reference's tokens).
  std::optional<Tokenizer> tok;
  if (!o.file.empty()) tok.emplace(load_tokenizer(o.model.tokenizer, source, model->config().n_vocab));

  const int64_t model_ctx = model->config().n_ctx;
  int64_t n_ctx = context_size(o.ctx_size, model_ctx);

  PerplexityOptions po;
  po.n_ctx = n_ctx;
  std::vector<int32_t> tokens;
  try {
    if (o.stride) {
      // transformers: tokenizer(text), with the template's special tokens.
      po.recipe = PerplexityRecipe::Stride;
      po.stride = *o.stride;
    } else {
      // llama.cpp: the text with a BOS in front where the tokenizer adds one, which also replaces the first
      // token of every chunk.
      po.recipe = PerplexityRecipe::Chunks;
      if (o.chunks) po.max_chunks = *o.chunks;
    }
    if (tok) {
      // As the reference's recipe encoded it, with --kl-divergence (whose options replace these below).
      PerplexityOptions as = po;
      if (kl_ref) as.recipe = kl_ref->header().options.recipe;
      tokens = perplexity_tokens(*tok, text, as);
      po.bos = as.bos;
    }
  } catch (const Error& e) {
    throw Error(e.kind(), o.file + ": " + e.what());
  }
  if (kl_ref) {
    const LogitsHeader& h = kl_ref->header();
    if (h.n_vocab != model->config().n_vocab) {
      throw Error(ErrorKind::Argument, o.kl_base + ": the reference has a vocabulary of " +
                                           std::to_string(h.n_vocab) + ", this model " +
                                           std::to_string(model->config().n_vocab));
    }
    if (h.options.n_ctx > model_ctx) {
      throw Error(ErrorKind::Argument, o.kl_base + ": the reference used a context of " +
                                           std::to_string(h.options.n_ctx) + ", more than this model's " +
                                           std::to_string(model_ctx));
    }
    if (!o.file.empty() && tokens != kl_ref->tokens()) {
      throw Error(ErrorKind::Argument,
                  o.file + ": its tokens differ from those of the reference " + o.kl_base);
    }
    po = h.options;
    n_ctx = po.n_ctx;
    tokens = kl_ref->tokens();
  }
  // Refused before any work: too short a text, a stride past the window.
  const auto windows = perplexity_windows(int64_t(tokens.size()), n_ctx, po);
  if (kl_ref) {
    int64_t n = 0;
    for (const auto& w : windows) n += w.last - w.first;
    if (n != kl_ref->header().n_scored) {
      throw Error(ErrorKind::Format, o.kl_base + ": holds " + std::to_string(kl_ref->header().n_scored) +
                                         " scored tokens, its recipe scores " + std::to_string(n));
    }
  }
  std::unique_ptr<LogitsWriter> writer;
  if (!o.save_logits.empty()) {
    LogitsHeader h;
    h.top_k = std::min(o.top_k, model->config().n_vocab);
    h.n_vocab = model->config().n_vocab;
    h.n_tokens = int64_t(tokens.size());
    for (const auto& w : windows) h.n_scored += w.last - w.first;
    h.options = po;
    h.options.n_ctx = n_ctx;
    writer = std::make_unique<LogitsWriter>(o.save_logits, h, tokens);
  }
  KlAccumulator kl;
  LogitsRecord rec;
  ScoredTokenFn on_scored;
  if (writer) {
    on_scored = [&](int64_t index, std::span<const float> logits, double) {
      make_logits_record(logits, std::min(o.top_k, int64_t(logits.size())), tokens[size_t(index)], rec);
      writer->write(rec);
    };
  } else if (kl_ref) {
    on_scored = [&](int64_t index, std::span<const float> logits, double) {
      kl.add(kl_ref->next(), logits, tokens[size_t(index)]);
    };
  }

  SessionOptions so;
  so.n_ctx = n_ctx;
  so.max_batch = std::min(o.batch, n_ctx);
  Session session(model, so);
  const char* unit = po.recipe == PerplexityRecipe::Chunks ? "chunks" : "windows";
  ProgressBar bar(o.progress && !o.json_out, unit);
  const PerplexityResult r =
      perplexity(session, tokens, po, on_scored, [&](int64_t d, int64_t t) { bar.update(d, t); });
  if (writer) writer->commit();
  const KlStats ks = kl.stats();
  const double tps = r.seconds > 0 ? double(r.n_evaluated) / r.seconds : 0.0;
  const char* recipe = po.recipe == PerplexityRecipe::Chunks ? "chunks" : "stride";

  if (o.json_out) {
    json j = {{"file", o.file},
              {"recipe", recipe},
              {"n_ctx", n_ctx},
              {"tokens", tokens.size()},
              {"windows", r.n_windows},
              {"scored", r.n_scored},
              {"evaluated", r.n_evaluated},
              {"ppl", r.ppl},
              {"ppl_error", r.ppl_error},
              {"nll_mean", r.nll_mean},
              {"nll_stderr", r.nll_stderr},
              {"seconds", r.seconds},
              {"tok_s", tps}};
    if (po.recipe == PerplexityRecipe::Stride) j["stride"] = po.stride > 0 ? po.stride : n_ctx / 2;
    if (kl_ref) {
      j["kl_divergence"] = {{"reference", o.kl_base},
                            {"tokens", ks.n},
                            {"mean", ks.kl_mean},
                            {"stderr", ks.kl_stderr},
                            {"median", ks.kl_median},
                            {"p99", ks.kl_p99},
                            {"max", ks.kl_max},
                            {"top1_agreement", ks.top1_agreement},
                            {"delta_p_mean", ks.delta_p_mean},
                            {"ppl_reference", ks.ppl_ref}};
    }
    write_stdout(j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
    return 0;
  }
  std::string head = "perplexity: " + std::to_string(tokens.size()) + " tokens, ";
  if (po.recipe == PerplexityRecipe::Chunks) {
    head += std::to_string(r.n_windows) + " chunks of " + std::to_string(n_ctx) +
            " (llama.cpp: the second half of each scored)";
  } else {
    head += std::to_string(r.n_windows) + " windows of up to " + std::to_string(n_ctx) + ", stride " +
            std::to_string(po.stride > 0 ? po.stride : n_ctx / 2) + " (transformers)";
  }
  char line[512];
  std::snprintf(
      line, sizeof line,
      "%s\nFinal estimate: PPL = %.4f +/- %.5f | mean NLL %.5f +/- %.5f nats | %lld tokens scored | "
      "%.1f tok/s\n",
      head.c_str(), r.ppl, r.ppl_error, r.nll_mean, r.nll_stderr, (long long)r.n_scored, tps);
  write_stdout(line);
  if (kl_ref) {
    std::snprintf(line, sizeof line,
                  "KL divergence against %s (%lld tokens; %s):\n"
                  "  mean KLD %.4g +/- %.2g | median %.4g | 99%% %.4g | max %.4g\n"
                  "  same top token %.3f%% | mean |dp| of the reference's top token %.4f%% | "
                  "PPL reference %.4f, this %.4f\n",
                  o.kl_base.c_str(), (long long)ks.n,
                  kl_ref->header().top_k == kl_ref->header().n_vocab
                      ? "whole distributions"
                      : "reference top-k + the rest as one bucket",
                  ks.kl_mean, ks.kl_stderr, ks.kl_median, ks.kl_p99, ks.kl_max, 100.0 * ks.top1_agreement,
                  100.0 * ks.delta_p_mean, ks.ppl_ref, r.ppl);
    write_stdout(line);
  }
  return 0;
}

bool registered_perplexity = register_command(
    "perplexity",
    "Perplexity of a model on a text file: llama.cpp's chunks (default) or transformers' --stride windows",
    [](CLI::App& app) -> std::function<int()> {
      auto o = std::make_shared<PerplexityCliOptions>();
      add_model_options(app, o->model, false);
      add_tokenizer_option(app, o->model.tokenizer);
      app.add_option("-f,--file", o->file, "The text to score");
      app.add_option_function<int64_t>(
          "-c,--ctx-size", [o](const int64_t& c) { o->ctx_size = c; },
          "Window / chunk length in tokens (default: the model's context, at most 4096; 0 = all of it)");
      app.add_option_function<int64_t>(
          "--stride", [o](const int64_t& s) { o->stride = s; },
          "transformers' recipe: windows of -c tokens whose ends move by this many, only the new tokens "
          "scored");
      app.add_option_function<int64_t>(
          "--chunks", [o](const int64_t& c) { o->chunks = c; },
          "llama.cpp's recipe (the default) on at most this many chunks");
      app.add_option("-b,--batch-size", o->batch, "Tokens per forward pass (default 512)");
      app.add_flag("--json", o->json_out, "Print the result as one JSON object");
      // A callback, not "!--no-progress": CLI11 would show the flag's default as --no-progress{false}.
      app.add_flag_callback(
          "--no-progress", [o] { o->progress = false; }, "No progress bar on stderr");
      auto* save = app.add_option(
          "--save-logits", o->save_logits,
          "Store this run's next-token distributions (top --kl-top-k per token) as a reference");
      app.add_option("--kl-divergence", o->kl_base,
                     "Compare with a reference stored by --save-logits (its text and recipe are used)");
      // Without --save-logits it has no effect (--kl-divergence uses the reference's own): refused.
      app.add_option("--kl-top-k", o->top_k, "Tokens per position --save-logits keeps (default 256)")
          ->needs(save);
      return [o]() { return run_perplexity(*o); };
    });

}  // namespace
}  // namespace minigpt::cli
