// The ops the forward pass needs, one interface for every device. The forward pass (model.cpp) is
// written once over it; a backend only implements ops. Every op takes its output first.
//
// Dimension letters: T = tokens in the batch, C = n_embd, H = n_head, D = head dim (C / H),
// F = n_inner, V = n_vocab, S = n_ctx (KV-cache rows).
//
// Within one forward pass only the token ids and the position pos0 change from step to step (embed,
// store_kv, attention take them); every buffer address is fixed for a session's lifetime.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "minigpt/config.h"
#include "minigpt/tensor.h"

namespace minigpt {

// How a linear layer's weight matrix is stored. GPT-2's Conv1D keeps W as [n_in, n_out]; nn.Linear and
// the tied LM head (wte) keep it as [n_out, n_in].
// A backend may also keep a matrix in a layout of its own, which only its ops read: the CPU backend keeps
// 16-bit matrices Packed4 (src/cpu/kernels.h: blocks of 4 rows interleaved in 16-column chunks, rows =
// n_out, cols = n_in, stride = n_in rounded up to 16).
enum class WeightLayout { InOut, OutIn, Packed4 };

// y = x W + b
struct Linear {
  Tensor w;  // [n_in, n_out] (InOut) or [n_out, n_in] (OutIn)
  Tensor b;  // [1, n_out], or empty for no bias
  WeightLayout layout = WeightLayout::InOut;
  int64_t n_in = 0;
  int64_t n_out = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  virtual int n_threads() const { return 1; }
  // The element type of the KV cache rows store_kv writes and attention reads (the session allocates
  // [S, C] of it per layer and tags the tensors with it).
  virtual DType kv_dtype() const { return DType::F32; }
  // The rows of KV cache to allocate for a context of n_ctx positions (>= n_ctx): a backend may pad them,
  // e.g. so that a row of its layout is not a multiple of 4 KB apart from the next.
  virtual int64_t kv_cache_rows(int64_t n_ctx) const { return n_ctx; }
  // The device's memory bandwidth in GB/s as its maker states it (0: unknown; bench then measures).
  virtual double peak_bandwidth_gb_s() const { return 0.0; }

  // Zero-filled memory on this backend's device.
  virtual std::unique_ptr<Buffer> alloc(size_t bytes) = 0;
  // Makes a weight usable by this backend's ops. `host` lies in host memory in its stored dtype and is
  // valid only during the call: the result lives in a buffer appended to `keep`, never aliasing `host`.
  // The result is F32 (vectors, position tables).
  virtual Tensor prepare_weight(const Tensor& host, std::vector<std::unique_ptr<Buffer>>& keep) = 0;
  // Makes a linear layer usable by `linear()`, its weight matrix in `dtype` (F32, F16 or BF16). The backend
  // picks the layout; the bias becomes F32. `host.w` is in host memory in its stored dtype, valid only
  // during the call (as prepare_weight's `host`).
  virtual Linear prepare_linear(const Linear& host, DType dtype, std::vector<std::unique_ptr<Buffer>>& keep) = 0;
  // Copies a tensor of this backend to host F32 (contiguous rows * cols).
  virtual void to_host(float* dst, const Tensor& src) = 0;

  // out[t] = wte[tokens[t]] + wpe[pos0 + t]                 out: [T, C]; tokens: host ids, checked by caller
  //   wte: [V, C] in any weight dtype (it doubles as the tied LM head); wpe: [S, C] F32
  virtual void embed(Tensor out, const int32_t* tokens, int64_t n_tokens, int64_t pos0, const Tensor& wte,
                     const Tensor& wpe) = 0;
  // out = (in - mean) / sqrt(var + eps) * w + b, per row   out, in: [T, C]; w, b: [1, C]
  virtual void layer_norm(Tensor out, const Tensor& in, const Tensor& w, const Tensor& b, float eps) = 0;
  // out = in W + b, or out += in W + b when `accumulate` (the residual add)   in: [T, n_in]; out: [T, n_out]
  virtual void linear(Tensor out, const Tensor& in, const Linear& lin, bool accumulate) = 0;
  // x = act(x) in place                                      x: [T, F]
  virtual void activation(Tensor x, Activation act) = 0;
  // out = act(in W + b): a linear layer and its activation, which a backend may fuse.
  virtual void linear_act(Tensor out, const Tensor& in, const Linear& lin, Activation act) {
    linear(out, in, lin, false);
    activation(out, act);
  }
  // k_cache[pos0 + t] = k[t], v_cache[pos0 + t] = v[t]     k, v: [T, C] (strided views of qkv)
  //   The caches are buffers of S * C elements (a [S, C] tensor) that only store_kv and attention read or
  //   write, so a backend may order them as it likes (the CPU backend keeps them [H, S, D]: each head's
  //   keys one contiguous stream).
  virtual void store_kv(Tensor k_cache, Tensor v_cache, const Tensor& k, const Tensor& v, int64_t pos0,
                        int64_t n_head) = 0;
  // Causal attention of T queries at positions pos0 .. pos0+T-1 over the cached keys/values 0 .. pos0+T-1.
  //   out: [T, C]; q: [T, C] (may be strided); k_cache, v_cache: as store_kv left them; head h is columns
  //   h*D .. h*D+D-1 of q and out.
  //   scores are scale * q.k; softmax over the causal window.
  virtual void attention(Tensor out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t pos0,
                         int64_t n_head, float scale) = 0;
  // Waits for queued work (a no-op on synchronous backends).
  virtual void synchronize() {}

  // One forward step: `ops` queues its ops, which take exactly these tokens (host ids) and pos0. The same
  // `key` (a session) promises the same op sequence on the same buffers whenever n_tokens is the same, so
  // a backend may record the sequence once and replay it (CUDA graphs); null: never recorded.
  virtual void run_step(const void* key, const int32_t* tokens, int64_t n_tokens, int64_t pos0,
                        const std::function<void()>& ops) {
    (void)key, (void)tokens, (void)n_tokens, (void)pos0;
    ops();
  }
  // Drops whatever run_step recorded for `key` (its buffers are going away, or the key will be reused).
  virtual void forget_step(const void* key) { (void)key; }
};

// The CPU backend: OpenBLAS for matrix products, own kernels for the rest, `n_threads` workers
// (0 = the number of cores).
std::shared_ptr<Backend> make_cpu_backend(int n_threads = 0);

// The CUDA backend on one GPU: cuBLAS for batched matrix products, own kernels for the rest (GEMV for
// decode, flash-style attention). Throws Error(Unsupported) when this build has no CUDA or when there is
// no usable device or driver.
struct CudaOptions {
  int device = 0;
  DType kv_dtype = DType::F16;  // F16, BF16 or F32
  // Record the decode step (one token) as a CUDA graph and replay it. Default: on, unless the
  // environment sets MINIGPT_CUDA_GRAPHS=0.
  bool graphs = true;
};
std::shared_ptr<Backend> make_cuda_backend(int device = 0);
std::shared_ptr<Backend> make_cuda_backend(const CudaOptions& options);
// Whether make_cuda_backend can succeed: built with CUDA, and a driver and a device are present. When not,
// `why` (if given) receives the reason in one line.
bool cuda_available(std::string* why = nullptr);

}  // namespace minigpt
