// Speculative decoding: drafters, the verification of a step's drafts, the adaptation of k.
#include "minigpt/speculative.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "minigpt/error.h"

namespace minigpt {

void SpeculativeOptions::validate() const {
  auto range = [](const char* name, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) {
      throw Error(ErrorKind::Argument, std::string(name) + ": must be in [" + std::to_string(lo) + ", " +
                                           std::to_string(hi) + "], got " + std::to_string(v));
    }
  };
  if (prompt_lookup && draft_model) {
    throw Error(ErrorKind::Argument,
                "speculative: prompt lookup and a draft model are two draft sources; give one");
  }
  range("draft_max", draft_max, 1, 64);
  range("draft_min", draft_min, 0, draft_max);
  range("ngram_min", ngram_min, 1, 64);
  range("ngram_max", ngram_max, ngram_min, 64);
}

PromptLookup::PromptLookup(int64_t ngram_min, int64_t ngram_max)
    : ngram_min_(ngram_min), ngram_max_(ngram_max) {}

void PromptLookup::draft(int64_t, std::span<const int32_t> h, int64_t k, std::vector<int32_t>& out) {
  out.clear();
  const int64_t L = int64_t(h.size());
  for (int64_t n = std::min(ngram_max_, L - 1); n >= ngram_min_; --n) {
    const std::span<const int32_t> tail = h.subspan(size_t(L - n));
    // The latest earlier occurrence: text being rewritten is followed where the output has reached in it.
    for (int64_t i = L - n - 1; i >= 0; --i) {
      if (!std::equal(tail.begin(), tail.end(), h.begin() + i)) continue;
      const int64_t from = i + n, to = std::min(L, from + k);
      out.assign(h.begin() + from, h.begin() + to);
      return;
    }
  }
}

namespace {

SessionOptions draft_session_options(const std::shared_ptr<const Model>& model, const Config& target,
                                     int64_t n_ctx, int64_t n_seq) {
  if (!model) throw Error(ErrorKind::Argument, "draft model: none given");
  const Model& draft = *model;
  if (draft.config().n_vocab != target.n_vocab) {
    throw Error(ErrorKind::Argument, "draft model: its vocabulary has " +
                                         std::to_string(draft.config().n_vocab) + " tokens, the model's " +
                                         std::to_string(target.n_vocab) +
                                         " tokens: a draft must share the model's vocabulary");
  }
  SessionOptions so;
  so.n_ctx = std::min(n_ctx, draft.config().n_ctx);
  so.n_seq = n_seq;
  so.max_batch = std::min<int64_t>(512, so.n_ctx);
  return so;
}

int32_t argmax(std::span<const float> v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

}  // namespace

DraftModel::DraftModel(std::shared_ptr<const Model> draft, const Config& target, int64_t n_ctx, int64_t n_seq)
    : session_(draft, draft_session_options(draft, target, n_ctx, n_seq)), seqs_(size_t(n_seq)) {}

void DraftModel::prepare(int64_t seq, std::span<const int32_t> history) {
  if (!history.empty()) catch_up(seq, history, 1);
}

std::span<const float> DraftModel::catch_up(int64_t seq, std::span<const int32_t> history, int64_t k) {
  Seq& s = seqs_.at(size_t(seq));
  const int64_t n_ctx = session_.n_ctx();
  // The draft sees the history from `offset`: past its context it starts again from the last half, once,
  // rather than moving every step (which would evaluate the whole window again each time).
  if (s.offset > history.size() || int64_t(history.size() - s.offset) + k > n_ctx) {
    const int64_t keep = std::max<int64_t>(1, std::min<int64_t>(n_ctx / 2, n_ctx - k));
    s.offset = history.size() > size_t(keep) ? history.size() - size_t(keep) : 0;
    s.kv.clear();
    session_.reset(seq);
  }
  const std::span<const int32_t> h = history.subspan(s.offset);
  // What the cache holds of h, but at least its last token is evaluated again (its logits draft).
  size_t common = 0;
  while (common < s.kv.size() && common + 1 < h.size() && s.kv[common] == h[common]) ++common;
  common = size_t(session_.keepable(seq, int64_t(common)));
  session_.keep(seq, int64_t(common));
  s.kv.assign(h.begin(), h.end());
  return session_.eval(h.subspan(common), seq);
}

void DraftModel::draft(int64_t seq, std::span<const int32_t> history, int64_t k, std::vector<int32_t>& out) {
  out.clear();
  const int64_t n_ctx = session_.n_ctx();
  k = std::min(k, n_ctx - 1);
  if (history.empty() || k < 1) return;
  std::span<const float> logits = catch_up(seq, history, k);
  Seq& s = seqs_.at(size_t(seq));
  k = std::min(k, n_ctx - int64_t(s.kv.size()));
  for (;;) {
    const int32_t t = argmax(logits);
    out.push_back(t);
    if (int64_t(out.size()) >= k) break;
    logits = session_.eval(std::span<const int32_t>(&t, 1), seq);
    s.kv.push_back(t);
  }
}

std::shared_ptr<Drafter> make_drafter(const SpeculativeOptions& o, const Model& target, int64_t n_ctx,
                                      int64_t n_seq) {
  o.validate();
  if (o.draft_model) return std::make_shared<DraftModel>(o.draft_model, target.config(), n_ctx, n_seq);
  if (o.prompt_lookup) return std::make_shared<PromptLookup>(o.ngram_min, o.ngram_max);
  return nullptr;
}

int64_t push_verified(Generator& gen, std::span<const float> rows, int64_t V, std::span<const int32_t> drafts,
                      bool& going) {
  int64_t accepted = 0;
  for (size_t i = 0;; ++i) {
    going = gen.push(rows.subspan(i * size_t(V), size_t(V)));
    // The token sampled from row i is the one row i + 1 assumed: row i + 1 is its successor's distribution.
    if (!going || i == drafts.size() || gen.next() != drafts[i]) break;
    ++accepted;
  }
  return accepted;
}

Speculator::Speculator(std::shared_ptr<Drafter> drafter, const SpeculativeOptions& o)
    : drafter_(std::move(drafter)), o_(o), k_(o.draft_max) {
  if (!drafter_) throw Error(ErrorKind::Argument, "speculative: no draft source");
  o_.validate();
}

Speculator::Speculator(const SpeculativeOptions& o, const Model& target, int64_t n_ctx, int64_t n_seq)
    : Speculator(make_drafter(o, target, n_ctx, n_seq), o) {}

Speculator::~Speculator() = default;

std::span<const int32_t> Speculator::draft(int64_t seq, const Generator& gen, int64_t room) {
  drafts_.clear();
  // Every token past the first needs max_new_tokens' room: the last one allowed is sampled from a row.
  // A one-row step now and then times what a row costs (the first one at once).
  if (++since_one_ > 32 || one_ == 0) return {};
  if (k_ == 0) {
    // Drafting stopped paying; a single draft now and then finds out when it pays again (less often each
    // time it does not: a draft model's probe evaluates what it missed since the last one).
    if (++plain_ < probe_) return {};
    plain_ = 0;
    k_ = 1;
    probing_ = true;
  }
  // At most kMaxStepRows - 1 drafts: a longer step would be computed as a prefill, not as decode computes
  // each token, and the verified tokens would not be plain decoding's bit for bit.
  const int64_t k = std::min({k_, room, gen.remaining() - 1, kMaxStepRows - 1});
  if (k < 1) return {};
  drafter_->draft(seq, gen.history(), k, drafts_);
  if (int64_t(drafts_.size()) > k) drafts_.resize(size_t(k));
  return drafts_;
}

bool Speculator::verify(Session& session, int64_t seq, Generator& gen, std::span<const float> rows,
                        int64_t past0) {
  const int64_t V = session.model().config().n_vocab;
  const int64_t n = int64_t(drafts_.size());
  bool going = true;
  const int64_t accepted = push_verified(gen, rows, V, drafts_, going);
  // The cache keeps gen.next()'s evaluation and the accepted drafts'; the rest was another future.
  if (accepted < n) session.keep(seq, past0 + 1 + accepted);
  GenerateResult& r = gen.result();
  ++r.decode_steps;
  r.drafted += n;
  r.accepted += accepted;
  if (n > 0) {
    constexpr double kDecay = 0.9;
    kept_ = kDecay * kept_ + double(accepted);
    tried_ = kDecay * tried_ + double(accepted) + (accepted < n ? 1.0 : 0.0);
    k_ = choose_k();
    if (probing_) probe_ = k_ == 0 ? std::min<int64_t>(256, 2 * probe_) : 8;
    probing_ = false;
  }
  drafts_.clear();
  return going;
}

void Speculator::observe(int64_t rows, double seconds) {
  constexpr double kDecay = 0.8;
  if (rows == 1) {
    one_ = one_ == 0 ? seconds : kDecay * one_ + (1 - kDecay) * seconds;
    since_one_ = 0;
  } else if (one_ > 0) {
    const double per = std::max(0.0, seconds - one_) / double(rows - 1);
    per_ = per_ == 0 ? per : kDecay * per_ + (1 - kDecay) * per;
  }
  if (k_ > 0) k_ = choose_k();
}

int64_t Speculator::choose_k() const {
  const double a = std::clamp(kept_ / tried_, 0.0, 0.999);
  // Each row past the first costs c of a one-row step, as timed, or before that a prior (a CPU's
  // small-batch product costs about half a step per row).
  const double c = one_ > 0 && per_ > 0 ? std::clamp(per_ / one_, 0.01, 8.0) : 0.5;
  int64_t best = o_.draft_min;
  double best_rate = -1;
  for (int64_t k = o_.draft_min; k <= o_.draft_max; ++k) {
    const double tokens = (1 - std::pow(a, double(k + 1))) / (1 - a);
    const double rate = tokens / (1 + c * double(k));
    if (rate > best_rate * 1.0001) best = k, best_rate = rate;
  }
  return best;
}

bool Speculator::step(Session& session, int64_t seq, Generator& gen) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t past0 = session.n_past(seq);
  const int64_t room = std::min(session.n_ctx() - past0, session.max_batch()) - 1;
  const std::span<const int32_t> d = draft(seq, gen, room);
  step_.assign(1, gen.next());
  step_.insert(step_.end(), d.begin(), d.end());
  const std::span<const float> rows = d.empty() ? session.eval(step_, seq) : session.eval_all(step_, seq);
  const int64_t n = int64_t(step_.size());
  const bool going = verify(session, seq, gen, rows, past0);
  observe(n, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return going;
}

}  // namespace minigpt
