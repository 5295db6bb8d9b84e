// Text generation over a Session: prompt handling, the sampling loop, EOS and stop strings, the context
// limit, streaming UTF-8-safe text. What `minigpt generate` runs, callable from tests.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "minigpt/constraint.h"
#include "minigpt/generation_config.h"
#include "minigpt/sampler.h"
#include "minigpt/session.h"
#include "minigpt/tokenizer.h"

namespace minigpt {

enum class ContextOverflow {
  Error,     // a prompt longer than the context is an error; generation stops when the context is full
  Truncate,  // a prompt longer than the context keeps its last tokens; generation stops when it is full
  Slide,     // as Truncate, and when the context is full the last half of it is evaluated again at fresh
             // positions (learned positions: cached keys cannot be shifted) and generation goes on
};

enum class StopReason {
  Length,     // max_new_tokens generated
  Eos,        // the model's end-of-text token
  Stop,       // a stop string
  Context,    // the context is full
  Cancelled,  // the caller ended it (a client that went away, a server shutting down)
};
const char* stop_reason_name(StopReason r);

// Speculative decoding (speculative.h): drafted tokens verified in one forward step; the output is what plain
// decoding gives, token for token.
struct SpeculativeOptions {
  bool prompt_lookup = false;  // draft by prompt lookup (n-grams of the prompt and of the output so far)
  std::shared_ptr<const Model> draft_model;  // or by this model, greedily (the target's vocabulary)
  int64_t draft_max = 8;                     // k, the tokens drafted per step, at most
  int64_t draft_min = 0;  // and at least, once the acceptance has brought it down (0: plain steps then)
  int64_t ngram_min = 1;  // prompt lookup's n-gram lengths, longest first
  int64_t ngram_max = 4;
  bool enabled() const { return prompt_lookup || draft_model != nullptr; }
  // Throws Error(Argument) naming the field when a value is out of range or both sources are given.
  void validate() const;
};

struct GenerateOptions {
  int64_t max_new_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string>
      stop;  // generation ends at the first of these in the generated text, cut before it
  bool ignore_eos = false;
  // The ids that end generation when not empty (generation_config.json's eos_token_id, which transformers
  // prefers to config.json's); else the model's (Config::eos_token_ids, eos_token_id), else the tokenizer's.
  std::vector<int64_t> eos_token_ids;
  ContextOverflow overflow = ContextOverflow::Error;
  // Special tokens (Tokenizer::is_special) give no text, as in llama-server (without --special) and
  // transformers' decode(skip_special_tokens=True); they still count as tokens. The server and `generate`
  // (without --show-special) set it.
  bool skip_special = false;
  bool logprobs = false;  // fill GeneratedToken::logprob
  // Structured output (constraint.h): the generated text is in this grammar's language. Each sequence
  // starts its own Constraint from it; tokens it does not allow get -inf logits before sampling, and
  // generation ends when it has (an end-of-text id where it may end; with none, its text complete).
  std::shared_ptr<const Grammar> grammar;
  int64_t top_logprobs = 0;  // fill GeneratedToken::top with this many alternatives
  SpeculativeOptions speculative;
};

struct GeneratedToken {
  int32_t id;
  std::string text;    // what the stream decoder released for this token (may be empty mid-character)
  double logprob = 0;  // log p(id) under the model's distribution before any sampling filter
  std::vector<std::pair<int32_t, double>> top;
};

struct GenerateResult {
  std::vector<int32_t> prompt;  // as evaluated (after BOS substitution or truncation)
  int64_t prompt_dropped = 0;   // ids truncation removed from the front
  int64_t prompt_restored = 0;  // prompt positions a prompt cache held (GenerateCallbacks::restore_prompt)
  std::vector<int32_t> tokens;  // generated ids (an ending EOS not included)
  std::string text;             // generated text, cut before a stop string
  StopReason reason = StopReason::Length;
  std::string stop;  // the stop string that ended generation (reason Stop), not in `text`
  int64_t slides = 0;
  double prefill_seconds = 0;      // evaluating the prompt
  double first_token_seconds = 0;  // from the start to the first sampled token
  double decode_seconds = 0;       // from the first sampled token to the end
  // Forward steps of the model after the prompt's, and with speculation the tokens drafted and accepted: a
  // step yields 1 + its accepted drafts (tokens per step = (tokens - 1) / decode_steps, the first token
  // coming from the prompt's step).
  int64_t decode_steps = 0;
  int64_t drafted = 0;
  int64_t accepted = 0;
};

struct GenerateCallbacks {
  std::function<void(const GeneratedToken&)> on_token;  // every generated token, as it comes
  std::function<void(std::string_view)> on_text;        // text safe to show now (held back while it may be
                                                  // the start of a stop string; never a partial character)
  std::function<void()> on_prefilled;  // the prompt was evaluated (nothing failed so far)
  // Before the prompt is evaluated (generate(), Generation): may restore a prefix of the prompt (as prepared)
  // into the session's sequence 0 from a prompt cache, and returns how many positions it holds (fewer than
  // the prompt's: its last token is evaluated for its logits); only the rest is evaluated.
  std::function<int64_t(Session& session, std::span<const int32_t> prompt)> restore_prompt = nullptr;
};

// The tokens --context-overflow keeps, at the end of what is there: `truncate` of an overlong prompt keeps
// room for max_new_tokens, but never less than half the context of prompt; `slide` keeps the last half of
// the window when generation fills the context. generate() and `generate -i` use both.
int64_t truncate_keep(int64_t max_new_tokens, int64_t n_ctx);
int64_t slide_keep(int64_t n_ctx);

// Throws Error(Argument) naming the field (max_new_tokens, top_p, stop, ...) when an option is out of range.
void validate_options(const GenerateOptions& options, const Config& config, const Tokenizer* tokenizer);
// The prompt as generate() evaluates it in a context of `n_ctx` positions (a session's; 0 = the model's):
// BOS for an empty one; an overlong one refused or truncated (options.overflow). `dropped` receives the
// number of ids truncation removed.
std::vector<int32_t> prepare_prompt(std::vector<int32_t> prompt, const GenerateOptions& options,
                                    const Config& config, const Tokenizer* tokenizer, int64_t n_ctx = 0,
                                    int64_t* dropped = nullptr);

// One sequence's generation, step by step, so that a caller can evaluate it alone or batched with other
// sequences (the server): after each evaluation of the sequence's last token, push() takes its logits,
// samples the next token and emits tokens and text through the callbacks exactly as generate() does
// (generate() is this class over one Session).
class Generator {
 public:
  // `prompt` as prepare_prompt() returned it; the caller evaluates it. Starts the clock for the timings.
  Generator(const Config& config, const Tokenizer* tokenizer, const GenerateOptions& options,
            std::vector<int32_t> prompt, GenerateCallbacks callbacks = {});
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // The logits [V] after the sequence's last evaluated token: samples and emits the next token. True when
  // generation goes on (evaluate next() then); false when it has ended (EOS, a stop string, max_new_tokens),
  // result() is then complete.
  bool push(std::span<const float> logits);
  // The token to evaluate next (the last one sampled).
  int32_t next() const { return history_.back(); }
  // Ends generation (the context is full, the caller cancels): releases what was held back.
  void finish(StopReason reason);
  bool done() const { return done_; }
  // Tokens still allowed by max_new_tokens.
  int64_t remaining() const { return o_.max_new_tokens - int64_t(r_.tokens.size()); }
  // Every id of the sequence: the prompt, then the generated ones.
  const std::vector<int32_t>& history() const { return history_; }
  GenerateResult& result() { return r_; }
  const GenerateResult& result() const { return r_; }

 private:
  struct Pending;
  enum class Release { Shown, Stop, All };
  void release(Release mode);
  bool add_text(const std::string& piece, bool final);

  const Tokenizer* tokenizer_;
  GenerateOptions o_;
  GenerateCallbacks cb_;
  Sampler sampler_;
  std::unique_ptr<Constraint> constraint_;  // o_.grammar's, for this sequence
  std::vector<uint32_t> allowed_;           // its bitmask for the next token
  std::vector<float> masked_;               // the logits with the tokens it does not allow at -inf
  std::vector<int32_t> history_;
  std::optional<StreamDecoder> decoder_;
  GenerateResult r_;
  std::vector<int64_t> eos_;  // the ids that end generation (none: it ends otherwise)
  size_t shown_ = 0;          // bytes of r_.text passed to on_text
  std::vector<Pending> pending_;
  std::chrono::steady_clock::time_point t0_, t_first_;
  bool done_ = false;
  bool sampled_ = false;
};

// generate() one token at a time, so that a caller can stop between tokens (the Python package checks for
// Ctrl-C there, and its stream=True iterator returns after each): each step() evaluates what is pending (the
// prompt first, then the token sampled last, or the window again after a slide) and samples the next token,
// emitting it through the callbacks. generate() runs steps until the end.
class Speculator;  // speculative.h

class Generation {
 public:
  // Validates the options and prepares the prompt as generate() does (Error(Argument) for bad options or an
  // overlong prompt), resets the session and starts the clock; evaluates nothing yet. `session` must
  // outlive this object.
  Generation(Session& session, const Tokenizer* tokenizer, std::vector<int32_t> prompt,
             const GenerateOptions& options, GenerateCallbacks callbacks = {});
  ~Generation();
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // One token: true while generation goes on, false once it has ended (result() is then complete). An Error
  // thrown by the session leaves the generation ended.
  bool step();
  // Ends generation before the next step (StopReason::Cancelled): releases what was held back.
  void cancel();
  bool done() const;
  GenerateResult& result();

 private:
  Session* session_;
  GenerateOptions o_;
  std::vector<int32_t> prompt_;
  int64_t dropped_ = 0;
  std::function<void()> on_prefilled_;
  std::function<int64_t(Session&, std::span<const int32_t>)> restore_prompt_;
  std::unique_ptr<Generator> gen_;
  std::unique_ptr<Speculator> spec_;  // o_.speculative's, when enabled
  bool prefilled_ = false;
  bool failed_ = false;
};

// Runs generation from `prompt` (ids; empty = start from the model's BOS token). `tokenizer` may be null
// (no text then; stop strings need one). Throws Error(Argument) for bad options or an overlong prompt.
GenerateResult generate(Session& session, const Tokenizer* tokenizer, std::vector<int32_t> prompt,
                        const GenerateOptions& options, const GenerateCallbacks& callbacks = {});

// The one merge of the user's settings with a model's own defaults (read_generation_defaults()), which
// `generate`, `chat`, `serve` and the Python package all run: each sampling setting (names as
// GenerationDefaults::apply() asks) and max_new_tokens is the user's when `given(name)` (a flag, a request
// field, a keyword argument: its value is already in `options`), else the model's default when it has one,
// else the built-in value already in `options`. The model's eos ids end generation. The model's length is
// its max_new_tokens, or else, with `n_prompt`, its max_length less the prompt's n_prompt tokens (an empty
// prompt counts as its BOS); a conversation's prompt grows each turn, so `chat` and `serve` give none.
// Throws Error(Config) when max_length leaves no room after the prompt, and an unusable setting's message
// (GenerationDefaults::unusable) when it is not given.
void apply_generation_defaults(GenerateOptions& options, const GenerationDefaults& defaults,
                               const std::function<bool(const char*)>& given,
                               std::optional<int64_t> n_prompt = std::nullopt);

// The context (KV-cache positions) for -c/--ctx-size: by default (nullopt) the model's, but at most 4096, so
// that a config with a huge n_positions does not allocate gigabytes for a short run; 0 = all of the model's.
// Error(Argument) outside [0, model_ctx].
int64_t context_size(std::optional<int64_t> ctx_size, int64_t model_ctx);

// -n -1 (llama.cpp's): as many tokens as a context of n_ctx has room for after a prompt of n_prompt tokens
// (an empty one is its BOS), at least 1. Any other count is returned as it is (validate_options() refuses
// one below 1).
int64_t resolve_max_new_tokens(int64_t max_new_tokens, int64_t n_prompt, int64_t n_ctx);

}  // namespace minigpt
