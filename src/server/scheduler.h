// Continuous batching: one thread owns the Session (n_parallel sequences); each step it takes one token of
// every decoding sequence and chunks of the prompts being prefilled (up to batch_size tokens in all) and
// runs them as ONE forward step, so that every weight is read once for all of them. A request that arrives
// joins at the next step; a finished or cancelled one frees its slot at once.
// A freed slot keeps its sequence's keys and values for a later prompt that begins with the same tokens;
// with a host prompt cache (cache_ram), a freed slot's prefix is also kept there, in blocks, and a prompt
// starts from the longest prefix either holds.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "minigpt/generate.h"
#include "minigpt/session.h"
#include "minigpt/speculative.h"
#include "server/prompt_cache.h"

namespace minigpt::server {

using Clock = std::chrono::steady_clock;

// What the scheduler tells a request, in order, per choice.
struct Event {
  enum class Kind {
    Prompt,    // the prompt was evaluated: its tokens' logprobs (echo + logprobs) in prompt_logprobs
    Token,     // a generated token, released (its text shown, nothing past a stop string)
    Finished,  // the choice ended: reason; token.text: text no Token carried (the decoder's flushed end)
    Failed,    // the step failed (error): the whole request fails
  };
  Kind kind;
  int64_t choice = 0;
  GeneratedToken token;
  // Prompt: for each prompt token after the first, its logprob and the top alternatives.
  std::vector<double> prompt_logprobs;
  std::vector<std::vector<std::pair<int32_t, double>>> prompt_top;
  StopReason reason = StopReason::Length;  // Finished
  std::string error;                       // Failed
  int64_t generated = 0;                   // Finished: the choice's generated tokens
  int64_t cached = 0;  // Prompt: its first tokens whose keys and values an earlier request left in the slot
};

// One choice to generate: a prompt (prepared: never empty, fits the context) and its options.
struct ChoiceSpec {
  std::vector<int32_t> prompt;
  GenerateOptions options;  // max_new_tokens >= 1 always
  int64_t max_tokens = 16;  // 0: evaluate the prompt only
  bool prompt_logprobs = false;
  // Start from the longest prefix of the prompt that a free slot's cache holds (llama-server's
  // cache_prompt). Never with prompt_logprobs: those need the logits of every prompt token.
  bool cache_prompt = true;
};

// A request: its choices, and the events the scheduler posts for it. Shared by the HTTP thread that waits
// on it and the scheduler thread.
class Task {
 public:
  explicit Task(std::vector<ChoiceSpec> choices) : choices_(std::move(choices)) {}
  const std::vector<ChoiceSpec>& choices() const { return choices_; }

  void post(Event e);
  // Waits up to `timeout` for events; moves them into `out`. False on timeout with none.
  bool wait(std::vector<Event>& out, std::chrono::milliseconds timeout);
  // The client went away: the scheduler ends its choices at the next step.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  Clock::time_point created() const { return created_; }

 private:
  std::vector<ChoiceSpec> choices_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  std::atomic<bool> cancelled_{false};
  Clock::time_point created_ = Clock::now();
};

// A Prometheus histogram: cumulative counts per upper bound (seconds), their sum and count.
struct Histogram {
  explicit Histogram(std::vector<double> bounds)
      : bounds(std::move(bounds)), counts(this->bounds.size(), 0) {}
  void observe(double x) {
    for (size_t i = 0; i < bounds.size(); ++i) {
      if (x <= bounds[i]) ++counts[i];
    }
    sum += x;
    ++count;
  }
  std::vector<double> bounds;
  std::vector<int64_t> counts;
  double sum = 0;
  int64_t count = 0;
};

// Counters and latency histograms the scheduler keeps for /metrics.
struct SchedulerStats {
  std::atomic<int64_t> prompt_tokens{0}, generated_tokens{0}, steps{0};
  std::atomic<int64_t> prompt_tokens_cached{0};  // prompt tokens not evaluated: a slot's cache held them
  std::atomic<int64_t> prompt_tokens_shared{0};  // prompt tokens not evaluated: copied from another choice
  std::atomic<int64_t> draft_tokens{0}, draft_tokens_accepted{0};  // speculative decoding's
  // The host prompt cache (PromptCache): admissions it gave a prefix to (beyond the slot's own) or did not
  // (a prompt that may use a cache), the prompt tokens it gave, the bytes it holds and may hold.
  std::atomic<int64_t> host_cache_hits{0}, host_cache_misses{0}, host_cache_tokens{0};
  std::atomic<int64_t> host_cache_bytes{0}, host_cache_max_bytes{0};
  std::atomic<int64_t> queued{0}, busy{0};
  std::mutex m;  // guards the histograms
  // Time to first token, from the request's arrival; the gaps between one choice's tokens.
  Histogram ttft{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
  Histogram itl{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
};

struct SchedulerOptions {
  int64_t n_parallel = 4;
  int64_t n_ctx = 0;
  int64_t batch_size = 256;
  int64_t max_queue = 64;
  // The server's draft source (a choice's options say whether it speculates): with a draft model, one
  // DraftModel keeps a draft cache per slot.
  SpeculativeOptions speculative;
  // The host prompt cache (PromptCache): at most this many bytes; 0: none. Off anyway where the session
  // cannot export its keys and values (Session::exports_kv).
  size_t cache_ram = 0;
  int64_t cache_block = 64;  // tokens per block of it
};

class Scheduler {
 public:
  Scheduler(std::shared_ptr<const Model> model, const Tokenizer* tokenizer, const SchedulerOptions& options);
  ~Scheduler();

  // Queues the task's choices. False when the queue has no room for them (503) or the scheduler is
  // stopping.
  bool submit(const std::shared_ptr<Task>& task);
  // Stops taking tasks; with `cancel` ends the running and queued ones at the next step. The thread
  // exits once nothing is left; wait() joins it.
  void stop(bool cancel);
  void wait();

  int64_t n_ctx() const { return n_ctx_; }
  SchedulerStats& stats() { return stats_; }

 private:
  struct Slot;
  // The free slot for a choice: the one whose cache shares the longest prefix with its prompt (when it may
  // use it) if that is at least half the prompt, else the least recently used; null when every slot is busy.
  // `reuse`: the positions to keep.
  Slot* pick_slot(const ChoiceSpec& spec, int64_t& reuse);
  void loop();
  void step();
  void finish_slot(Slot& s, StopReason reason);
  // The slot's evaluated tokens into the host cache (the blocks it lacks).
  void save_prefix(Slot& s);
  // Extends the slot's prefix `reuse` (the positions its sequence keeps of the prompt) from the host cache.
  int64_t restore_prefix(Slot& s, int64_t reuse);

  std::shared_ptr<const Model> model_;
  std::shared_ptr<Drafter> draft_;  // the server's draft model's, shared by the slots; null: none
  const Tokenizer* tokenizer_;
  SchedulerOptions o_;
  int64_t n_ctx_ = 0;
  Session session_;
  std::unique_ptr<PromptCache> host_cache_;  // null: none
  std::vector<std::unique_ptr<Slot>> slots_;
  struct Queued {
    std::shared_ptr<Task> task;
    int64_t choice;
  };
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<Queued> queue_;
  bool stopping_ = false, cancel_all_ = false;
  int64_t active_ = 0;
  uint64_t clock_ = 0;  // counts admissions: a slot's last_used
  SchedulerStats stats_;
  std::thread thread_;
};

}  // namespace minigpt::server
