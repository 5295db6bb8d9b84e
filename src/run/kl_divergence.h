// KL divergence of a model's next-token distributions against a reference run over the same text, the way
// llama.cpp's `llama-perplexity --kl-divergence-base / --kl-divergence` compares a quantized model with
// its original: `minigpt perplexity --save-logits FILE` stores the reference, `--kl-divergence FILE`
// evaluates another model (dtype, quantization) over the same windows and compares token by token.
//
// What is stored, per scored token: the reference's top-k log-probabilities (k = min(n_vocab, top_k),
// 256 by default: every token of a byte-level model) with their ids, the log of the remaining mass, and the
// log-probability of the token that came. About 2 KB per token for GPT-2's vocabulary, where llama.cpp's
// all-logits-in-16-bits file takes 100 KB; the price is that the tail beyond the top k is compared as one
// bucket, which gives a lower bound of the full KL (log-sum inequality), exact when k = n_vocab.
//
// The file (little-endian): "MGLOGIT1", u32 top_k, u32 recipe (0 chunks, 1 stride), i64 n_vocab, n_ctx,
// stride, max_chunks, n_tokens, n_scored, bos (-1: none); i32 tokens[n_tokens]; then n_scored records of
// { i32 ids[top_k]; f32 logp[top_k]; f32 log_rest; f32 logp_target }.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <istream>
#include <span>
#include <string>
#include <vector>

#include "io/io.h"
#include "minigpt/perplexity.h"

namespace minigpt {

struct LogitsHeader {
  int64_t top_k = 0, n_vocab = 0, n_tokens = 0, n_scored = 0;
  PerplexityOptions options;  // the recipe that produced it
};

// One scored token's reference distribution, in the reference's order of probability.
struct LogitsRecord {
  std::vector<int32_t> ids;
  std::vector<float> logp;
  float log_rest = 0;     // log of the mass outside `ids` (-inf when ids covers the vocabulary)
  float logp_target = 0;  // log-probability of the token that came
};

// Fills `rec` from a row of logits: the top k by logit (ties: lower id first).
void make_logits_record(std::span<const float> logits, int64_t top_k, int32_t target, LogitsRecord& rec);

// Writes through an AtomicFile (src/io/io.h): a temporary renamed to PATH on commit(); a writer destroyed
// uncommitted removes it and leaves PATH as it was.
class LogitsWriter {
 public:
  LogitsWriter(const std::filesystem::path& path, const LogitsHeader& header,
               std::span<const int32_t> tokens);
  ~LogitsWriter();
  void write(const LogitsRecord& rec);
  void commit();

 private:
  AtomicFile out_;
  int64_t top_k_, n_scored_, written_ = 0;
};

// Reads the header and tokens at once (every count and size checked against the stream's length), then
// the records one by one. Errors: Error(Format) naming `what` and what is wrong.
class LogitsReader {
 public:
  LogitsReader(std::istream& in, uint64_t size, const std::string& what);
  const LogitsHeader& header() const { return header_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // The next record; Error(Format) if there is none left or the stream ends early.
  const LogitsRecord& next();

 private:
  std::istream& in_;
  std::string what_;
  LogitsHeader header_;
  std::vector<int32_t> tokens_;
  LogitsRecord rec_;
  int64_t read_ = 0;
};

// The statistics llama.cpp's KL-divergence mode reports.
struct KlStats {
  int64_t n = 0;
  double kl_mean = 0, kl_stderr = 0, kl_median = 0, kl_p99 = 0, kl_max = 0;
  double top1_agreement = 0;    // fraction of tokens whose most likely token is the reference's
  double delta_p_mean = 0;      // mean |p(model) - p(ref)| of the reference's most likely token
  double ppl_ref = 0, ppl = 0;  // perplexities of the reference and of this model over the scored tokens
};

class KlAccumulator {
 public:
  // Compares one scored token: the reference's record and this model's logits.
  void add(const LogitsRecord& ref, std::span<const float> logits, int32_t target);
  KlStats stats() const;

 private:
  std::vector<double> kl_;
  double nll_ref_ = 0, nll_ = 0, delta_p_ = 0;
  int64_t top1_ = 0;
  std::vector<double> logq_;
  std::vector<uint8_t> in_top_;
};

}  // namespace minigpt
