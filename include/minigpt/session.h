// Per-run state over a shared Model: a KV cache of one or more sequences (made by the model's backend),
// scratch buffers, each sequence's position. A forward step may take tokens of several sequences, each
// at its own position, so that they are decoded together with every weight read once.
// After each forward pass the logits are checked: NaN or Inf (weights that overflow their compute dtype,
// activations that overflow F32) is an Error(Numeric), never a silently wrong token.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "minigpt/model.h"

namespace minigpt {

struct SessionOptions {
  int64_t max_batch = 512;  // tokens per forward pass; a longer eval of one sequence is split into chunks
  // Positions the KV cache holds per sequence (llama.cpp's n_ctx, -c): 0 = the model's whole context
  // (n_positions). At most that: learned positions end there. The cache is allocated for exactly this many.
  int64_t n_ctx = 0;
  int64_t n_seq = 1;  // sequences the KV cache holds
};

class Session {
 public:
  explicit Session(std::shared_ptr<const Model> model, const SessionOptions& options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Appends `tokens` (any number >= 1) to sequence `seq` and returns the logits of the last one: [V].
  // Throws Error(Argument) for an id outside the vocabulary, a sequence outside [0, n_seq) or when the
  // context would overflow; the session is unchanged then.
  std::span<const float> eval(std::span<const int32_t> tokens, int64_t seq = 0);
  // The same, returning the logits of every appended token: [n_tokens * V], row-major.
  std::span<const float> eval_all(std::span<const int32_t> tokens, int64_t seq = 0);
  // The same, writing the logits into `out` ([n_tokens * V], memory of the caller's: a numpy array the Python
  // package returns) instead of the session's.
  void eval_all(std::span<const int32_t> tokens, std::span<float> out, int64_t seq = 0);

  // Tokens for one sequence in a batched step.
  struct SeqTokens {
    int64_t seq = 0;
    std::span<const int32_t> tokens;
    bool all_logits = false;  // the logits of every token appended, not only of the last
  };
  // Appends each entry's tokens to its sequence in ONE forward step (every weight read once for all of
  // them) and returns the logits of each entry's last token (of every token with all_logits):
  // [rows * V], in the order given. Each sequence at most once; at most max_batch tokens in all. Errors as
  // eval's, the session unchanged then.
  std::span<const float> eval_batch(std::span<const SeqTokens> batch);

  // For inspection (minigpt/attention.h): called in every forward step, for each layer, with the step and
  // the layer's q|k|v as the attention reads them: [T, (H + 2 Hkv) D] on the backend's device (copy it with
  // Backend::to_host). A session with an observer never lets the backend record its steps. Empty: none.
  using QkvObserver = std::function<void(int64_t layer, const Step& step, const Tensor& qkv)>;
  void set_qkv_observer(QkvObserver observer) { qkv_observer_ = std::move(observer); }

  // Forgets every sequence, or one (keeps the memory).
  void reset();
  void reset(int64_t seq);
  // Keeps the first n positions of sequence `seq` and forgets the rest (0 <= n <= n_past(seq), else
  // Error(Argument)): a prompt that begins with the n tokens the sequence holds goes on from there.
  // Where a windowed layer keeps only its last positions (KvCache::ring_capacity), the keys that position n
  // sees may be gone once the sequence went further than n: keep() refuses such an n (Error(Argument)).
  void keep(int64_t seq, int64_t n);
  // What keep(seq, n) can keep: n, or 0 where a windowed layer's ring no longer holds the keys position n
  // sees (then the prompt is evaluated again from its start). Callers that reuse a prefix ask this first.
  int64_t keepable(int64_t seq, int64_t n) const;
  // Sequence `to` takes the first n positions of sequence `from` (0 <= n <= n_past(from)) and forgets the
  // rest of its own: what `from` evaluated is not evaluated again. Only where can_copy() (the backend copies
  // keys and values between sequences), else Error(Unsupported).
  bool can_copy() const;
  void copy_prefix(int64_t from, int64_t to, int64_t n);
  // A prompt cache beyond the KV cache (Backend::read_kv): positions [from, from + n) of sequence `seq`,
  // kv_position_bytes() bytes each, to or from host memory. exports_kv(): whether the backend can and no
  // layer keeps a ring of its last positions only (a windowed layer's ring holds too little of a prefix to
  // export it; such models go without the cache). read_kv needs from + n <= n_past(seq); write_kv needs
  // from <= n_past(seq) and leaves the sequence holding from + n positions (forgetting the rest). Errors:
  // Error(Argument) for positions outside that, Error(Unsupported) where !exports_kv().
  bool exports_kv() const;
  size_t kv_position_bytes() const;
  void read_kv(int64_t seq, int64_t from, int64_t n, void* host) const;
  void write_kv(int64_t seq, int64_t from, int64_t n, const void* host);

  int64_t n_past(int64_t seq = 0) const;
  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_seq() const { return int64_t(n_past_.size()); }
  int64_t max_batch() const { return max_batch_; }
  const Model& model() const { return *model_; }
  const KvCache& kv_cache() const { return *cache_; }

 private:
  void check_seq(int64_t seq) const;
  void check_tokens(std::span<const int32_t> tokens, int64_t seq, const char* what) const;
  // Runs one step; the logits of the step's rows `logit_rows` (ascending) go to logits_out (null: none).
  void forward(const Step& step, std::span<const int64_t> logit_rows, float* logits_out);
  // Every token's logits into out [n * V], in chunks of max_batch (tokens checked).
  void forward_all(std::span<const int32_t> tokens, int64_t seq, float* out);
  void check_finite(const float* logits, const Step& step, std::span<const int64_t> rows) const;
  void ensure_logit_rows(int64_t rows);

  std::shared_ptr<const Model> model_;
  int64_t max_batch_;
  int64_t n_ctx_ = 0;
  std::vector<int64_t> n_past_;  // per sequence
  std::unique_ptr<KvCache> cache_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  Tensor x_, xn_, qkv_, att_, h_;  // [B, C], [B, C], [B, (H + 2 Hkv) D], [B, H D], [B, F]
  Tensor y_;           // [B, C]: a half's output before its post-norm (LayerDesc::post_norms); else empty
  Tensor e_;           // [B, E]: embeddings before project_in, the head's input after project_out
  Tensor logits_dev_;  // [rows, V] on the device
  int64_t logit_rows_ = 0;
  std::vector<float> logits_;      // [V] or [entries * V]: handed to the caller
  std::vector<float> all_logits_;  // [n * V]: every position, for eval_all
  std::vector<int32_t> step_tokens_;
  std::vector<SeqRun> step_runs_;
  std::vector<int64_t> step_rows_;
  QkvObserver qkv_observer_;
};

}  // namespace minigpt
