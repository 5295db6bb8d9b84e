// A fixed set of worker threads created once; the caller's thread takes part as thread 0. Work is
// handed over by bumping a generation counter, so no thread is created and nothing is allocated per op.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace minigpt::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index, n_threads) on every thread and returns when all have finished. Concurrent
  // callers (sessions on different threads sharing one model) are served one after the other.
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

  // Splits [0, n) into one contiguous range per thread and calls fn(begin, end) for each non-empty one.
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
  void worker(int index);

  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex dispatch_;  // one run() at a time
  std::mutex mutex_;     // guards the sleep/wake hand-over
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int, int)>* job_ = nullptr;
};

}  // namespace minigpt::cpu
