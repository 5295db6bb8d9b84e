// Micro-benchmark of prefill's F32 GEMM (cpu::fgemm): GFLOP/s of one thread for T tokens against matrices of
// K columns, N = 768 * 3072 / K rows (the same flops at every K), the best of 5 runs. With few tokens the
// packed activations sit in L2; with 512 (a pp512 prefill) they are 512 K 4 bytes, 6 MB at K = 3072: how
// well fgemm's loops keep them near (bench/results/2026-11-29-xeon-prefill.md).
// Usage: bench_gemm [T]   (default 512; MINIGPT_CPU picks the level)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "cpu/kernels.h"

int main(int argc, char** argv) {
  namespace cpu = minigpt::cpu;
  const int64_t T = argc > 1 ? std::atoll(argv[1]) : 512;
  if (!cpu::fgemm_available()) {
    std::printf("kernel level %s has no fgemm (it needs AVX-512)\n", cpu::kernel_level_name());
    return 0;
  }
  std::printf("kernel level %s, %lld tokens, 1 thread\n", cpu::kernel_level_name(), (long long)T);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t K : {128, 256, 576, 768, 1536, 3072}) {
    const int64_t N = 768 * 3072 / K / 12 * 12;
    std::vector<float> w(size_t(N * K)), x(size_t(T * K)), y(size_t(T * N));
    for (auto& v : w) v = u(rng);
    for (auto& v : x) v = u(rng);
    std::vector<float> buf(size_t(cpu::fgemm_packed_floats(T, K)) + 16);
    float* xp = buf.data() + (16 - (reinterpret_cast<uintptr_t>(buf.data()) / 4) % 16) % 16;
    cpu::fgemm_pack_x(xp, x.data(), K, T, K, 0, T);
    double best = 1e30;
    for (int r = 0; r < 5; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      cpu::fgemm(y.data(), N, w.data(), K, N, xp, T, K);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("K %5lld N %5lld: %6.1f GFLOP/s\n", (long long)K, (long long)N, 2.0 * T * N * K / best / 1e9);
  }
  return 0;
}
