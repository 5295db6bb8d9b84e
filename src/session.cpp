// The forward pass, written once over the Backend interface.
#include "minigpt/session.h"

#include <cmath>

#include "minigpt/error.h"

namespace minigpt {

Session::Session(std::shared_ptr<const Model> model, const SessionOptions& options) : model_(std::move(model)) {
  if (!model_) throw Error(ErrorKind::Argument, "Session: no model");
  const Config& c = model_->config();
  if (options.max_batch < 1) throw Error(ErrorKind::Argument, "Session: max_batch must be >= 1");
  if (options.n_ctx < 0 || options.n_ctx > c.n_ctx) {
    throw Error(ErrorKind::Argument, "context size " + std::to_string(options.n_ctx) + " is outside [1, " +
                                         std::to_string(c.n_ctx) + "], the model's context (n_positions)");
  }
  n_ctx_ = options.n_ctx == 0 ? c.n_ctx : options.n_ctx;
  max_batch_ = std::min(options.max_batch, n_ctx_);
  Backend& be = model_->backend();
  const int64_t C = c.n_embd, S = n_ctx_, B = max_batch_;
  auto tensor = [&](int64_t rows, int64_t cols) {
    buffers_.push_back(be.alloc(size_t(rows * cols) * sizeof(float)));
    return make_tensor(buffers_.back()->data(), DType::F32, be.device(), rows, cols);
  };
  // The KV cache in the backend's dtype (F32 on the CPU, 16-bit on a GPU).
  const DType kv = be.kv_dtype();
  const int64_t kv_rows = be.kv_cache_rows(S);
  if (kv_rows < S) throw Error(ErrorKind::Argument, "Session: the backend's KV cache has fewer rows than the context");
  auto kv_tensor = [&] {
    buffers_.push_back(be.alloc(size_t(kv_rows * C) * dtype_size(kv)));
    return make_tensor(buffers_.back()->data(), kv, be.device(), kv_rows, C);
  };
  for (int64_t l = 0; l < c.n_layer; ++l) {
    k_cache_.push_back(kv_tensor());
    v_cache_.push_back(kv_tensor());
  }
  x_ = tensor(B, C);
  xn_ = tensor(B, C);
  qkv_ = tensor(B, 3 * C);
  att_ = tensor(B, C);
  h_ = tensor(B, c.n_inner);
  ensure_logit_rows(1);
  logits_.resize(size_t(c.n_vocab));
}

// What the backend recorded for this session's steps refers to its buffers, and a later session may get
// the same address.
Session::~Session() { model_->backend().forget_step(this); }

int64_t Session::n_ctx() const { return n_ctx_; }

void Session::ensure_logit_rows(int64_t rows) {
  if (rows <= logit_rows_) return;
  Backend& be = model_->backend();
  const int64_t V = model_->config().n_vocab;
  be.forget_step(this);  // a recorded step writes the old logits buffer
  buffers_.push_back(be.alloc(size_t(rows * V) * sizeof(float)));
  logits_dev_ = make_tensor(buffers_.back()->data(), DType::F32, be.device(), rows, V);
  logit_rows_ = rows;
}

void Session::check_tokens(std::span<const int32_t> tokens) const {
  const Config& c = model_->config();
  if (tokens.empty()) throw Error(ErrorKind::Argument, "eval: no tokens");
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.n_vocab) {
      throw Error(ErrorKind::Argument, "eval: token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                                           " is outside the vocabulary [0, " + std::to_string(c.n_vocab) + ")");
    }
  }
  if (int64_t(tokens.size()) > n_ctx_ - n_past_) {
    throw Error(ErrorKind::Argument, "eval: context overflow: " + std::to_string(n_past_) + " tokens in the context + " +
                                         std::to_string(tokens.size()) + " new > n_ctx " + std::to_string(n_ctx_));
  }
}

std::span<const float> Session::eval(std::span<const int32_t> tokens) {
  check_tokens(tokens);
  const int64_t n = int64_t(tokens.size());
  for (int64_t i = 0; i < n; i += max_batch_) {
    const int64_t len = std::min(max_batch_, n - i);
    // Only the last chunk's last row is wanted; earlier chunks just fill the KV cache.
    forward(tokens.data() + i, len, false, i + len == n ? logits_.data() : nullptr);
  }
  return {logits_.data(), logits_.size()};
}

std::span<const float> Session::eval_all(std::span<const int32_t> tokens) {
  check_tokens(tokens);
  const int64_t n = int64_t(tokens.size());
  const int64_t V = model_->config().n_vocab;
  ensure_logit_rows(std::min(n, max_batch_));
  all_logits_.resize(size_t(n * V));
  for (int64_t i = 0; i < n; i += max_batch_) {
    const int64_t len = std::min(max_batch_, n - i);
    forward(tokens.data() + i, len, true, all_logits_.data() + i * V);
  }
  return {all_logits_.data(), all_logits_.size()};
}

void Session::forward(const int32_t* tokens, int64_t n, bool all_logits, float* logits_out) {
  const Model& m = *model_;
  const Config& c = m.config();
  const ModelWeights& w = m.weights();
  Backend& be = m.backend();
  const int64_t C = c.n_embd;
  const int64_t pos0 = n_past_;

  Tensor x = x_.row_slice(0, n);
  Tensor xn = xn_.row_slice(0, n);
  Tensor qkv = qkv_.row_slice(0, n);
  Tensor att = att_.row_slice(0, n);
  Tensor h = h_.row_slice(0, n);

  const int64_t rows = all_logits ? n : 1;
  Tensor logits = logits_dev_.row_slice(0, rows);
  // The whole step as one unit the backend may record and replay: only tokens and pos0 vary between
  // replays, and a step that skips the logits is never recorded (it is a different op sequence).
  be.run_step(logits_out ? this : nullptr, tokens, n, pos0, [&] {
    be.embed(x, tokens, n, pos0, w.wte, w.wpe);
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const LayerWeights& L = w.layers[size_t(l)];
      // attention block: x += proj(attn(ln_1(x)))
      be.layer_norm(xn, x, L.ln_1_w, L.ln_1_b, c.layer_norm_epsilon);
      be.linear(qkv, xn, L.attn_qkv, false);
      be.store_kv(k_cache_[size_t(l)], v_cache_[size_t(l)], qkv.col_slice(C, C), qkv.col_slice(2 * C, C), pos0, c.n_head);
      float scale = c.scale_attn_weights ? 1.0f / std::sqrt(float(c.head_dim())) : 1.0f;
      if (c.scale_attn_by_inverse_layer_idx) scale /= float(l + 1);
      be.attention(att, qkv.col_slice(0, C), k_cache_[size_t(l)], v_cache_[size_t(l)], pos0, c.n_head, scale);
      be.linear(x, att, L.attn_proj, true);
      // MLP block: x += proj(act(fc(ln_2(x))))
      be.layer_norm(xn, x, L.ln_2_w, L.ln_2_b, c.layer_norm_epsilon);
      be.linear_act(h, xn, L.mlp_fc, c.activation);
      be.linear(x, h, L.mlp_proj, true);
    }
    if (logits_out == nullptr) return;
    Tensor xs = x.row_slice(n - rows, rows);
    Tensor xf = xn.row_slice(0, rows);
    be.layer_norm(xf, xs, w.ln_f_w, w.ln_f_b, c.layer_norm_epsilon);
    be.linear(logits, xf, w.lm_head, false);
  });
  n_past_ += n;
  if (logits_out == nullptr) return;
  be.to_host(logits_out, logits);
  check_finite(logits_out, rows, pos0 + n - rows);
}

void Session::check_finite(const float* logits, int64_t rows, int64_t pos0) const {
  const int64_t V = model_->config().n_vocab;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * V;
    // Exponent all ones: Inf or NaN. On the bits, so that it vectorises.
    const auto* bits = reinterpret_cast<const uint32_t*>(row);
    uint32_t bad = 0;
#pragma omp simd reduction(| : bad)
    for (int64_t i = 0; i < V; ++i) bad |= uint32_t((bits[i] & 0x7F800000u) == 0x7F800000u);
    if (bad == 0) continue;
    int64_t i = 0;
    while (std::isfinite(row[i])) ++i;
    throw Error(ErrorKind::Numeric,
                "the logits at position " + std::to_string(pos0 + r) + " are not finite (" +
                    (std::isnan(row[i]) ? "NaN" : "Inf") + " for token " + std::to_string(i) +
                    "): the computation overflowed; with --dtype f16, values beyond F16's range become "
                    "infinite (try f32 or bf16)");
  }
}

}  // namespace minigpt
