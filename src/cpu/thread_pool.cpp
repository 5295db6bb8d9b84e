#include "cpu/thread_pool.h"

#include <immintrin.h>
#include <pthread.h>
#include <signal.h>

#include "cpu/sysinfo.h"

namespace minigpt::cpu {
namespace {
// Spin this many pauses (tens of microseconds) before sleeping: ops of one forward pass follow each
// other closely, and waking a sleeping thread costs more than the op itself during decode.
constexpr int kSpinPauses = 20000;

// state_: the generation in the high 48 bits (never wraps in practice), the slots claimed in the low 16
// (the backend allows at most 1024 threads).
constexpr int kSlotBits = 16;
uint64_t generation(uint64_t state) { return state >> kSlotBits; }
int claimed(uint64_t state) { return int(state & ((uint64_t(1) << kSlotBits) - 1)); }
uint64_t make_state(uint64_t gen, int claimed) { return gen << kSlotBits | uint64_t(claimed); }
}  // namespace

ThreadPool::ThreadPool(int n_threads, bool start_workers)
    : n_threads_(n_threads < 1      ? 1
                 : n_threads > 1024 ? 1024
                                    : n_threads),
      spin_pauses_(n_threads_ <= cpu_count() ? kSpinPauses : 0),
      n_wake_(n_threads_ <= cpu_count() ? n_threads_ - 1 : cpu_count() - 1) {
  if (!start_workers) return;
  // The workers block the asynchronous signals (they inherit the mask they are created with), so that a
  // signal sent to the process (Ctrl-C's SIGINT, SIGTERM, ...) runs its handler in a thread of the
  // program's own rather than in a worker that may not be scheduled until later: `generate -i` counts a
  // Ctrl-C before the turn it ends, and a worker busy or waiting for a core would count it tokens late.
  sigset_t async, old;
  sigemptyset(&async);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGALRM, SIGUSR1, SIGUSR2, SIGCHLD, SIGWINCH})
    sigaddset(&async, sig);
  pthread_sigmask(SIG_BLOCK, &async, &old);
  try {
    for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this] { worker(); });
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    throw;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
    // A new generation with every slot taken: the workers wake, see stop_, and leave.
    const uint64_t gen = generation(state_.load()) + 1;
    state_.store(make_state(gen, n_threads_), std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

int ThreadPool::run_free_slots(uint64_t gen, uint64_t s, bool by_worker) {
  int ran = 0;
  while (generation(s) == gen && claimed(s) < n_threads_) {
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire))
      continue;
    // The job cannot end before this slot is counted done, so job_ stays valid while it runs.
    run_slot(*job_, claimed(s));
    ++ran;
    if (by_worker) done_by_workers_.fetch_add(1, std::memory_order_release);
    s = state_.load(std::memory_order_acquire);
  }
  return ran;
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  std::lock_guard<std::mutex> serial(dispatch_);
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    done_by_workers_.store(0, std::memory_order_relaxed);
    gen = generation(state_.load(std::memory_order_relaxed)) + 1;
    state_.store(make_state(gen, 1), std::memory_order_release);  // slot 0 is this thread's
  }
  // More threads than CPUs: wake as many workers as there are other CPUs (each claims slots until none is
  // left; the caller runs the rest). Waking every sleeper made each op a storm of context switches: 1024
  // threads on 2 CPUs decoded at 0.2 tok/s.
  if (n_wake_ == n_threads_ - 1) {
    wake_.notify_all();
  } else {
    for (int i = 0; i < n_wake_; ++i) wake_.notify_one();
  }
  run_slot(fn, 0);
  // The slots no worker has claimed by now: run here rather than wait for a thread not running yet.
  const int by_caller = 1 + run_free_slots(gen, state_.load(std::memory_order_acquire), false);
  // The slots workers claimed are running on a CPU: wait for them.
  const int by_workers = n_threads_ - by_caller;
  int spins = 0;
  while (done_by_workers_.load(std::memory_order_acquire) != by_workers) {
    if (++spins < spin_pauses_) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
  if (failed_.load(std::memory_order_acquire)) {
    std::exception_ptr e;
    {
      std::lock_guard<std::mutex> lock(error_mutex_);
      std::swap(e, error_);
    }
    failed_.store(false, std::memory_order_relaxed);
    std::rethrow_exception(e);
  }
}

void ThreadPool::run_slot(const std::function<void(int, int)>& fn, int slot) {
  try {
    fn(slot, n_threads_);
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
    failed_.store(true, std::memory_order_release);
  }
}

void ThreadPool::worker() {
  uint64_t seen = 0;
  for (;;) {
    uint64_t s = state_.load(std::memory_order_acquire);
    for (int spins = 0; generation(s) == seen && spins < spin_pauses_; ++spins) {
      _mm_pause();
      s = state_.load(std::memory_order_acquire);
    }
    if (generation(s) == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation(state_.load(std::memory_order_acquire)) != seen; });
      s = state_.load(std::memory_order_acquire);
    }
    seen = generation(s);
    if (stop_.load()) return;
    run_free_slots(seen, s, true);
  }
}

}  // namespace minigpt::cpu
