#include "minigpt/generate.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "minigpt/error.h"
#include "minigpt/speculative.h"
#include "tokenizer/utf8.h"

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
    case StopReason::Cancelled:
      return "cancelled";
  }
  return "?";
}

void validate_options(const GenerateOptions& o, const Config& c, const Tokenizer* tokenizer) {
  if (o.max_new_tokens < 1) {
    throw Error(ErrorKind::Argument, "max_new_tokens: must be >= 1, got " + std::to_string(o.max_new_tokens));
  }
  o.sampling.validate();
  o.speculative.validate();
  if (o.top_logprobs < 0 || o.top_logprobs > c.n_vocab) {
    throw Error(ErrorKind::Argument, "top_logprobs: must be in [0, " + std::to_string(c.n_vocab) + "], got " +
                                         std::to_string(o.top_logprobs));
  }
  for (const auto& s : o.stop) {
    if (s.empty()) throw Error(ErrorKind::Argument, "stop: a stop string must not be empty");
    // Generated text is UTF-8 (U+FFFD for what is not), so such a string could never match.
    if (const size_t bad = tokenizer_detail::utf8_first_invalid(s); bad != std::string_view::npos) {
      throw Error(ErrorKind::Argument, "stop: the stop string is not valid UTF-8 at byte offset " +
                                           std::to_string(bad) + ", so generated text could never match it");
    }
  }
  if (!o.stop.empty() && tokenizer == nullptr)
    throw Error(ErrorKind::Argument, "stop: stop strings need a tokenizer");
}

int64_t truncate_keep(int64_t max_new_tokens, int64_t n_ctx) {
  return std::max<int64_t>(1, n_ctx - std::min(max_new_tokens, n_ctx / 2));
}

int64_t slide_keep(int64_t n_ctx) { return std::max<int64_t>(1, n_ctx / 2); }

std::vector<int32_t> prepare_prompt(std::vector<int32_t> prompt, const GenerateOptions& o, const Config& c,
                                    const Tokenizer* tokenizer, int64_t n_ctx, int64_t* dropped) {
  if (dropped != nullptr) *dropped = 0;
  if (prompt.empty()) {
    // Unconditional generation starts from BOS, as GPT-2 does (<|endoftext|>).
    int64_t bos = c.bos_token_id;
    if ((bos < 0 || bos >= c.n_vocab) && tokenizer != nullptr && tokenizer->bos_id())
      bos = *tokenizer->bos_id();
    if (bos < 0 || bos >= c.n_vocab) {
      // transformers' GPT2Config writes bos_token_id 50256 whatever the vocabulary, so an id past it is
      // common in small models' configs: no BOS then, as for none at all, but the message names it.
      const std::string why = c.bos_token_id >= c.n_vocab
                                  ? " (bos_token_id " + std::to_string(c.bos_token_id) +
                                        " in config.json is past its vocabulary of " +
                                        std::to_string(c.n_vocab) + ")"
                                  : " (bos_token_id in config.json)";
      throw Error(ErrorKind::Argument,
                  "empty prompt, and the model has no BOS token" + why + " to start from: give a prompt");
    }
    prompt.push_back(int32_t(bos));
  }
  if (n_ctx == 0) n_ctx = c.n_ctx;
  if (int64_t(prompt.size()) > n_ctx) {
    if (o.overflow == ContextOverflow::Error) {
      const std::string which = n_ctx == c.n_ctx ? "the model's context of " + std::to_string(n_ctx)
                                                 : "the context of " + std::to_string(n_ctx) + " (n_ctx)";
      throw Error(ErrorKind::Argument, "the prompt is " + std::to_string(prompt.size()) +
                                           " tokens, longer than " + which +
                                           " (context_overflow truncate keeps its last tokens)");
    }
    const int64_t keep = truncate_keep(o.max_new_tokens, n_ctx);
    const int64_t drop = int64_t(prompt.size()) - keep;
    prompt.erase(prompt.begin(), prompt.begin() + drop);
    if (dropped != nullptr) *dropped = drop;
  }
  return prompt;
}

// A token not yet passed to on_token, with the bytes [begin, end) of the text it takes: a token is handed out
// only once its text has been shown, so that nothing at or past a stop string ever is.
struct Generator::Pending {
  GeneratedToken tok;
  size_t begin, end;
};

Generator::Generator(const Config& c, const Tokenizer* tokenizer, const GenerateOptions& o,
                     std::vector<int32_t> prompt, GenerateCallbacks cb)
    : tokenizer_(tokenizer),
      o_(o),
      cb_(std::move(cb)),
      sampler_(o.sampling, c.n_vocab),
      history_(std::move(prompt)),
      t0_(clock_type::now()) {
  r_.prompt = history_;
  if (!o.ignore_eos) {
    // Ids past the vocabulary (transformers' GPT2Config default 50256 in a small model's config) never come.
    const auto add = [&](int64_t id) {
      if (id >= 0 && id < c.n_vocab) eos_.push_back(id);
    };
    if (!o.eos_token_ids.empty()) {
      for (const int64_t id : o.eos_token_ids) add(id);
    } else if (!c.eos_token_ids.empty()) {
      for (const int64_t id : c.eos_token_ids) add(id);
    } else {
      add(c.eos_token_id);
    }
    if (eos_.empty() && tokenizer != nullptr && tokenizer->eos_id()) add(*tokenizer->eos_id());
  }
  if (tokenizer != nullptr) decoder_.emplace(*tokenizer);
  if (o.grammar) {
    constraint_ = o.grammar->start(eos_);
    allowed_.resize(bitmask_words(c.n_vocab));
  }
}

Generator::~Generator() = default;

// Shown: up to the last token whose (non-empty) text has been shown whole; a token that is part of a
// character (empty text) goes with the one that completes it. Stop: the tokens that begin before the
// cut, the one the stop string starts in cut to its part before it. All: at the end.
void Generator::release(Release mode) {
  if (mode == Release::Shown && o_.stop.empty()) mode = Release::All;  // nothing can be held back then
  size_t n = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    const Pending& p = pending_[i];
    if (mode == Release::All || (mode == Release::Stop && p.begin < shown_) ||
        (mode == Release::Shown && p.end <= shown_ && p.end > p.begin)) {
      n = i + 1;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    Pending& p = pending_[i];
    if (p.end > shown_) p.tok.text.resize(shown_ > p.begin ? shown_ - p.begin : 0);
    if (cb_.on_token) cb_.on_token(p.tok);
  }
  pending_.erase(pending_.begin(), pending_.begin() + ptrdiff_t(n));
}

// Appends decoded text; returns false when a stop string ended generation.
bool Generator::add_text(const std::string& piece, bool final) {
  std::string& text = r_.text;
  text += piece;
  for (const auto& s : o_.stop) {
    const size_t at = text.find(s, shown_);
    if (at != std::string::npos) {
      text.resize(at);
      r_.stop = s;
      if (cb_.on_text && at > shown_) cb_.on_text(std::string_view(text).substr(shown_));
      shown_ = text.size();
      return false;
    }
  }
  const size_t end = final ? text.size() : text.size() - stop_prefix_hold(text, o_.stop);
  if (end > shown_) {
    if (cb_.on_text) cb_.on_text(std::string_view(text).substr(shown_, end - shown_));
    shown_ = end;
  }
  return true;
}

bool Generator::push(std::span<const float> logits) {
  if (done_) throw Error(ErrorKind::Argument, "Generator::push: generation has ended");
  std::span<const float> scores = logits;
  if (constraint_) {
    constraint_->fill_allowed(allowed_);
    constexpr float kNever = -std::numeric_limits<float>::infinity();
    masked_.resize(logits.size());  // the model's n_vocab: allocated once
    for (size_t i = 0; i < masked_.size(); ++i)
      masked_[i] = (allowed_[i >> 5] >> (i & 31)) & 1 ? logits[i] : kNever;
    scores = masked_;
  }
  const int32_t id = sampler_.sample(scores, history_, r_.tokens);
  if (constraint_) constraint_->accept(id);
  if (!sampled_) {
    sampled_ = true;
    t_first_ = clock_type::now();
    r_.first_token_seconds = std::chrono::duration<double>(t_first_ - t0_).count();
  }
  if (std::find(eos_.begin(), eos_.end(), id) != eos_.end()) {
    finish(StopReason::Eos);
    return false;
  }
  GeneratedToken tok{id, "", 0.0, {}};
  if (o_.logprobs || o_.top_logprobs > 0) tok.logprob = log_prob(logits, id);
  if (o_.top_logprobs > 0) tok.top = top_log_probs(logits, o_.top_logprobs);
  // A model may have more ids than its tokenizer (a padded vocabulary): those print as nothing.
  const bool skipped =
      decoder_ && id < tokenizer_->n_vocab() && o_.skip_special && tokenizer_->is_special(id);
  if (decoder_ && id < tokenizer_->n_vocab() && !skipped) tok.text = decoder_->push(id);
  history_.push_back(id);
  r_.tokens.push_back(id);
  const size_t begin = r_.text.size(), end = begin + tok.text.size();
  const std::string piece = tok.text;
  pending_.push_back({std::move(tok), begin, end});
  if (skipped) {
    // A stop string that is a special token's text ends generation at that token, though its text is not
    // shown (llama.cpp matches a one-token reverse prompt by id); what was held back precedes it.
    const std::string content = tokenizer_->token_bytes(id);
    for (const auto& s : o_.stop) {
      if (s != content) continue;
      if (cb_.on_text && r_.text.size() > shown_) cb_.on_text(std::string_view(r_.text).substr(shown_));
      shown_ = r_.text.size();
      r_.stop = s;
      release(Release::Stop);
      finish(StopReason::Stop);
      return false;
    }
  }
  if (!add_text(piece, false)) {
    release(Release::Stop);
    finish(StopReason::Stop);
    return false;
  }
  release(Release::Shown);
  if (constraint_ && constraint_->finished()) {  // its text is complete and there is no EOS to wait for
    finish(StopReason::Eos);
    return false;
  }
  if (int64_t(r_.tokens.size()) >= o_.max_new_tokens) {
    finish(StopReason::Length);
    return false;
  }
  return true;
}

void Generator::finish(StopReason reason) {
  if (done_) return;
  done_ = true;
  r_.reason = reason;
  if (decoder_ && reason != StopReason::Stop && !add_text(decoder_->flush(), true))
    r_.reason = StopReason::Stop;
  release(r_.reason == StopReason::Stop ? Release::Stop : Release::All);
  if (!r_.tokens.empty() || r_.reason == StopReason::Eos) {
    r_.decode_seconds = std::chrono::duration<double>(clock_type::now() - t_first_).count();
  }
}

Generation::Generation(Session& session, const Tokenizer* tokenizer, std::vector<int32_t> prompt,
                       const GenerateOptions& o, GenerateCallbacks cb)
    : session_(&session), o_(o), on_prefilled_(cb.on_prefilled), restore_prompt_(cb.restore_prompt) {
  const Config& c = session.model().config();
  validate_options(o, c, tokenizer);
  prompt_ = prepare_prompt(std::move(prompt), o, c, tokenizer, session.n_ctx(), &dropped_);
  if (o.speculative.enabled())
    spec_ = std::make_unique<Speculator>(o.speculative, session.model(), session.n_ctx());
  session.reset();
  gen_ = std::make_unique<Generator>(c, tokenizer, o, prompt_, std::move(cb));
  gen_->result().prompt_dropped = dropped_;
}

Generation::~Generation() = default;

bool Generation::step() {
  if (gen_->done() || failed_) return false;
  try {
    Session& session = *session_;
    const int64_t n_ctx = session.n_ctx();
    std::span<const float> logits;
    if (!prefilled_) {
      const auto t0 = clock_type::now();
      int64_t held = 0;
      if (restore_prompt_ && prompt_.size() > 1) {
        held = std::clamp<int64_t>(restore_prompt_(session, prompt_), 0, int64_t(prompt_.size()) - 1);
        if (session.n_past() != held) session.reset();  // a callback that did not restore what it said
        held = session.n_past();
        gen_->result().prompt_restored = held;
      }
      logits = session.eval(std::span<const int32_t>(prompt_).subspan(size_t(held)));
      if (spec_) spec_->prepare(0, prompt_);
      gen_->result().prefill_seconds = since(t0);
      prefilled_ = true;
      if (on_prefilled_) on_prefilled_();
    } else if (session.n_past() == n_ctx) {
      if (o_.overflow != ContextOverflow::Slide) {
        gen_->finish(StopReason::Context);
        return false;
      }
      // The last half of the window, the new token included, evaluated again from position 0.
      const std::vector<int32_t>& history = gen_->history();
      const int64_t keep = slide_keep(n_ctx);
      session.reset();
      logits = session.eval(
          std::span<const int32_t>(history.data() + history.size() - size_t(keep), size_t(keep)));
      ++gen_->result().slides;
    } else if (spec_) {
      return spec_->step(session, 0, *gen_);
    } else {
      const int32_t next = gen_->next();
      logits = session.eval(std::span<const int32_t>(&next, 1));
      ++gen_->result().decode_steps;
    }
    return gen_->push(logits);
  } catch (...) {
    failed_ = true;
    throw;
  }
}

void Generation::cancel() { gen_->finish(StopReason::Cancelled); }

bool Generation::done() const { return gen_->done() || failed_; }

GenerateResult& Generation::result() { return gen_->result(); }

GenerateResult generate(Session& session, const Tokenizer* tokenizer, std::vector<int32_t> prompt,
                        const GenerateOptions& o, const GenerateCallbacks& cb) {
  Generation g(session, tokenizer, std::move(prompt), o, cb);
  while (g.step()) {
  }
  return std::move(g.result());
}

void apply_generation_defaults(GenerateOptions& g, const GenerationDefaults& defaults,
                               const std::function<bool(const char*)>& given,
                               std::optional<int64_t> n_prompt) {
  defaults.apply(g.sampling, given);
  g.eos_token_ids = defaults.eos_token_ids;
  if (given("max_new_tokens")) return;
  if (!n_prompt) {
    if (defaults.max_new_tokens) g.max_new_tokens = *defaults.max_new_tokens;
    return;
  }
  const int64_t n = std::max<int64_t>(1, *n_prompt);  // an empty prompt is the BOS alone
  if (defaults.max_length && !defaults.max_new_tokens && *defaults.max_length <= n) {
    // transformers' generate() raises here too
    throw Error(ErrorKind::Config, defaults.source + ": max_length " + std::to_string(*defaults.max_length) +
                                       " leaves no room after the prompt's " + std::to_string(n) +
                                       " tokens (give max_new_tokens)");
  }
  if (const auto d = defaults.default_new_tokens(n)) g.max_new_tokens = *d;
}

int64_t context_size(std::optional<int64_t> ctx_size, int64_t model_ctx) {
  constexpr int64_t kDefaultMaxCtx = 4096;
  if (!ctx_size) return std::min(model_ctx, kDefaultMaxCtx);
  if (*ctx_size < 0 || *ctx_size > model_ctx) {
    throw Error(ErrorKind::Argument, "ctx_size: " + std::to_string(*ctx_size) + " is outside [0, " +
                                         std::to_string(model_ctx) +
                                         "] (the model's context; 0 = all of it)");
  }
  return *ctx_size == 0 ? model_ctx : *ctx_size;
}

int64_t resolve_max_new_tokens(int64_t max_new_tokens, int64_t n_prompt, int64_t n_ctx) {
  if (max_new_tokens != -1) return max_new_tokens;
  return std::max<int64_t>(1, n_ctx - std::max<int64_t>(1, n_prompt));
}

}  // namespace minigpt
