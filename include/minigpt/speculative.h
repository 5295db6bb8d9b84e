// Speculative decoding: a cheap source drafts the next few tokens, the model scores them all in ONE forward
// pass (every weight read once), and the tokens it would have chosen itself are kept, so that one read of the
// weights can yield several tokens.
//
// The drafts are deterministic (prompt lookup's n-gram continuation, a draft model's greedy choice): a point
// mass q at the drafted token d. The standard speculative rejection rule then accepts d with probability
// min(1, p(d) / q(d)) = p(d) and otherwise draws from the residual max(0, p - q), normalised: p without d.
// Drawing x from p exactly as plain decoding does (the same processors, the same random stream) and keeping
// d when x == d realises both at once. So the output is the one plain decoding gives, token for token, for
// greedy and for every sampling setting with the same seed, and a grammar only ever sees accepted tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "minigpt/generate.h"
#include "minigpt/model.h"
#include "minigpt/session.h"

namespace minigpt {

// The most rows a verification step has: the CPU backend computes a step of up to 16 tokens of a sequence as
// decode computes each (the GEMVs, attention one query at a time), bit for bit, so draft_max is capped at 15.
inline constexpr int64_t kMaxStepRows = 16;

// Proposes the tokens that follow a sequence.
class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to k tokens that may follow `history` (the whole sequence: prompt and generated, its last token
  // sampled but not evaluated yet) of sequence `seq`, appended to `out` (cleared first). None is fine.
  virtual void draft(int64_t seq, std::span<const int32_t> history, int64_t k, std::vector<int32_t>& out) = 0;
  // The sequence's prompt (`history`, all of it) was evaluated: a drafter with a model of its own evaluates
  // it now too, in the prompt's time rather than the first draft's.
  virtual void prepare(int64_t seq, std::span<const int32_t> history) { (void)seq, (void)history; }
};

// Prompt lookup (transformers' prompt_lookup_num_tokens, llama.cpp's lookup decoding): the sequence's last n
// tokens (n from ngram_max down to ngram_min) are searched for in what came before them, and the tokens that
// followed their latest earlier occurrence are the draft. Needs no second model; pays on input-grounded work
// (rewriting, editing or quoting text given in the prompt).
class PromptLookup : public Drafter {
 public:
  PromptLookup(int64_t ngram_min, int64_t ngram_max);
  void draft(int64_t seq, std::span<const int32_t> history, int64_t k, std::vector<int32_t>& out) override;

 private:
  int64_t ngram_min_, ngram_max_;
};

// A smaller model over the same vocabulary (a lower-precision copy of the target, or a smaller sibling)
// drafts greedily. It keeps its own KV cache per sequence and evaluates only what its cache does not hold.
class DraftModel : public Drafter {
 public:
  // `n_ctx`: the target session's context; `n_seq`: its sequences. Error(Argument) when the draft's
  // vocabulary differs from the target's (naming both sizes).
  DraftModel(std::shared_ptr<const Model> draft, const Config& target, int64_t n_ctx, int64_t n_seq);
  void draft(int64_t seq, std::span<const int32_t> history, int64_t k, std::vector<int32_t>& out) override;
  void prepare(int64_t seq, std::span<const int32_t> history) override;

 private:
  // Brings the draft's cache to hold `history` (from its window's start) but its last `leave` tokens, and
  // returns the logits after it (empty when nothing was evaluated).
  std::span<const float> catch_up(int64_t seq, std::span<const int32_t> history, int64_t k);
  struct Seq {
    std::vector<int32_t> kv;  // the tokens its cache holds: history[offset, offset + kv.size())
    size_t offset = 0;        // where its window of the history starts (past the draft's context: moves on)
  };
  Session session_;
  std::vector<Seq> seqs_;
};

// The drafter `options` asks for (prompt lookup or a draft model); null when it asks for none.
std::shared_ptr<Drafter> make_drafter(const SpeculativeOptions& options, const Model& target, int64_t n_ctx,
                                      int64_t n_seq);

// Pushes the logits of a verification step into `gen`: row 0 follows gen.next(), row i + 1 follows
// drafts[i]. Each row is sampled as plain decoding would; the next row is read only while the token sampled
// equals the draft. Returns the drafts accepted; `going` receives gen.push()'s last answer.
int64_t push_verified(Generator& gen, std::span<const float> rows, int64_t n_vocab,
                      std::span<const int32_t> drafts, bool& going);

// One sequence's speculation: how many tokens to draft (adapted to the recent acceptance), the drafts, and
// the verification's bookkeeping. The caller evaluates gen.next() and the drafts in one step (all logits),
// then calls verify(); generate() and the CLI use step(), the server batches entries of several sequences.
class Speculator {
 public:
  // A drafter of the caller's (a draft model the server's slots share, a test's); options give k's bounds.
  Speculator(std::shared_ptr<Drafter> drafter, const SpeculativeOptions& options);
  // The drafter make_drafter() makes (Error(Argument) when options ask for none).
  Speculator(const SpeculativeOptions& options, const Model& target, int64_t n_ctx, int64_t n_seq = 1);
  ~Speculator();

  // Drafts for `gen`'s sequence `seq` to evaluate after gen.next(): at most `room` tokens (what the context
  // and the step have room for), none after the last token max_new_tokens allows. Valid until the next call.
  std::span<const int32_t> draft(int64_t seq, const Generator& gen, int64_t room);
  // After the step that evaluated gen.next() and the drafts from position `past0` of sequence `seq`, with
  // their logits `rows` ([1 + drafts] x V): pushes the accepted tokens (push_verified), cuts the sequence
  // back to what they hold (Session::keep) and adapts k. Returns whether generation goes on.
  bool verify(Session& session, int64_t seq, Generator& gen, std::span<const float> rows, int64_t past0);
  // The prompt was evaluated (before the first token is sampled): Drafter::prepare.
  void prepare(int64_t seq, std::span<const int32_t> prompt) { drafter_->prepare(seq, prompt); }
  // draft(), one forward step of the target, verify(): one target step, one or more tokens.
  bool step(Session& session, int64_t seq, Generator& gen);
  // A step of `rows` tokens (gen.next() and the drafts) took `seconds`, drafting included where it was timed:
  // the cost model k is chosen by. step() observes its own steps.
  void observe(int64_t rows, double seconds);

 private:
  std::shared_ptr<Drafter> drafter_;
  SpeculativeOptions o_;
  // k maximises the expected tokens per second: with a the chance that a draft is kept (given the ones
  // before it were) and a step of r rows costing t0 + t1 r, a step of k drafts yields (1 - a^(k+1)) / (1 - a)
  // tokens for t0 + t1 (k + 1). Both are estimated as the run goes, with older steps forgotten.
  int64_t choose_k() const;
  int64_t k_;             // tokens to draft next
  int64_t plain_ = 0;     // plain steps since k fell to 0 (a draft is tried again after probe_ of them)
  int64_t probe_ = 8;     // doubled each time a tried draft does not pay, up to 256
  bool probing_ = false;  // this step's draft is such a try
  double kept_ = 0.7;     // drafts kept, decayed sum (a prior of 7 in 10)
  double tried_ = 1.0;    // drafts whose fate was decided (kept, or the first refused), decayed sum
  double one_ = 0;        // seconds of a one-row step (decayed mean; 0: none timed yet)
  double per_ = 0;  // seconds each row past the first adds, drafting included (decayed mean; 0: none yet)
  int64_t since_one_ = 0;  // steps since the last one-row step (one is run now and then to time it)
  std::vector<int32_t> drafts_;
  std::vector<int32_t> step_;  // gen.next() and the drafts
};

}  // namespace minigpt
