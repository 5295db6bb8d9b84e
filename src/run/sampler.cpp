#include "minigpt/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <string>

#include "core/hash.h"
#include "minigpt/error.h"

namespace minigpt {
namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

[[noreturn]] void bad(const std::string& field, const std::string& what) {
  throw Error(ErrorKind::Argument, field + ": " + what);
}

// Softmax of the finite entries in float, as torch.softmax computes it (max subtracted first).
void softmax(std::span<const float> s, std::vector<float>& p) {
  p.resize(s.size());
  float mx = kNegInf;
  for (float v : s) mx = std::max(mx, v);
  float sum = 0.0f;
  for (size_t i = 0; i < s.size(); ++i) sum += (p[i] = s[i] == kNegInf ? 0.0f : std::exp(s[i] - mx));
  for (float& v : p) v /= sum;
}
}  // namespace

void SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    bad("temperature", "must be a finite number >= 0 (0 = greedy), got " + num(temperature));
  if (top_k < 0) bad("top_k", "must be >= 0 (0 = off), got " + std::to_string(top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) bad("top_p", "must be in (0, 1], got " + num(top_p));
  if (!(min_p >= 0.0f && min_p <= 1.0f)) bad("min_p", "must be in [0, 1], got " + num(min_p));
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    bad("repetition_penalty", "must be a finite number > 0 (1 = off), got " + num(repetition_penalty));
  }
  if (repeat_last_n < -1) {
    bad("repeat_last_n",
        "must be >= -1 (-1 = the whole sequence, 0 = off), got " + std::to_string(repeat_last_n));
  }
  if (!std::isfinite(presence_penalty))
    bad("presence_penalty", "must be a finite number (0 = off), got " + num(presence_penalty));
  if (!std::isfinite(frequency_penalty))
    bad("frequency_penalty", "must be a finite number (0 = off), got " + num(frequency_penalty));
  for (const auto& [id, b] : logit_bias) {
    if (id < 0) bad("logit_bias", "token id " + std::to_string(id) + " is negative");
    // +inf would make the draw's softmax inf / inf; -inf is "never", as llama.cpp reads it
    if (!std::isfinite(b) && b != kNegInf)
      bad("logit_bias", "the bias of token " + std::to_string(id) + " must be finite or -inf, got " + num(b));
  }
}

namespace processors {

void repetition_penalty(std::span<float> scores, std::span<const int32_t> ids, float penalty,
                        std::vector<float>& gathered) {
  // As transformers: gather the scores of the ids, penalise the gathered copies, scatter them back. An id
  // that occurs several times thus gets the penalty once.
  gathered.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const float v = scores[size_t(ids[i])];
    gathered[i] = v < 0 ? v * penalty : v / penalty;
  }
  for (size_t i = 0; i < ids.size(); ++i) scores[size_t(ids[i])] = gathered[i];
}

void presence_frequency_penalty(std::span<float> scores, std::span<const int32_t> ids, float presence,
                                float frequency, std::vector<int32_t>& counts) {
  for (int32_t id : ids) ++counts[size_t(id)];
  // Each id once (its count then back to 0), in float as torch and vLLM compute it: first the frequency
  // term, then the presence term.
  for (int32_t id : ids) {
    int32_t& c = counts[size_t(id)];
    if (c == 0) continue;
    float& s = scores[size_t(id)];
    const float f = float(c) * frequency;
    s = s - f;
    s = s - presence;
    c = 0;
  }
}

void repetition_penalty(std::span<float> scores, std::span<const int32_t> ids, float penalty) {
  std::vector<float> gathered;
  repetition_penalty(scores, ids, penalty, gathered);
}

void temperature(std::span<float> scores, float t) {
  for (float& s : scores) s = s / t;
}

void top_k(std::span<float> scores, int64_t k, std::vector<float>& scratch) {
  if (k <= 0 || size_t(k) >= scores.size()) return;
  scratch.assign(scores.begin(), scores.end());
  std::nth_element(scratch.begin(), scratch.begin() + (k - 1), scratch.end(), std::greater<float>());
  const float kth = scratch[size_t(k - 1)];
  for (float& s : scores) {
    if (s < kth) s = kNegInf;  // ties with the k-th value stay, as in transformers
  }
}

void top_k(std::span<float> scores, int64_t k) {
  std::vector<float> scratch;
  top_k(scores, k, scratch);
}

void top_p(std::span<float> scores, float p) {
  if (p >= 1.0f) return;
  std::vector<int32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return scores[size_t(a)] < scores[size_t(b)]; });
  std::vector<float> sorted(scores.size()), probs;
  for (size_t i = 0; i < order.size(); ++i) sorted[i] = scores[size_t(order[i])];
  softmax(sorted, probs);
  // Ascending order: drop tokens while the cumulative probability stays <= 1 - p; keep the most likely one.
  float cum = 0.0f;
  for (size_t i = 0; i + 1 < order.size(); ++i) {
    cum += probs[i];
    if (cum <= 1.0f - p) scores[size_t(order[i])] = kNegInf;
  }
}

void min_p(std::span<float> scores, float p) {
  if (p <= 0.0f) return;
  std::vector<float> probs;
  softmax(scores, probs);
  const size_t top = size_t(std::max_element(probs.begin(), probs.end()) - probs.begin());
  const float threshold = p * probs[top];
  for (size_t i = 0; i < scores.size(); ++i) {
    if (i != top && probs[i] < threshold) scores[i] = kNegInf;
  }
}

}  // namespace processors

// The stream starts at splitmix64(seed), not at the seed itself: seeds N and N + 1 then start at unrelated
// points of SplitMix64's sequence instead of one draw apart (which made their samples the same, shifted).
Sampler::Sampler(const SamplingParams& params, int64_t n_vocab)
    : params_(params),
      rng_state_(splitmix64(params.seed)),
      scores_(size_t(n_vocab)),
      scratch_(size_t(n_vocab)) {
  params_.validate();
  // One bias per token, the last one given (as a JSON object's last key, and transformers' sequence_bias)
  auto& bias = params_.logit_bias;
  for (const auto& [id, b] : bias) {
    if (id >= n_vocab) {
      bad("logit_bias", "token id " + std::to_string(id) + " is not in the vocabulary [0, " +
                            std::to_string(n_vocab) + ")");
    }
  }
  std::stable_sort(bias.begin(), bias.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  size_t n = 0;
  for (size_t i = 0; i < bias.size(); ++i) {
    if (n > 0 && bias[n - 1].first == bias[i].first) --n;  // a later bias of the same token replaces it
    bias[n++] = bias[i];
  }
  bias.resize(n);
  const auto banned =
      std::count_if(bias.begin(), bias.end(), [](const auto& b) { return b.second == kNegInf; });
  if (n_vocab > 0 && banned == n_vocab) {
    bad("logit_bias", "every token of the vocabulary is -inf: none is left to choose");
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f)
    counts_.assign(size_t(n_vocab), 0);
  cand_score_.reserve(size_t(n_vocab));
  cand_id_.reserve(size_t(n_vocab));
}

double Sampler::next_uniform() {
  // SplitMix64 (Steele et al.): the state advances by the golden gamma, the output is its mix.
  const uint64_t z = splitmix64(rng_state_);
  rng_state_ += 0x9E3779B97F4A7C15ull;
  return double(z >> 11) * 0x1.0p-53;
}

bool Sampler::greedy(std::span<const float> scores) const {
  if (params_.temperature == 0.0f) return true;
  // A temperature so small that scores / T overflow is the limit T -> 0 of sampling: the argmax. Dividing
  // would give Inf - Inf = NaN in the softmax, and a wrong token.
  float m = 0.0f;
  for (float v : scores) {
    if (std::isfinite(v)) m = std::max(m, std::fabs(v));
  }
  return !std::isfinite(m / params_.temperature);
}

std::span<const float> Sampler::process(std::span<const float> logits, std::span<const int32_t> history,
                                        std::span<const int32_t> generated) {
  std::copy(logits.begin(), logits.end(), scores_.begin());
  std::span<float> s(scores_);
  for (const auto& [id, b] : params_.logit_bias) scores_[size_t(id)] += b;
  if (params_.repetition_penalty != 1.0f) {
    // --repeat-last-n: the last ids only
    const size_t n =
        params_.repeat_last_n < 0 ? history.size() : std::min(history.size(), size_t(params_.repeat_last_n));
    processors::repetition_penalty(s, history.last(n), params_.repetition_penalty, gathered_);
  }
  if (!counts_.empty()) {
    processors::presence_frequency_penalty(s, generated, params_.presence_penalty, params_.frequency_penalty,
                                           counts_);
  }
  greedy_ = greedy(s);
  if (greedy_) return s;  // greedy: the warpers are for sampling only
  if (params_.temperature != 1.0f) processors::temperature(s, params_.temperature);
  // top-k over the whole vocabulary (an O(V) selection), then top-p and min-p over the survivors only:
  // every other entry is -inf, which neither can see.
  processors::top_k(s, params_.top_k, scratch_);
  if (params_.top_p < 1.0f || params_.min_p > 0.0f) {
    cand_score_.clear();
    cand_id_.clear();
    for (size_t i = 0; i < scores_.size(); ++i) {
      if (scores_[i] != -std::numeric_limits<float>::infinity()) {
        cand_score_.push_back(scores_[i]);
        cand_id_.push_back(int32_t(i));
      }
    }
    std::span<float> c(cand_score_);
    if (params_.top_p < 1.0f) processors::top_p(c, params_.top_p);
    if (params_.min_p > 0.0f) processors::min_p(c, params_.min_p);
    for (size_t i = 0; i < cand_id_.size(); ++i) scores_[size_t(cand_id_[i])] = cand_score_[i];
  }
  return s;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history,
                        std::span<const int32_t> generated) {
  process(logits, history, generated);
  // First maximum, as torch.argmax.
  const size_t best = size_t(std::max_element(scores_.begin(), scores_.end()) - scores_.begin());
  if (greedy_ || scores_[best] == -std::numeric_limits<float>::infinity()) return int32_t(best);
  // Draw from the softmax of what is left, in double, walking the vocabulary in id order.
  const double mx = scores_[best];
  double total = 0.0;
  constexpr float kOut = -std::numeric_limits<float>::infinity();
  weights_.resize(scores_.size());
  for (size_t i = 0; i < scores_.size(); ++i) {
    weights_[i] = scores_[i] == kOut ? 0.0 : std::exp(double(scores_[i]) - mx);
    total += weights_[i];
  }
  const double u = next_uniform() * total;
  double acc = 0.0;
  for (size_t i = 0; i < scores_.size(); ++i) {
    if (scores_[i] == kOut) continue;
    acc += weights_[i];
    if (u < acc) return int32_t(i);
  }
  return int32_t(best);  // u landed in the rounding slack at the very top
}

namespace {
// log softmax of one logit: v - max - log(sum exp(logit - max)). One computation for log_prob and
// top_log_probs, so that a token's logprob and its entry among the top ones are the same double.
struct LogSoftmax {
  double mx = -std::numeric_limits<double>::infinity();
  double log_sum = 0.0;
  explicit LogSoftmax(std::span<const float> logits) {
    for (float v : logits) mx = std::max(mx, double(v));
    double sum = 0.0;
    for (float v : logits) sum += std::exp(double(v) - mx);
    log_sum = std::log(sum);
  }
  double operator()(float v) const { return double(v) - mx - log_sum; }
};
}  // namespace

double log_prob(std::span<const float> logits, int32_t id) { return LogSoftmax(logits)(logits[size_t(id)]); }

std::vector<std::pair<int32_t, double>> top_log_probs(std::span<const float> logits, int64_t n) {
  n = std::min<int64_t>(n, int64_t(logits.size()));
  std::vector<int32_t> idx(logits.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  });
  const LogSoftmax lsm(logits);
  std::vector<std::pair<int32_t, double>> out;
  for (int64_t i = 0; i < n; ++i) out.emplace_back(idx[size_t(i)], lsm(logits[size_t(idx[size_t(i)])]));
  return out;
}

}  // namespace minigpt
