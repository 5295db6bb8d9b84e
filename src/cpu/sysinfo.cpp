#include "cpu/sysinfo.h"

#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cpu/kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace minigpt {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

int cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

namespace {
#if defined(__x86_64__) || defined(__i386__)
// Compiled for AVX2 whatever the build's flags (a portable build reads memory as fast as a native one: the
// roofline must be the most a decode kernel could read), and called only where the CPU has it.
// ahead == 0: four streams at once (the four quarters of the range), two accumulators each: one plain
// sequential stream per core under-reads DRAM on this kind of machine (the prefetchers track several
// streams). ahead > 0: one stream, prefetched that many bytes ahead, as the quantized GEMV kernels read
// (cpu::quant_prefetch_bytes): on an Intel Xeon those kernels read faster than the four plain streams (Q8_0
// decode at 104-113% of their GB/s there), so a roofline against those alone came out above 100%; on the Zen
// 3 development machine the two reads are about as fast (one thread: 16.4-17.1 and 16.4-16.9 GB/s).
__attribute__((target("avx2"))) float sum_read_avx2(const float* p, size_t n, size_t ahead) {
  const int streams = ahead == 0 ? 4 : 1;
  const size_t q = n / size_t(streams) / 16 * 16, ahead_floats = ahead / sizeof(float);
  __m256 a[8];
  for (auto& v : a) v = _mm256_setzero_ps();
  for (size_t i = 0; i < q; i += 16) {
    for (int r = 0; r < streams; ++r) {
      // The address may lie past the range (a prefetch never faults, and reads nothing into registers).
      if (ahead_floats != 0) _mm_prefetch(reinterpret_cast<const char*>(p + i + ahead_floats), _MM_HINT_T0);
      a[2 * r] = _mm256_add_ps(a[2 * r], _mm256_load_ps(p + size_t(r) * q + i));
      a[2 * r + 1] = _mm256_add_ps(a[2 * r + 1], _mm256_load_ps(p + size_t(r) * q + i + 8));
    }
  }
  for (int r = 1; r < 8; ++r) a[0] = _mm256_add_ps(a[0], a[r]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, a[0]);
  float s = 0;
  for (float l : lanes) s += l;
  for (size_t i = size_t(streams) * q; i < n; ++i) s += p[i];
  return s;
}
#endif

// `ahead`: see sum_read_avx2 (ignored without AVX2, where no kernel prefetches).
float sum_read(const float* p, size_t n, size_t ahead) {
#if defined(__x86_64__) || defined(__i386__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return sum_read_avx2(p, n, ahead);
#endif
  (void)ahead;
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) s0 += p[i], s1 += p[i + 1], s2 += p[i + 2], s3 += p[i + 3];
  for (; i < n; ++i) s0 += p[i];
  return s0 + s1 + s2 + s3;
}
}  // namespace

namespace {
// The quantized kernels' prefetch distance (bytes).
size_t prefetch_bytes() { return size_t(cpu::quant_prefetch_bytes()); }

// n floats, 2 MB aligned and advised into 2 MB pages like the backend's large buffers, zeroed.
float* alloc_read_buffer(size_t n) {
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t bytes = (n * sizeof(float) + kHuge - 1) / kHuge * kHuge;
  auto* p = static_cast<float*>(std::aligned_alloc(kHuge, bytes));
  if (p == nullptr) return nullptr;
#ifdef MADV_HUGEPAGE
  ::madvise(p, bytes, MADV_HUGEPAGE);
#endif
  std::memset(p, 0, bytes);
  return p;
}

// One timed pass of n_threads threads over buf[0, n), n a multiple of 64, prefetching `ahead` bytes ahead
// (0: none): GB/s.
double timed_pass(const float* buf, size_t n, int n_threads, size_t ahead) {
  std::vector<std::thread> threads;
  std::vector<float> sums(static_cast<size_t>(n_threads));
  const size_t per = n / size_t(n_threads) / 64 * 64;
  const auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < n_threads; ++t) {
    threads.emplace_back([&, t] {
      const size_t begin = per * size_t(t);
      const size_t len = t == n_threads - 1 ? n - begin : per;
      sums[size_t(t)] = sum_read(buf + begin, len, ahead);
    });
  }
  for (auto& th : threads) th.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  volatile float sink = 0;
  for (float v : sums) sink = sink + v;
  return double(n * sizeof(float)) / s / 1e9;
}
}  // namespace

double measure_read_bandwidth(int n_threads, size_t bytes, int reps) {
  n_threads = std::max(1, n_threads);
  const size_t n = bytes / sizeof(float) / 64 * 64;  // whole 256-byte blocks
  float* buf = alloc_read_buffer(n);
  if (buf == nullptr) return 0.0;
  std::vector<double> rates;
  for (int r = 0; r <= reps; ++r) {
    // Each repetition: the plain read and the prefetching one, the faster counts.
    const double rate =
        std::max(timed_pass(buf, n, n_threads, 0), timed_pass(buf, n, n_threads, prefetch_bytes()));
    if (r > 0) rates.push_back(rate);
  }
  std::free(buf);
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

BandwidthProbe::BandwidthProbe(size_t bytes) : n_(bytes / sizeof(float) / 64 * 64) {
  buf_ = alloc_read_buffer(n_);
}

BandwidthProbe::~BandwidthProbe() { std::free(buf_); }

double BandwidthProbe::measure(int n_threads) {
  if (buf_ == nullptr || n_ == 0) return 0.0;
  // The best of three passes of each read (plain, prefetching), as STREAM reports its best trial: a pass
  // slowed by a neighbour's burst would put the roofline below what the memory can give.
  double best = 0.0;
  for (int i = 0; i < 3; ++i) {
    for (size_t ahead : {size_t(0), prefetch_bytes()})
      best = std::max(best, timed_pass(buf_, n_, std::max(1, n_threads), ahead));
  }
  return best;
}

double BandwidthProbe::read_seconds(size_t bytes, int n_threads, bool prefetch) {
  // More than half the buffer would read bytes of the read before (and a shorter read than asked for
  // would give a wrong rate): the caller sizes the probe.
  if (bytes / sizeof(float) / 64 * 64 > n_ / 2 / 64 * 64 && buf_ != nullptr) {
    throw std::invalid_argument("BandwidthProbe::read_seconds: " + std::to_string(bytes) +
                                " bytes exceed half the probe's buffer of " +
                                std::to_string(n_ * sizeof(float)));
  }
  const size_t n = bytes / sizeof(float) / 64 * 64;
  if (buf_ == nullptr || n == 0) return 0.0;
  if (pos_ + n > n_) pos_ = 0;
  const float* p = buf_ + pos_;
  pos_ += n;
  n_threads = std::max(1, n_threads);
  const size_t per = n / size_t(n_threads) / 64 * 64, ahead = prefetch ? prefetch_bytes() : 0;
  std::vector<float> sums(static_cast<size_t>(n_threads));
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < n_threads; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1, std::memory_order_release);
      while (!go.load(std::memory_order_acquire)) {
      }
      const size_t begin = per * size_t(t);
      sums[size_t(t)] = sum_read(p + begin, t == n_threads - 1 ? n - begin : per, ahead);
    });
  }
  // Thread creation is not the read's: the clock starts once every thread waits at the line.
  while (ready.load(std::memory_order_acquire) < n_threads) std::this_thread::yield();
  const auto t0 = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  for (auto& th : threads) th.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  volatile float sink = 0;
  for (float v : sums) sink = sink + v;
  return s;
}

}  // namespace minigpt
