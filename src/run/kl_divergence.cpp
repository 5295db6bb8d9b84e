#include "run/kl_divergence.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "minigpt/error.h"

namespace minigpt {

namespace {

constexpr char kMagic[8] = {'M', 'G', 'L', 'O', 'G', 'I', 'T', '1'};
constexpr int64_t kMaxTopK = 1 << 20;
constexpr int64_t kMaxVocab = int64_t(1) << 24;
constexpr int64_t kMaxTokens = int64_t(1) << 31;

template <typename T>
void put(AtomicFile& out, T v) {
  out.write(&v, sizeof v);
}

Error format_error(const std::string& what, const std::string& msg) {
  return Error(ErrorKind::Format, what + ": " + msg);
}

}  // namespace

void make_logits_record(std::span<const float> logits, int64_t top_k, int32_t target, LogitsRecord& rec) {
  const int64_t V = int64_t(logits.size());
  const int64_t k = std::min(top_k, V);
  double mx = -INFINITY;
  for (float v : logits) mx = std::max(mx, double(v));
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - mx);
  const double lse = mx + std::log(sum);
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  rec.ids.assign(order.begin(), order.begin() + k);
  rec.logp.resize(size_t(k));
  for (int64_t i = 0; i < k; ++i)
    rec.logp[size_t(i)] = float(double(logits[size_t(rec.ids[size_t(i)])]) - lse);
  // The rest's mass summed directly (1 - sum of the top would cancel), in id order, as KlAccumulator sums
  // the compared model's: a model against itself then gives exactly 0.
  std::vector<uint8_t> top(size_t(V), 0);
  for (int32_t id : rec.ids) top[size_t(id)] = 1;
  double rest = 0;
  for (int64_t i = 0; i < V; ++i)
    if (!top[size_t(i)]) rest += std::exp(double(logits[size_t(i)]) - lse);
  rec.log_rest = k == V || rest <= 0 ? -INFINITY : float(std::log(rest));
  rec.logp_target = float(double(logits[size_t(target)]) - lse);
}

LogitsWriter::LogitsWriter(const std::filesystem::path& path, const LogitsHeader& h,
                           std::span<const int32_t> tokens)
    : out_(path, path.string()), top_k_(h.top_k), n_scored_(h.n_scored) {
  out_.write(kMagic, sizeof kMagic);
  put<uint32_t>(out_, uint32_t(h.top_k));
  put<uint32_t>(out_, h.options.recipe == PerplexityRecipe::Chunks ? 0u : 1u);
  for (int64_t v :
       {h.n_vocab, h.options.n_ctx, h.options.stride, h.options.max_chunks, int64_t(tokens.size()),
        h.n_scored, h.options.bos ? int64_t(*h.options.bos) : int64_t(-1)})
    put<int64_t>(out_, v);
  out_.write(tokens.data(), tokens.size() * sizeof(int32_t));
}

LogitsWriter::~LogitsWriter() = default;

void LogitsWriter::write(const LogitsRecord& rec) {
  if (int64_t(rec.ids.size()) != top_k_) throw Error(ErrorKind::Argument, "logits record of the wrong size");
  out_.write(rec.ids.data(), rec.ids.size() * sizeof(int32_t));
  out_.write(rec.logp.data(), rec.logp.size() * sizeof(float));
  put<float>(out_, rec.log_rest);
  put<float>(out_, rec.logp_target);
  ++written_;
}

void LogitsWriter::commit() {
  if (written_ != n_scored_) {
    throw Error(ErrorKind::Argument, out_.target().string() + ": " + std::to_string(written_) +
                                         " records written, " + std::to_string(n_scored_) + " announced");
  }
  out_.commit();
}

LogitsReader::LogitsReader(std::istream& in, uint64_t size, const std::string& what) : in_(in), what_(what) {
  constexpr uint64_t kHeader = 8 + 4 + 4 + 7 * 8;
  if (size < kHeader)
    throw format_error(what, "too short for a minigpt logits file (" + std::to_string(size) + " bytes)");
  char magic[8];
  uint32_t k32 = 0, recipe = 0;
  int64_t f[7];
  in_.read(magic, 8);
  in_.read(reinterpret_cast<char*>(&k32), 4);
  in_.read(reinterpret_cast<char*>(&recipe), 4);
  in_.read(reinterpret_cast<char*>(f), sizeof f);
  if (!in_) throw format_error(what, "cannot read the header");
  if (std::memcmp(magic, kMagic, 8) != 0) {
    throw format_error(what, "not a minigpt logits file (written by perplexity --save-logits)");
  }
  const auto [n_vocab, n_ctx, stride, max_chunks, n_tokens, n_scored, bos] =
      std::tuple(f[0], f[1], f[2], f[3], f[4], f[5], f[6]);
  if (n_vocab < 1 || n_vocab > kMaxVocab)
    throw format_error(what, "vocabulary size " + std::to_string(n_vocab) + " out of range");
  if (k32 < 1 || int64_t(k32) > std::min(n_vocab, kMaxTopK)) {
    throw format_error(what,
                       "top-k " + std::to_string(k32) + " outside [1, " + std::to_string(n_vocab) + "]");
  }
  if (recipe > 1) throw format_error(what, "unknown recipe " + std::to_string(recipe));
  if (n_ctx < 2 || n_ctx > kMaxTokens || stride < 0 || stride > n_ctx || max_chunks < 0 || bos < -1 ||
      bos >= n_vocab) {
    throw format_error(what, "bad recipe parameters (context " + std::to_string(n_ctx) + ", stride " +
                                 std::to_string(stride) + ", chunks " + std::to_string(max_chunks) + ")");
  }
  if (n_tokens < 2 || n_tokens > kMaxTokens || n_scored < 1 || n_scored >= n_tokens) {
    throw format_error(what, "bad counts (" + std::to_string(n_tokens) + " tokens, " +
                                 std::to_string(n_scored) + " scored)");
  }
  // Exact size: every count is bounded above, so these products cannot overflow.
  const uint64_t record = uint64_t(k32) * 8 + 8;
  const uint64_t want = kHeader + uint64_t(n_tokens) * 4 + uint64_t(n_scored) * record;
  if (size != want) {
    throw format_error(what, "is " + std::to_string(size) + " bytes, the header implies " +
                                 std::to_string(want) + (size < want ? " (truncated)" : " (trailing bytes)"));
  }
  header_.top_k = k32;
  header_.n_vocab = n_vocab;
  header_.n_tokens = n_tokens;
  header_.n_scored = n_scored;
  header_.options.recipe = recipe == 0 ? PerplexityRecipe::Chunks : PerplexityRecipe::Stride;
  header_.options.n_ctx = n_ctx;
  header_.options.stride = stride;
  header_.options.max_chunks = max_chunks;
  if (bos >= 0) header_.options.bos = int32_t(bos);
  tokens_.resize(size_t(n_tokens));
  in_.read(reinterpret_cast<char*>(tokens_.data()), std::streamsize(n_tokens * 4));
  if (!in_) throw format_error(what, "cannot read the tokens");
  for (int64_t i = 0; i < n_tokens; ++i) {
    if (tokens_[size_t(i)] < 0 || tokens_[size_t(i)] >= n_vocab) {
      throw format_error(what, "token " + std::to_string(i) + " = " + std::to_string(tokens_[size_t(i)]) +
                                   " is outside the vocabulary");
    }
  }
  rec_.ids.resize(k32);
  rec_.logp.resize(k32);
}

const LogitsRecord& LogitsReader::next() {
  if (read_ >= header_.n_scored) throw format_error(what_, "more scored tokens than the file holds");
  in_.read(reinterpret_cast<char*>(rec_.ids.data()), std::streamsize(rec_.ids.size() * 4));
  in_.read(reinterpret_cast<char*>(rec_.logp.data()), std::streamsize(rec_.logp.size() * 4));
  in_.read(reinterpret_cast<char*>(&rec_.log_rest), 4);
  in_.read(reinterpret_cast<char*>(&rec_.logp_target), 4);
  if (!in_) throw format_error(what_, "ends inside record " + std::to_string(read_));
  for (size_t i = 0; i < rec_.ids.size(); ++i) {
    if (rec_.ids[i] < 0 || rec_.ids[i] >= header_.n_vocab || !(rec_.logp[i] <= 0.0f)) {
      throw format_error(what_, "record " + std::to_string(read_) + " holds a bad id or log-probability");
    }
  }
  if (!(rec_.log_rest <= 0.0f) || !(rec_.logp_target <= 0.0f)) {
    throw format_error(what_, "record " + std::to_string(read_) + " holds a bad log-probability");
  }
  ++read_;
  return rec_;
}

void KlAccumulator::add(const LogitsRecord& ref, std::span<const float> logits, int32_t target) {
  const size_t V = logits.size();
  double mx = -INFINITY;
  for (float v : logits) mx = std::max(mx, double(v));
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - mx);
  const double lse = mx + std::log(sum);
  // Rounded to float as the reference's were (make_logits_record): a model against itself gives exactly 0.
  logq_.resize(V);
  for (size_t i = 0; i < V; ++i) logq_[i] = double(float(double(logits[i]) - lse));
  in_top_.assign(V, 0);
  double kl = 0;
  for (size_t i = 0; i < ref.ids.size(); ++i) {
    const size_t id = size_t(ref.ids[i]);
    if (id >= V)
      throw Error(ErrorKind::Argument,
                  "reference token id " + std::to_string(id) + " outside this model's vocabulary");
    in_top_[id] = 1;
    const double lp = ref.logp[i];
    kl += std::exp(lp) * (lp - logq_[id]);
  }
  if (std::isfinite(ref.log_rest)) {
    double rest = 0;
    for (size_t i = 0; i < V; ++i)
      if (!in_top_[i]) rest += std::exp(double(logits[i]) - lse);
    const double lr = ref.log_rest;
    kl += rest > 0 ? std::exp(lr) * (lr - double(float(std::log(rest)))) : INFINITY;
  }
  kl_.push_back(std::max(0.0, kl));  // rounding can leave a tiny negative for identical distributions
  const size_t top = size_t(ref.ids[0]);
  const size_t argmax = size_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  top1_ += logits[argmax] == logits[top] ? 1 : 0;  // a tie with the reference's choice counts as agreement
  delta_p_ += std::fabs(std::exp(logq_[top]) - std::exp(double(ref.logp[0])));
  nll_ref_ -= ref.logp_target;
  nll_ -= logq_[size_t(target)];
}

KlStats KlAccumulator::stats() const {
  KlStats s;
  s.n = int64_t(kl_.size());
  if (s.n == 0) return s;
  const double n = double(s.n);
  double sum = 0, sum2 = 0;
  for (double v : kl_) sum += v, sum2 += v * v;
  s.kl_mean = sum / n;
  const double var = sum2 / n - s.kl_mean * s.kl_mean;
  s.kl_stderr = s.n > 1 && var > 0 ? std::sqrt(var / (n - 1)) : 0.0;
  std::vector<double> sorted = kl_;
  std::sort(sorted.begin(), sorted.end());
  auto quantile = [&](double q) { return sorted[size_t(std::min(n - 1, std::floor(q * (n - 1) + 0.5)))]; };
  s.kl_median = quantile(0.5);
  s.kl_p99 = quantile(0.99);
  s.kl_max = sorted.back();
  s.top1_agreement = double(top1_) / n;
  s.delta_p_mean = delta_p_ / n;
  s.ppl_ref = std::exp(nll_ref_ / n);
  s.ppl = std::exp(nll_ / n);
  return s;
}

}  // namespace minigpt
