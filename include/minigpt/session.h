// Per-run state over a shared Model: the KV cache (n_ctx rows per layer), scratch buffers, the position.
// After each forward pass the logits are checked: NaN or Inf (weights that overflow their compute dtype,
// activations that overflow F32) is an Error(Numeric), never a silently wrong token.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "minigpt/model.h"

namespace minigpt {

struct SessionOptions {
  int64_t max_batch = 512;  // tokens per forward pass; longer evals are split into chunks of this size
  // Positions the KV cache holds (llama.cpp's n_ctx, -c): 0 = the model's whole context (n_positions).
  // At most that: learned positions end there. The cache is allocated for exactly this many.
  int64_t n_ctx = 0;
};

class Session {
 public:
  explicit Session(std::shared_ptr<const Model> model, const SessionOptions& options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Appends `tokens` (any number >= 1) to the sequence and returns the logits of the last one: [V].
  // Throws Error(Argument) for an id outside the vocabulary or when the context would overflow; the
  // session is unchanged then.
  std::span<const float> eval(std::span<const int32_t> tokens);
  // The same, returning the logits of every appended token: [n_tokens * V], row-major.
  std::span<const float> eval_all(std::span<const int32_t> tokens);
  // Forgets the sequence (keeps the memory).
  void reset() { n_past_ = 0; }

  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const;
  const Model& model() const { return *model_; }

 private:
  void check_tokens(std::span<const int32_t> tokens) const;
  void forward(const int32_t* tokens, int64_t n, bool all_logits, float* logits_out);
  void check_finite(const float* logits, int64_t rows, int64_t pos0) const;
  void ensure_logit_rows(int64_t rows);

  std::shared_ptr<const Model> model_;
  int64_t max_batch_;
  int64_t n_ctx_ = 0;
  int64_t n_past_ = 0;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<Tensor> k_cache_, v_cache_;  // per layer: [S, C]
  Tensor x_, xn_, qkv_, att_, h_;          // [B, C], [B, C], [B, 3C], [B, C], [B, F]
  Tensor logits_dev_;                      // [rows, V] on the device
  int64_t logit_rows_ = 0;
  std::vector<float> logits_;              // [V]: the last position, handed to the caller
  std::vector<float> all_logits_;          // [n * V]: every position, for eval_all
};

}  // namespace minigpt
