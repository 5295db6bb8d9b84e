// The ops the forward pass needs, one interface for every device, and the memory they work on. The
// forward pass (session.cpp) is written once over it; a backend implements ops, weight preparation and
// its KV cache. Every op takes its output first. How a backend lays out its weights and its cache is its
// own business (src/cpu/, src/cuda/); nothing here depends on it.
//
// Dimension letters: T = tokens in the step, C = n_embd, H = n_head, Hkv = n_kv_head, D = head dim,
// F = n_inner, V = n_vocab, S = positions per sequence in the KV cache.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "minigpt/config.h"
#include "minigpt/ggml_type.h"
#include "minigpt/tensor.h"

namespace minigpt {

// How a weight matrix's elements are stored: `dtype` for every element (block = 1), or, for quantized
// types, blocks of `block` consecutive elements of a row in `block_bytes` bytes each, laid out as GGUF's
// `quant` type lays them out (its products are then computed in F32: `dtype`).
struct WeightFormat {
  DType dtype = DType::F32;
  int32_t block = 1;
  int32_t block_bytes = 4;
  GgmlType quant = GgmlType::F32;  // the block type when block > 1
  static WeightFormat plain(DType t) { return {t, 1, int32_t(dtype_size(t))}; }
  // A GGUF block type's format (Error(Argument) for a type that is not a known block type).
  static WeightFormat quantized(GgmlType t);
  bool is_quantized() const { return block > 1; }
  // "F32", "BF16", "Q8_0", ...
  std::string name() const;
  // Bytes of one row of n elements (n a multiple of `block`).
  size_t row_bytes(int64_t n) const { return size_t(n / block) * size_t(block_bytes); }
  bool operator==(const WeightFormat& o) const {
    return dtype == o.dtype && block == o.block && block_bytes == o.block_bytes && quant == o.quant;
  }
};

// A linear layer, y = x W + b, as a backend holds it. `w` is the backend's own: only its ops read it (its
// rows, cols and stride are the backend's business); `format` says what its elements are.
struct Linear {
  Tensor w;
  Tensor b;  // [1, n_out] F32, or empty for no bias
  WeightFormat format;
  int64_t n_in = 0;
  int64_t n_out = 0;
  uint32_t layout = 0;  // the backend's own tag for how it laid `w` out (e.g. the CPU's packed 16-bit rows)
};

// A host matrix handed to Backend::prepare_linear: `w` in host memory in its stored dtype and order,
// valid only during the call.
struct HostLinear {
  Tensor w;  // [n_in, n_out] (InOut) or [n_out, n_in] (OutIn)
  Tensor b;  // [1, n_out] or empty
  MatrixOrder order = MatrixOrder::InOut;
  int64_t n_in = 0;
  int64_t n_out = 0;
  // Quantized (stored.is_quantized()): w.data holds n_out rows of stored.row_bytes(n_in) bytes of GGUF blocks
  // (order OutIn), and w's dtype and stride mean nothing. Otherwise unused: w.dtype says what w holds.
  WeightFormat stored;
};

// The shape of a KV cache: `n_seq` sequences of `n_ctx` positions each, for every layer.
struct KvCacheSpec {
  int64_t n_layer = 0;
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
  int64_t n_ctx = 0;
  int64_t n_seq = 1;
  // Sliding-window attention: a query at position p attends to keys p - window + 1 .. p only. 0: no window.
  int64_t window = 0;
  // Per-layer windows (Gemma's local and global layers): n_layer entries, or empty for `window` everywhere.
  std::vector<int64_t> layer_window = {};
  // The most tokens one step stores (the session's batch); 0: unknown. With it, a backend may keep a windowed
  // layer's keys and values in a ring of window + max_step - 1 positions (KvCache::ring_capacity).
  int64_t max_step = 0;
  int64_t window_of(int64_t layer) const {
    return layer_window.empty() ? window : layer_window[size_t(layer)];
  }
};

// Ops only some models need, which a backend may not have yet (Backend::supports).
enum class BackendOp {
  Scale,             // scale(): Gemma's embedding scale
  Add,               // add(): the sandwich norms' residual
  Softcap,           // softcap(): Gemma 2's final logits
  AttentionSoftcap,  // attention() with a soft-cap of the scores (Gemma 2)
  RopeMscale,        // rope_freqs() with cos and sin scaled (mscale != 1: LongRoPE's attention factor)
};
const char* backend_op_name(BackendOp op);

// Keys and values of past positions, made by a backend (make_kv_cache) in a layout only its ops know.
class KvCache {
 public:
  explicit KvCache(const KvCacheSpec& spec, DType dtype = DType::F32) : spec_(spec), dtype_(dtype) {}
  virtual ~KvCache() = default;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;
  const KvCacheSpec& spec() const { return spec_; }
  DType dtype() const { return dtype_; }  // of the keys and values stored
  virtual size_t bytes() const = 0;
  // The positions a layer holds when it keeps only the last ones (a windowed layer's ring); 0: all of them.
  // A sequence can then be cut back (Session::keep) by at most ring - window + 1 positions.
  virtual int64_t ring_capacity(int64_t layer) const {
    (void)layer;
    return 0;
  }

 private:
  KvCacheSpec spec_;
  DType dtype_;
};

// Tokens [first, first + n) of a step belong to sequence `seq` of the KV cache, at positions
// pos0 .. pos0 + n - 1: they see that sequence's positions 0 .. their own.
struct SeqRun {
  int64_t seq = 0;
  int64_t first = 0;
  int64_t n = 0;
  int64_t pos0 = 0;
};

// One forward step: `n_tokens` host token ids (checked by the caller) in `runs` (consecutive, covering
// the tokens in order, at most one run per sequence).
struct Step {
  const int32_t* tokens = nullptr;
  int64_t n_tokens = 0;
  std::span<const SeqRun> runs;
};

// How a backend multiplies BF16 weights: in F32 (the weights widened: the exact F32 product, transformers'
// arithmetic on the same weights), in BF16 arithmetic (the activations rounded to BF16 as well: faster where
// the hardware has it, logits ~1e-2 from the F32 product), or Auto: the backend's choice for this machine.
enum class Bf16Math { Auto, F32, Bf16 };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  virtual int n_threads() const { return 1; }
  // Whether BF16 weights are multiplied in BF16 arithmetic (Bf16Math::Bf16, chosen or by Auto).
  virtual bool bf16_arithmetic() const { return false; }

  // Zero-filled memory on this backend's device.
  virtual std::unique_ptr<Buffer> alloc(size_t bytes) = 0;
  // Makes a weight vector or table usable by this backend's ops, as F32. `host` lies in host memory in its
  // stored dtype and is valid only during the call: the result lives in a buffer appended to `keep`.
  virtual Tensor prepare_weight(const Tensor& host, std::vector<std::unique_ptr<Buffer>>& keep) = 0;
  // Makes a linear layer usable by `linear()`, its matrix held as `format`: F32, F16 or BF16 from any float
  // host matrix, or a quantized format (one holds() accepts) from a host matrix already in that format. The
  // bias becomes F32. The result lives in buffers appended to `keep`, never aliasing `host`.
  virtual Linear prepare_linear(const HostLinear& host, const WeightFormat& format,
                                std::vector<std::unique_ptr<Buffer>>& keep) = 0;
  // Whether prepare_linear can hold a matrix in `format` (every backend holds F32, F16 and BF16).
  virtual bool holds(const WeightFormat& format) const { return !format.is_quantized(); }
  // The KV cache of this spec, zero-filled.
  virtual std::unique_ptr<KvCache> make_kv_cache(const KvCacheSpec& spec) = 0;
  // Copies a tensor of this backend to host F32 (contiguous rows * cols).
  virtual void to_host(float* dst, const Tensor& src) = 0;

  // out[t] = row tokens[t] of the table + wpe[position of t] (no wpe: just the row)    out: [T, C]
  //   table: the token embeddings as prepare_linear made them ([V, C] OutIn: they double as the tied head)
  virtual void embed(Tensor out, const Step& step, const Linear& table, const Tensor& wpe) = 0;
  // out[t] += wpe[position of t]: the learned positions added after a projection of the embeddings (OPT's
  // project_in), where embed() cannot add them.                out: [T, C]; wpe: [S, C]
  virtual void add_positions(Tensor out, const Step& step, const Tensor& wpe) = 0;
  // Rotary positions, in place: in each of the `n_heads` heads of x (D = head_dim wide, side by side), the
  // leading rotary_dim dimensions rotate as pairs, pair i < rotary_dim / 2 by the angle
  // position * theta^(-2i / rotary_dim), with the angle computed in F32 as transformers computes it. The
  // pairs are (i, i + rotary_dim / 2) for RopeLayout::NeoxHalves (GPT-NeoX's rotate_half), (2i, 2i + 1) for
  // AdjacentPairs (GPT-J, llama.cpp's permuted Llama). A pair (a, b) becomes (a cos - b sin, b cos + a sin).
  // x: [T, n_heads * D] (may be a strided view: the q or k columns of qkv).
  virtual void rope(Tensor x, const Step& step, int64_t n_heads, int64_t head_dim, int64_t rotary_dim,
                    float theta, RopeLayout layout) = 0;
  // rope with the inverse frequencies given rather than computed from a base: pair i rotates by position *
  // inv_freq[i]. inv_freq: [1, rotary_dim / 2] F32 made by prepare_weight (Config::rope_inv_freq(), a
  // rescaled rope's). cos and sin are multiplied by mscale (LongRoPE's attention factor; 1: rotation only):
  // (a, b) becomes (a c - b s, b c + a s) with c = mscale cos, s = mscale sin, in F32.
  virtual void rope_freqs(Tensor x, const Step& step, int64_t n_heads, int64_t head_dim, int64_t rotary_dim,
                          const Tensor& inv_freq, RopeLayout layout, float mscale) = 0;
  // A norm of each head, in place: x [T, n_heads * D] (may be a strided view: the q or k columns of qkv),
  // each D-wide head normalized as norm() does with w [1, D] (shared by the heads; no bias). Qwen3's q_norm
  // and k_norm. The default runs norm() on each token's heads as rows.
  virtual void norm_heads(Tensor x, int64_t n_heads, const Tensor& w, NormKind kind, float eps);
  // A norm of its kind, per row, in F32:                   out, in: [T, C]; w, b: [1, C]
  //   Layer: out = (in - mean) / sqrt(var + eps) * w + b (the mean first, then the variance around it)
  //   Rms:   out = in / sqrt(mean(in^2) + eps) * w + b, as transformers' LlamaRMSNorm: in * (1 / sqrt(mean of
  //          the squares + eps)), then * w
  // b may be empty (no bias: + 0).
  virtual void norm(Tensor out, const Tensor& in, const Tensor& w, const Tensor& b, NormKind kind,
                    float eps) = 0;
  // out = in W + b, or out += in W + b when `accumulate` (the residual add)   in: [T, n_in]; out: [T, n_out]
  virtual void linear(Tensor out, const Tensor& in, const Linear& lin, bool accumulate) = 0;
  // out = in [W_0 | W_1 | ...]: a stacked projection kept in parts (q | k | v, gate | up, each part in its
  // own type), each part's product into its own columns in order; a backend may run them as one product.
  //   out: [T, sum of the parts' n_out]; every part's n_in = in's columns
  virtual void linear_parts(Tensor out, const Tensor& in, std::span<const Linear> parts) {
    int64_t c0 = 0;
    for (const Linear& p : parts) {
      linear(out.col_slice(c0, p.n_out), in, p, false);
      c0 += p.n_out;
    }
  }
  // x = act(x) in place                                      x: [T, F]
  virtual void activation(Tensor x, Activation act) = 0;
  // A gated MLP's middle: out = act(gate) * up, elementwise, with gate | up the two halves of each row of
  // gate_up (one linear layer's output of 2F columns: the gate's F first).
  //   out: [T, F]; gate_up: [T, 2F]. out may be gate_up's first half itself (in place), not otherwise
  //   overlap.
  virtual void gated_act(Tensor out, const Tensor& gate_up, Activation act) = 0;
  // out = act(in W + b): a linear layer and its activation, which a backend may fuse.
  virtual void linear_act(Tensor out, const Tensor& in, const Linear& lin, Activation act) {
    linear(out, in, lin, false);
    activation(out, act);
  }
  // Whether this backend has `op` (the ops below that default to Error(Unsupported)).
  virtual bool supports(BackendOp op) const {
    (void)op;
    return false;
  }
  // x *= s, in place.                                         x: [T, n]
  virtual void scale(Tensor x, float s);
  // x = cap * tanh(x / cap), in place, in F32.                x: [T, n]
  virtual void softcap(Tensor x, float cap);
  // out += in.                                                out, in: [T, n]
  virtual void add(Tensor out, const Tensor& in);
  // Stores the keys and values of the step's tokens in layer `layer` of the cache, each at its sequence
  // and position.                                            k, v: [T, Hkv * D] (may be strided views)
  virtual void store_kv(KvCache& cache, int64_t layer, const Tensor& k, const Tensor& v,
                        const Step& step) = 0;
  // Causal attention of the step's queries over their own sequence's cached keys and values (positions 0
  // .. their own; with the layer's window W (KvCacheSpec::window_of), positions p - W + 1 .. p), after
  // store_kv of the same step.
  // Query head h reads KV head h / (H / Hkv).
  //   out, q: [T, H * D] (q may be strided); scores are scale * q.k; softmax over the causal window.
  virtual void attention(Tensor out, const Tensor& q, KvCache& cache, int64_t layer, const Step& step,
                         int64_t n_head, float scale) = 0;
  // attention() with the scores soft-capped before the softmax: cap * tanh(scale * q.k / cap) (Gemma 2).
  virtual void attention_softcap(Tensor out, const Tensor& q, KvCache& cache, int64_t layer, const Step& step,
                                 int64_t n_head, float scale, float cap);
  // Copies the first n positions of sequence `from`'s keys and values, every layer, to sequence `to` of the
  // same cache (several choices of one prompt evaluate it once). copies_kv(): whether the backend can.
  virtual bool copies_kv() const { return false; }
  virtual void copy_kv(KvCache& cache, int64_t from, int64_t to, int64_t n);
  // Positions [from, from + n) of sequence `seq`'s keys and values, every layer, to or from host memory (a
  // prompt cache beyond the KV cache: the server's host cache, the CLI's --prompt-cache file). The host
  // layout is position-major, so that any run of positions is one contiguous piece of an export:
  // position by position, each position's layers in order, each layer's keys (Hkv * D) then values
  // (Hkv * D), in the cache's dtype: kv_position_bytes() bytes a position. exports_kv(): whether the backend
  // can (else Error(Unsupported)). A layer that keeps a ring (KvCache::ring_capacity) is not exported:
  // Error(Unsupported) (the session never asks).
  virtual bool exports_kv() const { return false; }
  static size_t kv_position_bytes(const KvCache& cache) {
    const KvCacheSpec& s = cache.spec();
    return size_t(s.n_layer * 2 * s.n_kv_head * s.head_dim) * dtype_size(cache.dtype());
  }
  virtual void read_kv(const KvCache& cache, int64_t seq, int64_t from, int64_t n, void* host);
  virtual void write_kv(KvCache& cache, int64_t seq, int64_t from, int64_t n, const void* host);

  // One forward step: `ops` queues its ops, which take exactly this step. The same `key` (a session)
  // promises the same op sequence on the same buffers whenever the step has the same shape (token count
  // and runs), so a backend may record the sequence once and replay it (CUDA graphs); null: never recorded.
  virtual void run_step(const void* key, const Step& step, const std::function<void()>& ops) {
    (void)key, (void)step;
    ops();
  }
  // Drops whatever run_step recorded for `key` (its buffers are going away, or the key will be reused).
  virtual void forget_step(const void* key) { (void)key; }
};

// Checks a step against a cache: runs consecutive, covering the tokens, sequences and positions within
// the cache. Throws Error(Argument) naming what is wrong. Backends call it at the top of their ops.
void check_step(const Step& step, const KvCacheSpec& cache);

}  // namespace minigpt
