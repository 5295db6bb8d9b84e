// A fixed set of worker threads created once; the caller's thread takes part as thread 0. Work is
// handed over by bumping a generation counter, so no thread is created and nothing is allocated per op.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace minigpt::cpu {

class ThreadPool {
 public:
  // `start_workers` false is for tests only: a pool whose workers never get a CPU, as a vCPU the
  // hypervisor has not scheduled yet looks to this process.
  explicit ThreadPool(int n_threads, bool start_workers = true);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(slot, n_threads) once for every slot in [0, n_threads) and returns when all have finished.
  // The caller runs slot 0; each worker that notices the job claims a free slot (an atomic compare-and-swap),
  // and the caller, once done with its own, runs the slots nobody has claimed yet instead of waiting for a
  // thread that the OS or the hypervisor has not run yet (on a 2-vCPU VM, an idle vCPU can take tens of
  // milliseconds to come back). So fn must not depend on which thread runs a slot, nor on slots running at
  // the same time. Concurrent callers (sessions on different threads sharing one model) are served one after
  // the other. An exception thrown by fn in any slot (a failed allocation in a worker, say) is rethrown here
  // once every slot has finished, the first one if several threw (left on a worker, it would end the process
  // in std::terminate).
  void run(const std::function<void(int, int)>& fn);

  // Calls fn(begin, end) for chunks of [0, n) of `chunk` items each (the last may be shorter), handed to
  // the threads as they come free, one atomic add per chunk: a thread the OS or the hypervisor holds back
  // does fewer chunks instead of keeping the others waiting at the end.
  template <typename Fn>
  void parallel_chunks(int64_t n, int64_t chunk, Fn&& fn) {
    if (n <= 0) return;
    const int64_t n_chunks = (n + chunk - 1) / chunk;
    if (n_threads_ == 1 || n_chunks == 1) {
      fn(int64_t(0), n);
      return;
    }
    std::atomic<int64_t> next{0};
    run([&](int, int) {
      for (int64_t c; (c = next.fetch_add(1, std::memory_order_relaxed)) < n_chunks;) {
        fn(c * chunk, std::min(n, (c + 1) * chunk));
      }
    });
  }

  // Calls fn(begin, end) for pieces of [0, n) handed to the threads as they come free, each a share of what
  // is left (a 2 x threads-th of it, rounded up to a multiple of `quantum`, at least `min_piece`): large
  // pieces first and small ones at the end, so that the threads finish nearly together (a decode GEMV in
  // fixed chunks of 64 rows leaves one thread waiting half a chunk at the end of each product) without
  // cutting the whole product into small pieces. Every boundary but n is a multiple of `quantum`.
  template <typename Fn>
  void parallel_guided(int64_t n, int64_t quantum, int64_t min_piece, Fn&& fn) {
    if (n <= 0) return;
    if (n_threads_ == 1 || n <= min_piece) {
      fn(int64_t(0), n);
      return;
    }
    std::atomic<int64_t> next{0};
    const int64_t div = 2 * int64_t(n_threads_);
    run([&](int, int) {
      int64_t cur = next.load(std::memory_order_relaxed);
      while (cur < n) {
        const int64_t share = std::max(min_piece, (n - cur + div - 1) / div);
        const int64_t end = std::min(n, cur + (share + quantum - 1) / quantum * quantum);
        // On failure cur is what another thread left: try again from there.
        if (next.compare_exchange_weak(cur, end, std::memory_order_relaxed)) {
          fn(cur, end);
          cur = next.load(std::memory_order_relaxed);
        }
      }
    });
  }

  // Splits [0, n) into one contiguous range per slot and calls fn(begin, end) for each non-empty one.
  template <typename Fn>
  void parallel_for(int64_t n, Fn&& fn) {
    if (n <= 0) return;
    if (n_threads_ == 1 || n == 1) {
      fn(int64_t(0), n);
      return;
    }
    run([&](int ith, int nth) {
      const int64_t per = (n + nth - 1) / nth;
      const int64_t begin = std::min<int64_t>(n, per * ith);
      const int64_t end = std::min<int64_t>(n, begin + per);
      if (begin < end) fn(begin, end);
    });
  }

 private:
  void worker();
  // Claims free slots of generation `gen`, starting from `s` (a value of state_), and runs them; returns how
  // many. A worker counts each in done_by_workers_.
  int run_free_slots(uint64_t gen, uint64_t s, bool by_worker);
  // fn(slot, n_threads_), an exception kept for run() to rethrow.
  void run_slot(const std::function<void(int, int)>& fn, int slot);

  int n_threads_;
  // How many pauses a waiting thread spins before it sleeps (or, the caller, yields): kSpinPauses when every
  // thread can have a CPU of its own, 0 when there are more threads than CPUs this process may run on (a
  // spinning thread would then hold a CPU that a thread with work is waiting for).
  int spin_pauses_;
  int n_wake_;  // workers run() wakes: all, or one per other CPU when there are more threads than CPUs
  std::vector<std::thread> threads_;
  std::mutex dispatch_;  // one run() at a time
  std::mutex mutex_;     // guards the sleep/wake hand-over
  std::condition_variable wake_;
  // The job's generation and how many of its slots have been claimed, in one word, so that a claim names the
  // job it is for.
  std::atomic<uint64_t> state_{0};
  std::atomic<int> done_by_workers_{0};  // slots of the current job finished by workers
  std::atomic<bool> stop_{false};
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<bool> failed_{false};  // a slot of the current job threw
  std::mutex error_mutex_;
  std::exception_ptr error_;  // the first exception of the current job
};

}  // namespace minigpt::cpu
