// Perplexity of a model over a token sequence, by the two recipes people compare against:
//
// - Chunks (llama.cpp's `llama-perplexity`): the tokens are cut into consecutive chunks of n_ctx; each
//   chunk is evaluated from an empty cache, and the logits of its positions n_ctx/2 .. n_ctx-2 score the
//   next token (the first half only gives context). Where the tokenizer adds a BOS, the first token of
//   every chunk is replaced by it. Tokens past the last whole chunk are not used.
// - Stride (transformers' "Perplexity of fixed-length models"): windows of up to n_ctx tokens whose ends
//   move by `stride`; in each window only the tokens past the previous window's end are labelled, and a
//   labelled token is scored when it has a token before it in the window. With stride < n_ctx every
//   token after the first is scored exactly once; with stride == n_ctx the first token of each window is
//   not. The perplexity is exp(total NLL / tokens actually scored) (the documentation's code weights each
//   window's mean by its label count, which miscounts one token per window: not done here).
//
// Both report the mean NLL and its standard error, and the perplexity with llama.cpp's error estimate
// (ppl x the standard error of the mean NLL).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "minigpt/session.h"
#include "minigpt/tokenizer.h"

namespace minigpt {

enum class PerplexityRecipe { Chunks, Stride };

struct PerplexityOptions {
  PerplexityRecipe recipe = PerplexityRecipe::Chunks;
  int64_t n_ctx = 0;       // window / chunk length; 0: the session's context
  int64_t stride = 0;      // Stride: how far each window's end moves (1 .. n_ctx); 0: n_ctx / 2
  int64_t max_chunks = 0;  // Chunks: use at most this many (0: all)
  std::optional<int32_t>
      bos;  // Chunks: replaces each chunk's first token (the tokenizer's BOS, if it adds one)
};

// The tokens `options.recipe` scores in `text`, as `minigpt perplexity` encodes it: Stride, tokenizer(text)
// with the template's special tokens, as transformers; Chunks, the text after the template's prefix (a BOS
// where the tokenizer adds one, as llama.cpp), which then also replaces the first token of every chunk
// (options.bos is set to it). Throws the tokenizer's Error for text it refuses.
std::vector<int32_t> perplexity_tokens(const Tokenizer& tokenizer, std::string_view text,
                                       PerplexityOptions& options);

// One evaluation window: tokens [begin, end) are evaluated from an empty cache; the logits of window
// positions [first, last) score the token after each (token begin + j + 1 for position j).
struct PerplexityWindow {
  int64_t begin = 0, end = 0, first = 0, last = 0;
};

// The windows a recipe evaluates for n_tokens tokens. Throws Error(Argument) when the text is too short for
// the recipe (fewer than 2 tokens; Chunks: fewer than one chunk) or an option is out of range.
std::vector<PerplexityWindow> perplexity_windows(int64_t n_tokens, int64_t n_ctx_session,
                                                 const PerplexityOptions& options);

struct PerplexityResult {
  double ppl = 0, ppl_error = 0;        // exp(mean NLL), ppl x the NLL's standard error
  double nll_mean = 0, nll_stderr = 0;  // nats per scored token
  int64_t n_scored = 0, n_windows = 0,
          n_evaluated = 0;  // tokens scored, windows, tokens run through the model
  double seconds = 0;       // wall time of the evaluation
};

// Called for every scored token, in order: its index in `tokens`, the logits that predict it ([V]), and its
// log-probability under them.
using ScoredTokenFn = std::function<void(int64_t index, std::span<const float> logits, double logprob)>;
// Called after each window with (windows done, windows in all).
using ProgressFn = std::function<void(int64_t done, int64_t total)>;

// Runs the recipe on `session` (sequence 0, reset before each window; its context must hold n_ctx).
PerplexityResult perplexity(Session& session, std::span<const int32_t> tokens,
                            const PerplexityOptions& options, const ScoredTokenFn& on_scored = {},
                            const ProgressFn& on_progress = {});

}  // namespace minigpt
