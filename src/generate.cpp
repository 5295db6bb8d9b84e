#include "minigpt/generate.h"

#include <algorithm>
#include <chrono>

#include "minigpt/error.h"

namespace minigpt {
namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// Bytes at the end of `text` that could begin one of `stops`: they must wait for the next token.
size_t stop_prefix_hold(std::string_view text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const auto& s : stops) {
    for (size_t k = std::min(s.size() - 1, text.size()); k > hold; --k) {
      if (text.substr(text.size() - k) == std::string_view(s).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  return hold;
}

}  // namespace

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::Length:
      return "length";
    case StopReason::Eos:
      return "eos";
    case StopReason::Stop:
      return "stop";
    case StopReason::Context:
      return "context";
  }
  return "?";
}

void validate_options(const GenerateOptions& o, const Config& c, const Tokenizer* tokenizer) {
  if (o.max_new_tokens < 1) {
    throw Error(ErrorKind::Argument,
                "--max-new-tokens: must be >= 1, got " + std::to_string(o.max_new_tokens));
  }
  o.sampling.validate();
  if (o.top_logprobs < 0 || o.top_logprobs > c.n_vocab) {
    throw Error(ErrorKind::Argument, "--top-logprobs: must be in [0, " + std::to_string(c.n_vocab) +
                                         "], got " + std::to_string(o.top_logprobs));
  }
  for (const auto& s : o.stop) {
    if (s.empty()) throw Error(ErrorKind::Argument, "--stop: a stop string must not be empty");
  }
  if (!o.stop.empty() && tokenizer == nullptr) throw Error(ErrorKind::Argument, "--stop needs a tokenizer");
}

std::vector<int32_t> prepare_prompt(std::vector<int32_t> prompt, const GenerateOptions& o, const Config& c,
                                    const Tokenizer* tokenizer, int64_t n_ctx, int64_t* dropped) {
  if (dropped != nullptr) *dropped = 0;
  if (prompt.empty()) {
    // Unconditional generation starts from BOS, as GPT-2 does (<|endoftext|>).
    int64_t bos = c.bos_token_id;
    if ((bos < 0 || bos >= c.n_vocab) && tokenizer != nullptr && tokenizer->bos_id())
      bos = *tokenizer->bos_id();
    if (bos < 0 || bos >= c.n_vocab) {
      throw Error(ErrorKind::Argument,
                  "empty prompt, and the model has no BOS token (bos_token_id in config.json) to start from");
    }
    prompt.push_back(int32_t(bos));
  }
  if (n_ctx == 0) n_ctx = c.n_ctx;
  if (int64_t(prompt.size()) > n_ctx) {
    if (o.overflow == ContextOverflow::Error) {
      const std::string which = n_ctx == c.n_ctx ? "the model's context of " + std::to_string(n_ctx)
                                                 : "the context of " + std::to_string(n_ctx) + " (-c)";
      throw Error(ErrorKind::Argument, "the prompt is " + std::to_string(prompt.size()) +
                                           " tokens, longer than " + which +
                                           " (--context-overflow truncate keeps its last tokens)");
    }
    // Keep room for the tokens asked for, but never less than half the context of prompt.
    const int64_t keep = std::max<int64_t>(1, n_ctx - std::min(o.max_new_tokens, n_ctx / 2));
    const int64_t drop = int64_t(prompt.size()) - keep;
    prompt.erase(prompt.begin(), prompt.begin() + drop);
    if (dropped != nullptr) *dropped = drop;
  }
  return prompt;
}

GenerateResult generate(Session& session, const Tokenizer* tokenizer, std::vector<int32_t> prompt,
                        const GenerateOptions& o, const GenerateCallbacks& cb) {
  const Config& c = session.model().config();
  const int64_t n_ctx = session.n_ctx();
  validate_options(o, c, tokenizer);
  GenerateResult r;
  prompt = prepare_prompt(std::move(prompt), o, c, tokenizer, n_ctx, &r.prompt_dropped);
  r.prompt = prompt;

  int64_t eos = -1;
  if (!o.ignore_eos) {
    if (c.eos_token_id >= 0 && c.eos_token_id < c.n_vocab) {
      eos = c.eos_token_id;
    } else if (tokenizer != nullptr && tokenizer->eos_id() && *tokenizer->eos_id() < c.n_vocab) {
      eos = *tokenizer->eos_id();
    }
  }

  Sampler sampler(o.sampling, c.n_vocab);
  std::vector<int32_t> history = prompt;
  std::optional<StreamDecoder> decoder;
  if (tokenizer != nullptr) decoder.emplace(*tokenizer);
  size_t shown = 0;  // bytes of r.text passed to on_text
  // Tokens not yet passed to on_token, with the bytes [begin, end) of r.text their text takes: a token is
  // handed out only once its text has been shown, so that nothing at or past a stop string ever is.
  struct Pending {
    GeneratedToken tok;
    size_t begin, end;
  };
  std::vector<Pending> pending;
  enum class Release { Shown, Stop, All };
  // Shown: up to the last token whose (non-empty) text has been shown whole; a token that is part of a
  // character (empty text) goes with the one that completes it. Stop: the tokens that begin before the
  // cut, the one the stop string starts in cut to its part before it. All: at the end.
  auto release = [&](Release mode) {
    if (mode == Release::Shown && o.stop.empty()) mode = Release::All;  // nothing can be held back then
    size_t n = 0;
    for (size_t i = 0; i < pending.size(); ++i) {
      const Pending& p = pending[i];
      if (mode == Release::All || (mode == Release::Stop && p.begin < shown) ||
          (mode == Release::Shown && p.end <= shown && p.end > p.begin)) {
        n = i + 1;
      }
    }
    for (size_t i = 0; i < n; ++i) {
      Pending& p = pending[i];
      if (p.end > shown) p.tok.text.resize(shown > p.begin ? shown - p.begin : 0);
      if (cb.on_token) cb.on_token(p.tok);
    }
    pending.erase(pending.begin(), pending.begin() + ptrdiff_t(n));
  };

  // Appends decoded text; returns false when a stop string ended generation.
  auto add_text = [&](const std::string& piece, bool final) {
    r.text += piece;
    for (const auto& s : o.stop) {
      const size_t at = r.text.find(s, shown);
      if (at != std::string::npos) {
        r.text.resize(at);
        if (cb.on_text && at > shown) cb.on_text(std::string_view(r.text).substr(shown));
        shown = r.text.size();
        return false;
      }
    }
    const size_t end = final ? r.text.size() : r.text.size() - stop_prefix_hold(r.text, o.stop);
    if (end > shown) {
      if (cb.on_text) cb.on_text(std::string_view(r.text).substr(shown, end - shown));
      shown = end;
    }
    return true;
  };

  session.reset();
  const auto t0 = clock_type::now();
  std::span<const float> logits = session.eval(prompt);
  r.prefill_seconds = since(t0);
  if (cb.on_prefilled) cb.on_prefilled();
  clock_type::time_point t_first;
  bool stopped = false;
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    const int32_t id = sampler.sample(logits, history);
    if (i == 0) {
      t_first = clock_type::now();
      r.first_token_seconds = std::chrono::duration<double>(t_first - t0).count();
    }
    if (id == eos) {
      r.reason = StopReason::Eos;
      stopped = true;
      break;
    }
    GeneratedToken tok{id, "", 0.0, {}};
    if (o.logprobs || o.top_logprobs > 0) tok.logprob = log_prob(logits, id);
    if (o.top_logprobs > 0) tok.top = top_log_probs(logits, o.top_logprobs);
    // A model may have more ids than its tokenizer (a padded vocabulary): those print as nothing.
    if (decoder && id < tokenizer->n_vocab()) tok.text = decoder->push(id);
    history.push_back(id);
    r.tokens.push_back(id);
    const size_t begin = r.text.size(), end = begin + tok.text.size();
    const std::string piece = tok.text;
    pending.push_back({std::move(tok), begin, end});
    if (!add_text(piece, false)) {
      release(Release::Stop);
      r.reason = StopReason::Stop;
      stopped = true;
      break;
    }
    release(Release::Shown);
    if (i + 1 == o.max_new_tokens) break;  // Length
    if (session.n_past() == n_ctx) {
      if (o.overflow != ContextOverflow::Slide) {
        r.reason = StopReason::Context;
        stopped = true;
        break;
      }
      // The last half of the window, the new token included, evaluated again from position 0.
      const int64_t keep = std::max<int64_t>(1, n_ctx / 2);
      session.reset();
      logits = session.eval(
          std::span<const int32_t>(history.data() + history.size() - size_t(keep), size_t(keep)));
      ++r.slides;
    } else {
      logits = session.eval(std::span<const int32_t>(&history.back(), 1));
    }
  }
  if (!stopped) r.reason = StopReason::Length;
  if (decoder && r.reason != StopReason::Stop && !add_text(decoder->flush(), true))
    r.reason = StopReason::Stop;
  release(r.reason == StopReason::Stop ? Release::Stop : Release::All);
  if (!r.tokens.empty() || r.reason == StopReason::Eos) r.decode_seconds = since(t_first);
  return r;
}

}  // namespace minigpt
