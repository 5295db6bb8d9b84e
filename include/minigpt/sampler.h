// Choosing the next token: transformers' logits processors, applied in transformers' order (a logit bias
// (its SequenceBiasLogitsProcessor), the repetition penalty, then the OpenAI API's presence and frequency
// penalties where transformers puts a processor passed to generate(), then temperature, top-k, top-p,
// min-p), then greedy argmax or a seeded draw.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace minigpt {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy (argmax after the repetition penalty, as do_sample=False);
                             // so is one so small that logits / temperature overflow

  int64_t top_k = 50;               // 0: off. transformers' default
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // 1: off. CTRL's penalty over every id in the sequence so far
  int64_t repeat_last_n = -1;       // the repetition penalty's window: -1 the whole sequence (transformers),
                                    // 0 none, N the last N ids (llama.cpp's --repeat-last-n, 64 there)
  // The OpenAI API's penalties over the tokens generated so far (not the prompt's), as its documentation
  // gives them: logit -= count x frequency_penalty + (count > 0) x presence_penalty. 0: off.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Added to these tokens' logits before everything else (the OpenAI API's logit_bias, llama.cpp's
  // --logit-bias); -inf: never chosen. A token given twice takes its last bias.
  std::vector<std::pair<int32_t, float>> logit_bias;
  uint64_t seed = 0;
  // Throws Error(Argument) naming the field (temperature, top_k, ...) when a value is out of range.
  void validate() const;
};

// The processors, each exactly as transformers computes it on one row of scores (filter value -inf,
// min_tokens_to_keep = 1). `scores` may be a subset of the vocabulary whose other entries would be -inf.
namespace processors {
// ids must lie in [0, scores.size()).
void repetition_penalty(std::span<float> scores, std::span<const int32_t> ids, float penalty);
void repetition_penalty(std::span<float> scores, std::span<const int32_t> ids, float penalty,
                        std::vector<float>& scratch);
// counts: [scores.size()] zeros, left zero again; ids: the generated tokens.
void presence_frequency_penalty(std::span<float> scores, std::span<const int32_t> ids, float presence,
                                float frequency, std::vector<int32_t>& counts);
void temperature(std::span<float> scores, float t);
void top_k(std::span<float> scores, int64_t k);
void top_k(std::span<float> scores, int64_t k, std::vector<float>& scratch);
void top_p(std::span<float> scores, float p);
void min_p(std::span<float> scores, float p);
}  // namespace processors

class Sampler {
 public:
  Sampler(const SamplingParams& params, int64_t n_vocab);

  // The next token given the model's logits [n_vocab], every id of the sequence so far (prompt and
  // generated, for the repetition penalty) and the generated ones (for the presence and frequency
  // penalties). Allocates nothing after construction.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history,
                 std::span<const int32_t> generated = {});

  // The scores after the processors (removed tokens -inf), as transformers' processor chain for these
  // parameters would leave them; sample() draws from their softmax. Valid until the next call.
  std::span<const float> process(std::span<const float> logits, std::span<const int32_t> history,
                                 std::span<const int32_t> generated = {});

  const SamplingParams& params() const { return params_; }

 private:
  double next_uniform();  // [0, 1), from SplitMix64: the same stream on every platform and thread count
  bool greedy(std::span<const float> scores) const;

  SamplingParams params_;
  uint64_t rng_state_;
  bool greedy_ = false;            // this step's choice is the argmax
  std::vector<float> scores_;      // [V]
  std::vector<float> scratch_;     // [V] for the top-k threshold
  std::vector<double> weights_;    // [V] the draw's exp(score - max), computed once for the sum and the walk
  std::vector<float> cand_score_;  // the tokens top-k kept, in id order
  std::vector<int32_t> cand_id_;
  std::vector<float> gathered_;  // the repetition penalty's gathered scores
  std::vector<int32_t> counts_;  // [V] zeros between calls: the frequency penalty's counts
};

// log_softmax of the model's raw distribution, for --json: logprob of `id`, and the `n` most likely.
double log_prob(std::span<const float> logits, int32_t id);
std::vector<std::pair<int32_t, double>> top_log_probs(std::span<const float> logits, int64_t n);

}  // namespace minigpt
