// The machine's arithmetic ceiling, for prefill's roofline: the peak rate of the multiply-add instructions a
// prefill GEMM is made of, each in a loop of 12 independent accumulators (more than latency x throughput
// on every x86 core), on 1 thread and on every thread. A GEMM reaches at most this; a prefill of a model of
// P matrix parameters at most peak / (2 P) tokens/s.
//   f32 FMA:     vfmadd231ps, 2 flops per lane (AVX-512: 16 lanes; AVX2: 8)
//   bf16 dot:    vdpbf16ps, 2 bf16 products added to an F32 lane: 4 flops per F32 lane (AVX-512 BF16)
//   int8 dot:    vpdpbusd, 4 u8 x s8 products added to an int32 lane: 8 ops per lane (AVX-512 VNNI)
// Usage: peak_flops [P]   (P: a model's matrix parameters, for the tokens/s ceiling; default 134.5e6,
// SmolLM2-135M with its tied head counted once)
#include <immintrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

constexpr long kIters = 20'000'000;

// Lane 0 of v: the result kept alive (GCC 12's _mm512_reduce_add_ps warns of an uninitialized variable).
__attribute__((target("avx512f"))) float first_lane(__m512 v) {
  float out[16];
  _mm512_storeu_ps(out, v);
  return out[0];
}

__attribute__((target("avx512f"))) float f32_fma512() {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(float(i) * 1e-9f);
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-9f);
  for (long n = 0; n < kIters; ++n)
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], x, y);
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  return first_lane(s);
}

__attribute__((target("avx2,fma"))) float f32_fma256() {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(float(i) * 1e-9f);
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-9f);
  for (long n = 0; n < kIters; ++n)
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], x, y);
  __m256 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, a[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}

__attribute__((target("avx512f,avx512bf16"))) float bf16_dot512() {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_setzero_ps();
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3000);
  for (long n = 0; n < kIters; ++n)
    for (int i = 0; i < 12; ++i) a[i] = _mm512_dpbf16_ps(a[i], x, y);
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  return first_lane(s);
}

__attribute__((target("avx512f,avx512vnni"))) float int8_dot512() {
  __m512i a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_setzero_si512();
  const __m512i x = _mm512_set1_epi8(1), y = _mm512_set1_epi8(1);
  for (long n = 0; n < kIters; ++n)
    for (int i = 0; i < 12; ++i) a[i] = _mm512_dpbusd_epi32(a[i], x, y);
  __m512i s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_epi32(s, a[i]);
  return first_lane(_mm512_maskz_cvtepi32_ps(0xFFFF, s));  // (maskz: as first_lane, no GCC warning)
}

// Giga-operations per second of fn (ops_per_call operations) on `threads` threads at once.
template <typename Fn>
double rate(Fn fn, double ops_per_call, int threads) {
  volatile float sink = 0;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) ts.emplace_back([&] { sink = sink + fn(); });
    for (auto& t : ts) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, ops_per_call * threads / s / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const double params = argc > 1 ? std::atof(argv[1]) : 134.5e6;
  const int all = int(std::thread::hardware_concurrency());
  const double calls = double(kIters) * 12;
  struct Kind {
    const char* name;
    bool ok;
    float (*fn)();
    double ops;  // per instruction
  };
  const Kind kinds[] = {
      {"f32 FMA (avx512, vfmadd231ps zmm)", __builtin_cpu_supports("avx512f") != 0, f32_fma512, 32},
      {"f32 FMA (avx2, vfmadd231ps ymm)", __builtin_cpu_supports("avx2") != 0, f32_fma256, 16},
      {"bf16 dot (vdpbf16ps zmm)", __builtin_cpu_supports("avx512bf16") != 0, bf16_dot512, 64},
      {"int8 dot (vpdpbusd zmm)", __builtin_cpu_supports("avx512vnni") != 0, int8_dot512, 128},
  };
  std::printf("| instruction | 1 thread Gop/s | %d threads Gop/s | prefill ceiling, %.4g params, tok/s |\n",
              all, params);
  std::printf("|---|---:|---:|---:|\n");
  for (const Kind& k : kinds) {
    if (!k.ok) {
      std::printf("| %s | not on this CPU | | |\n", k.name);
      continue;
    }
    const double one = rate(k.fn, calls * k.ops, 1), many = rate(k.fn, calls * k.ops, all);
    std::printf("| %s | %.1f | %.1f | %.0f |\n", k.name, one, many, many * 1e9 / (2 * params));
  }
  return 0;
}
