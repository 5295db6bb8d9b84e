#include "cpu/thread_pool.h"

#include <immintrin.h>

namespace minigpt::cpu {
namespace {
// Spin this many pauses (tens of microseconds) before sleeping: ops of one forward pass follow each
// other closely, and waking a sleeping thread costs more than the op itself during decode.
constexpr int kSpinPauses = 20000;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  std::lock_guard<std::mutex> serial(dispatch_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  fn(0, n_threads_);
  int spins = 0;
  while (pending_.load(std::memory_order_acquire) != 0) {
    if (++spins < kSpinPauses) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spins = 0; gen == seen && spins < kSpinPauses; ++spins) {
      _mm_pause();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    (*job_)(index, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace minigpt::cpu
