// Micro-benchmark of the CPU GEMV kernels: GB/s of weights streamed, one thread, over a weight set far
// larger than the last-level cache (so every byte comes from DRAM, as in a decode step), and for the
// multi-row kernels (batched decode, nx rows of activations) the effective GFLOP/s as well.
// Usage: bench_gemv [K] [N] [cache]   (default: GPT-2's c_fc, 768 x 3072; MINIGPT_CPU picks the level)
// Where the level has prefill's int8 GEMM (and Q8_0's 16-bit one) it is timed too (weights in cache, 512
// tokens: GFLOP/s).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cpu/kernels.h"

int main(int argc, char** argv) {
  namespace cpu = minigpt::cpu;
  const int64_t K = argc > 1 ? std::atoll(argv[1]) : 768, N = argc > 2 ? std::atoll(argv[2]) : 3072;
  // >= 512 MB of F32 (from DRAM), or with a third argument "cache" one matrix again and again (compute).
  const bool cache = argc > 3;
  const int64_t mats = cache ? 1 : std::max<int64_t>(4, (int64_t(512) << 20) / (K * N * 4));
  const int64_t loops = cache ? 2000 : 1;
  std::printf("kernel level %s (CPU: %s), K = %lld, N = %lld, %s\n", cpu::kernel_level_name(),
              cpu::cpu_features().c_str(), (long long)K, (long long)N,
              cache ? "one matrix (cache)" : "weights from DRAM");
  std::vector<float> w32(size_t(mats * K * N), 0.01f);
  std::vector<uint16_t> w16(size_t(mats * K * N), 0x3c00);
  constexpr int64_t kMaxRows = 16;
  const int64_t ld = std::max(K, N);
  // The multi-row kernels' rows of x and y lie as the backend's activations do: K and N floats apart.
  const int64_t ldx = K, ldy = N;
  std::vector<float> x(size_t(kMaxRows * ld), 1.0f), y(size_t(kMaxRows * ld));
  // flops_per_mat 0: GB/s only.
  auto time = [&](const std::string& name, size_t bytes_per_mat, double flops_per_mat, auto fn) {
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t l = 0; l < loops; ++l)
        for (int64_t m = 0; m < mats; ++m) fn(m);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double n = double(mats * loops);
    std::printf("%-34s %7.1f GB/s", name.c_str(), double(bytes_per_mat) * n / best / 1e9);
    if (flops_per_mat > 0) std::printf("  %7.1f GFLOP/s", flops_per_mat * n / best / 1e9);
    std::printf("\n");
  };
  const double mac = 2.0 * double(K) * double(N);
  time("gemv_f32", size_t(K * N * 4), mac,
       [&](int64_t m) { cpu::gemv_f32(y.data(), &w32[size_t(m * K * N)], K, x.data(), N, K, true); });
  // 16-bit: the packed layout (K and N multiples of 16 and 4 here, so no padding).
  time("packed bf16", size_t(K * N * 2), mac, [&](int64_t m) {
    cpu::gemv_packed16(y.data(), &w16[size_t(m * K * N)], K, x.data(), 0, N, K, true, true);
  });
  time("packed f16", size_t(K * N * 2), mac, [&](int64_t m) {
    cpu::gemv_packed16(y.data(), &w16[size_t(m * K * N)], K, x.data(), 0, N, K, true, false);
  });
  // Quantized weights (GGUF blocks; the bytes are arbitrary, the speed does not depend on them) against
  // activations quantized once per product, as the backend does (the quantization is timed too).
  struct QuantCase {
    const char* name;
    cpu::QKind kind;
    int64_t block, bytes;
  };
  std::vector<int8_t> xq_store(size_t(kMaxRows * K + 32));
  int8_t* xq = xq_store.data() + (32 - reinterpret_cast<uintptr_t>(xq_store.data()) % 32) % 32;
  std::vector<float> xd(size_t(kMaxRows * K / 32));
  std::vector<int16_t> xs(size_t(kMaxRows * K / 16));
  std::vector<int16_t> xq16_store(size_t(kMaxRows * K + 32));
  int16_t* xq16 = xq16_store.data() + (64 - reinterpret_cast<uintptr_t>(xq16_store.data()) % 64) % 64 / 2;
  std::vector<cpu::QAct> acts;
  for (int64_t t = 0; t < kMaxRows; ++t)
    acts.push_back({xq + t * K, xd.data() + t * K / 32, xs.data() + t * K / 16, xq16 + t * K});
  for (const QuantCase& q :
       {QuantCase{"Q8_0", cpu::QKind::Q8_0, 32, 34}, QuantCase{"Q4_0", cpu::QKind::Q4_0, 32, 18},
        QuantCase{"Q4_K", cpu::QKind::Q4_K, 256, 144}, QuantCase{"Q5_K", cpu::QKind::Q5_K, 256, 176},
        QuantCase{"Q6_K", cpu::QKind::Q6_K, 256, 210}, QuantCase{"Q5_0", cpu::QKind::Q5_0, 32, 22},
        QuantCase{"Q5_1", cpu::QKind::Q5_1, 32, 24}, QuantCase{"Q4_1", cpu::QKind::Q4_1, 32, 20}}) {
    if (K % q.block != 0) continue;
    // BENCH_QUANT_ONLY=Q4_K: that type only (e.g. under perf stat)
    if (const char* only = std::getenv("BENCH_QUANT_ONLY");
        only != nullptr && *only != '\0' && std::string(only) != "1" && std::string(only) != q.name)
      continue;
    const int64_t rb = K / q.block * q.bytes;
    const int64_t qmats = cache ? 1 : std::max<int64_t>(4, (int64_t(512) << 20) / (rb * N));
    std::vector<uint8_t> wq(size_t(qmats * rb * N), 0x11);
    for (int64_t nx : {1, 4, 8}) {
      const std::string name = std::string(q.name) + " nx=" + std::to_string(nx);
      double best = 1e30;
      for (int rep = 0; rep < 5; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t l = 0; l < loops; ++l)
          for (int64_t m = 0; m < qmats; ++m) {
            for (int64_t t = 0; t < nx; ++t) {
              if (cpu::acts_int16(q.kind))
                cpu::quantize_acts16(x.data() + t * ld, K, xq16 + t * K, xd.data() + t * K / 32);
              else
                cpu::quantize_acts(x.data() + t * ld, K, xq + t * K, xd.data() + t * K / 32,
                                   xs.data() + t * K / 16, cpu::act_block_size(q.kind));
            }
            cpu::gemv_quant(q.kind, y.data(), ld, &wq[size_t(m * rb * N)], 0, acts.data(), nx, N, K, true);
          }
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      const double n = double(qmats * loops);
      std::printf("%-34s %7.1f GB/s  %7.1f GFLOP/s\n", name.c_str(), double(rb * N) * n / best / 1e9,
                  mac * double(nx) * n / best / 1e9);
    }
  }
  // Prefill's int8 GEMM where the level has it: 256 weight rows (16 panels, each repacked as the backend
  // does) against 512 tokens, the weights in cache: GFLOP/s of the multiply-adds, the repacking included.
  if (cpu::qgemm_available()) {
    const int64_t T = 512, R = 256;
    std::vector<uint8_t> xu(size_t(T * K), 0x93);
    std::vector<float> xdq(size_t(2 * T * (K / 32)), 0.01f);
    for (const QuantCase& q :
         {QuantCase{"Q4_0", cpu::QKind::Q4_0, 32, 18}, QuantCase{"Q4_K", cpu::QKind::Q4_K, 256, 144},
          QuantCase{"Q5_K", cpu::QKind::Q5_K, 256, 176}, QuantCase{"Q6_K", cpu::QKind::Q6_K, 256, 210},
          QuantCase{"Q5_0", cpu::QKind::Q5_0, 32, 22}, QuantCase{"Q5_1", cpu::QKind::Q5_1, 32, 24},
          QuantCase{"Q4_1", cpu::QKind::Q4_1, 32, 20}}) {
      if (K % q.block != 0 || !cpu::qgemm_takes(q.kind)) continue;
      if (const char* only = std::getenv("BENCH_QUANT_ONLY");
          only != nullptr && *only != '\0' && std::string(only) != "1" && std::string(only) != q.name)
        continue;
      std::vector<uint8_t> wq(size_t(R * (K / q.block) * q.bytes), 0x11);
      std::vector<uint8_t> panel(size_t(cpu::qgemm_panel_bytes(K)));
      std::vector<float> yq(size_t(T * R));
      double best = 1e30;
      for (int rep = 0; rep < 30; ++rep) {  // short runs: the best of many
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t p = 0; p < R; p += cpu::kQgemmRows) {
          cpu::qgemm_pack(panel.data(), q.kind, wq.data(), p, cpu::kQgemmRows, K);
          cpu::qgemm(q.kind, yq.data() + p, R, panel.data(), xu.data(), K, xdq.data(),
                     xdq.data() + T * (K / 32), K / 32, T, cpu::kQgemmRows, K);
        }
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::printf("%-34s %7.1f GFLOP/s\n", (std::string(q.name) + " int8 GEMM, 512 tokens").c_str(),
                  2.0 * double(K) * double(R) * double(T) / best / 1e9);
    }
  }
  // Q8_0's 16-bit GEMM where the level has it (VNNI): the same shape, the activations' packing (done once per
  // product, not per panel) outside the timing, the panels' widening inside.
  if (cpu::q8gemm_available() && K % 32 == 0) {
    const int64_t T = 512, R = 256;
    std::vector<float> xf(size_t(T * K));
    for (size_t i = 0; i < xf.size(); ++i) xf[i] = float(int64_t(i % 17) - 8) * 0.01f;
    std::vector<uint8_t> xbuf(size_t(cpu::q8gemm_x_bytes(T, K)) + 64),
        pbuf(size_t(cpu::q8gemm_panel_bytes(K)) + 64);
    uint8_t* xp = xbuf.data() + (64 - reinterpret_cast<uintptr_t>(xbuf.data()) % 64) % 64;
    uint8_t* panel = pbuf.data() + (64 - reinterpret_cast<uintptr_t>(pbuf.data()) % 64) % 64;
    cpu::q8gemm_pack_x(xp, xf.data(), K, T, K, 0, T);
    std::vector<uint8_t> wq(size_t(R * (K / 32) * 34), 0x11);
    std::vector<float> yq(size_t(T * R));
    double best = 1e30;
    for (int rep = 0; rep < 30; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t p = 0; p < R; p += cpu::kQ8gemmRows) {
        cpu::q8gemm_pack_w(panel, wq.data(), p, cpu::kQ8gemmRows, K);
        cpu::q8gemm(yq.data() + p, R, panel, xp, T, cpu::kQ8gemmRows, K, true);
      }
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%-34s %7.1f GFLOP/s\n", "Q8_0 16-bit GEMM, 512 tokens",
                2.0 * double(K) * double(R) * double(T) / best / 1e9);
  }
  if (std::getenv("BENCH_QUANT_ONLY") != nullptr) return 0;
  // BF16's GEMM of prefill where the level has it: 256 weight rows (read in place) against 512 tokens, the
  // weights in cache, the activations' packing (once per product) outside the timing.
  std::vector<uint16_t> xb(size_t(kMaxRows * K));
  if (cpu::bf16_available() && K % 16 == 0) {
    const int64_t T = 512, R = 256;
    std::vector<float> xf(size_t(T * K));
    for (size_t i = 0; i < xf.size(); ++i) xf[i] = float(int64_t(i % 17) - 8) * 0.01f;
    std::vector<uint16_t> xbuf(size_t(cpu::bgemm_packed_halves(T, K)) + 32), wb(size_t(R * K), 0x3c00);
    uint16_t* xp = xbuf.data() + (32 - (reinterpret_cast<uintptr_t>(xbuf.data()) / 2) % 32) % 32;
    cpu::bgemm_pack_x(xp, xf.data(), K, T, K, 0, T);
    std::vector<float> yb(size_t(T * R));
    double best = 1e30;
    for (int rep = 0; rep < 30; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      cpu::bgemm(yb.data(), R, wb.data(), K, 0, R, xp, T, K);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%-34s %7.1f GFLOP/s\n", "BF16 GEMM, 512 tokens",
                2.0 * double(K) * double(R) * double(T) / best / 1e9);
  }
  // Multi-row kernels: nx rows of x against each weight, read once.
  for (int64_t nx : {1, 2, 4, 8, 16}) {
    const std::string s = " nx=" + std::to_string(nx);
    time("packed bf16 rows" + s, size_t(K * N * 2), mac * double(nx), [&](int64_t m) {
      cpu::gemv_packed16_rows(y.data(), ldy, &w16[size_t(m * K * N)], K, x.data(), ldx, nx, 0, N, K, true,
                              true);
    });
    time("packed f16 rows" + s, size_t(K * N * 2), mac * double(nx), [&](int64_t m) {
      cpu::gemv_packed16_rows(y.data(), ldy, &w16[size_t(m * K * N)], K, x.data(), ldx, nx, 0, N, K, true,
                              false);
    });
    time("gemv_f32_rows" + s, size_t(K * N * 4), mac * double(nx), [&](int64_t m) {
      cpu::gemv_f32_rows(y.data(), ldy, &w32[size_t(m * K * N)], K, x.data(), ldx, nx, N, K, true);
    });
    // BF16 arithmetic (AVX-512 BF16): the activations' rounding to BF16 (once per product, as the backend
    // does) included.
    if (cpu::bf16_available() && K % 16 == 0) {
      time("bf16 dot rows" + s, size_t(K * N * 2), mac * double(nx), [&](int64_t m) {
        cpu::to_bf16_rows(xb.data(), K, x.data(), ldx, nx, K);
        cpu::gemv_bf16_rows(y.data(), ldy, &w16[size_t(m * K * N)], K, xb.data(), K, nx, 0, N, K, true);
      });
    }
  }
  time("packed bf16 x8 as 8 single-row calls", size_t(K * N * 2), mac * 8, [&](int64_t m) {
    for (int64_t t = 0; t < 8; ++t)
      cpu::gemv_packed16(y.data() + t * ld, &w16[size_t(m * K * N)], K, x.data() + t * ld, 0, N, K, true,
                         true);
  });
  return 0;
}
