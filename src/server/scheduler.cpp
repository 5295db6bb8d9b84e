#include "server/scheduler.h"

#include <algorithm>

#include "minigpt/error.h"
#include "minigpt/sampler.h"

namespace minigpt::server {

void Task::post(Event e) {
  {
    std::lock_guard<std::mutex> l(m_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

bool Task::wait(std::vector<Event>& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(m_);
  if (!cv_.wait_for(l, timeout, [&] { return !events_.empty(); })) return false;
  while (!events_.empty()) {
    out.push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return true;
}

struct Scheduler::Slot {
  int64_t seq = 0;
  std::shared_ptr<Task> task;  // null: free
  int64_t choice = 0;
  const ChoiceSpec* spec = nullptr;
  size_t prefilled = 0;  // prompt tokens evaluated
  std::unique_ptr<Generator> gen;
  std::unique_ptr<Speculator> speculator;  // when the choice speculates
  int32_t next = 0;                        // the token to evaluate in the next step
  std::vector<int32_t> step;               // a speculating step's tokens: next, then the drafts
  std::vector<double> prompt_lp;
  std::vector<std::vector<std::pair<int32_t, double>>> prompt_top;
  Clock::time_point last_token;
  bool any_token = false;
  size_t text_posted = 0;  // bytes of text the Token events carried
  // The tokens whose keys and values the sequence holds (its n_past of them), kept after the slot is freed
  // for a later prompt that begins with them.
  std::vector<int32_t> kv;
  uint64_t last_used = 0;
  int64_t cached = 0;  // of this choice's prompt, the tokens kv held when it was admitted
  // Another choice of the same request with the same prompt, evaluating it: this one waits, then takes a
  // copy of its keys and values and its last logits (n > 1 evaluates a prompt once). Null: on its own.
  Slot* leader = nullptr;
};

namespace {
SessionOptions session_options(const SchedulerOptions& o) {
  SessionOptions so;
  so.n_seq = o.n_parallel;
  so.n_ctx = o.n_ctx;
  so.max_batch = o.batch_size + o.n_parallel;  // the prompts' budget, plus one token per decoding sequence
  return so;
}
}  // namespace

Scheduler::Scheduler(std::shared_ptr<const Model> model, const Tokenizer* tokenizer,
                     const SchedulerOptions& o)
    : model_(std::move(model)), tokenizer_(tokenizer), o_(o), session_(model_, session_options(o)) {
  n_ctx_ = session_.n_ctx();
  if (o.speculative.draft_model) {
    draft_ = std::make_shared<DraftModel>(o.speculative.draft_model, model_->config(), n_ctx_, o.n_parallel);
  }
  if (o.cache_ram > 0 && session_.exports_kv()) {
    host_cache_ = std::make_unique<PromptCache>(o.cache_ram, o.cache_block, session_.kv_position_bytes());
    stats_.host_cache_max_bytes = int64_t(o.cache_ram);
  }
  for (int64_t i = 0; i < o.n_parallel; ++i) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->seq = i;
  }
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  stop(true);
  wait();
}

bool Scheduler::submit(const std::shared_ptr<Task>& task) {
  {
    std::lock_guard<std::mutex> l(m_);
    const int64_t n = int64_t(task->choices().size());
    if (stopping_ || int64_t(queue_.size()) + n > o_.max_queue) return false;
    for (int64_t i = 0; i < n; ++i) queue_.push_back({task, i});
    stats_.queued = int64_t(queue_.size());
  }
  cv_.notify_all();
  return true;
}

void Scheduler::stop(bool cancel) {
  {
    std::lock_guard<std::mutex> l(m_);
    stopping_ = true;
    if (cancel) cancel_all_ = true;
  }
  cv_.notify_all();
}

void Scheduler::wait() {
  if (thread_.joinable()) thread_.join();
}

void Scheduler::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> l(m_);
      cv_.wait(l, [&] { return !queue_.empty() || active_ > 0 || stopping_; });
      if (stopping_ && queue_.empty() && active_ == 0) return;
    }
    step();
  }
}

void Scheduler::finish_slot(Slot& s, StopReason reason) {
  int64_t generated = 0;
  GeneratedToken tail{};
  if (s.gen) {
    s.gen->finish(reason);  // releases what was held back (Token events) unless it had ended
    reason = s.gen->result().reason;
    generated = int64_t(s.gen->result().tokens.size());
    // The decoder's last bytes, flushed at the end (U+FFFD for a character the tokens left unfinished), were
    // in no token's text.
    const std::string& text = s.gen->result().text;
    if (text.size() > s.text_posted) tail.text = text.substr(s.text_posted);
  }
  // Kept before the answer goes out: a client that reads /metrics after its answer sees the cache hold it.
  save_prefix(s);
  s.task->post({Event::Kind::Finished, s.choice, std::move(tail), {}, {}, reason, {}, generated});
  // Choices waiting for this one's prompt evaluate it themselves now.
  for (auto& f : slots_) {
    if (f->leader == &s) f->leader = nullptr;
  }
  // The sequence's keys and values stay (s.kv says for which tokens) until the slot is taken again.
  s.task.reset();
  s.gen.reset();
  s.spec = nullptr;
  std::lock_guard<std::mutex> l(m_);
  --active_;
  stats_.busy = active_;
}

void Scheduler::save_prefix(Slot& s) {
  if (!host_cache_) return;
  const int64_t n = std::min(int64_t(s.kv.size()), session_.n_past(s.seq));
  if (n < host_cache_->block()) return;
  try {
    host_cache_->store(std::span<const int32_t>(s.kv).first(size_t(n)),
                       [&](int64_t pos, int64_t k, void* host) { session_.read_kv(s.seq, pos, k, host); });
  } catch (const std::exception&) {
    // Only a cache: the request is done, and a prefix not kept is evaluated again.
  }
  stats_.host_cache_bytes = int64_t(host_cache_->bytes());
}

int64_t Scheduler::restore_prefix(Slot& s, int64_t reuse) {
  const std::vector<int32_t>& prompt = s.spec->prompt;
  // At least the prompt's last token is evaluated: its logits give the first generated token.
  const int64_t found = std::min<int64_t>(host_cache_->lookup(prompt), int64_t(prompt.size()) - 1);
  if (found <= reuse) {
    ++stats_.host_cache_misses;
    return reuse;
  }
  try {
    host_cache_->restore(prompt, reuse, found, [&](int64_t pos, int64_t k, const void* host) {
      session_.write_kv(s.seq, pos, k, host);
    });
  } catch (const std::exception&) {
    // What was written before the failure stays (write_kv keeps n_past right); the rest is evaluated.
  }
  const int64_t held = session_.n_past(s.seq);
  s.kv.assign(prompt.begin(), prompt.begin() + held);
  if (held > reuse) {
    ++stats_.host_cache_hits;
    stats_.host_cache_tokens += held - reuse;
  } else {
    ++stats_.host_cache_misses;
  }
  return held;
}

Scheduler::Slot* Scheduler::pick_slot(const ChoiceSpec& spec, int64_t& reuse) {
  Slot* best = nullptr;  // the longest common prefix
  Slot* lru = nullptr;   // the least recently used
  size_t best_common = 0, lru_common = 0;
  const bool may_reuse = spec.cache_prompt && !spec.prompt_logprobs;
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (s.task) continue;
    size_t common = 0;
    if (may_reuse) {
      const size_t m = std::min(s.kv.size(), spec.prompt.size());
      while (common < m && s.kv[common] == spec.prompt[common]) ++common;
    }
    if (best == nullptr || common > best_common || (common == best_common && s.last_used < best->last_used)) {
      best = &s;
      best_common = common;
    }
    if (lru == nullptr || s.last_used < lru->last_used) {
      lru = &s;
      lru_common = common;
    }
  }
  // A slot that holds under half of the prompt is not worth another conversation's cache: the least recently
  // used one is taken then (llama-server's slot similarity, 0.5 by default, decides the same way).
  if (best != nullptr && 2 * best_common < spec.prompt.size()) {
    best = lru;
    best_common = lru_common;
  }
  // At least the prompt's last token is evaluated: its logits give the first generated token.
  reuse = int64_t(std::min(best_common, spec.prompt.empty() ? 0 : spec.prompt.size() - 1));
  return best;
}

void Scheduler::step() {
  const Config& c = model_->config();
  const int64_t V = c.n_vocab;
  // Admit queued choices into free slots; drop what was cancelled.
  bool cancel_all = false;
  {
    std::lock_guard<std::mutex> l(m_);
    cancel_all = cancel_all_;
    while (!queue_.empty() && (cancel_all || queue_.front().task->cancelled())) {
      const Queued q = queue_.front();
      queue_.pop_front();
      q.task->post({Event::Kind::Finished, q.choice, {}, {}, {}, StopReason::Cancelled, {}});
    }
    while (!queue_.empty()) {
      if (queue_.front().task->cancelled()) break;  // dropped at the next step
      int64_t reuse = 0;
      Slot* picked = pick_slot(queue_.front().task->choices()[size_t(queue_.front().choice)], reuse);
      if (picked == nullptr) break;
      Slot& s = *picked;
      s.task = queue_.front().task;
      s.choice = queue_.front().choice;
      queue_.pop_front();
      s.spec = &s.task->choices()[size_t(s.choice)];
      s.leader = nullptr;
      if (session_.can_copy() && !s.spec->prompt_logprobs) {
        for (auto& op : slots_) {
          Slot& o = *op;
          if (&o != &s && o.task == s.task && o.leader == nullptr && !o.spec->prompt_logprobs &&
              o.prefilled < o.spec->prompt.size() && o.spec->prompt == s.spec->prompt) {
            s.leader = &o;
            reuse = 0;
            break;
          }
        }
      }
      reuse = session_.keepable(s.seq, reuse);  // a windowed layer's ring may no longer hold that prefix
      session_.keep(s.seq, reuse);
      s.kv.resize(size_t(reuse));
      if (host_cache_ && s.leader == nullptr && s.spec->cache_prompt && !s.spec->prompt_logprobs) {
        reuse = restore_prefix(s, reuse);
      }
      s.last_used = ++clock_;
      s.cached = reuse;
      stats_.prompt_tokens_cached += reuse;
      s.prefilled = size_t(reuse);
      s.prompt_lp.clear();
      s.prompt_top.clear();
      s.any_token = false;
      s.text_posted = 0;
      ++active_;
      Slot* slot = &s;
      GenerateCallbacks cb;
      cb.on_token = [this, slot](const GeneratedToken& t) {
        const auto now = Clock::now();
        {
          std::lock_guard<std::mutex> sl(stats_.m);
          if (!slot->any_token) {
            stats_.ttft.observe(std::chrono::duration<double>(now - slot->task->created()).count());
          } else {
            stats_.itl.observe(std::chrono::duration<double>(now - slot->last_token).count());
          }
        }
        ++stats_.generated_tokens;
        slot->any_token = true;
        slot->last_token = now;
        slot->text_posted += t.text.size();
        slot->task->post({Event::Kind::Token, slot->choice, t, {}, {}, StopReason::Length, {}});
      };
      s.gen = std::make_unique<Generator>(c, tokenizer_, s.spec->options, s.spec->prompt, std::move(cb));
      s.speculator.reset();
      if (const SpeculativeOptions& so = s.spec->options.speculative; so.enabled()) {
        std::shared_ptr<Drafter> drafter = so.draft_model && so.draft_model == o_.speculative.draft_model
                                               ? draft_
                                               : make_drafter(so, *model_, n_ctx_, 1);
        s.speculator = std::make_unique<Speculator>(std::move(drafter), so);
      }
    }
    // busy before queued: /metrics reads the queue depth first, so a choice moving from the queue to a slot
    // is never seen in neither
    stats_.busy = active_;
    stats_.queued = int64_t(queue_.size());
  }
  for (auto& sp : slots_) {
    if (sp->task && (cancel_all || sp->task->cancelled())) finish_slot(*sp, StopReason::Cancelled);
  }

  // The step: a token of every decoding sequence first (streams keep flowing), then prompt chunks.
  std::vector<Session::SeqTokens> entries;
  std::vector<Slot*> owners;
  std::vector<int64_t> takes;
  std::vector<int64_t> pasts;  // each entry's sequence's positions before the step
  int64_t decoding = 0;
  for (auto& sp : slots_) decoding += sp->task && sp->prefilled == sp->spec->prompt.size() ? 1 : 0;
  int64_t budget = o_.batch_size;
  Slot* timed = nullptr;  // the speculating sequence, whose step is timed when it runs alone
  const Clock::time_point t_step = Clock::now();
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (s.task && s.prefilled == s.spec->prompt.size()) {
      // Drafts only while this is the one sequence decoding: with more, the step already reads each weight
      // once for several tokens, and drafts would make it longer for all of them.
      std::span<const int32_t> drafts;
      if (s.speculator && decoding == 1) {
        timed = &s;
        const int64_t room = std::min(n_ctx_ - session_.n_past(s.seq), budget) - 1;
        try {
          drafts = s.speculator->draft(s.seq, *s.gen, room);
        } catch (const std::exception&) {  // the draft model failed: this choice goes on without drafts
          s.speculator.reset();
          timed = nullptr;
        }
        budget -= int64_t(drafts.size());
      }
      if (drafts.empty()) {
        entries.push_back({s.seq, std::span<const int32_t>(&s.next, 1), false});
      } else {
        s.step.assign(1, s.next);
        s.step.insert(s.step.end(), drafts.begin(), drafts.end());
        entries.push_back({s.seq, s.step, true});
      }
      owners.push_back(&s);
      takes.push_back(0);
      pasts.push_back(session_.n_past(s.seq));
    }
  }
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (!s.task || s.leader != nullptr || s.prefilled == s.spec->prompt.size() || budget == 0) continue;
    const int64_t take = std::min<int64_t>(budget, int64_t(s.spec->prompt.size() - s.prefilled));
    budget -= take;
    entries.push_back({s.seq, std::span<const int32_t>(s.spec->prompt).subspan(s.prefilled, size_t(take)),
                       s.spec->prompt_logprobs});
    owners.push_back(&s);
    takes.push_back(take);
    pasts.push_back(session_.n_past(s.seq));
  }
  if (entries.empty()) return;

  std::span<const float> logits;
  try {
    logits = session_.eval_batch(entries);
    ++stats_.steps;
  } catch (const std::exception& e) {
    for (Slot* s : owners) {
      s->task->post({Event::Kind::Failed, s->choice, {}, {}, {}, StopReason::Cancelled, e.what()});
      s->gen.reset();
      finish_slot(*s, StopReason::Cancelled);
      session_.reset(s->seq);
      s->kv.clear();
    }
    return;
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    std::vector<int32_t>& kv = owners[i]->kv;
    kv.insert(kv.end(), entries[i].tokens.begin(), entries[i].tokens.end());
  }

  // After its prompt: the Prompt event; false when that ends the choice (max_tokens 0).
  auto prompt_done = [&](Slot& x) {
    Event pe{Event::Kind::Prompt,     x.choice,           {}, std::move(x.prompt_lp),
             std::move(x.prompt_top), StopReason::Length, {}};
    pe.cached = x.cached;
    x.task->post(std::move(pe));
    if (x.spec->max_tokens > 0) return true;
    x.gen.reset();
    finish_slot(x, StopReason::Length);
    return false;
  };
  // The choice's next token from the logits of its last one (with drafts: `last` is every row, the tokens
  // the model agrees with are kept and the sequence is cut back to them).
  auto advance = [&](Slot& x, std::span<const float> last, bool drafted = false, int64_t past0 = 0) {
    const GenerateResult& r = x.gen->result();
    const int64_t drafted0 = r.drafted, accepted0 = r.accepted;
    const bool going =
        drafted ? x.speculator->verify(session_, x.seq, *x.gen, last, past0) : x.gen->push(last);
    if (drafted) {
      x.kv.resize(size_t(session_.n_past(x.seq)));
      stats_.draft_tokens += r.drafted - drafted0;
      stats_.draft_tokens_accepted += r.accepted - accepted0;
    }
    if (!going) {
      finish_slot(x, x.gen->result().reason);
    } else if (session_.n_past(x.seq) == n_ctx_) {
      finish_slot(x, StopReason::Context);
    } else {
      x.next = x.gen->next();
    }
  };
  // The choices waiting for `leader`'s prompt, now evaluated: its keys and values and its last logits.
  auto follow = [&](Slot& leader, std::span<const float> last) {
    for (auto& fp : slots_) {
      Slot& f = *fp;
      if (f.leader != &leader) continue;
      f.leader = nullptr;
      try {
        const int64_t n = int64_t(leader.spec->prompt.size());
        session_.copy_prefix(leader.seq, f.seq, n);
        f.kv = leader.kv;
        f.prefilled = size_t(n);
        stats_.prompt_tokens_shared += n;
        if (prompt_done(f)) advance(f, last);
      } catch (const std::exception& e) {
        f.task->post({Event::Kind::Failed, f.choice, {}, {}, {}, StopReason::Cancelled, e.what()});
        f.gen.reset();
        finish_slot(f, StopReason::Cancelled);
      }
    }
  };

  size_t row = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    Slot& s = *owners[i];
    const int64_t take = takes[i];
    const bool drafted = take == 0 && entries[i].all_logits;  // a decoding entry with drafts
    const int64_t rows = entries[i].all_logits ? int64_t(entries[i].tokens.size()) : 1;
    const std::span<const float> all = logits.subspan(row * size_t(V), size_t(rows * V));
    row += size_t(rows);
    const std::span<const float> last = all.subspan(size_t((rows - 1) * V), size_t(V));
    try {
      if (take > 0) {  // a prompt chunk
        const std::vector<int32_t>& prompt = s.spec->prompt;
        if (s.spec->prompt_logprobs) {
          const int64_t top = s.spec->options.top_logprobs;
          for (int64_t r = 0; r < take; ++r) {
            const size_t g = s.prefilled + size_t(r);  // this row predicts token g + 1
            if (g + 1 >= prompt.size()) break;
            const std::span<const float> lr = all.subspan(size_t(r * V), size_t(V));
            s.prompt_lp.push_back(log_prob(lr, prompt[g + 1]));
            s.prompt_top.push_back(top > 0 ? top_log_probs(lr, top)
                                           : std::vector<std::pair<int32_t, double>>{});
          }
        }
        s.prefilled += size_t(take);
        stats_.prompt_tokens += take;
        if (s.prefilled < prompt.size()) continue;
        follow(s, last);
        if (!prompt_done(s)) continue;
        if (s.speculator) {
          try {
            s.speculator->prepare(s.seq, prompt);
          } catch (const std::exception&) {  // the draft model failed: this choice goes on without drafts
            s.speculator.reset();
          }
        }
      }
      if (drafted) {
        advance(s, all, true, pasts[i]);
      } else {
        advance(s, last);
      }
    } catch (const std::exception& e) {
      s.task->post({Event::Kind::Failed, s.choice, {}, {}, {}, StopReason::Cancelled, e.what()});
      s.gen.reset();
      finish_slot(s, StopReason::Cancelled);
    }
  }
  // What a speculating step of this many rows costs, drafting included (speculative.h: how k is chosen).
  if (timed != nullptr && entries.size() == 1) {
    timed->speculator->observe(int64_t(entries[0].tokens.size()),
                               std::chrono::duration<double>(Clock::now() - t_step).count());
  }
}

}  // namespace minigpt::server
