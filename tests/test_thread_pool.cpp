// The CPU backend's thread pool: every slot of a job runs exactly once, run() returns only after all of
// them, and the caller does not wait for a worker that never gets a CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cpu/sysinfo.h"
#include "cpu/thread_pool.h"

namespace minigpt::cpu {
namespace {

// Runs `body` on its own thread and fails (ending the process: the thread cannot be joined) when it has
// not returned after `seconds`, so that a pool that waits forever fails this test instead of hanging ctest.
template <typename Body>
void within(double seconds, const char* what, Body body) {
  std::atomic<bool> done{false};
  std::thread t([&] {
    body();
    done.store(true);
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!done.load()) {
    std::fprintf(stderr, "FAILED: %s did not return within %.0f s\n", what, seconds);
    std::fflush(stderr);
    std::_Exit(1);
  }
  t.join();
}

TEST(ThreadPool, EverySlotRunsOnceAndRunReturnsAfterAll) {
  for (int n : {1, 2, 3, 8}) {
    ThreadPool pool(n);
    ASSERT_EQ(pool.size(), n);
    std::vector<std::atomic<int>> calls(static_cast<size_t>(n));
    within(60, "run()", [&] {
      for (int job = 0; job < 1000; ++job) {
        for (auto& c : calls) c.store(0);
        std::atomic<int> bad_nth{0};
        pool.run([&](int slot, int nth) {
          if (nth != n) bad_nth.fetch_add(1);
          // Some slots take a while, so that a run() returning early would find their count still 0.
          if ((slot + job) % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
          calls[static_cast<size_t>(slot)].fetch_add(1);
        });
        ASSERT_EQ(bad_nth.load(), 0) << "n = " << n;
        for (int s = 0; s < n; ++s) {
          ASSERT_EQ(calls[static_cast<size_t>(s)].load(), 1)
              << "n = " << n << ", job " << job << ", slot " << s;
        }
      }
    });
  }
}

TEST(ThreadPool, MoreThreadsThanCpusStillRunEverySlotOnce) {
  // More threads than CPUs: run() wakes only one worker per other CPU (each claims slots until none is left)
  // and nobody spins; every slot must still run exactly once, whichever thread takes it.
  const int n = 4 * cpu_count() + 1;
  ThreadPool pool(n);
  std::vector<std::atomic<int>> calls(static_cast<size_t>(n));
  within(60, "run() with more threads than CPUs", [&] {
    for (int job = 0; job < 300; ++job) {
      for (auto& c : calls) c.store(0);
      pool.run([&](int slot, int) {
        if ((slot + job) % 5 == 0) std::this_thread::sleep_for(std::chrono::microseconds(10));
        calls[static_cast<size_t>(slot)].fetch_add(1);
      });
      for (int s = 0; s < n; ++s)
        ASSERT_EQ(calls[static_cast<size_t>(s)].load(), 1)
            << "n = " << n << ", job " << job << ", slot " << s;
    }
    std::atomic<int64_t> sum{0};
    pool.parallel_chunks(100000, 100, [&](int64_t b, int64_t e) {
      int64_t part = 0;
      for (int64_t i = b; i < e; ++i) part += i;
      sum.fetch_add(part);
    });
    EXPECT_EQ(sum.load(), int64_t(99999) * 100000 / 2);
  });
}

TEST(ThreadPool, TheCallerRunsTheSlotsOfWorkersThatNeverStart) {
  // A pool whose 3 workers never run (as a vCPU the hypervisor has not scheduled yet): run() must do every
  // slot on the calling thread and return, not wait for the workers.
  ThreadPool pool(4, /*start_workers=*/false);
  within(20, "run() without running workers", [&] {
    const std::thread::id caller = std::this_thread::get_id();
    for (int job = 0; job < 100; ++job) {
      std::vector<int> calls(4, 0);
      std::set<std::thread::id> ran_on;
      pool.run([&](int slot, int) {
        ++calls[static_cast<size_t>(slot)];
        ran_on.insert(std::this_thread::get_id());
      });
      EXPECT_EQ(calls, std::vector<int>(4, 1));
      EXPECT_EQ(ran_on, std::set<std::thread::id>{caller});
    }
    int64_t sum = 0;
    pool.parallel_chunks(1000, 7, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i;
    });
    EXPECT_EQ(sum, 999 * 1000 / 2);
  });
}

TEST(ThreadPool, ChunksAndRangesCoverEveryItemOnce) {
  ThreadPool pool(3);
  within(60, "parallel_chunks / parallel_for", [&] {
    for (int64_t n : {1, 2, 5, 64, 1000, 4097}) {
      std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
      pool.parallel_chunks(n, 16, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
      });
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 2) << "n " << n << " i " << i;
    }
  });
}

// parallel_guided: every item once; every piece starts on a multiple of the quantum and, but for the last,
// ends on one, holds at least min_piece items and no more than the share of what was left when it was cut
// (a 2 x threads-th, rounded up to the quantum); a range of at most min_piece is one call.
TEST(ThreadPool, GuidedPiecesCoverEveryItemOnceLargeFirst) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    within(60, "parallel_guided", [&] {
      for (int64_t n : {1, 3, 16, 17, 64, 576, 1000, 4097}) {
        std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
        std::mutex m;
        std::vector<std::pair<int64_t, int64_t>> pieces;
        pool.parallel_guided(n, 4, 16, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
          std::lock_guard<std::mutex> lock(m);
          pieces.emplace_back(b, e);
        });
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 1)
              << "threads " << threads << " n " << n << " i " << i;
        std::sort(pieces.begin(), pieces.end());
        if (n <= 16 || threads == 1) {
          EXPECT_EQ(pieces.size(), 1u) << "n " << n;
          continue;
        }
        for (const auto& [b, e] : pieces) {
          EXPECT_EQ(b % 4, 0) << "n " << n << " piece at " << b;
          if (e == n) continue;
          EXPECT_EQ(e % 4, 0) << "n " << n << " piece at " << b;
          EXPECT_GE(e - b, 16) << "n " << n << " piece at " << b;
          const int64_t share = std::max<int64_t>(16, (n - b + 2 * threads - 1) / (2 * threads));
          EXPECT_EQ(e - b, (share + 3) / 4 * 4) << "n " << n << " piece at " << b;
        }
      }
    });
  }
}

TEST(ThreadPool, ConcurrentCallersAreServedOneAfterTheOther) {
  ThreadPool pool(2);
  std::atomic<int> inside{0}, overlap{0}, total{0};
  within(60, "concurrent run()", [&] {
    std::vector<std::thread> callers;
    for (int c = 0; c < 3; ++c) {
      callers.emplace_back([&] {
        for (int job = 0; job < 500; ++job) {
          std::atomic<int> started{0}, finished{0};
          pool.run([&](int, int nth) {
            // The job's first slot to start enters, its last to finish leaves: another job inside meanwhile
            // would be an overlap.
            if (started.fetch_add(1) == 0 && inside.fetch_add(1) != 0) overlap.fetch_add(1);
            total.fetch_add(1);
            if (finished.fetch_add(1) == nth - 1) inside.fetch_sub(1);
          });
        }
      });
    }
    for (auto& t : callers) t.join();
  });
  EXPECT_EQ(total.load(), 3 * 500 * 2);
  EXPECT_EQ(overlap.load(), 0);
}

// An exception thrown in any slot, the caller's or a worker's, reaches run()'s caller once every other slot
// has run (left on a worker, it would end the process in std::terminate, as a bad MINIGPT_CPU would);
// the pool then runs the next job as usual. Also through parallel_chunks.
TEST(ThreadPool, AnExceptionInAnySlotIsRethrownByRun) {
  for (int n : {2, 3, cpu_count() * 2 + 1}) {
    ThreadPool pool(n);
    within(60, "run() with a throwing slot", [&] {
      for (int job = 0; job < 200; ++job) {
        const int bad = job % n;  // slot 0 is the caller's own
        std::atomic<int> ran{0};
        std::string what;
        try {
          pool.run([&](int slot, int) {
            if (slot == bad) throw std::runtime_error("slot " + std::to_string(slot));
            if (slot % 2 == 1) std::this_thread::sleep_for(std::chrono::microseconds(20));
            ran.fetch_add(1);
          });
        } catch (const std::runtime_error& e) {
          what = e.what();
        }
        ASSERT_EQ(what, "slot " + std::to_string(bad)) << "n = " << n << ", job " << job;
        ASSERT_EQ(ran.load(), n - 1) << "n = " << n << ", job " << job;  // the others all ran first
        std::atomic<int> next{0};
        pool.run([&](int, int) { next.fetch_add(1); });
        ASSERT_EQ(next.load(), n) << "n = " << n << ", job " << job;
      }
      std::atomic<int64_t> covered{0};
      EXPECT_THROW(pool.parallel_chunks(1000, 10,
                                        [&](int64_t b, int64_t e) {
                                          if (b == 500) throw std::length_error("chunk 500");
                                          covered.fetch_add(e - b);
                                        }),
                   std::length_error);
      EXPECT_EQ(covered.load(), 990) << "n = " << n;  // every other chunk ran
    });
  }
}

}  // namespace
}  // namespace minigpt::cpu
