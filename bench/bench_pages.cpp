// What page size costs a decode GEMV: THREADS threads streaming K x N packed BF16 matrices from DRAM (768 MB
// of them, taken in a shuffled order, as a decode step takes a model's matrices; thread t takes every
// THREADS-th), once in memory advised into 4 KB pages and once into 2 MB pages (transparent huge pages,
// "madvise" mode). Prints the GB/s of all threads together and the us per matrix, ROUNDS times in turn.
// Usage: bench_pages [K] [N] [ROUNDS] [THREADS]   (default 576 576 3 2: SmolLM2-135M's q and o projections)
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "cpu/kernels.h"

namespace {

struct Region {
  uint16_t* w = nullptr;
  size_t bytes = 0;
};

Region make_region(size_t bytes, bool huge) {
  constexpr size_t kAlign = size_t(2) << 20;
  Region r;
  r.bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  r.w = static_cast<uint16_t*>(std::aligned_alloc(kAlign, r.bytes));
  if (r.w == nullptr) {
    std::fprintf(stderr, "bench_pages: cannot allocate %zu bytes\n", r.bytes);
    std::exit(1);
  }
  ::madvise(r.w, r.bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  std::fill(r.w, r.w + r.bytes / 2, uint16_t(0x3c00));
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  namespace cpu = minigpt::cpu;
  const int64_t K = argc > 1 ? std::atoll(argv[1]) : 576, N = argc > 2 ? std::atoll(argv[2]) : 576;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 3, threads = argc > 4 ? std::atoi(argv[4]) : 2;
  if (K <= 0 || N <= 0 || K % 16 != 0 || N % 4 != 0 || rounds <= 0 || threads <= 0 || threads > 64) {
    std::fprintf(stderr,
                 "bench_pages: K a positive multiple of 16, N of 4, ROUNDS positive, THREADS 1..64\n");
    return 1;
  }
  const int64_t per = K * N, mats = std::max<int64_t>(8, (int64_t(768) << 20) / (per * 2));
  std::printf("kernel level %s, %lld matrices of %lld x %lld BF16, %d threads, shuffled order\n",
              cpu::kernel_level_name(), (long long)mats, (long long)K, (long long)N, threads);
  const Region small = make_region(size_t(mats * per * 2), false),
               huge = make_region(size_t(mats * per * 2), true);
  const std::vector<float> x(static_cast<size_t>(K), 1.0f);
  std::vector<std::vector<float>> y(static_cast<size_t>(threads), std::vector<float>(static_cast<size_t>(N)));
  std::vector<int64_t> order(static_cast<size_t>(mats));
  for (int64_t i = 0; i < mats; ++i) order[size_t(i)] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(1));
  for (int round = 1; round <= rounds; ++round) {
    for (const Region* r : {&small, &huge}) {
      double best = 1e30;
      for (int rep = 0; rep < 5; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t) {
          pool.emplace_back([&, t] {
            for (size_t i = size_t(t); i < order.size(); i += size_t(threads))
              cpu::gemv_packed16(y[size_t(t)].data(), r->w + order[i] * per, K, x.data(), 0, N, K, false,
                                 true);
          });
        }
        for (std::thread& th : pool) th.join();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::printf("round %d  %s pages: %5.1f GB/s, %6.2f us per matrix\n", round,
                  r == &small ? "4 KB" : "2 MB", double(mats * per * 2) / best / 1e9,
                  best / double(mats) * 1e6);
    }
  }
  return 0;
}
