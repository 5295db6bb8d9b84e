#include "minigpt/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "minigpt/error.h"
#include "minigpt/sampler.h"

namespace minigpt {

namespace {
Error arg_error(const std::string& what) { return Error(ErrorKind::Argument, "perplexity: " + what); }
}  // namespace

std::vector<int32_t> perplexity_tokens(const Tokenizer& tokenizer, std::string_view text,
                                       PerplexityOptions& options) {
  if (options.recipe == PerplexityRecipe::Stride) return tokenizer.encode_with_specials(text);
  const auto prefix = tokenizer.special_prefix();
  std::vector<int32_t> tokens(prefix.begin(), prefix.end());
  if (!prefix.empty()) options.bos = prefix[0];
  const auto ids = tokenizer.encode(text);
  tokens.insert(tokens.end(), ids.begin(), ids.end());
  return tokens;
}

std::vector<PerplexityWindow> perplexity_windows(int64_t n_tokens, int64_t n_ctx_session,
                                                 const PerplexityOptions& o) {
  const int64_t n_ctx = o.n_ctx > 0 ? o.n_ctx : n_ctx_session;
  if (o.n_ctx < 0) throw arg_error("the context size must be positive, not " + std::to_string(o.n_ctx));
  if (n_ctx > n_ctx_session) {
    throw arg_error("a window of " + std::to_string(n_ctx) + " tokens is longer than the context (" +
                    std::to_string(n_ctx_session) + ")");
  }
  if (n_ctx < 2) throw arg_error("a window must hold at least 2 tokens, not " + std::to_string(n_ctx));
  if (n_tokens < 2) {
    throw arg_error("the text is " + std::to_string(n_tokens) +
                    " token(s) long: at least 2 are needed to score one");
  }
  std::vector<PerplexityWindow> windows;
  if (o.recipe == PerplexityRecipe::Chunks) {
    if (o.max_chunks < 0) throw arg_error("max_chunks must be positive, not " + std::to_string(o.max_chunks));
    // Positions n_ctx / 2 .. n_ctx - 2 of a chunk score the next token: none at all below 3.
    if (n_ctx < 3) {
      throw arg_error("a chunk of " + std::to_string(n_ctx) +
                      " tokens scores none (its second half less the last token): use an n_ctx of 3 or more, "
                      "or a stride");
    }
    int64_t n_chunks = n_tokens / n_ctx;
    if (n_chunks == 0) {
      throw arg_error("the text is " + std::to_string(n_tokens) + " tokens long, shorter than one chunk of " +
                      std::to_string(n_ctx) + " (use a smaller n_ctx, or a stride)");
    }
    if (o.max_chunks > 0) n_chunks = std::min(n_chunks, o.max_chunks);
    for (int64_t c = 0; c < n_chunks; ++c)
      windows.push_back({c * n_ctx, (c + 1) * n_ctx, n_ctx / 2, n_ctx - 1});
    return windows;
  }
  const int64_t stride = o.stride > 0 ? o.stride : std::max<int64_t>(1, n_ctx / 2);
  if (o.stride < 0 || stride > n_ctx) {
    throw arg_error("stride must be in [1, " + std::to_string(n_ctx) + "] (the window), not " +
                    std::to_string(o.stride));
  }
  // transformers' loop: for begin in range(0, n, stride): end = min(begin + n_ctx, n); labels on the last
  // end - prev_end tokens of the window; stop once end == n.
  int64_t prev_end = 0;
  for (int64_t begin = 0; begin < n_tokens; begin += stride) {
    const int64_t end = std::min(begin + n_ctx, n_tokens);
    const int64_t trg = end - prev_end, len = end - begin;
    // labelled window positions p in [len - trg, len); scored when p >= 1, by the logits of p - 1
    windows.push_back({begin, end, std::max<int64_t>(0, len - trg - 1), len - 1});
    prev_end = end;
    if (end == n_tokens) break;
  }
  return windows;
}

PerplexityResult perplexity(Session& session, std::span<const int32_t> tokens, const PerplexityOptions& o,
                            const ScoredTokenFn& on_scored, const ProgressFn& on_progress) {
  const auto windows = perplexity_windows(int64_t(tokens.size()), session.n_ctx(), o);
  const int64_t V = session.model().config().n_vocab;
  const auto t0 = std::chrono::steady_clock::now();
  PerplexityResult r;
  double sum = 0, sum2 = 0;
  std::vector<int32_t> window;
  for (const PerplexityWindow& w : windows) {
    window.assign(tokens.begin() + w.begin, tokens.begin() + w.end);
    if (o.recipe == PerplexityRecipe::Chunks && o.bos) window[0] = *o.bos;
    session.reset(0);
    // Only the logits up to the last scored position are needed: the rest of the window is not run.
    const auto logits = session.eval_all(std::span<const int32_t>(window).first(size_t(w.last)), 0);
    r.n_evaluated += w.last;
    for (int64_t j = w.first; j < w.last; ++j) {
      const auto row = logits.subspan(size_t(j * V), size_t(V));
      const int64_t index = w.begin + j + 1;
      const double lp = log_prob(row, tokens[size_t(index)]);
      sum -= lp;
      sum2 += lp * lp;
      ++r.n_scored;
      if (on_scored) on_scored(index, row, lp);
    }
    ++r.n_windows;
    if (on_progress) on_progress(r.n_windows, int64_t(windows.size()));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double n = double(r.n_scored);
  r.nll_mean = sum / n;
  // llama.cpp's estimate: the standard error of the mean NLL, carried to the perplexity to first order.
  const double var = sum2 / n - r.nll_mean * r.nll_mean;
  r.nll_stderr = r.n_scored > 1 && var > 0 ? std::sqrt(var / (n - 1)) : 0.0;
  r.ppl = std::exp(r.nll_mean);
  r.ppl_error = r.ppl * r.nll_stderr;
  return r;
}

}  // namespace minigpt
