// What every backend checks of a step before it touches its cache.
#include "minigpt/backend.h"

#include <vector>

#include "minigpt/error.h"

namespace minigpt {

void check_step(const Step& step, const KvCacheSpec& cache) {
  auto fail = [](const std::string& what) { throw Error(ErrorKind::Argument, "forward step: " + what); };
  if (step.n_tokens < 1 || step.tokens == nullptr) fail("no tokens");
  if (step.runs.empty()) fail("no sequence runs");
  int64_t next = 0;
  std::vector<uint8_t> seen;  // for many runs; a few are compared pairwise
  if (step.runs.size() > 16) seen.assign(size_t(cache.n_seq), 0);
  for (size_t i = 0; i < step.runs.size(); ++i) {
    const SeqRun& r = step.runs[i];
    const std::string run = "run " + std::to_string(i);
    if (r.first != next || r.n < 1)
      fail(run + " does not continue the tokens (first " + std::to_string(r.first) + ", n " +
           std::to_string(r.n) + ")");
    if (r.seq < 0 || r.seq >= cache.n_seq) {
      fail(run + ": sequence " + std::to_string(r.seq) + " is outside the cache's [0, " +
           std::to_string(cache.n_seq) + ")");
    }
    if (r.pos0 < 0 || r.pos0 > cache.n_ctx - r.n) {
      fail(run + ": positions " + std::to_string(r.pos0) + " .. " + std::to_string(r.pos0 + r.n - 1) +
           " are outside the cache's " + std::to_string(cache.n_ctx));
    }
    bool twice = false;
    if (!seen.empty()) {
      twice = seen[size_t(r.seq)]++ != 0;
    } else {
      for (size_t j = 0; j < i; ++j) twice = twice || step.runs[j].seq == r.seq;
    }
    if (twice) fail(run + ": sequence " + std::to_string(r.seq) + " appears twice");
    next = r.first + r.n;
  }
  if (next != step.n_tokens)
    fail("the runs cover " + std::to_string(next) + " of " + std::to_string(step.n_tokens) + " tokens");
}

void Backend::copy_kv(KvCache& cache, int64_t from, int64_t to, int64_t n) {
  (void)cache, (void)from, (void)to, (void)n;
  throw Error(ErrorKind::Unsupported,
              name() + " backend: copying keys and values between sequences is not supported");
}

void Backend::read_kv(const KvCache& cache, int64_t seq, int64_t from, int64_t n, void* host) {
  (void)cache, (void)seq, (void)from, (void)n, (void)host;
  throw Error(ErrorKind::Unsupported, name() + " backend: exporting keys and values is not supported");
}

void Backend::write_kv(KvCache& cache, int64_t seq, int64_t from, int64_t n, const void* host) {
  (void)cache, (void)seq, (void)from, (void)n, (void)host;
  throw Error(ErrorKind::Unsupported, name() + " backend: importing keys and values is not supported");
}

}  // namespace minigpt

namespace minigpt {

void Backend::norm_heads(Tensor x, int64_t n_heads, const Tensor& w, NormKind kind, float eps) {
  if (n_heads < 1 || x.cols % n_heads != 0 || w.numel() != x.cols / n_heads) {
    throw Error(ErrorKind::Argument, name() + " norm_heads: " + std::to_string(n_heads) + " heads over " +
                                         std::to_string(x.cols) + " columns, weights of " +
                                         std::to_string(w.numel()));
  }
  const int64_t D = x.cols / n_heads;
  for (int64_t t = 0; t < x.rows; ++t) {
    // Token t's heads as n_heads rows of D, side by side.
    Tensor heads = x.row_slice(t, 1);
    heads.rows = n_heads;
    heads.cols = D;
    heads.stride = D;
    norm(heads, heads, w, Tensor{}, kind, eps);
  }
}

}  // namespace minigpt

namespace minigpt {

const char* backend_op_name(BackendOp op) {
  switch (op) {
    case BackendOp::Scale:
      return "scale (an embedding scale)";
    case BackendOp::Add:
      return "add (norms of each half's output)";
    case BackendOp::Softcap:
      return "softcap (soft-capped logits)";
    case BackendOp::AttentionSoftcap:
      return "attention with soft-capped scores";
    case BackendOp::RopeMscale:
      return "rotary positions with cos and sin scaled (LongRoPE's attention factor)";
  }
  return "?";
}

namespace {
[[noreturn]] void missing(const Backend& be, BackendOp op) {
  throw Error(ErrorKind::Unsupported, be.name() + " backend: the op " + backend_op_name(op) +
                                          " is not implemented (try the cpu backend)");
}
}  // namespace

void Backend::scale(Tensor, float) { missing(*this, BackendOp::Scale); }
void Backend::softcap(Tensor, float) { missing(*this, BackendOp::Softcap); }
void Backend::add(Tensor, const Tensor&) { missing(*this, BackendOp::Add); }
void Backend::attention_softcap(Tensor, const Tensor&, KvCache&, int64_t, const Step&, int64_t, float,
                                float) {
  missing(*this, BackendOp::AttentionSoftcap);
}

}  // namespace minigpt
