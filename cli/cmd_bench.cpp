// minigpt bench: tokens/sec of prefill and decode, like llama-bench. Times cover forward passes only.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "command.h"
#include "common.h"
#include "cpu/cpu.h"
#include "cpu/sysinfo.h"
#include "cuda/cuda.h"
#include "minigpt/error.h"
#include "minigpt/model.h"
#include "minigpt/registry.h"
#include "minigpt/session.h"
#include "model/random_weights.h"

namespace minigpt::cli {
namespace {

using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

struct BenchOptions {
  std::string model_dir;
  std::string random;
  std::vector<int64_t> n_prompt{512};
  std::vector<int64_t> n_gen{128};
  std::vector<int64_t> depth{0};
  std::vector<int64_t> batch{1};
  int reps = 5;
  std::vector<int> threads;
  std::vector<std::string> dtypes;
  std::string output = "md";
  std::string backend = "cpu";
  int device = 0;
  std::string cache_type;                            // empty: the backend's default
  std::string bf16_math = "auto";                    // --bf16-math
  bool paired_probe = false;                         // --paired-probe
  bool n_prompt_given = false, n_gen_given = false;  // -p / -n on the command line (else the defaults)
};

struct Stats {
  double median = 0, stddev = 0;
};
Stats stats(std::vector<double> v) {
  Stats s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  double mean = 0;
  for (double x : v) mean += x;
  mean /= double(n);
  for (double x : v) s.stddev += (x - mean) * (x - mean);
  s.stddev = n > 1 ? std::sqrt(s.stddev / double(n - 1)) : 0.0;
  return s;
}
double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, size_t(std::ceil(p / 100.0 * double(v.size()))) - (p > 0 ? 1 : 0));
  return v[i];
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

std::optional<DType> parse_dtype(const std::string& s) { return float_dtype(s, "--dtype", "stored"); }

// The formats the weight matrices are held in, most bytes first ("F32"; "Q4_K+Q6_K+Q5_K" for a Q4_K_M file),
// with the bits per weight of the matrices when any is quantized ("Q8_0 8.50 bpw of the matrices") unless
// `with_bpw` is false.
std::string dtype_label(const Model& m, bool with_bpw = true) {
  std::map<std::string, double> bytes;
  double total_bytes = 0, weights = 0;
  auto add = [&](const Linear& l) {
    const double b = double(l.format.row_bytes(l.n_in)) * double(l.n_out);
    bytes[l.format.name()] += b;
    total_bytes += b;
    weights += double(l.n_in) * double(l.n_out);
  };
  bool quantized = false;
  for (const LayerWeights& L : m.weights().layers) {
    std::vector<const Linear*> ls = {&L.attn_out, &L.ffn_down};
    for (const auto* parts : {&L.attn_qkv_parts, &L.ffn_up_parts})
      for (const Linear& p : *parts) ls.push_back(&p);
    if (L.attn_qkv_parts.empty()) ls.push_back(&L.attn_qkv);
    if (L.ffn_up_parts.empty()) ls.push_back(&L.ffn_up);
    for (const Linear* l : ls) {
      add(*l);
      quantized = quantized || l->format.is_quantized();
    }
  }
  add(m.weights().output);
  quantized = quantized || m.weights().output.format.is_quantized();
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [name, b] : bytes) order.emplace_back(-b, name);
  std::sort(order.begin(), order.end());
  std::string label;
  for (const auto& [b, name] : order) label += (label.empty() ? "" : "+") + name;
  if (quantized && with_bpw) {
    char bpw[32];
    // Of the matrices only (info's bits/weight counts every tensor: embeddings, norms, biases too).
    std::snprintf(bpw, sizeof bpw, " %.2f bpw of the matrices", 8 * total_bytes / weights);
    label += bpw;
  }
  return label;
}

// As llama-bench prints them: MiB below a GiB, else GiB; millions of parameters below a billion, else
// billions.
std::string size_cell(size_t bytes) {
  char b[32];
  const double mib = double(bytes) / double(1 << 20);
  if (mib < 1024) {
    std::snprintf(b, sizeof b, "%.2f MiB", mib);
  } else {
    std::snprintf(b, sizeof b, "%.2f GiB", mib / 1024);
  }
  return b;
}
std::string params_cell(int64_t n) {
  char b[32];
  std::snprintf(b, sizeof b, n < 1000000000 ? "%.2f M" : "%.2f B", double(n) / (n < 1000000000 ? 1e6 : 1e9));
  return b;
}

// The table's short name of the model: the file's or directory's name without its extension ("smollm2-135m-
// q4_k_m" for ~/models/smollm2-135m-q4_k_m.gguf), or the random shape's ("gpt2 (random)").
std::string short_model_name(const BenchOptions& o) {
  if (!o.random.empty()) {
    const std::string shape =
        o.random.ends_with(".json") ? std::filesystem::path(o.random).stem().string() : o.random;
    return shape + " (random)";
  }
  const std::filesystem::path p = std::filesystem::path(o.model_dir).lexically_normal();
  std::filesystem::path name = p.filename();
  if (name.empty()) name = p.parent_path().filename();  // "models/gpt2/"
  return std::filesystem::is_directory(p) ? name.string() : name.stem().string();
}

int run_bench(BenchOptions o) {  // a copy: the 0 lengths are dropped below
  // Neither: the shipped model, as every command that takes -m runs it.
  if (o.model_dir.empty() && o.random.empty()) o.model_dir = resolve_model_dir(ModelOptions{}).string();
  const bool on_gpu = o.backend != "cpu";
  if (o.device < 0)
    throw Error(ErrorKind::Argument, "--device: " + std::to_string(o.device) + " must be >= 0");
  // One GPU backend for every dtype; its error (unknown name, no device, no driver, no CUDA in this build)
  // is the message.
  const std::optional<DType> kv = cache_dtype(o.cache_type);
  const Bf16Math bf16 = bf16_math(o.bf16_math);
  std::shared_ptr<Backend> gpu =
      on_gpu ? make_backend(o.backend, BackendOptions{0, o.device, kv, bf16}) : nullptr;
  // --device 1 without --backend cuda measured the CPU without a word: the CPU backend's own refusal.
  if (!on_gpu && o.device != 0) make_backend(o.backend, BackendOptions{1, o.device, kv, bf16});
  // As in llama-bench, a length of 0 skips that test (-n 0: prefill only).
  for (int64_t p : o.n_prompt)
    if (p < 0)
      throw Error(ErrorKind::Argument,
                  "-p: prompt length " + std::to_string(p) + " must be >= 0 (0 = no prefill test)");
  for (int64_t n : o.n_gen)
    if (n < 0)
      throw Error(ErrorKind::Argument,
                  "-n: generation length " + std::to_string(n) + " must be >= 0 (0 = no decode test)");
  std::erase(o.n_prompt, 0);
  std::erase(o.n_gen, 0);
  if (o.n_prompt.empty() && o.n_gen.empty())
    throw Error(ErrorKind::Argument, "-p/-n: every length is 0, nothing to measure");
  for (int64_t d : o.depth)
    if (d < 0) throw Error(ErrorKind::Argument, "-d: depth " + std::to_string(d) + " must be >= 0");
  for (int64_t b : o.batch)
    if (b < 1 || b > 256)
      throw Error(ErrorKind::Argument, "-b: " + std::to_string(b) + " sequences must be in [1, 256]");
  // -b shapes decode steps only: with no decode test it would be accepted and do nothing.
  if (o.n_gen.empty() && std::any_of(o.batch.begin(), o.batch.end(), [](int64_t b) { return b != 1; }))
    throw Error(ErrorKind::Argument,
                "-b: sequences decoded together apply to decode tests, and -n 0 has none");
  if (o.reps < 1 || o.reps > 1000) throw Error(ErrorKind::Argument, "-r: repetitions must be in [1, 1000]");
  // On the GPU the thread count means nothing: one pass, reported as 1.
  std::vector<int> threads = on_gpu              ? std::vector<int>{1}
                             : o.threads.empty() ? std::vector<int>{cpu_count()}
                                                 : o.threads;
  // 0 = every core, as -t 0 means in the other commands.
  for (int& t : threads)
    if (t == 0) t = cpu_count();
  for (int t : threads)
    if (t < 1 || t > 1024)
      throw Error(ErrorKind::Argument,
                  "-t: thread count " + std::to_string(t) + " must be in [0, 1024] (0 = all cores)");
  if (!on_gpu)
    for (int t : threads) warn_threads(t);
  std::vector<std::string> dtypes = o.dtypes.empty() ? std::vector<std::string>{"stored"} : o.dtypes;
  for (const auto& d : dtypes) parse_dtype(d);

  // The model's path, classified (a GGUF parsed) once for the check below and every dtype's load.
  std::optional<ModelSource> source;
  if (o.random.empty()) source = ModelSource::open(o.model_dir);
  // A GGUF file's type as llama.cpp names it ("Q4_K - Medium"), for the rows that keep its dtypes.
  const std::optional<ModelSummary> summary =
      source ? std::optional<ModelSummary>(Model::inspect(*source)) : std::nullopt;
  const std::string file_type = summary ? summary->file_type : "";
  // Every length against the model's context before any work (the bandwidth probe takes seconds): the
  // first model's config (every dtype's is the same). -p and -n not given are the defaults (512, 128) cut
  // to what the context holds after the deepest -d, and said so.
  {
    const bool random_config = o.random.ends_with(".json");
    const int64_t n_ctx = summary         ? summary->config.n_ctx
                          : random_config ? load_config(o.random).n_ctx
                                          : gpt2_preset(o.random).n_ctx;
    const int64_t deepest = *std::max_element(o.depth.begin(), o.depth.end());
    const int64_t room = n_ctx - deepest;
    auto fit = [&](std::vector<int64_t>& lengths, bool given, const char* flag) {
      if (given || room < 1) return;
      for (int64_t& n : lengths) {
        if (n <= room) continue;
        std::fprintf(
            stderr, "minigpt: bench: %s %lld (the default %lld does not fit the model's context of %lld%s)\n",
            flag, (long long)room, (long long)n, (long long)n_ctx,
            deepest > 0 ? (" after -d " + std::to_string(deepest)).c_str() : "");
        n = room;
      }
    };
    fit(o.n_prompt, o.n_prompt_given, "-p");
    fit(o.n_gen, o.n_gen_given, "-n");
    for (int64_t p : o.n_prompt)
      for (int64_t d : o.depth) {
        if (d == 0 && p > n_ctx)
          throw Error(ErrorKind::Argument, "-p: " + std::to_string(p) + " exceeds the model's context of " +
                                               std::to_string(n_ctx));
        if (d + p > n_ctx)
          throw Error(ErrorKind::Argument, "-p/-d: depth " + std::to_string(d) + " + " + std::to_string(p) +
                                               " prompt tokens exceed the model's context of " +
                                               std::to_string(n_ctx));
      }
    for (int64_t n : o.n_gen)
      for (int64_t d : o.depth)
        if (d + n > n_ctx)
          throw Error(ErrorKind::Argument, "-n/-d: depth " + std::to_string(d) + " + " + std::to_string(n) +
                                               " tokens exceed the model's context of " +
                                               std::to_string(n_ctx));
  }

  const std::string model_name = o.random.empty() ? o.model_dir : o.random + " (random weights)";
  const std::string short_name = short_model_name(o);
  std::string kv_line;  // the first model's, for the footer
  // Below the table, once per model row label: what it stands for (the path, every format of the matrices
  // and their bits per weight).
  std::vector<std::pair<std::string, std::string>> model_notes;
  json machine = {{"cpu", cpu_model_name()}, {"cores", cpu_count()}};
  if (!on_gpu) {
    // What CPU numbers depend on besides the CPU: minigpt's kernel level, and OpenBLAS's kernels (prefill).
    const CpuInfo ci = cpu_info(bf16);
    machine["kernel_level"] = ci.kernel_level;
    machine["blas"] = ci.blas;
    machine["gemm"] = ci.gemm;
    machine["bf16_math"] = ci.bf16_math;
  }
  json results = json::array();
  std::map<int, double> bandwidth;
  // A 256 MB buffer read between decode repetitions (CPU decode tests only).
  std::unique_ptr<BandwidthProbe> probe =
      on_gpu || o.n_gen.empty() ? nullptr : std::make_unique<BandwidthProbe>();
  std::mt19937 rng(1234);

  // The table header goes out with the first row, so that an error found at load (e.g. -p past the
  // model's context) leaves stdout empty.
  bool header_printed = false;
  for (int t : threads) {
    if (on_gpu) {
      // The card's stated bandwidth (memory clock x bus width); achieved GB/s is reported against it.
      const auto devices = cuda_devices();
      bandwidth[t] = o.device < int(devices.size()) ? devices[size_t(o.device)].peak_bandwidth_gb_s : 0.0;
      machine["gpu_device"] = o.device;
      machine["gpu_peak_bandwidth_gb_s"] = bandwidth[t];
    } else if (!o.n_gen.empty()) {
      // Only decode rows have a roofline; a prefill-only run skips the 1 GiB pass (and its memory).
      if (!bandwidth.count(t)) bandwidth[t] = measure_read_bandwidth(t);
      machine["read_bandwidth_gb_s"][std::to_string(t)] = bandwidth[t];
    }
    for (const auto& dt : dtypes) {
      LoadOptions lo;
      lo.n_threads = t;
      lo.backend = gpu;
      // A cache type or BF16 arithmetic chosen on the CPU: the registry's cpu backend with them.
      if (!on_gpu && (kv || bf16 != Bf16Math::Auto))
        lo.backend = make_backend("cpu", BackendOptions{t, 0, kv, bf16});
      lo.weight_dtype = parse_dtype(dt);
      // --random NAME: a published shape; --random FILE.json: the shape a config.json describes.
      const bool random_config = o.random.ends_with(".json");
      auto model = o.random.empty()
                       ? Model::load(*source, lo)
                       : Model::random(random_config ? load_config(o.random) : gpt2_preset(o.random), lo);
      const Config& c = model->config();
      auto tokens = [&](int64_t n) {
        std::vector<int32_t> v(static_cast<size_t>(n));
        for (auto& x : v) x = int32_t(rng() % uint32_t(c.n_vocab));
        return v;
      };
      // The KV cache holds what the longest test needs (the +1: the untimed step after each probe), for the
      // most sequences decoded together.
      int64_t ctx = 1;
      for (int64_t p : o.n_prompt)
        for (int64_t d : o.depth) ctx = std::max(ctx, d + p);
      for (int64_t n : o.n_gen)
        for (int64_t d : o.depth) ctx = std::max(ctx, d + n + 1);
      SessionOptions so;
      so.n_ctx = std::min(ctx, c.n_ctx);
      so.n_seq = *std::max_element(o.batch.begin(), o.batch.end());
      so.max_batch = std::max<int64_t>(512, so.n_seq);
      Session s(model, so);
      // What one position of one sequence costs in the KV cache: K and V of every layer's KV heads.
      const int64_t kv_bytes_per_token =
          2 * c.n_layer * c.kv_dim() * int64_t(dtype_size(s.kv_cache().dtype()));
      if (kv_line.empty()) {
        char b[160];
        std::snprintf(b, sizeof b,
                      "KV cache: %lld bytes per token (2 x %lld layers x %lld KV head%s x %lld dims x %s)",
                      (long long)kv_bytes_per_token, (long long)c.n_layer, (long long)c.kv_heads(),
                      c.kv_heads() == 1 ? "" : "s", (long long)c.head_dim(),
                      std::string(dtype_name(s.kv_cache().dtype())).c_str());
        kv_line = b;
      }
      // What the table's model column says: its short name and the weights' type, the file's own name of it
      // when the dtypes are the file's ("Q4_K - Medium"), else the formats held ("BF16", "Q4_1+Q8_0").
      const std::string model_type =
          !file_type.empty() && dt == "stored" ? file_type : dtype_label(*model, false);
      const std::string model_cell = short_name + " " + model_type;
      if (std::none_of(model_notes.begin(), model_notes.end(),
                       [&](const auto& n) { return n.first == model_cell; }))
        model_notes.emplace_back(model_cell, model_name + ", " + dtype_label(*model));
      auto emit = [&](json r) {
        r["model"] = model_name;
        r["model_type"] = model_type;
        r["model_size"] = model->weight_bytes();
        r["kv_bytes_per_token"] = kv_bytes_per_token;
        r["backend"] = model->backend().name();
        r["dtype"] = dtype_label(*model);
        r["threads"] = t;
        r["reps"] = o.reps;
        r["n_params"] = model->n_params();
        if (o.output == "md") {
          // llama-bench's columns, and the decode rows' share of the memory bandwidth; every other figure
          // (GB/s, TTFT, inter-token latency, the bandwidth measured) is in -o json.
          if (!header_printed) {
            std::printf("| model | size | params | backend | threads | test | t/s | roofline |%s\n",
                        o.paired_probe ? " paired |" : "");
            std::printf("|---|---:|---:|---|---:|---|---:|---:|%s\n", o.paired_probe ? "---:|" : "");
            header_printed = true;
          }
          const auto pct = [&](const char* key) {
            return r.contains(key) ? std::to_string(std::lround(r[key].get<double>())) + "%" : std::string();
          };
          std::printf("| %s | %s | %s | %s | %d | %s | %.2f ± %.2f | %s |", model_cell.c_str(),
                      size_cell(model->weight_bytes()).c_str(), params_cell(model->n_params()).c_str(),
                      r["backend"].get<std::string>().c_str(), t, r["test"].get<std::string>().c_str(),
                      r["tok_s"].get<double>(), r["tok_s_std"].get<double>(), pct("roofline_pct").c_str());
          if (o.paired_probe) std::printf(" %s |", pct("roofline_paired_pct").c_str());
          std::printf("\n");
          std::fflush(stdout);
        }
        results.push_back(std::move(r));
      };

      // Prefill at each depth, as llama-bench's pp512 @ d512: the -d tokens before it are evaluated untimed,
      // so the prompt's attention reads that much KV cache too.
      for (int64_t p : o.n_prompt) {
        for (int64_t d : o.depth) {
          const auto prefix = tokens(d);
          const auto prompt = tokens(p);
          std::vector<double> rates, times;
          for (int r = -1; r < o.reps; ++r) {  // r = -1: warm-up
            s.reset();
            if (d > 0) s.eval(prefix);
            const auto t0 = clock_type::now();
            s.eval(prompt);
            const double sec = seconds_since(t0);
            if (r >= 0) rates.push_back(double(p) / sec), times.push_back(sec);
          }
          const Stats st = stats(rates);
          const double ttft_ms = stats(times).median * 1e3;
          emit({{"test", "pp" + std::to_string(p) + (d > 0 ? "@d" + std::to_string(d) : "")},
                {"depth", d},
                {"tok_s", st.median},
                {"tok_s_std", st.stddev},
                {"ttft_ms", ttft_ms}});
        }
      }
      for (int64_t n : o.n_gen) {
        for (int64_t d : o.depth) {
          for (int64_t b : o.batch) {
            const auto prefix = tokens(d);
            const auto gen = tokens(n * b);  // sequence q's i-th token: gen[i * b + q]
            std::vector<Session::SeqTokens> step(static_cast<size_t>(b));
            std::vector<double> rates, latencies, firsts, first_ratios, bws;
            // Step i: one token of every sequence.
            const auto decode_step = [&](int64_t i) {
              if (b == 1) {
                s.eval(std::span<const int32_t>(&gen[size_t(i)], 1));
                return;
              }
              for (int64_t q = 0; q < b; ++q)
                step[size_t(q)] = {q, std::span<const int32_t>(&gen[size_t(i * b + q)], 1)};
              s.eval_batch(step);
            };
            for (int r = -1; r < o.reps; ++r) {
              // The CPU's read bandwidth just before each repetition (untimed): the roofline this test is
              // measured against, taken while the machine is in the same state as during the test. Then
              // untimed decode steps (of position 0, for 2 ms and at least 2 of them): the first step after
              // the probe's 256 MB pass ran ~100x slower (cold caches and TLB, sleeping workers) and made a
              // row's spread exceed its value, and after one step of a small model (0.06 ms, less than a
              // worker takes to wake on a VM) the first timed one still ran at 1.2-3x its repetition's
              // median.
              if (probe && r >= 0) {
                bws.push_back(probe->measure(t));
                const auto warm = clock_type::now();
                for (int w = 0; w < 2 || seconds_since(warm) < 2e-3; ++w) {
                  s.reset();
                  s.eval(std::span<const int32_t>(&gen[0], 1));
                }
              }
              s.reset();
              if (d > 0) {
                for (int64_t q = 0; q < b; ++q) s.eval(prefix, q);
              }
              const auto t0 = clock_type::now();
              for (int64_t i = 0; i < n; ++i) {
                const auto ti = clock_type::now();
                decode_step(i);
                if (r >= 0) latencies.push_back(seconds_since(ti) * 1e3);
                if (r >= 0 && i == 0) firsts.push_back(latencies.back());
              }
              if (r >= 0) {
                rates.push_back(double(n * b) / seconds_since(t0));
                // The first step against its own repetition's median step: on a shared machine whole
                // repetitions run several times slower than others, so the first steps of slow repetitions
                // against the median step of all of them would read as a cold start that is not there.
                const std::vector<double> rep(latencies.end() - n, latencies.end());
                first_ratios.push_back(rep.front() / percentile(rep, 50));
              }
            }
            // --paired-probe: as many repetitions again, each decode step followed by a read of as many
            // bytes as it read (alternately plain and prefetched), both timed. The host's bandwidth changes
            // within a fraction of a second (bench/results/2026-11-29-paired-roofline.md), so a probe
            // between repetitions compares the decode with other moments; here each step and its read see
            // the same memory. The read runs after the step, so the step starts with its workers asleep
            // and its caches cold: if anything, this counts against the decode.
            std::vector<double> paired_pcts, paired_decode, paired_read;
            if (probe && o.paired_probe) {
              const auto step_bytes = [&](int64_t i) {
                return double(model->bytes_per_token()) + double(b) * 2.0 * double(c.n_layer) *
                                                              double(d + i + 1) * double(c.kv_dim()) *
                                                              double(dtype_size(s.kv_cache().dtype()));
              };
              BandwidthProbe paired(
                  std::max(size_t(256) << 20, size_t(2.0 * step_bytes(n)) + (size_t(1) << 20)));
              for (int r = -1; r < o.reps; ++r) {
                s.reset();
                if (d > 0) {
                  for (int64_t q = 0; q < b; ++q) s.eval(prefix, q);
                }
                double step_s = 0, read_s[2] = {0, 0}, read_b[2] = {0, 0}, total_b = 0;
                for (int64_t i = 0; i < n; ++i) {
                  const auto ti = clock_type::now();
                  decode_step(i);
                  step_s += seconds_since(ti);
                  const double sb = step_bytes(i);
                  total_b += sb;
                  const int k = int(i % 2);
                  read_s[k] += paired.read_seconds(size_t(sb), t, k == 1);
                  read_b[k] += sb;
                }
                if (r < 0 || read_s[0] <= 0) continue;
                const double dec = total_b / step_s / 1e9;
                const double rd =
                    std::max(read_b[0] / read_s[0], read_s[1] > 0 ? read_b[1] / read_s[1] : 0.0) / 1e9;
                paired_decode.push_back(dec);
                paired_read.push_back(rd);
                paired_pcts.push_back(100.0 * dec / rd);
              }
            }
            const Stats st = stats(rates);
            // A decode step reads every weight once plus each sequence's KV cache up to its position (K and
            // V in the backend's cache dtype), and makes b tokens.
            const double avg_ctx = double(d) + double(n + 1) / 2.0;
            const double kv_bytes = 2.0 * double(c.n_layer) * avg_ctx * double(c.kv_dim()) *
                                    double(dtype_size(s.kv_cache().dtype()));
            const double bytes = double(model->bytes_per_token()) + double(b) * kv_bytes;
            const double gb_s = bytes * st.median / double(b) / 1e9;
            const double bw = probe ? stats(bws).median : bandwidth[t];
            json r = {{"test", "tg" + std::to_string(n) + (d > 0 ? "@d" + std::to_string(d) : "") +
                                   (b > 1 ? "@b" + std::to_string(b) : "")},
                      {"depth", d},
                      {"batch", b},
                      {"tok_s", st.median},
                      {"tok_s_std", st.stddev},
                      {"bytes_per_token", bytes / double(b)},
                      {"gb_s", gb_s},
                      {"read_bandwidth_gb_s", bw},
                      {"roofline_pct", bw > 0 ? 100.0 * gb_s / bw : 0.0},
                      {"itl_p50_ms", percentile(latencies, 50)},
                      {"itl_p99_ms", percentile(latencies, 99)},
                      // The first timed step of each repetition (median): a cold start shows here.
                      {"itl_first_ms", percentile(firsts, 50)},
                      // ... and against its repetition's median step (median over repetitions).
                      {"itl_first_ratio", percentile(first_ratios, 50)}};
            if (!paired_pcts.empty()) {
              // Median over repetitions of each one's ratio, and the range.
              r["roofline_paired_pct"] = percentile(paired_pcts, 50);
              r["roofline_paired_min_pct"] = *std::min_element(paired_pcts.begin(), paired_pcts.end());
              r["roofline_paired_max_pct"] = *std::max_element(paired_pcts.begin(), paired_pcts.end());
              r["paired_decode_gb_s"] = percentile(paired_decode, 50);
              r["paired_read_gb_s"] = percentile(paired_read, 50);
            }
            emit(r);
          }
        }
      }
    }
  }
  if (o.output == "json") {
    std::printf("%s\n", json{{"machine", machine}, {"results", results}}
                            .dump(2, ' ', false, json::error_handler_t::replace)
                            .c_str());
  } else {
    // What the table leaves out: the model rows' paths and formats (when the label does not say them all),
    // the statistics, and where every other figure is.
    std::printf("\n");
    for (const auto& [cell, note] : model_notes)
      if (o.random.empty() || note.find(" bpw") != std::string::npos)
        std::printf("%s: %s\n", cell.c_str(), note.c_str());
    std::printf(
        "t/s: median ± standard deviation of %d repetition%s; size: the weights as held in memory; -o json "
        "adds each row's TTFT or inter-token latency, GB/s and bandwidth read\n",
        o.reps, o.reps == 1 ? "" : "s");
    std::printf("%s\nmachine: %s, %d cores", kv_line.c_str(), machine["cpu"].get<std::string>().c_str(),
                cpu_count());
    if (machine.contains("kernel_level")) {
      std::printf("; kernels %s, %s", machine["kernel_level"].get<std::string>().c_str(),
                  machine["blas"].get<std::string>().c_str());
    }
    if (on_gpu) {
      std::printf("; CUDA device %d, stated bandwidth %.1f GB/s (roofline = achieved / stated)\n", o.device,
                  bandwidth[1]);
    } else if (!bandwidth.empty()) {
      std::printf("; read bandwidth at the start:");
      for (const auto& [t, bw] : bandwidth) std::printf(" %.1f GB/s (%d thread%s)", bw, t, t == 1 ? "" : "s");
      std::printf(
          "\nroofline = achieved GB/s / the read bandwidth measured between that test's repetitions\n");
    } else {
      std::printf("\n");
    }
  }
  return 0;
}

const bool registered_bench =
    register_command("bench", "Measure prefill and decode tokens/sec (like llama-bench)", [](CLI::App& app) {
      auto o = std::make_shared<BenchOptions>();
      auto* model_opt = app.add_option("-m,--model", o->model_dir, kModelHelp);
      app.add_option("--random", o->random,
                     "Benchmark a model of this shape with random weights built in memory: gpt2, "
                     "gpt2-medium, gpt2-large, "
                     "gpt2-xl, distilgpt2, or a config.json file (a name ending in .json)")
          ->check(CLI::Validator(
              [](std::string& s) -> std::string {
                if (is_published_shape(s) || s.ends_with(".json")) return "";
                return "'" + s + "' is not one of " + published_shape_names() + " nor a .json config";
              },
              "NAME|CONFIG.json"))
          ->excludes(model_opt);
      app.add_option_function<std::vector<int64_t>>(
             "-p,--n-prompt",
             [o](const std::vector<int64_t>& v) { o->n_prompt = v, o->n_prompt_given = true; },
             "Prompt lengths (prefill tests), comma-separated; 0: no prefill test (default 512, or the "
             "model's "
             "context when shorter)")
          ->delimiter(',');
      app.add_option_function<std::vector<int64_t>>(
             "-n,--n-gen", [o](const std::vector<int64_t>& v) { o->n_gen = v, o->n_gen_given = true; },
             "Generated tokens (decode tests), comma-separated; 0: no decode test (default 128, or the "
             "model's context when shorter)")
          ->delimiter(',');
      app.add_option("-d,--depth", o->depth,
                     "KV-cache depths: each test runs after this many tokens (pp512@d512, tg128@d512), "
                     "comma-separated (default 0)")
          ->delimiter(',');
      app.add_option(
             "-b,--batch", o->batch,
             "Sequences decoded together in each decode step, comma-separated (aggregate tok/s; default 1)")
          ->delimiter(',');
      app.add_option("-r,--repetitions", o->reps, "Timed repetitions after one warm-up (default 5)");
      app.add_option("-t,--threads", o->threads, "CPU thread counts, comma-separated (default 0 = all cores)")
          ->delimiter(',');
      app.add_option(
             "--dtype", o->dtypes,
             "Weight dtypes to compute in, comma-separated: f32, f16, bf16, or stored (default: as in "
             "the file)")
          ->delimiter(',')
          ->check(CLI::IsMember({"f32", "f16", "bf16", "stored"}));
      app.add_option("-o,--output", o->output, "Output format: md or json (default md)")
          ->check(CLI::IsMember({"md", "json"}));
      app.add_option("--backend", o->backend, backend_help())->check(backend_validator());
      app.add_option("--device", o->device, "Device index of the backend (a CUDA device; default 0)");
      app.add_flag("--paired-probe", o->paired_probe,
                   "Decode tests (CPU): as many repetitions again, each step followed by a timed read of as "
                   "many bytes as it read; reports the roofline as the two rates' ratio (\"paired\" in the "
                   "notes, roofline_paired_pct in JSON)");
      add_cache_type_option(app, o->cache_type);
      add_bf16_math_option(app, o->bf16_math);
      return [o] { return run_bench(*o); };
    });

}  // namespace
}  // namespace minigpt::cli
