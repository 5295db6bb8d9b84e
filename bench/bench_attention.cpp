// Micro-benchmark of decode attention on the CPU backend: one token's attention over every layer of a KV
// cache filled to depth d, through Backend::attention as a decode step calls it, the cache evicted from
// the caches between tokens (a decode step streams the weights between two visits of a layer's K and V,
// so those come from DRAM). Prints the time per token (all layers), and the bytes of K and V that token
// reads (each layer's K and V to depth d once) per second of it. The CPU time column (all threads) is what
// to compare on a shared machine, with one thread: wall time there includes other processes' time slices.
// Usage: bench_attention [shape] [cache] [threads] [depths] [tokens] [hot]
//   shape: gpt2 (12 layers, 12 heads of 64), smollm2 (30 layers, 9 query heads over 3 KV heads of 64),
//          llama1b (16 layers, 32 over 8 of 64); cache: f32, f16, bf16; depths: comma-separated;
//   hot: the cache not evicted between tokens (K and V from the caches where they fit: the compute's cost)
//   e.g. bench_attention gpt2 f32 2 0,512,896 64
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cpu/cpu.h"
#include "minigpt/backend.h"
#include "minigpt/tensor.h"

// CPU time of the whole process (all threads): with one thread, the time the token took less the time other
// processes held the core (a shared machine's time slices), memory stalls included.
static double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

int main(int argc, char** argv) {
  using namespace minigpt;
  const std::string shape = argc > 1 ? argv[1] : "gpt2", cache_name = argc > 2 ? argv[2] : "f32";
  const int threads = argc > 3 ? std::atoi(argv[3]) : 2;
  const std::string depths_arg = argc > 4 ? argv[4] : "0,512,896";
  const int tokens = argc > 5 ? std::atoi(argv[5]) : 64;
  const bool hot = argc > 6 && std::string(argv[6]) == "hot";  // no eviction: the compute alone
  int64_t L = 12, H = 12, Hkv = 12, D = 64;
  if (shape == "smollm2") {
    L = 30, H = 9, Hkv = 3;
  } else if (shape == "llama1b") {
    L = 16, H = 32, Hkv = 8;
  } else if (shape != "gpt2") {
    std::fprintf(stderr, "bench_attention: unknown shape '%s' (gpt2, smollm2, llama1b)\n", shape.c_str());
    return 2;
  }
  const DType kv = cache_name == "f16" ? DType::F16 : cache_name == "bf16" ? DType::BF16 : DType::F32;
  std::vector<int64_t> depths;
  std::stringstream ss(depths_arg);
  for (std::string d; std::getline(ss, d, ',');) depths.push_back(std::atoll(d.c_str()));
  const int64_t n_ctx = *std::max_element(depths.begin(), depths.end()) + tokens + 1;
  auto be = make_cpu_backend(threads, kv);
  const auto cache = be->make_kv_cache(KvCacheSpec{L, Hkv, D, n_ctx, 1});
  const int64_t C = H * D, KV = Hkv * D;
  // Random keys, values and queries (the speed does not depend on them; softmax sees varied scores).
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(size_t(n_ctx * KV)), v(size_t(n_ctx * KV)), q(static_cast<size_t>(C)),
      out(static_cast<size_t>(C));
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  for (auto& x : q) x = nd(rng);
  auto view = [](std::vector<float>& x, int64_t rows, int64_t cols) {
    return make_tensor(x.data(), DType::F32, Device::Host, rows, cols);
  };
  const std::vector<int32_t> ids(size_t(n_ctx), 0);
  {
    const SeqRun all{0, 0, n_ctx, 0};
    const Step step{ids.data(), n_ctx, {&all, 1}};
    for (int64_t l = 0; l < L; ++l) be->store_kv(*cache, l, view(k, n_ctx, KV), view(v, n_ctx, KV), step);
  }
  // 64 MB written between tokens: more than the last-level cache, as a decode step's weights are.
  std::vector<char> flush(size_t(64) << 20);
  const size_t elem = dtype_size(kv);
  std::printf(
      "shape %s (%lld layers, %lld heads over %lld KV heads of %lld), %s cache, %d threads, %d tokens\n",
      shape.c_str(), (long long)L, (long long)H, (long long)Hkv, (long long)D, cache_name.c_str(), threads,
      tokens);
  std::printf("%8s %12s %12s %12s %10s\n", "depth", "us/token", "cpu us/token", "KV MB/token", "GB/s");
  for (int64_t d : depths) {
    std::vector<double> times, cpu;
    for (int t = 0; t < tokens; ++t) {
      if (!hot) std::memset(flush.data(), t, flush.size());
      const SeqRun run{0, 0, 1, d + t % 2};
      const Step step{ids.data(), 1, {&run, 1}};
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = cpu_seconds();
      for (int64_t l = 0; l < L; ++l)
        be->attention(view(out, 1, C), view(q, 1, C), *cache, l, step, H, 0.125f);
      cpu.push_back(cpu_seconds() - c0);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    std::sort(cpu.begin(), cpu.end());
    const double med = times[times.size() / 2], med_cpu = cpu[cpu.size() / 2];
    const double bytes = double(L * 2 * KV * (d + 1)) * double(elem);
    std::printf("%8lld %12.1f %12.1f %12.2f %10.1f\n", (long long)d, med * 1e6, med_cpu * 1e6, bytes / 1e6,
                bytes / med / 1e9);
  }
  return 0;
}
