// The forward pass, written once over the Backend interface.
#include "minigpt/session.h"

#include <cmath>
#include <utility>

#include "minigpt/error.h"

namespace minigpt {

Session::Session(std::shared_ptr<const Model> model, const SessionOptions& options)
    : model_(std::move(model)) {
  if (!model_) throw Error(ErrorKind::Argument, "Session: no model");
  const Config& c = model_->config();
  if (options.max_batch < 1) throw Error(ErrorKind::Argument, "Session: max_batch must be >= 1");
  if (options.n_ctx < 0 || options.n_ctx > c.n_ctx) {
    throw Error(ErrorKind::Argument, "context size " + std::to_string(options.n_ctx) + " is outside [1, " +
                                         std::to_string(c.n_ctx) + "], the model's context (n_positions)");
  }
  if (options.n_seq < 1 || options.n_seq > 4096) {
    throw Error(ErrorKind::Argument,
                "sequence count " + std::to_string(options.n_seq) + " is outside [1, 4096]");
  }
  n_ctx_ = options.n_ctx == 0 ? c.n_ctx : options.n_ctx;
  max_batch_ = std::min(options.max_batch, n_ctx_ * options.n_seq);
  n_past_.assign(size_t(options.n_seq), 0);
  Backend& be = model_->backend();
  KvCacheSpec spec;
  spec.n_layer = c.n_layer;
  spec.n_kv_head = c.kv_heads();
  spec.head_dim = c.head_dim();
  spec.n_ctx = n_ctx_;
  spec.n_seq = options.n_seq;
  const BlockDesc& b = model_->block();
  for (const LayerDesc& l : b.layers) spec.layer_window.push_back(l.window);
  // The ops this model's layers need beyond every backend's, refused here rather than mid-step.
  std::vector<BackendOp> needs;
  if (b.embed_scale > 0.0f) needs.push_back(BackendOp::Scale);
  if (b.any_post_norms()) needs.push_back(BackendOp::Add);
  if (b.logit_softcap > 0.0f) needs.push_back(BackendOp::Softcap);
  if (b.any_softcap()) needs.push_back(BackendOp::AttentionSoftcap);
  if (b.any_rope_mscale()) needs.push_back(BackendOp::RopeMscale);
  for (BackendOp op : needs) {
    if (!be.supports(op)) {
      throw Error(ErrorKind::Unsupported, "the " + be.name() + " backend does not run this model: it needs " +
                                              backend_op_name(op) + ", which the backend does not have yet");
    }
  }
  spec.max_step = max_batch_;
  cache_ = be.make_kv_cache(spec);
  const int64_t C = c.n_embd, B = max_batch_, HD = c.n_head * c.head_dim();
  auto tensor = [&](int64_t rows, int64_t cols) {
    buffers_.push_back(be.alloc(size_t(rows * cols) * sizeof(float)));
    return make_tensor(buffers_.back()->data(), DType::F32, be.device(), rows, cols);
  };
  x_ = tensor(B, C);
  xn_ = tensor(B, C);
  if (b.any_post_norms()) y_ = tensor(B, C);
  qkv_ = tensor(B, HD + 2 * c.kv_dim());
  att_ = tensor(B, HD);
  h_ = tensor(B, c.ffn_up_width());
  if (c.projects_io()) e_ = tensor(B, c.embd_io());
  ensure_logit_rows(1);
}

// What the backend recorded for this session's steps refers to its buffers, and a later session may get
// the same address.
Session::~Session() { model_->backend().forget_step(this); }

void Session::reset() { std::fill(n_past_.begin(), n_past_.end(), 0); }

void Session::reset(int64_t seq) {
  check_seq(seq);
  n_past_[size_t(seq)] = 0;
}

void Session::keep(int64_t seq, int64_t n) {
  check_seq(seq);
  if (n < 0 || n > n_past_[size_t(seq)]) {
    throw Error(ErrorKind::Argument, "keep: " + std::to_string(n) + " positions of sequence " +
                                         std::to_string(seq) + ", which holds " +
                                         std::to_string(n_past_[size_t(seq)]));
  }
  if (keepable(seq, n) != n) {
    throw Error(ErrorKind::Argument,
                "keep: " + std::to_string(n) + " positions of sequence " + std::to_string(seq) +
                    ", which holds " + std::to_string(n_past_[size_t(seq)]) +
                    ": its windowed layers keep only their last positions, and the keys position " +
                    std::to_string(n) + " sees are gone (keepable() says what can be kept)");
  }
  n_past_[size_t(seq)] = n;
}

int64_t Session::keepable(int64_t seq, int64_t n) const {
  check_seq(seq);
  const int64_t past = n_past_[size_t(seq)];
  const KvCacheSpec& spec = cache_->spec();
  for (int64_t l = 0; l < spec.n_layer; ++l) {
    const int64_t ring = cache_->ring_capacity(l);
    // The ring holds positions past - ring .. past - 1; position n sees n - window + 1 .. n - 1.
    if (ring > 0 && n > 0 && past > ring && n - spec.window_of(l) + 1 < past - ring) return 0;
  }
  return n;
}

bool Session::can_copy() const { return model_->backend().copies_kv(); }

void Session::copy_prefix(int64_t from, int64_t to, int64_t n) {
  check_seq(from);
  check_seq(to);
  if (n < 0 || n > n_past_[size_t(from)]) {
    throw Error(ErrorKind::Argument, "copy_prefix: " + std::to_string(n) + " positions of sequence " +
                                         std::to_string(from) + ", which holds " +
                                         std::to_string(n_past_[size_t(from)]));
  }
  if (keepable(from, n) != n) {
    throw Error(ErrorKind::Argument, "copy_prefix: the windowed layers of sequence " + std::to_string(from) +
                                         " no longer hold the keys position " + std::to_string(n) + " sees");
  }
  if (from == to) {
    n_past_[size_t(to)] = n;
    return;
  }
  model_->backend().copy_kv(*cache_, from, to, n);
  n_past_[size_t(to)] = n;
}

bool Session::exports_kv() const {
  if (!model_->backend().exports_kv()) return false;
  for (int64_t l = 0; l < cache_->spec().n_layer; ++l) {
    if (cache_->ring_capacity(l) > 0) return false;
  }
  return true;
}

size_t Session::kv_position_bytes() const { return Backend::kv_position_bytes(*cache_); }

void Session::read_kv(int64_t seq, int64_t from, int64_t n, void* host) const {
  check_seq(seq);
  if (from < 0 || n < 0 || from + n > n_past_[size_t(seq)]) {
    throw Error(ErrorKind::Argument, "read_kv: positions [" + std::to_string(from) + ", " +
                                         std::to_string(from + n) + ") of sequence " + std::to_string(seq) +
                                         ", which holds " + std::to_string(n_past_[size_t(seq)]));
  }
  if (!exports_kv()) {
    throw Error(ErrorKind::Unsupported, "read_kv: this model's keys and values cannot be exported on the " +
                                            model_->backend().name() + " backend");
  }
  model_->backend().read_kv(*cache_, seq, from, n, host);
}

void Session::write_kv(int64_t seq, int64_t from, int64_t n, const void* host) {
  check_seq(seq);
  if (from < 0 || n < 0 || from > n_past_[size_t(seq)] || from + n > n_ctx_) {
    throw Error(ErrorKind::Argument, "write_kv: positions [" + std::to_string(from) + ", " +
                                         std::to_string(from + n) + ") of sequence " + std::to_string(seq) +
                                         ", which holds " + std::to_string(n_past_[size_t(seq)]) + " of " +
                                         std::to_string(n_ctx_));
  }
  if (!exports_kv()) {
    throw Error(ErrorKind::Unsupported, "write_kv: this model's keys and values cannot be imported on the " +
                                            model_->backend().name() + " backend");
  }
  n_past_[size_t(seq)] = from;  // a failure below leaves only what was there before `from`
  model_->backend().write_kv(*cache_, seq, from, n, host);
  n_past_[size_t(seq)] = from + n;
}

int64_t Session::n_past(int64_t seq) const {
  check_seq(seq);
  return n_past_[size_t(seq)];
}

void Session::ensure_logit_rows(int64_t rows) {
  if (rows <= logit_rows_) return;
  Backend& be = model_->backend();
  const int64_t V = model_->config().n_vocab;
  be.forget_step(this);  // a recorded step writes the old logits buffer
  buffers_.push_back(be.alloc(size_t(rows * V) * sizeof(float)));
  logits_dev_ = make_tensor(buffers_.back()->data(), DType::F32, be.device(), rows, V);
  logit_rows_ = rows;
}

void Session::check_seq(int64_t seq) const {
  if (seq < 0 || seq >= int64_t(n_past_.size())) {
    throw Error(ErrorKind::Argument, "sequence " + std::to_string(seq) + " is outside the session's [0, " +
                                         std::to_string(n_past_.size()) + ")");
  }
}

void Session::check_tokens(std::span<const int32_t> tokens, int64_t seq, const char* what) const {
  const Config& c = model_->config();
  check_seq(seq);
  if (tokens.empty()) throw Error(ErrorKind::Argument, std::string(what) + ": no tokens");
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.n_vocab) {
      throw Error(ErrorKind::Argument, std::string(what) + ": token id " + std::to_string(tokens[i]) +
                                           " at index " + std::to_string(i) +
                                           " is outside the vocabulary [0, " + std::to_string(c.n_vocab) +
                                           ")");
    }
  }
  const int64_t past = n_past_[size_t(seq)];
  if (int64_t(tokens.size()) > n_ctx_ - past) {
    throw Error(ErrorKind::Argument,
                std::string(what) + ": context overflow: " + std::to_string(past) +
                    " tokens in the context + " + std::to_string(tokens.size()) + " new > n_ctx " +
                    std::to_string(n_ctx_) +
                    (n_past_.size() > 1 ? " (sequence " + std::to_string(seq) + ")" : ""));
  }
}

std::span<const float> Session::eval(std::span<const int32_t> tokens, int64_t seq) {
  check_tokens(tokens, seq, "eval");
  const int64_t n = int64_t(tokens.size());
  const int64_t V = model_->config().n_vocab;
  logits_.resize(size_t(V));
  for (int64_t i = 0; i < n; i += max_batch_) {
    const int64_t len = std::min(max_batch_, n - i);
    const SeqRun run{seq, 0, len, n_past_[size_t(seq)]};
    const Step step{tokens.data() + i, len, {&run, 1}};
    // Only the last chunk's last row is wanted; earlier chunks just fill the KV cache.
    const int64_t last = len - 1;
    forward(step, i + len == n ? std::span<const int64_t>(&last, 1) : std::span<const int64_t>(),
            i + len == n ? logits_.data() : nullptr);
  }
  return {logits_.data(), logits_.size()};
}

std::span<const float> Session::eval_all(std::span<const int32_t> tokens, int64_t seq) {
  check_tokens(tokens, seq, "eval");
  all_logits_.resize(tokens.size() * size_t(model_->config().n_vocab));
  forward_all(tokens, seq, all_logits_.data());
  return {all_logits_.data(), all_logits_.size()};
}

void Session::eval_all(std::span<const int32_t> tokens, std::span<float> out, int64_t seq) {
  check_tokens(tokens, seq, "eval");
  const size_t want = tokens.size() * size_t(model_->config().n_vocab);
  if (out.size() != want) {
    throw Error(ErrorKind::Argument, "eval: the output holds " + std::to_string(out.size()) +
                                         " floats, not " + std::to_string(tokens.size()) + " x " +
                                         std::to_string(model_->config().n_vocab));
  }
  forward_all(tokens, seq, out.data());
}

void Session::forward_all(std::span<const int32_t> tokens, int64_t seq, float* out) {
  const int64_t n = int64_t(tokens.size());
  const int64_t V = model_->config().n_vocab;
  ensure_logit_rows(std::min(n, max_batch_));
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < n; i += max_batch_) {
    const int64_t len = std::min(max_batch_, n - i);
    const SeqRun run{seq, 0, len, n_past_[size_t(seq)]};
    const Step step{tokens.data() + i, len, {&run, 1}};
    rows.resize(size_t(len));
    for (int64_t r = 0; r < len; ++r) rows[size_t(r)] = r;
    forward(step, rows, out + i * V);
  }
}

std::span<const float> Session::eval_batch(std::span<const SeqTokens> batch) {
  if (batch.empty()) throw Error(ErrorKind::Argument, "eval_batch: no sequences");
  int64_t total = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    check_tokens(batch[i].tokens, batch[i].seq, "eval_batch");
    for (size_t j = 0; j < i; ++j) {
      if (batch[j].seq == batch[i].seq) {
        throw Error(ErrorKind::Argument,
                    "eval_batch: sequence " + std::to_string(batch[i].seq) + " appears twice");
      }
    }
    total += int64_t(batch[i].tokens.size());
  }
  if (total > max_batch_) {
    throw Error(ErrorKind::Argument, "eval_batch: " + std::to_string(total) +
                                         " tokens exceed the session's batch of " +
                                         std::to_string(max_batch_));
  }
  step_tokens_.clear();
  step_runs_.clear();
  step_rows_.clear();
  for (const SeqTokens& e : batch) {
    const int64_t first = int64_t(step_tokens_.size()), n = int64_t(e.tokens.size());
    step_tokens_.insert(step_tokens_.end(), e.tokens.begin(), e.tokens.end());
    step_runs_.push_back({e.seq, first, n, n_past_[size_t(e.seq)]});
    for (int64_t r = e.all_logits ? first : first + n - 1; r < first + n; ++r) step_rows_.push_back(r);
  }
  const int64_t V = model_->config().n_vocab;
  ensure_logit_rows(int64_t(step_rows_.size()));
  logits_.resize(step_rows_.size() * size_t(V));
  const Step step{step_tokens_.data(), total, step_runs_};
  forward(step, step_rows_, logits_.data());
  return {logits_.data(), logits_.size()};
}

void Session::forward(const Step& step, std::span<const int64_t> logit_rows, float* logits_out) {
  const Model& m = *model_;
  const Config& c = m.config();
  const BlockDesc& b = m.block();
  const ModelWeights& w = m.weights();
  Backend& be = m.backend();
  const int64_t n = step.n_tokens;
  check_step(step, cache_->spec());
  KvCache& cache = *cache_;

  Tensor qkv_all = qkv_.row_slice(0, n);
  Tensor att_all = att_.row_slice(0, n);
  Tensor h = h_.row_slice(0, n);

  const int64_t rows = int64_t(logit_rows.size());
  Tensor logits = logits_dev_.row_slice(0, std::max<int64_t>(rows, 1));
  // The logits rows as one range when they are consecutive (a prefill's every row, or its last).
  const bool consecutive = rows > 0 && logit_rows.back() - logit_rows.front() == rows - 1;
  // The whole step as one unit the backend may record and replay: only the token ids and positions vary
  // between replays of the same shape, and a step that skips the logits (or is observed) is never recorded.
  be.run_step(logits_out && !qkv_observer_ ? this : nullptr, step, [&] {
    Tensor x = x_.row_slice(0, n), xn = xn_.row_slice(0, n);  // swapped by post-norm blocks
    if (c.projects_io()) {
      // OPT-350m: embeddings of width E, projected to C, then the positions.
      Tensor e = e_.row_slice(0, n);
      be.embed(e, step, w.token_embd, Tensor{});
      be.linear(x, e, w.proj_in, false);
      if (!w.pos_embd.empty()) be.add_positions(x, step, w.pos_embd);
    } else {
      be.embed(x, step, w.token_embd, w.pos_embd);
    }
    if (b.embed_scale > 0.0f) be.scale(x, b.embed_scale);
    // out = in W^T of a stacked projection: the fused matrix, or its parts each into its own columns.
    auto stacked = [&](const Tensor& out, const Tensor& in, const Linear& fused,
                       const std::vector<Linear>& parts) {
      if (parts.empty()) return be.linear(out, in, fused, false);
      be.linear_parts(out, in, parts);
    };
    // The MLP into `out` (added to it when `accumulate`): down(act(up(in))) or, gated, down(act(gate) * up).
    auto mlp = [&](const Tensor& out, const Tensor& in, const LayerDesc& d, const LayerWeights& L,
                   bool accumulate) {
      if (d.ffn == FfnKind::Gated) {
        const Tensor hg = h.col_slice(0, d.n_inner);  // act(gate) * up in place of the gate
        stacked(h, in, L.ffn_up, L.ffn_up_parts);
        be.gated_act(hg, h, d.activation);
        be.linear(out, hg, L.ffn_down, accumulate);
      } else {
        be.linear_act(h, in, L.ffn_up, d.activation);
        be.linear(out, h, L.ffn_down, accumulate);
      }
    };
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const LayerDesc& d = b.layers[size_t(l)];
      const LayerWeights& L = w.layers[size_t(l)];
      const int64_t H = d.n_head, Hkv = d.n_kv_head, D = d.head_dim, HD = H * D, KV = Hkv * D;
      auto norm = [&](Tensor out, const Tensor& in, const Tensor& nw, const Tensor& nb) {
        be.norm(out, in, nw, nb, d.norm, d.eps);
      };
      Tensor qkv = qkv_all.col_slice(0, HD + 2 * KV), att = att_all.col_slice(0, HD);
      const Tensor q = qkv.col_slice(0, HD), k = qkv.col_slice(HD, KV), v = qkv.col_slice(HD + KV, KV);
      // attention: att = attn(n1(x)) over each token's own sequence (rotary positions rotate q and k
      // before k is stored)
      const bool pre_norm = d.residual != Residual::PostNorm;
      const Tensor& attn_in = pre_norm ? xn : x;
      if (pre_norm) norm(xn, x, L.attn_norm_w, L.attn_norm_b);
      stacked(qkv, attn_in, L.attn_qkv, L.attn_qkv_parts);
      if (d.qk_norm) {
        be.norm_heads(q, H, L.attn_q_norm, NormKind::Rms, d.eps);
        be.norm_heads(k, Hkv, L.attn_k_norm, NormKind::Rms, d.eps);
      }
      if (const int table = b.rope_table_of(d, n_ctx_); table >= 0) {
        const Tensor& inv = w.rope_tables[size_t(table)];
        be.rope_freqs(q, step, H, D, d.rotary_dim, inv, d.rope_layout, d.rope_mscale);
        be.rope_freqs(k, step, Hkv, D, d.rotary_dim, inv, d.rope_layout, d.rope_mscale);
      }
      if (qkv_observer_) qkv_observer_(l, step, qkv);
      be.store_kv(cache, l, k, v, step);
      if (d.softcap > 0.0f) {
        be.attention_softcap(att, q, cache, l, step, H, d.scale, d.softcap);
      } else {
        be.attention(att, q, cache, l, step, H, d.scale);
      }
      switch (d.residual) {
        case Residual::PostNorm:
          // x = n1(x + proj(att)); x = n2(x + mlp(x))
          be.linear(x, att, L.attn_out, true);
          norm(xn, x, L.attn_norm_w, L.attn_norm_b);
          std::swap(x, xn);
          mlp(x, x, d, L, true);
          norm(xn, x, L.ffn_norm_w, L.ffn_norm_b);
          std::swap(x, xn);
          break;
        case Residual::Parallel:
          // x += proj(att) + mlp(n2(x)), both norms of the block's input x
          norm(xn, x, L.ffn_norm_w, L.ffn_norm_b);
          be.linear(x, att, L.attn_out, true);
          mlp(x, xn, d, L, true);
          break;
        case Residual::Sequential:
          if (d.post_norms) {
            // x += post_n1(proj(att)); x += post_n2(mlp(n2(x)))
            const Tensor y = y_.row_slice(0, n);
            be.linear(y, att, L.attn_out, false);
            norm(y, y, L.attn_post_norm_w, Tensor{});
            be.add(x, y);
            norm(xn, x, L.ffn_norm_w, L.ffn_norm_b);
            mlp(y, xn, d, L, false);
            norm(y, y, L.ffn_post_norm_w, Tensor{});
            be.add(x, y);
          } else {
            // x += proj(att); x += mlp(n2(x))
            be.linear(x, att, L.attn_out, true);
            norm(xn, x, L.ffn_norm_w, L.ffn_norm_b);
            mlp(x, xn, d, L, true);
          }
          break;
      }
    }
    if (rows == 0) return;
    // The head of rows r of `from` (C wide): project_out first where the model has it.
    auto head = [&](Tensor out, const Tensor& from) {
      if (c.projects_io()) {
        Tensor p = e_.row_slice(0, from.rows);
        be.linear(p, from, w.proj_out, false);
        be.linear(out, p, w.output, false);
      } else {
        be.linear(out, from, w.output, false);
      }
      if (b.logit_softcap > 0.0f) be.softcap(out, b.logit_softcap);
    };
    if (!b.output_norm) {
      if (consecutive) {
        head(logits, x.row_slice(logit_rows.front(), rows));
      } else {
        for (int64_t i = 0; i < rows; ++i)
          head(logits.row_slice(i, 1), x.row_slice(logit_rows[size_t(i)], 1));
      }
      return;
    }
    const NormKind out_kind = b.layers.front().norm;
    const float out_eps = b.layers.front().eps;
    Tensor xf = xn.row_slice(0, rows);
    if (consecutive) {
      be.norm(xf, x.row_slice(logit_rows.front(), rows), w.out_norm_w, w.out_norm_b, out_kind, out_eps);
    } else {
      for (int64_t i = 0; i < rows; ++i) {
        be.norm(xf.row_slice(i, 1), x.row_slice(logit_rows[size_t(i)], 1), w.out_norm_w, w.out_norm_b,
                out_kind, out_eps);
      }
    }
    head(logits, xf);
  });
  for (const SeqRun& r : step.runs) n_past_[size_t(r.seq)] = r.pos0 + r.n;
  if (logits_out == nullptr || rows == 0) return;
  be.to_host(logits_out, logits);
  check_finite(logits_out, step, logit_rows);
}

void Session::check_finite(const float* logits, const Step& step, std::span<const int64_t> rows) const {
  const int64_t V = model_->config().n_vocab;
  for (size_t r = 0; r < rows.size(); ++r) {
    const float* row = logits + int64_t(r) * V;
    // Exponent all ones: Inf or NaN. On the bits, so that it vectorises.
    const auto* bits = reinterpret_cast<const uint32_t*>(row);
    uint32_t bad = 0;
#pragma omp simd reduction(| : bad)
    for (int64_t i = 0; i < V; ++i) bad |= uint32_t((bits[i] & 0x7F800000u) == 0x7F800000u);
    if (bad == 0) continue;
    int64_t i = 0;
    while (std::isfinite(row[i])) ++i;
    // The position (and sequence) of the step's row.
    std::string where;
    for (const SeqRun& run : step.runs) {
      if (rows[r] >= run.first && rows[r] < run.first + run.n) {
        where = std::to_string(run.pos0 + rows[r] - run.first);
        if (n_past_.size() > 1) where += " of sequence " + std::to_string(run.seq);
      }
    }
    throw Error(ErrorKind::Numeric,
                "the logits at position " + where + " are not finite (" +
                    (std::isnan(row[i]) ? "NaN" : "Inf") + " for token " + std::to_string(i) +
                    "): the computation overflowed; values beyond F16's range (65504) become infinite with "
                    "dtype f16 (try f32 or bf16) and in the CUDA backend's prefill on F16 or quantized "
                    "weights (try the cpu backend)");
  }
}

}  // namespace minigpt
