// Micro-benchmark of the CPU GEMV kernels: GB/s of weights streamed, one thread, over a weight set far
// larger than the last-level cache (so every byte comes from DRAM, as in a decode step).
// Usage: bench_gemv [K] [N]    (default: GPT-2's c_fc, 768 x 3072)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cpu/kernels.h"

int main(int argc, char** argv) {
  const int64_t K = argc > 1 ? std::atoll(argv[1]) : 768, N = argc > 2 ? std::atoll(argv[2]) : 3072;
  // >= 512 MB of F32 (from DRAM), or with a third argument "cache" one matrix again and again (compute).
  const bool cache = argc > 3;
  const int64_t mats = cache ? 1 : std::max<int64_t>(4, (int64_t(512) << 20) / (K * N * 4));
  const int64_t loops = cache ? 2000 : 1;
  std::vector<float> w32(size_t(mats * K * N), 0.01f);
  std::vector<uint16_t> w16(size_t(mats * K * N), 0x3c00);
  std::vector<float> x(size_t(std::max(K, N)), 1.0f), y(size_t(std::max(K, N)));
  auto time = [&](const char* name, size_t bytes_per_mat, auto fn) {
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t l = 0; l < loops; ++l)
        for (int64_t m = 0; m < mats; ++m) fn(m);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%-16s %7.1f GB/s\n", name, double(bytes_per_mat * mats * loops) / best / 1e9);
  };
  time("gemv_f32", size_t(K * N * 4), [&](int64_t m) { minigpt::cpu::gemv_f32(y.data(), &w32[size_t(m * K * N)], K, x.data(), N, K, true); });
  time("gemv_inout_f32", size_t(K * N * 4), [&](int64_t m) { minigpt::cpu::gemv_inout_f32(y.data(), &w32[size_t(m * K * N)], N, x.data(), N, K, true); });
  // 16-bit: the packed layout (K and N multiples of 16 and 4 here, so no padding).
  time("packed bf16", size_t(K * N * 2), [&](int64_t m) { minigpt::cpu::gemv_packed16(y.data(), &w16[size_t(m * K * N)], K, x.data(), 0, N, K, true, true); });
  time("packed f16", size_t(K * N * 2), [&](int64_t m) { minigpt::cpu::gemv_packed16(y.data(), &w16[size_t(m * K * N)], K, x.data(), 0, N, K, true, false); });
  return 0;
}
