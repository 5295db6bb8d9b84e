// The CUDA backend against the CPU backend (every op, odd sizes) and against transformers (whole model);
// the decode step recorded as a CUDA graph against the same step launched op by op; several sequences in
// one step against each sequence alone on the CPU. Every test skips, with the reason, where there is no
// CUDA device (or no CUDA in the build).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "cpu/cpu.h"
#include "cuda/cuda.h"
#include "formats/gguf.h"
#include "minigpt/backend.h"
#include "minigpt/generate.h"
#include "minigpt/model.h"
#include "minigpt/registry.h"
#include "minigpt/session.h"
#include "model/random_weights.h"
#include "test_util.h"

namespace minigpt {
namespace {

#define SKIP_WITHOUT_CUDA()                                     \
  do {                                                          \
    std::string cuda_why_;                                      \
    if (!cuda_available(&cuda_why_)) GTEST_SKIP() << cuda_why_; \
  } while (0)

using test::randn;

using test::top_margin;

// F32 values as a 16-bit dtype stores them (F32: unchanged).
float round_to(float x, DType t) {
  if (t == DType::F16) return f16_to_f32(f32_to_f16(x));
  if (t == DType::BF16) return bf16_to_f32(f32_to_bf16(x));
  return x;
}

Tensor host_view(std::vector<float>& v, int64_t rows, int64_t cols) {
  return make_tensor(v.data(), DType::F32, Device::Host, rows, cols);
}

// Host data -> an F32 tensor of `be` (prepare_weight copies it to the device, or aliases it on the CPU).
struct Uploads {
  std::vector<std::unique_ptr<Buffer>> keep;
  Tensor put(Backend& be, std::vector<float>& v, int64_t rows, int64_t cols) {
    return be.prepare_weight(host_view(v, rows, cols), keep);
  }
  // Zero-filled F32 [rows, cols] with row stride `stride` (>= cols): strided views, as the session uses.
  Tensor zeros(Backend& be, int64_t rows, int64_t cols, int64_t stride, DType dtype = DType::F32) {
    keep.push_back(be.alloc(size_t(rows * stride) * dtype_size(dtype)));
    Tensor t = make_tensor(keep.back()->data(), dtype, be.device(), rows, cols);
    t.stride = stride;
    return t;
  }
};

std::vector<float> fetch(Backend& be, const Tensor& t) {
  std::vector<float> v(size_t(t.rows * t.cols));
  be.to_host(v.data(), t);
  return v;
}

// A step over dummy token ids (store_kv and attention do not read them), runs as given.
struct StepOf {
  std::vector<int32_t> tokens;
  std::vector<SeqRun> runs;
  explicit StepOf(std::vector<SeqRun> r) : runs(std::move(r)) {
    int64_t n = 0;
    for (const SeqRun& run : runs) n += run.n;
    tokens.assign(size_t(n), 0);
  }
  StepOf(std::vector<int32_t> t, std::vector<SeqRun> r) : tokens(std::move(t)), runs(std::move(r)) {}
  Step step() const { return Step{tokens.data(), int64_t(tokens.size()), std::span<const SeqRun>(runs)}; }
};
// One sequence's run of n tokens at pos0.
StepOf one_run(int64_t seq, int64_t n, int64_t pos0) { return StepOf({SeqRun{seq, 0, n, pos0}}); }

Linear prepare(Backend& be, std::vector<float>& w, std::vector<float>* b, MatrixOrder order, int64_t n_in,
               int64_t n_out, DType dt, std::vector<std::unique_ptr<Buffer>>& keep) {
  HostLinear h;
  h.w = order == MatrixOrder::InOut ? host_view(w, n_in, n_out) : host_view(w, n_out, n_in);
  if (b) h.b = host_view(*b, 1, n_out);
  h.order = order;
  h.n_in = n_in;
  h.n_out = n_out;
  return be.prepare_linear(h, WeightFormat::plain(dt), keep);
}

std::shared_ptr<Backend> cuda_backend(DType kv = DType::F16, bool graphs = true) {
  CudaOptions o;
  o.kv_dtype = kv;
  o.graphs = graphs;
  return make_cuda_backend(o);
}

// ---- ops against the CPU backend ----------------------------------------------------------------

// The same widened weights and the same adds: only float summation order could differ (it does not here).
// Two sequences' runs in one step, each at its own positions; with learned positions and without.
TEST(CudaOps, EmbedMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  auto gpu = cuda_backend();
  auto cpu = make_cpu_backend(2);
  const int64_t V = 37, C = 19, S = 11;
  auto wte = randn(size_t(V * C), 1), wpe = randn(size_t(S * C), 2);
  const StepOf steps[] = {
      StepOf({3, 0, 36, 5}, {SeqRun{0, 0, 4, 4}}),
      StepOf({3, 0, 36, 5, 7}, {SeqRun{1, 0, 2, 9}, SeqRun{0, 2, 1, 0}, SeqRun{2, 3, 2, 5}})};
  for (const StepOf& st : steps) {
    const Step step = st.step();
    for (bool with_wpe : {true, false}) {
      for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
        std::vector<float> got, want;
        for (Backend* be : {gpu.get(), cpu.get()}) {
          Uploads up;
          Linear l = prepare(*be, wte, nullptr, MatrixOrder::OutIn, C, V, dt, up.keep);
          Tensor p = with_wpe ? up.put(*be, wpe, S, C) : Tensor{};
          Tensor out = up.zeros(*be, step.n_tokens, C, C + 3);
          be->embed(out, step, l, p);
          (be == gpu.get() ? got : want) = fetch(*be, out);
        }
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], 1e-6)
              << dtype_name(dt) << " wpe=" << with_wpe << " runs=" << st.runs.size() << " i=" << i;
        }
      }
    }
  }
}

// Both backends do two passes in F32, in different orders: |diff| <= 1e-5 (1 + |ref|).
TEST(CudaOps, LayerNormMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  auto gpu = cuda_backend();
  auto cpu = make_cpu_backend(2);
  for (auto [T, C] : std::vector<std::array<int64_t, 2>>{{1, 1}, {5, 771}, {3, 768}, {2, 1600}}) {
    auto x = randn(size_t(T * (C + 5)), 3, 2.0f), w = randn(size_t(C), 4), b = randn(size_t(C), 5);
    for (auto& v : x) v += 3.0f;  // a mean far from 0
    std::vector<float> got, want;
    for (Backend* be : {gpu.get(), cpu.get()}) {
      Uploads up;
      Tensor xin = up.put(*be, x, T, C + 5).col_slice(2, C);  // strided rows
      Tensor out = up.zeros(*be, T, C, C);
      be->norm(out, xin, up.put(*be, w, 1, C), up.put(*be, b, 1, C), NormKind::Layer, 1e-5f);
      (be == gpu.get() ? got : want) = fetch(*be, out);
    }
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << "C=" << C;
  }
}

// tanhf/erff on the GPU against std::tanh/std::erf (and the CPU's vector tanh): a few ulp.
TEST(CudaOps, ActivationsMatchCpu) {
  SKIP_WITHOUT_CUDA();
  auto gpu = cuda_backend();
  auto cpu = make_cpu_backend(2);
  const int64_t T = 3, F = 1001;
  auto x = randn(size_t(T * F), 6, 3.0f);
  for (Activation act : {Activation::GeluTanh, Activation::GeluErf, Activation::Relu}) {
    std::vector<float> got, want;
    for (Backend* be : {gpu.get(), cpu.get()}) {
      Uploads up;
      Tensor t = up.put(*be, x, T, F);
      be->activation(t, act);
      (be == gpu.get() ? got : want) = fetch(*be, t);
    }
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 4e-6 * std::fabs(want[i]) + 1e-6) << int(act);
  }
}

// The norm of each kind, with and without a bias, against the CPU's: both in F32 in different orders (two
// passes for Layer, the sum of squares for Rms): |diff| <= 1e-5 (1 + |ref|).
TEST(CudaOps, NormKindsMatchCpu) {
  SKIP_WITHOUT_CUDA();
  auto gpu = cuda_backend();
  auto cpu = make_cpu_backend(2);
  for (auto [T, C] : std::vector<std::array<int64_t, 2>>{{1, 1}, {5, 771}, {3, 768}, {9, 1600}}) {
    auto x = randn(size_t(T * (C + 5)), 3, 2.0f), w = randn(size_t(C), 4), b = randn(size_t(C), 5);
    for (auto& v : x) v += 3.0f;  // a mean far from 0
    for (NormKind kind : {NormKind::Layer, NormKind::Rms}) {
      for (bool bias : {true, false}) {
        std::vector<float> got, want;
        for (Backend* be : {gpu.get(), cpu.get()}) {
          Uploads up;
          Tensor xin = up.put(*be, x, T, C + 5).col_slice(2, C);  // strided rows
          Tensor out = up.zeros(*be, T, C, C);
          be->norm(out, xin, up.put(*be, w, 1, C), bias ? up.put(*be, b, 1, C) : Tensor{}, kind, 1e-5f);
          (be == gpu.get() ? got : want) = fetch(*be, out);
        }
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i])))
              << (kind == NormKind::Rms ? "rms" : "layer") << " bias=" << bias << " C=" << C;
        }
      }
    }
  }
}

// SiLU (expf on the GPU, the CPU's vector exp or expf) through activation(), and act(gate) * up for every
// activation, into another tensor and in place of the gate, on strided rows: a few ulp of the activation
// (ActivationsMatchCpu's 4e-6 relative + 1e-6), times |up|, plus the product's rounding.
TEST(CudaOps, SiluAndGatedActMatchCpu) {
  SKIP_WITHOUT_CUDA();
  auto gpu = cuda_backend();
  auto cpu = make_cpu_backend(2);
  const int64_t F = 1001, W = 2 * F + 3;
  for (int64_t T : {1, 3}) {
    auto x = randn(size_t(T * W), 6, 3.0f);
    {
      std::vector<float> got, want;
      for (Backend* be : {gpu.get(), cpu.get()}) {
        Uploads up;
        Tensor t = up.put(*be, x, T, W);
        be->activation(t.col_slice(0, F), Activation::Silu);
        (be == gpu.get() ? got : want) = fetch(*be, t);
      }
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 4e-6 * std::fabs(want[i]) + 1e-6);
    }
    for (Activation act : {Activation::Silu, Activation::GeluTanh, Activation::GeluErf, Activation::Relu}) {
      for (bool in_place : {false, true}) {
        std::vector<float> got, want;
        for (Backend* be : {gpu.get(), cpu.get()}) {
          Uploads up;
          Tensor t = up.put(*be, x, T, W);
          Tensor out = in_place ? t.col_slice(0, F) : up.zeros(*be, T, F, F + 1);
          be->gated_act(out, t.col_slice(0, 2 * F), act);
          (be == gpu.get() ? got : want) = fetch(*be, in_place ? t : out);
        }
        for (size_t i = 0; i < got.size(); ++i) {
          const int64_t t = int64_t(i) / (in_place ? W : F), c = int64_t(i) % (in_place ? W : F);
          const float upv = c < F ? std::fabs(x[size_t(t * W + F + c)]) : 1.0f;
          ASSERT_NEAR(got[i], want[i], (4e-6 * std::fabs(want[i]) + 1e-6) * (1 + upv))
              << "act=" << int(act) << " in_place=" << in_place << " T=" << T << " i=" << i;
        }
      }
    }
  }
}

// Linear layers of every weight dtype and both stored layouts, at odd and aligned sizes, through the GEMV
// (T <= 4) and GEMM (T > 4) paths, with and without bias, residual and activation. Both backends multiply
// the same (rounded) weights with F32 activations in F32: |diff| <= 3e-5 sum|w x| + 1e-6 (the GEMM path
// carries activations as hi + lo 16-bit halves, exact to ~2^-17 relative).
TEST(CudaOps, LinearMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  auto gpu = cuda_backend();
  auto cpu = make_cpu_backend(2);
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    for (auto [K, N] : std::vector<std::array<int64_t, 2>>{{19, 23}, {64, 40}, {136, 72}, {768, 97}}) {
      for (int64_t T : {1, 2, 3, 4, 5, 37}) {
        for (int variant = 0; variant < 4; ++variant) {
          const bool in_out = variant % 2 == 0, with_bias = variant < 2, accumulate = variant == 1;
          const bool act = variant == 3;
          auto w = randn(size_t(K * N), 7 + uint32_t(K), 0.2f), b = randn(size_t(N), 8),
               x = randn(size_t(T * K), 9);
          auto residual = randn(size_t(T * N), 10);
          std::vector<float> got, want;
          for (Backend* be : {gpu.get(), cpu.get()}) {
            Uploads up;
            const Linear l = prepare(*be, w, with_bias ? &b : nullptr,
                                     in_out ? MatrixOrder::InOut : MatrixOrder::OutIn, K, N, dt, up.keep);
            if (be == gpu.get()) {
              EXPECT_EQ(l.format.dtype, dt);
              EXPECT_EQ(l.n_in, K);
              EXPECT_EQ(l.n_out, N);
            }
            Tensor in = up.put(*be, x, T, K);
            std::vector<float> r = residual;
            Tensor out = up.put(*be, r, T, N);
            if (be == cpu.get()) {  // the CPU aliases host F32: compute in a copy
              up.keep.push_back(be->alloc(r.size() * sizeof(float)));
              std::memcpy(up.keep.back()->data(), r.data(), r.size() * sizeof(float));
              out = make_tensor(up.keep.back()->data(), DType::F32, Device::Host, T, N);
            }
            if (act) {
              be->linear_act(out, in, l, Activation::GeluTanh);
            } else {
              be->linear(out, in, l, accumulate);
            }
            (be == gpu.get() ? got : want) = fetch(*be, out);
          }
          for (int64_t t = 0; t < T; ++t) {
            for (int64_t n = 0; n < N; ++n) {
              double mag = 0;
              for (int64_t k = 0; k < K; ++k) {
                const float wk = in_out ? w[size_t(k * N + n)] : w[size_t(n * K + k)];
                mag += std::fabs(double(round_to(wk, dt)) * x[size_t(t * K + k)]);
              }
              const size_t i = size_t(t * N + n);
              ASSERT_NEAR(got[i], want[i], 3e-5 * mag + 1e-6 * (1 + std::fabs(want[i])))
                  << dtype_name(dt) << " K=" << K << " N=" << N << " T=" << T << " variant=" << variant;
            }
          }
        }
      }
    }
  }
}

// store_kv then attention, for every cache dtype, prefill (T > 1) and decode (T = 1, split over the cache)
// shapes (a 4096-row cache: splits of more than one 32-key tile), odd head dims up to the maximum (decode at
// 256 needs more than the default 48 KB of shared memory).
// The CPU reference holds the same rounded values (the inputs are rounded to the GPU cache's dtype first), so
// only summation order differs: |diff| <= 2e-5 (outputs are averages of N(0,1) values). The tensor-core
// kernel feeds Q and P as two F16 terms each (~22 bits), so it keeps to the same bound.
TEST(CudaOps, StoreKvAndAttentionMatchCpu) {
  SKIP_WITHOUT_CUDA();
  auto cpu = make_cpu_backend(2);
  struct Case {
    int64_t T, pos0, H, D, S, Hkv = 0;  // Hkv 0: H (multi-head); 1: multi-query; else grouped
  };
  std::vector<Case> cases = {{1, 0, 1, 1, 1},          {5, 3, 3, 7, 8},         {1, 150, 2, 64, 151},
                             {70, 0, 2, 5, 70},        {1, 700, 4, 33, 1024},   {19, 40, 2, 160, 64},
                             {9, 3, 1, 256, 12},       {1, 1500, 2, 64, 2048},  {1, 2, 2, 64, 2048},
                             {1, 63, 12, 64, 1024},    {33, 0, 12, 64, 1024},   {1, 700, 12, 64, 1024, 1},
                             {33, 5, 12, 64, 1024, 1}, {5, 3, 4, 16, 8, 2},     {1, 2047, 6, 64, 2048, 3},
                             {1, 300, 2, 256, 512},    {1, 90, 2, 160, 128, 1}, {1, 3000, 2, 64, 4096}};
  // With an F16 cache and head dims 16 .. 128 (multiples of 16), prefill runs on tensor cores
  // (CudaOptions::mma_attention): many 64-key tiles, query blocks cut short, at depth, grouped heads.
  cases.insert(cases.end(), {{300, 200, 4, 128, 1024, 2},
                             {1000, 0, 2, 64, 1024},
                             {77, 500, 3, 96, 1024, 1},
                             {64, 64, 2, 48, 256},
                             {17, 1, 2, 16, 64},
                             {2, 129, 1, 80, 256},
                             {130, 0, 2, 112, 256}});
  for (DType kv : {DType::F32, DType::F16, DType::BF16}) {
    auto gpu = cuda_backend(kv);
    for (const Case& c : cases) {
      const int64_t Hkv = c.Hkv > 0 ? c.Hkv : c.H;
      const int64_t C = c.H * c.D, KV = Hkv * c.D, n = c.pos0 + c.T;
      auto q = randn(size_t(c.T * C), 11), k = randn(size_t(n * KV), 12), v = randn(size_t(n * KV), 13);
      for (auto& e : k) e = round_to(e, kv);
      for (auto& e : v) e = round_to(e, kv);
      const float scale = 1.0f / std::sqrt(float(c.D));
      std::vector<float> got, want;
      for (Backend* be : {gpu.get(), cpu.get()}) {
        Uploads up;
        auto cache = be->make_kv_cache(KvCacheSpec{1, Hkv, c.D, c.S, 1});
        // Rows 0 .. pos0-1 as an earlier step would have stored them, then this step's T rows.
        Tensor kt = up.put(*be, k, n, KV), vt = up.put(*be, v, n, KV);
        if (c.pos0 > 0) {
          const StepOf before = one_run(0, c.pos0, 0);
          be->store_kv(*cache, 0, kt.row_slice(0, c.pos0), vt.row_slice(0, c.pos0), before.step());
        }
        const StepOf now = one_run(0, c.T, c.pos0);
        be->store_kv(*cache, 0, kt.row_slice(c.pos0, c.T), vt.row_slice(c.pos0, c.T), now.step());
        Tensor out = up.zeros(*be, c.T, C, C);
        be->attention(out, up.put(*be, q, c.T, C), *cache, 0, now.step(), c.H, scale);
        (be == gpu.get() ? got : want) = fetch(*be, out);
      }
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 2e-5)
            << dtype_name(kv) << " T=" << c.T << " pos0=" << c.pos0 << " H=" << c.H << " Hkv=" << Hkv
            << " D=" << c.D << " S=" << c.S << " i=" << i;
      }
    }
  }
}

// Decode token by token, as a session does (each step reading the rows the earlier ones stored; two layers of
// one cache alternating, sharing the decode scratch), after a prefill run or from position 0, for every cache
// dtype, multi-head, multi-query and grouped heads, one split and many, against the CPU. The CPU holds the
// values rounded as the GPU cache does, so only summation order differs: 2e-5.
TEST(CudaOps, DecodeTokenByTokenMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  auto cpu = make_cpu_backend(2);
  struct Case {
    int64_t prefill, steps, H, D, S, Hkv;
  };
  const std::vector<Case> cases = {{0, 40, 2, 64, 64, 2}, {5, 70, 3, 33, 2048, 3},
                                   {0, 3, 1, 1, 4, 1},    {100, 5, 12, 64, 1024, 12},
                                   {7, 6, 6, 64, 256, 1}, {0, 9, 4, 256, 16, 2}};
  for (DType kv : {DType::F32, DType::F16, DType::BF16}) {
    auto gpu = cuda_backend(kv);
    for (const Case& c : cases) {
      const int64_t C = c.H * c.D, KV = c.Hkv * c.D, n = c.prefill + c.steps;
      auto q = randn(size_t(n * C), 61), k = randn(size_t(n * KV), 62), v = randn(size_t(n * KV), 63);
      auto k_r = k, v_r = v;  // what the cache holds
      for (auto& e : k_r) e = round_to(e, kv);
      for (auto& e : v_r) e = round_to(e, kv);
      const float scale = 1.0f / std::sqrt(float(c.D));
      std::vector<float> got, want, got0, want0;
      for (Backend* be : {gpu.get(), cpu.get()}) {
        const bool on_gpu = be == gpu.get();
        Uploads up;
        auto cache = be->make_kv_cache(KvCacheSpec{2, c.Hkv, c.D, c.S, 1});
        Tensor kt = up.put(*be, on_gpu ? k : k_r, n, KV), vt = up.put(*be, on_gpu ? v : v_r, n, KV);
        Tensor out2 = up.zeros(*be, 1, C, C);
        Tensor qt = up.put(*be, q, n, C);
        Tensor out = up.zeros(*be, n, C, C);
        if (c.prefill > 0) {
          const StepOf st = one_run(0, c.prefill, 0);
          be->store_kv(*cache, 1, kt.row_slice(0, c.prefill), vt.row_slice(0, c.prefill), st.step());
          be->attention(out.row_slice(0, c.prefill), qt.row_slice(0, c.prefill), *cache, 1, st.step(), c.H,
                        scale);
        }
        for (int64_t p = c.prefill; p < n; ++p) {
          const StepOf st = one_run(0, 1, p);
          be->store_kv(*cache, 1, kt.row_slice(p, 1), vt.row_slice(p, 1), st.step());
          be->attention(out.row_slice(p, 1), qt.row_slice(p, 1), *cache, 1, st.step(), c.H, scale);
          // layer 0 in between, at the same position
          be->store_kv(*cache, 0, kt.row_slice(p, 1), vt.row_slice(p, 1), st.step());
          be->attention(out2, qt.row_slice(p, 1), *cache, 0, st.step(), c.H, scale);
        }
        (on_gpu ? got : want) = fetch(*be, out);
        (on_gpu ? got0 : want0) = fetch(*be, out2);  // layer 0's last step
      }
      got.insert(got.end(), got0.begin(), got0.end());
      want.insert(want.end(), want0.begin(), want0.end());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 2e-5)
            << dtype_name(kv) << " prefill=" << c.prefill << " H=" << c.H << " Hkv=" << c.Hkv << " D=" << c.D
            << " S=" << c.S << " row=" << int64_t(i) / C;
      }
    }
  }
}

// Rotary positions and learned positions added after a projection: the CUDA kernels against the CPU's, for
// a prefill run and a decode run at a far position (the angle grows with it), on a strided view of q.
TEST(CudaOps, RopeAndAddPositionsMatchCpu) {
  SKIP_WITHOUT_CUDA();
  auto cpu = make_cpu_backend(2);
  auto gpu = cuda_backend(DType::F32);
  struct Case {
    int64_t T, pos0, H, D, rotary;
    float theta;
  };
  for (const Case& c :
       {Case{7, 0, 3, 16, 4, 10000.0f}, Case{1, 1900, 4, 64, 64, 10000.0f}, Case{20, 5, 2, 32, 16, 500.0f}}) {
    const int64_t W = c.H * c.D + 8;  // q's columns inside a wider row, as in qkv
    auto x = randn(size_t(c.T * W), 41);
    auto table = randn(size_t((c.pos0 + c.T) * c.H * c.D), 42);
    std::vector<float> got, want, got_p, want_p;
    for (Backend* be : {gpu.get(), cpu.get()}) {
      Uploads up;
      Tensor t = up.put(*be, x, c.T, W);
      const StepOf st = one_run(0, c.T, c.pos0);
      be->rope(t.col_slice(0, c.H * c.D), st.step(), c.H, c.D, c.rotary, c.theta, RopeLayout::NeoxHalves);
      (be == gpu.get() ? got : want) = fetch(*be, t);
      Tensor p = up.put(*be, table, c.pos0 + c.T, c.H * c.D);
      Tensor o = up.put(*be, x, c.T, c.H * c.D);
      be->add_positions(o, st.step(), p);
      (be == gpu.get() ? got_p : want_p) = fetch(*be, o);
    }
    // sincosf against the CPU's double cos/sin of the same F32 angle: a few ulp of values ~3.
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 2e-5) << "pos0=" << c.pos0 << " i=" << i;
    for (size_t i = 0; i < got_p.size(); ++i) ASSERT_EQ(got_p[i], want_p[i]) << "i=" << i;
  }
}

// Rotary positions in the adjacent-pairs layout (GPT-J, llama.cpp's permuted Llama): as the test above, two
// runs in one step besides; sincosf against the CPU's double cos/sin of the same F32 angle: 2e-5.
TEST(CudaOps, RopeAdjacentPairsMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  auto cpu = make_cpu_backend(2);
  auto gpu = cuda_backend(DType::F32);
  struct Case {
    int64_t H, D, rotary;
    float theta;
  };
  const StepOf steps[] = {one_run(0, 7, 0), one_run(0, 1, 1900),
                          StepOf({SeqRun{1, 0, 3, 40}, SeqRun{0, 3, 20, 5}})};
  for (const Case& c : {Case{3, 16, 4, 10000.0f}, Case{4, 64, 64, 10000.0f}, Case{2, 32, 16, 500.0f}}) {
    for (const StepOf& st : steps) {
      const int64_t T = st.step().n_tokens, W = c.H * c.D + 8;
      auto x = randn(size_t(T * W), 43);
      std::vector<float> got, want;
      for (Backend* be : {gpu.get(), cpu.get()}) {
        Uploads up;
        Tensor t = up.put(*be, x, T, W);
        be->rope(t.col_slice(0, c.H * c.D), st.step(), c.H, c.D, c.rotary, c.theta,
                 RopeLayout::AdjacentPairs);
        (be == gpu.get() ? got : want) = fetch(*be, t);
      }
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 2e-5) << "H=" << c.H << " D=" << c.D << " T=" << T << " i=" << i;
    }
  }
}

// Rotary positions from given frequencies (Llama 3's rescaled ones, Config::rope_inv_freq) in both layouts,
// and the per-head RMSNorm of Qwen3's q and k on a strided view: against the CPU. Rotations: sincosf against
// the CPU's double cos/sin of the same F32 angle, 2e-5; the norm: F32 sums in another order, 1e-5.
TEST(CudaOps, RopeFreqsAndNormHeadsMatchCpu) {
  SKIP_WITHOUT_CUDA();
  auto cpu = make_cpu_backend(2);
  auto gpu = cuda_backend(DType::F32);
  Config c;
  c.n_head = 4, c.n_embd = 256, c.rotary_dim = 64, c.rope_theta = 500000.0f;
  c.rope_scaling.kind = RopeScalingKind::Llama3;
  c.rope_scaling.factor = 32.0f;
  c.rope_scaling.low_freq_factor = 1.0f;
  c.rope_scaling.high_freq_factor = 4.0f;
  c.rope_scaling.original_context = 8192;
  std::vector<float> inv = c.rope_inv_freq();
  const StepOf steps[] = {one_run(0, 7, 0), one_run(0, 1, 9000),
                          StepOf({SeqRun{1, 0, 3, 40}, SeqRun{0, 3, 20, 5}})};
  const int64_t H = 4, D = 64, W = H * D + 8;
  for (RopeLayout layout : {RopeLayout::NeoxHalves, RopeLayout::AdjacentPairs}) {
    for (const StepOf& st : steps) {
      const int64_t T = st.step().n_tokens;
      auto x = randn(size_t(T * W), 44);
      auto nw = randn(size_t(D), 45);
      std::vector<float> got, want, got_n, want_n;
      for (Backend* be : {gpu.get(), cpu.get()}) {
        Uploads up;
        Tensor f = up.put(*be, inv, 1, int64_t(inv.size()));
        Tensor t = up.put(*be, x, T, W);
        be->rope_freqs(t.col_slice(0, H * D), st.step(), H, D, D, f, layout, 1.0f);
        (be == gpu.get() ? got : want) = fetch(*be, t);
        Tensor n = up.put(*be, x, T, W);
        be->norm_heads(n.col_slice(8, H * D), H, up.put(*be, nw, 1, D), NormKind::Rms, 1e-6f);
        (be == gpu.get() ? got_n : want_n) = fetch(*be, n);
      }
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5) << "T=" << T << " i=" << i;
      for (size_t i = 0; i < got_n.size(); ++i)
        ASSERT_NEAR(got_n[i], want_n[i], 1e-5) << "T=" << T << " i=" << i;
    }
  }
}

// Three sequences in one step, each at its own position (two decode runs, one prefill run, in an order
// other than their sequence numbers), in the second layer of a two-layer cache: each run's output equals
// the CPU's for that sequence alone in a cache of its own. Earlier positions are stored by steps of one
// sequence first, as a session would have.
TEST(CudaOps, SeveralSequencesInOneStepMatchEachAloneOnCpu) {
  SKIP_WITHOUT_CUDA();
  auto cpu = make_cpu_backend(2);
  const int64_t H = 3, D = 40, C = H * D, S = 96, L = 2, layer = 1;
  const float scale = 1.0f / std::sqrt(float(D));
  const std::vector<SeqRun> runs = {SeqRun{2, 0, 1, 70}, SeqRun{0, 1, 1, 5}, SeqRun{1, 2, 6, 17}};
  const StepOf now(runs);
  const int64_t T = now.step().n_tokens;
  for (DType kv : {DType::F32, DType::F16, DType::BF16}) {
    auto gpu = cuda_backend(kv);
    // Per sequence: its keys and values for positions 0 .. pos0 + n - 1, and this step's queries.
    std::vector<std::vector<float>> ks, vs;
    for (const SeqRun& r : runs) {
      ks.push_back(randn(size_t((r.pos0 + r.n) * C), 20 + uint32_t(r.seq)));
      vs.push_back(randn(size_t((r.pos0 + r.n) * C), 30 + uint32_t(r.seq)));
      for (auto& e : ks.back()) e = round_to(e, kv);
      for (auto& e : vs.back()) e = round_to(e, kv);
    }
    auto q = randn(size_t(T * C), 40);

    // The GPU: one cache of 3 sequences; the history per sequence, then the step of all three.
    std::vector<float> got;
    {
      Uploads up;
      auto cache = gpu->make_kv_cache(KvCacheSpec{L, H, D, S, 3});
      EXPECT_EQ(cache->bytes(), size_t(L * 3 * 2 * S * C) * dtype_size(kv));
      std::vector<float> k_now(size_t(T * C)), v_now(size_t(T * C));
      for (size_t i = 0; i < runs.size(); ++i) {
        const SeqRun& r = runs[i];
        Tensor kt = up.put(*gpu, ks[i], r.pos0 + r.n, C), vt = up.put(*gpu, vs[i], r.pos0 + r.n, C);
        const StepOf before = one_run(r.seq, r.pos0, 0);
        gpu->store_kv(*cache, layer, kt.row_slice(0, r.pos0), vt.row_slice(0, r.pos0), before.step());
        std::memcpy(&k_now[size_t(r.first * C)], &ks[i][size_t(r.pos0 * C)], size_t(r.n * C) * sizeof(float));
        std::memcpy(&v_now[size_t(r.first * C)], &vs[i][size_t(r.pos0 * C)], size_t(r.n * C) * sizeof(float));
      }
      // k and v as strided views, as the session's qkv buffer gives them.
      std::vector<float> kv_rows(size_t(T * 2 * C));
      for (int64_t t = 0; t < T; ++t) {
        std::memcpy(&kv_rows[size_t(t * 2 * C)], &k_now[size_t(t * C)], size_t(C) * sizeof(float));
        std::memcpy(&kv_rows[size_t(t * 2 * C + C)], &v_now[size_t(t * C)], size_t(C) * sizeof(float));
      }
      Tensor both = up.put(*gpu, kv_rows, T, 2 * C);
      gpu->store_kv(*cache, layer, both.col_slice(0, C), both.col_slice(C, C), now.step());
      Tensor out = up.zeros(*gpu, T, C, C);
      gpu->attention(out, up.put(*gpu, q, T, C), *cache, layer, now.step(), H, scale);
      got = fetch(*gpu, out);
    }
    // The CPU: each sequence alone, as sequence 0 of a cache of one.
    for (size_t i = 0; i < runs.size(); ++i) {
      const SeqRun& r = runs[i];
      Uploads up;
      auto cache = cpu->make_kv_cache(KvCacheSpec{L, H, D, S, 1});
      Tensor kt = up.put(*cpu, ks[i], r.pos0 + r.n, C), vt = up.put(*cpu, vs[i], r.pos0 + r.n, C);
      const StepOf before = one_run(0, r.pos0, 0), alone = one_run(0, r.n, r.pos0);
      cpu->store_kv(*cache, layer, kt.row_slice(0, r.pos0), vt.row_slice(0, r.pos0), before.step());
      cpu->store_kv(*cache, layer, kt.row_slice(r.pos0, r.n), vt.row_slice(r.pos0, r.n), alone.step());
      std::vector<float> q_alone(q.begin() + r.first * C, q.begin() + (r.first + r.n) * C);
      Tensor out = up.zeros(*cpu, r.n, C, C);
      cpu->attention(out, up.put(*cpu, q_alone, r.n, C), *cache, layer, alone.step(), H, scale);
      const std::vector<float> want = fetch(*cpu, out);
      for (size_t j = 0; j < want.size(); ++j) {
        ASSERT_NEAR(got[size_t(r.first * C) + j], want[j], 2e-5)
            << dtype_name(kv) << " sequence " << r.seq << " (pos0 " << r.pos0 << ", n " << r.n << ") j=" << j;
      }
    }
  }
}

// ---- the whole model ------------------------------------------------------------------------------

using test::argmax;
using test::load_reference;
using test::read_tensor;
using test::Reference;

double max_abs_diff(const float* a, const float* b, size_t n) {
  double d = 0;
  for (size_t i = 0; i < n; ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
  return d;
}

std::shared_ptr<const Model> load_on(const std::string& fixture, std::shared_ptr<Backend> be,
                                     std::optional<DType> dtype = std::nullopt) {
  LoadOptions lo;
  lo.backend = std::move(be);
  lo.weight_dtype = dtype;
  return Model::load(test::fixture_dir(fixture), lo);
}

const std::vector<std::string> kFixtures = {"tiny",         "tiny-untied",      "tiny-f16",       "tiny-bf16",
                                            "tiny-sharded", "tiny-relu-legacy", "tiny-sinusoidal"};

// Stored weights with an F32 KV cache: F32 arithmetic throughout, so the CPU's bound (1e-4) holds. With the
// default F16 cache, K and V are rounded to 2^-11 relative: logits move by well under the 0.02 allowed
// (F16 weights, which round every matrix the same way, move them by ~8e-3 on these fixtures).
TEST(CudaModel, LogitsMatchTransformers) {
  SKIP_WITHOUT_CUDA();
  for (DType kv : {DType::F32, DType::F16}) {
    auto be = cuda_backend(kv);
    for (const auto& name : kFixtures) {
      const Reference ref = load_reference(name);
      auto model = load_on(name, be);
      const int64_t V = model->config().n_vocab, T = int64_t(ref.tokens.size());
      Session s(model);
      auto got = s.eval_all(ref.tokens);
      const double d = max_abs_diff(got.data(), ref.logits.data(), size_t(T * V));
      // 16-bit stored fixtures: their reference is transformers on the same 16-bit weights in F32.
      const double tol = kv == DType::F32 ? 1e-4 : 2e-2;
      std::printf("[ measured ] cuda %s, %s KV: max |logit - transformers| = %.3g\n", name.c_str(),
                  std::string(dtype_name(kv)).c_str(), d);
      EXPECT_LE(d, tol) << name;
      // Every logit within d of the reference: the top choice cannot change where the reference's top two
      // are more than 2d apart. Closer than that, either is right (tiny-bf16, position 18: 2.1e-5 apart).
      int64_t checked = 0;
      for (int64_t t = 0; t < T; ++t) {
        if (top_margin(ref.logits.data() + t * V, V) <= 2 * d) continue;
        ++checked;
        EXPECT_EQ(argmax(got.data() + t * V, V), argmax(ref.logits.data() + t * V, V))
            << name << " position " << t;
      }
      EXPECT_GE(checked, T - 2) << name << ": too many near-ties to say anything";
    }
  }
}

// Weights converted to 16 bits at load, default (F16) KV cache: the CPU test's bounds (2.5x the largest
// difference the CPU measured), F16 loosened to 0.03 for the cache's own rounding; argmax >= 99%.
TEST(CudaModel, SixteenBitWeightsCloseToTransformers) {
  SKIP_WITHOUT_CUDA();
  auto be = cuda_backend();
  for (auto [dt, tol] : std::vector<std::pair<DType, double>>{{DType::BF16, 0.15}, {DType::F16, 0.03}}) {
    int64_t positions = 0, agree = 0;
    double worst = 0;
    for (const char* name : {"tiny", "tiny-untied", "tiny-sharded", "tiny-relu-legacy", "tiny-sinusoidal"}) {
      const Reference ref = load_reference(name);
      auto model = load_on(name, be, dt);
      ASSERT_EQ(model->weights().layers[0].ffn_up.format.dtype, dt);
      const int64_t V = model->config().n_vocab, T = int64_t(ref.tokens.size());
      Session s(model);
      auto got = s.eval_all(ref.tokens);
      worst = std::max(worst, max_abs_diff(got.data(), ref.logits.data(), size_t(T * V)));
      for (int64_t t = 0; t < T; ++t)
        agree += argmax(got.data() + t * V, V) == argmax(ref.logits.data() + t * V, V);
      positions += T;
    }
    std::printf("[ measured ] cuda %s weights: max |logit - transformers F32| = %.3g, argmax %lld/%lld\n",
                std::string(dtype_name(dt)).c_str(), worst, (long long)agree, (long long)positions);
    EXPECT_LE(worst, tol);
    EXPECT_GE(double(agree), 0.99 * double(positions));
  }
}

// The exact GPT-2 124M shape (head dim 64, 1024 positions, 50257 vocab: the vector GEMV path and 16
// decode splits), BF16 weights: the CPU test's bounds against transformers' F32 logits.
TEST(CudaModel, Gpt2ShapeBf16MatchesTransformers) {
  SKIP_WITHOUT_CUDA();
  const auto dir = test::fixture_dir("gpt2-124m-splitmix");
  auto ref = SafeTensorsFile::open(dir / "reference.safetensors");
  const auto tokens = read_tensor<int32_t>(*ref, "tokens", StDtype::I32);
  const auto want_argmax = read_tensor<int32_t>(*ref, "argmax", StDtype::I32);
  const auto logits_last = read_tensor<float>(*ref, "logits_last", StDtype::F32);
  test::TempDir tmp;
  const Config c = load_config(dir / "config.json");
  write_random_model(tmp.path(), c);
  LoadOptions lo;
  lo.backend = cuda_backend();
  lo.weight_dtype = DType::BF16;
  auto model = Model::load(tmp.path(), lo);
  const int64_t V = c.n_vocab, T = int64_t(tokens.size());
  Session s(model);
  auto got = s.eval_all(tokens);
  int64_t agree = 0;
  for (int64_t t = 0; t < T; ++t) agree += argmax(got.data() + t * V, V) == want_argmax[size_t(t)];
  const double d = max_abs_diff(got.data() + (T - 1) * V, logits_last.data(), size_t(V));
  std::printf(
      "[ measured ] cuda gpt2 124M shape, BF16: max |logit - transformers F32| = %.3g (last row), argmax "
      "%lld/%lld\n",
      d, (long long)agree, (long long)T);
  EXPECT_LE(d, 4e-2);
  EXPECT_GE(double(agree), 0.99 * double(T));
  // Token by token through the cache (GEMV, split attention, the recorded graph) agrees with the prefill.
  Session step(model);
  for (int64_t t = 0; t < T; ++t) {
    auto row = step.eval(std::span<const int32_t>(&tokens[size_t(t)], 1));
    ASSERT_LE(max_abs_diff(row.data(), got.data() + t * V, size_t(V)), 2e-3) << "position " << t;
  }
}

// Decode through the KV cache (GEMV, split attention, graphs) equals prefill (cuBLAS, tiled attention):
// both read K/V from the cache; only summation orders differ, so with an F32 cache within 1e-4 (the CPU's
// bound for F32 paths). With the default F16 cache the two paths' K/V, a few F32 ulps apart before rounding,
// round to the same F16 value except where they straddle a rounding midpoint: there they land one F16 ulp
// apart, at most twice the half ulp by which rounding moves any value. So the F16 bound is 1e-4 plus twice
// what rounding the cache to F16 moves the logits (measured here: prefill with each cache dtype).
TEST(CudaModel, TokenByTokenWithTheKvCacheEqualsPrefill) {
  SKIP_WITHOUT_CUDA();
  auto be32 = cuda_backend(DType::F32), be16 = cuda_backend(DType::F16);
  for (const auto& name : kFixtures) {
    const Reference ref = load_reference(name);
    std::vector<float> prefill32;
    for (auto be : {be32, be16}) {
      const bool f16 = be == be16;
      auto model = load_on(name, be);
      const int64_t V = model->config().n_vocab, T = int64_t(ref.tokens.size());
      Session whole(model);
      auto all_span = whole.eval_all(ref.tokens);
      const std::vector<float> all(all_span.begin(), all_span.end());
      double bound = 1e-4;
      if (!f16) {
        prefill32 = all;
      } else {
        const double r = max_abs_diff(all.data(), prefill32.data(), all.size());
        bound += 2 * r;
        std::printf("[ measured ] cuda %s: the F16 cache moves prefill logits by %.3g; decode bound %.3g\n",
                    name.c_str(), r, bound);
      }
      Session s(model);
      double worst = 0;
      for (int64_t t = 0; t < T; ++t) {
        auto row = s.eval(std::span<const int32_t>(&ref.tokens[size_t(t)], 1));
        const double d = max_abs_diff(row.data(), all.data() + t * V, size_t(V));
        worst = std::max(worst, d);
        ASSERT_LE(d, bound) << name << (f16 ? " F16" : " F32") << " cache, position " << t;
      }
      std::printf("[ measured ] cuda %s, %s cache: max |decode - prefill| = %.3g\n", name.c_str(),
                  f16 ? "F16" : "F32", worst);
      // Chunks of 7 (prefill kernels at pos0 > 0) agree too.
      Session chunked(model, SessionOptions{7});
      auto c = chunked.eval_all(ref.tokens);
      EXPECT_LE(max_abs_diff(c.data(), all.data(), all.size()), bound) << name;
    }
  }
}

// The Llama-shaped families on the GPU, F32 cache: transformers' logits within the CPU's 1e-4 (llama3 and
// linear rope scaling, grouped queries, q/k norms, head_dim != n_embd / n_head, Mistral's sliding window of 8
// over 40 tokens), and decode token by token and prefill in chunks of 7 (the window's decode and prefill
// kernels at pos0 > 0) equal to the whole prefill within the same bound.
TEST(CudaModel, LlamaFamiliesMatchTransformers) {
  SKIP_WITHOUT_CUDA();
  auto be = cuda_backend(DType::F32);
  for (const char* name : {"llama-gqa62", "llama-gqa93-llama3", "llama-linear-bias", "mistral-window",
                           "qwen2-bias", "qwen3-headdim"}) {
    const Reference ref = load_reference(name);
    auto model = load_on(name, be);
    const int64_t V = model->config().n_vocab, T = int64_t(ref.tokens.size());
    Session whole(model);
    auto all_span = whole.eval_all(ref.tokens);
    const std::vector<float> all(all_span.begin(), all_span.end());
    const double d = max_abs_diff(all.data(), ref.logits.data(), all.size());
    std::printf("[ measured ] cuda %s: max |logit - transformers| = %.3g\n", name, d);
    EXPECT_LE(d, 1e-4) << name;
    Session s(model);
    for (int64_t t = 0; t < T; ++t) {
      auto row = s.eval(std::span<const int32_t>(&ref.tokens[size_t(t)], 1));
      ASSERT_LE(max_abs_diff(row.data(), all.data() + t * V, size_t(V)), 1e-4) << name << " position " << t;
    }
    Session chunked(model, SessionOptions{7});
    auto c = chunked.eval_all(ref.tokens);
    EXPECT_LE(max_abs_diff(c.data(), all.data(), all.size()), 1e-4) << name;
  }
}

// The logits of each token of `toks` appended to sequence `seq` one at a time (decode steps, recorded as
// graphs).
std::vector<float> one_by_one(Session& x, std::span<const int32_t> toks, int64_t seq = 0) {
  std::vector<float> out;
  for (const int32_t& id : toks) {
    auto r = x.eval(std::span<const int32_t>(&id, 1), seq);
    out.insert(out.end(), r.begin(), r.end());
  }
  return out;
}

// The "tiny" fixture on the CUDA backend with a KV cache of dtype kv, its reference tokens and vocabulary.
struct TinyOnCuda {
  std::shared_ptr<const Model> model;
  std::vector<int32_t> tokens;
  int64_t n_vocab;
};
TinyOnCuda tiny_on_cuda(DType kv) {
  auto model = load_on("tiny", cuda_backend(kv));
  const int64_t V = model->config().n_vocab;
  return {std::move(model), load_reference("tiny").tokens, V};
}

// Keeping a prefix of a sequence (what the server's prompt cache does) and going on from it with recorded
// decode steps gives exactly what a fresh session gets for the same tokens through the same kernels.
TEST(CudaModel, KeepingAPrefixGoesOnFromIt) {
  SKIP_WITHOUT_CUDA();
  for (DType kv : {DType::F32, DType::F16}) {
    const auto [model, tk, V] = tiny_on_cuda(kv);
    Session s(model), fresh(model);
    one_by_one(s, std::span<const int32_t>(tk.data(), 20));
    s.keep(0, 6);
    ASSERT_EQ(s.n_past(0), 6);
    const auto got = one_by_one(s, std::span<const int32_t>(tk.data() + 30, 10));
    one_by_one(fresh, std::span<const int32_t>(tk.data(), 6));
    const auto want = one_by_one(fresh, std::span<const int32_t>(tk.data() + 30, 10));
    ASSERT_EQ(got.size(), size_t(10 * V));
    EXPECT_EQ(max_abs_diff(got.data(), want.data(), got.size()), 0.0) << dtype_name(kv);
    // And a prefill run after a keep (the prompt-cache path: the uncached rest of a prompt in one step).
    s.keep(0, 6);
    const auto rows_span = s.eval_all(std::span<const int32_t>(tk.data() + 30, 10));
    const std::vector<float> rows(rows_span.begin(), rows_span.end());
    Session fresh2(model);
    one_by_one(fresh2, std::span<const int32_t>(tk.data(), 6));
    const auto want2 = fresh2.eval_all(std::span<const int32_t>(tk.data() + 30, 10));
    ASSERT_EQ(rows.size(), want2.size());
    EXPECT_EQ(max_abs_diff(rows.data(), want2.data(), rows.size()), 0.0) << dtype_name(kv);
  }
}

// A sequence that takes a copy of another's first positions (Session::copy_prefix: n > 1 choices of one
// prompt in the server) goes on, through recorded decode steps, exactly as a session that evaluated those
// positions itself with the same kernels. (Written without a GPU: this test is what checks it when one is
// lent.)
TEST(CudaModel, CopyingAPrefixGoesOnFromIt) {
  SKIP_WITHOUT_CUDA();
  for (DType kv : {DType::F32, DType::F16}) {
    const auto [model, tk, V] = tiny_on_cuda(kv);
    SessionOptions so;
    so.n_seq = 2;
    Session s(model, so), fresh(model);
    ASSERT_TRUE(s.can_copy());
    one_by_one(s, std::span<const int32_t>(tk.data(), 20), 0);
    one_by_one(s, std::span<const int32_t>(tk.data() + 40, 3), 1);  // something of its own first
    s.copy_prefix(0, 1, 6);
    ASSERT_EQ(s.n_past(1), 6);
    const auto got = one_by_one(s, std::span<const int32_t>(tk.data() + 30, 10), 1);
    one_by_one(fresh, std::span<const int32_t>(tk.data(), 6), 0);
    const auto want = one_by_one(fresh, std::span<const int32_t>(tk.data() + 30, 10), 0);
    ASSERT_EQ(got.size(), size_t(10 * V));
    EXPECT_EQ(max_abs_diff(got.data(), want.data(), got.size()), 0.0) << dtype_name(kv);
    // The source goes on as before.
    const auto next = one_by_one(s, std::span<const int32_t>(tk.data() + 20, 1), 0);
    Session whole(model);
    one_by_one(whole, std::span<const int32_t>(tk.data(), 20), 0);
    const auto next_want = one_by_one(whole, std::span<const int32_t>(tk.data() + 20, 1), 0);
    EXPECT_EQ(max_abs_diff(next.data(), next_want.data(), next.size()), 0.0) << dtype_name(kv);
    test::expect_error([&] { s.copy_prefix(0, 1, 22); }, ErrorKind::Argument, {"copy_prefix: 22 positions"});
  }
}

// The recorded decode step replays exactly what the op-by-op launch computes: same kernels, same grids,
// values read from the same device buffer. Also: two sessions interleaved (one graph each), a session
// destroyed and another made (possibly at the same address), a logits buffer regrown by eval_all.
TEST(CudaModel, GraphPathEqualsPlainPath) {
  SKIP_WITHOUT_CUDA();
  for (const char* name : {"tiny", "tiny-bf16", "tiny-untied"}) {
    const Reference ref = load_reference(name);
    auto with_graphs = load_on(name, cuda_backend(DType::F16, true));
    auto plain = load_on(name, cuda_backend(DType::F16, false));
    const int64_t V = with_graphs->config().n_vocab, T = int64_t(ref.tokens.size());
    std::vector<int32_t> other(ref.tokens.rbegin(), ref.tokens.rend());
    auto run = [&](std::shared_ptr<const Model> m) {
      std::vector<float> out;
      {
        Session a(m), b(m);
        for (int64_t t = 0; t < T; ++t) {
          auto ra = a.eval(std::span<const int32_t>(&ref.tokens[size_t(t)], 1));
          out.insert(out.end(), ra.begin(), ra.end());
          auto rb = b.eval(std::span<const int32_t>(&other[size_t(t)], 1));
          out.insert(out.end(), rb.begin(), rb.end());
        }
        a.reset();
        auto ra = a.eval_all(std::span<const int32_t>(ref.tokens.data(), 5));  // regrows a's logits buffer
        out.insert(out.end(), ra.begin(), ra.end());
        auto rs = a.eval(std::span<const int32_t>(&other[0], 1));
        out.insert(out.end(), rs.begin(), rs.end());
      }
      for (int rep = 0; rep < 3; ++rep) {  // new sessions, maybe at a freed one's address
        Session c(m);
        for (int64_t t = 0; t < std::min<int64_t>(T, 6); ++t) {
          auto rc = c.eval(std::span<const int32_t>(&other[size_t(t)], 1));
          out.insert(out.end(), rc.begin(), rc.end());
        }
      }
      return out;
    };
    const auto g = run(with_graphs), p = run(plain);
    ASSERT_EQ(g.size(), p.size());
    EXPECT_EQ(max_abs_diff(g.data(), p.data(), g.size()), 0.0) << name;
    (void)V;
  }
}

// Programmatic dependent launch (CudaOptions::pdl) changes only when kernels start, never what they compute:
// the logits with it and without are the same bits, prefill and token by token, graph-recorded and op by op,
// with plain and quantized weights. (On a device below compute capability 9.0 both backends launch plainly.)
TEST(CudaModel, DependentLaunchEqualsOrdinaryLaunch) {
  SKIP_WITHOUT_CUDA();
  auto backend = [](bool pdl, bool graphs) {
    CudaOptions o;
    o.pdl = pdl;
    o.graphs = graphs;
    return make_cuda_backend(o);
  };
  const auto quant = test::source_dir() / "tests" / "fixtures" / "gguf" / "gpt2-quant-mix.gguf";
  for (const std::string name : {"tiny", "tiny-bf16", "quant-mix"}) {
    const Reference ref = load_reference(name == "quant-mix" ? "tiny" : name);
    auto load = [&](bool pdl, bool graphs) -> std::shared_ptr<const Model> {
      if (name != "quant-mix") return load_on(name, backend(pdl, graphs), DType::F16);
      LoadOptions lo;
      lo.backend = backend(pdl, graphs);
      return Model::load(quant, lo);
    };
    auto run = [&](std::shared_ptr<const Model> m) {
      const int64_t V = m->config().n_vocab;
      std::vector<int32_t> ids;
      for (int32_t id : ref.tokens) ids.push_back(int32_t(id % V));
      Session a(m);
      const auto prefill = a.eval_all(ids);
      std::vector<float> out(prefill.begin(), prefill.end());
      Session b(m);
      for (int32_t id : ids) {
        const auto l = b.eval(std::span<const int32_t>(&id, 1));
        out.insert(out.end(), l.begin(), l.end());
      }
      return out;
    };
    for (bool graphs : {true, false}) {
      const auto with = run(load(true, graphs)), without = run(load(false, graphs));
      ASSERT_EQ(with.size(), without.size());
      EXPECT_EQ(max_abs_diff(with.data(), without.data(), with.size()), 0.0)
          << name << (graphs ? ", graphs" : ", op by op");
    }
  }
}

// Three sequences of one session decoded together (Session::eval_batch: one step of three runs at three
// positions, then one mixing a prefill run with decode runs), then one at a time (a recorded graph per
// sequence): every sequence's logits equal the CPU's for that sequence alone in a session of its own. F32
// KV cache: both within 1e-4 of transformers, so within 2e-4 of each other.
TEST(CudaModel, ThreeSequencesInOneStepEqualEachAloneOnCpu) {
  SKIP_WITHOUT_CUDA();
  auto be = cuda_backend(DType::F32);
  for (const char* name : {"tiny", "tiny-untied", "tiny-sinusoidal", "tiny-bf16"}) {
    const Reference ref = load_reference(name);
    auto on_gpu = load_on(name, be);
    auto on_cpu = Model::load(test::fixture_dir(name), LoadOptions::threads(2));
    const int64_t V = on_gpu->config().n_vocab;
    const std::vector<int32_t>& tk = ref.tokens;
    ASSERT_GE(tk.size(), 9u) << name;
    // Prompts of different lengths: the sequences sit at positions 5, 1 and 8.
    const std::vector<std::vector<int32_t>> prompts = {
        {tk.begin(), tk.begin() + 5}, {tk.rbegin(), tk.rbegin() + 1}, {tk.begin() + 1, tk.begin() + 9}};
    // What each sequence gets in each later step: {seq, tokens}.
    const std::vector<std::vector<std::pair<int64_t, std::vector<int32_t>>>> steps = {
        {{2, {tk[1]}}, {0, {tk[6]}}, {1, {tk[2]}}},                // three decode runs
        {{1, {tk[3], tk[4], tk[0]}}, {0, {tk[7]}}, {2, {tk[8]}}},  // a prefill run among decode runs
        {{1, {tk[5]}}},                                            // one sequence alone: graphs
        {{0, {tk[2]}}},
        {{1, {tk[6]}}},
        {{0, {tk[3]}}},
    };
    SessionOptions so;
    so.n_seq = 3;
    Session g(on_gpu, so);
    std::vector<std::unique_ptr<Session>> alone;
    for (int64_t s = 0; s < 3; ++s) {
      g.eval(prompts[size_t(s)], s);
      alone.push_back(std::make_unique<Session>(on_cpu));
      alone.back()->eval(prompts[size_t(s)]);
    }
    for (size_t si = 0; si < steps.size(); ++si) {
      std::vector<Session::SeqTokens> batch;
      for (const auto& [seq, toks] : steps[si]) batch.push_back({seq, std::span<const int32_t>(toks)});
      const auto got_span = g.eval_batch(batch);
      const std::vector<float> got(got_span.begin(), got_span.end());
      ASSERT_EQ(got.size(), batch.size() * size_t(V)) << name;
      for (size_t e = 0; e < batch.size(); ++e) {
        const auto want = alone[size_t(batch[e].seq)]->eval(batch[e].tokens);
        const double d = max_abs_diff(got.data() + e * size_t(V), want.data(), size_t(V));
        EXPECT_LE(d, 2e-4) << name << " step " << si << " sequence " << batch[e].seq;
        EXPECT_EQ(argmax(got.data() + e * size_t(V), V), argmax(want.data(), V))
            << name << " step " << si << " sequence " << batch[e].seq;
      }
    }
    for (int64_t s = 0; s < 3; ++s) EXPECT_EQ(g.n_past(s), alone[size_t(s)]->n_past()) << name;
  }
}

// Greedy generation on the GPU picks exactly the CPU's tokens (stored weights, default F16 KV cache).
TEST(CudaModel, GreedyGenerationEqualsCpu) {
  SKIP_WITHOUT_CUDA();
  auto be = cuda_backend();
  auto greedy = [](std::shared_ptr<const Model> m, std::vector<int32_t> prompt, int64_t n,
                   std::vector<float>* gaps) {
    Session s(m);
    const int64_t V = m->config().n_vocab;
    auto logits = s.eval(prompt);
    std::vector<int32_t> out;
    for (int64_t i = 0; i < n; ++i) {
      const int32_t next = int32_t(argmax(logits.data(), V));
      if (gaps) {  // the margin of each choice, to tell a near-tie from a bug if they ever differ
        std::vector<float> l(logits.begin(), logits.end());
        std::nth_element(l.begin(), l.begin() + 1, l.end(), std::greater<float>());
        gaps->push_back(l[0] - l[1]);
      }
      out.push_back(next);
      if (i + 1 < n) logits = s.eval(std::span<const int32_t>(&out.back(), 1));
    }
    return out;
  };
  for (const auto& name : kFixtures) {
    const Reference ref = load_reference(name);
    auto on_gpu = load_on(name, be);
    auto on_cpu = Model::load(test::fixture_dir(name), LoadOptions::threads(2));
    const std::vector<int32_t> prompt(ref.tokens.begin(), ref.tokens.begin() + 4);
    const int64_t n = on_cpu->config().n_ctx - int64_t(prompt.size());
    std::vector<float> gaps;
    const auto want = greedy(on_cpu, prompt, n, &gaps);
    const auto got = greedy(on_gpu, prompt, n, nullptr);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << name << ": first difference at generated token " << i
                                 << " (CPU margin there " << gaps[i] << ")";
    }
  }
}

// Without a device: one clear line, kind Unsupported.
TEST(CudaBackend, ClearErrorWithoutADevice) {
  std::string why;
  if (cuda_available(&why)) GTEST_SKIP() << "a CUDA device is available: the no-device error cannot be seen";
  test::expect_error([] { make_cuda_backend(0); }, ErrorKind::Unsupported, {why});
  EXPECT_EQ(why.find('\n'), std::string::npos);
}

// With a device: a device index past the last is an Argument error naming the range.
TEST(CudaBackend, ClearErrorForADeviceIndexPastTheLast) {
  SKIP_WITHOUT_CUDA();
  test::expect_error([] { make_cuda_backend(1000); }, ErrorKind::Argument,
                     {"CUDA device 1000 does not exist"});
  auto be = make_cuda_backend(0);
  EXPECT_EQ(be->device(), Device::Cuda);
  // The default KV cache is F16: [layer][seq][K | V][n_ctx][Hkv * D].
  auto cache = be->make_kv_cache(KvCacheSpec{3, 4, 16, 10, 2});
  EXPECT_EQ(cache->bytes(), size_t(3 * 2 * 2 * 10 * 4 * 16) * 2);
  EXPECT_EQ(cache->spec().n_seq, 2);
}

// The devices the driver reports: none without CUDA; with it, each with a name, its memory and its maker's
// bandwidth.
// --cache-type reaches the CUDA backend through the registry: F16 unless it says otherwise.
TEST(CudaBackend, CacheTypeFromTheRegistry) {
  SKIP_WITHOUT_CUDA();
  const KvCacheSpec spec{1, 2, 8, 16, 1};
  EXPECT_EQ(make_backend("cuda", BackendOptions{})->make_kv_cache(spec)->dtype(), DType::F16);
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    BackendOptions o;
    o.kv_dtype = t;
    EXPECT_EQ(make_backend("cuda", o)->make_kv_cache(spec)->dtype(), t) << dtype_name(t);
  }
}

TEST(CudaBackend, DevicesAreListed) {
  std::string why;
  const std::vector<CudaDeviceInfo> devices = cuda_devices();
  if (!cuda_available(&why)) {
    EXPECT_TRUE(devices.empty());
    GTEST_SKIP() << why;
  }
  ASSERT_FALSE(devices.empty());
  for (size_t i = 0; i < devices.size(); ++i) {
    const CudaDeviceInfo& d = devices[i];
    EXPECT_EQ(d.index, int(i));
    EXPECT_FALSE(d.name.empty());
    EXPECT_GE(d.cc_major, 1);
    EXPECT_GT(d.memory_bytes, size_t(1) << 30);
    EXPECT_GT(d.peak_bandwidth_gb_s, 100.0) << d.name;
  }
}

// Quantized weights held as their blocks on the device (tests/fixtures/gguf/gpt2-quant-mix.gguf: every block
// type in one model, tools/reference/make_quant_model_reference.py): prefill (the blocks widened to F16 hi +
// lo halves, three cuBLAS GEMMs with the activations' halves: the F32 product to ~2^-21) and token-by-token
// decode (the quantized GEMV, F32 activations) are the F32 product of the dequantized weights, so within 2e-4
// of transformers on them (the CPU's bound for F32 products; logits up to ~10; measured 3.9e-6), with an F32
// KV cache; greedy tokens equal. (Written without a GPU: this test is what checks them when one is lent.)
TEST(CudaModel, QuantizedBlocksGiveTransformersLogitsOnTheDequantizedWeights) {
  SKIP_WITHOUT_CUDA();
  using json = nlohmann::json;
  const auto dir = test::source_dir() / "tests" / "fixtures" / "gguf";
  const json ref = json::parse(test::read_file(dir / "gpt2-quant-mix-reference.json"));
  LoadOptions lo;
  lo.backend = cuda_backend(DType::F32);
  auto model = Model::load(dir / "gpt2-quant-mix.gguf", lo);
  EXPECT_EQ(model->weights().token_embd.format.name(), "Q6_K");
  EXPECT_EQ(model->weights().layers[0].attn_qkv.format.name(), "Q8_0");
  EXPECT_EQ(model->weights().layers[1].ffn_down.format.name(), "Q5_1");
  const auto ids = ref["ids"].get<std::vector<int32_t>>();
  const int64_t V = model->config().n_vocab;
  auto worst = [&](std::span<const float> got) {
    double w = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      const auto want = ref["logits"][t].get<std::vector<double>>();
      for (int64_t i = 0; i < V; ++i)
        w = std::max(w, std::fabs(double(got[t * size_t(V) + size_t(i)]) - want[size_t(i)]));
    }
    return w;
  };
  Session prefill(model);
  const double p = worst(prefill.eval_all(ids));
  Session decode(model);
  std::vector<float> stepwise;
  for (int32_t id : ids) {
    const auto l = decode.eval(std::span<const int32_t>(&id, 1));
    stepwise.insert(stepwise.end(), l.begin(), l.end());
  }
  const double d = worst(stepwise);
  std::printf("[ measured ] cuda, quantized blocks: max |logit - transformers| prefill %.3g, decode %.3g\n",
              p, d);
  EXPECT_LT(p, 2e-4);
  EXPECT_LT(d, 2e-4);
  Session g(model);
  GenerateOptions o;
  o.max_new_tokens = int64_t(ref["greedy"].size());
  o.sampling.temperature = 0;
  o.ignore_eos = true;
  EXPECT_EQ(generate(g, nullptr, ids, o).tokens, ref["greedy"].get<std::vector<int32_t>>());
}

// What the CUDA backend does not do is refused by name, kind Unsupported: block formats its kernels do not
// widen, and attention with fewer KV heads than query heads.
TEST(CudaBackend, UnsupportedVariantsAreRefused) {
  SKIP_WITHOUT_CUDA();
  auto be = cuda_backend();
  Uploads up;
  std::vector<float> w = randn(64 * 8, 50);
  HostLinear h;
  h.w = host_view(w, 64, 8);
  h.order = MatrixOrder::InOut;
  h.n_in = 64;
  h.n_out = 8;
  const WeightFormat q2k = WeightFormat::quantized(GgmlType::Q2_K);  // no kernels widen it
  EXPECT_FALSE(be->holds(q2k));
  EXPECT_TRUE(be->holds(WeightFormat::quantized(GgmlType::Q4_K)));
  test::expect_error([&] { be->prepare_linear(h, q2k, up.keep); }, ErrorKind::Unsupported,
                     {"cuda backend: weights held as GGUF type 10 are not supported"});

  const int64_t Hkv = 2, D = 8;
  auto cache = be->make_kv_cache(KvCacheSpec{1, Hkv, D, 16, 1});
  const StepOf st = one_run(0, 1, 0);
  Tensor k = up.zeros(*be, 1, Hkv * D, Hkv * D), v = up.zeros(*be, 1, Hkv * D, Hkv * D);
  // A cache of another backend, a step past the cache: Argument errors.
  auto cpu = make_cpu_backend(1);
  auto cpu_cache = cpu->make_kv_cache(KvCacheSpec{1, Hkv, D, 16, 1});
  test::expect_error([&] { be->store_kv(*cpu_cache, 0, k, v, st.step()); }, ErrorKind::Argument,
                     {"not made by this CUDA backend"});
  const StepOf past = one_run(0, 1, 16);
  test::expect_error([&] { be->store_kv(*cache, 0, k, v, past.step()); }, ErrorKind::Argument,
                     {"outside the cache"});
  // LongRoPE's attention factor on cos and sin (Phi-3): not in the CUDA rotary kernel.
  EXPECT_FALSE(be->supports(BackendOp::RopeMscale));
  std::vector<float> ones(size_t(D / 2), 1.0f);
  Tensor f = up.put(*be, ones, 1, D / 2);
  test::expect_error([&] { be->rope_freqs(k, st.step(), Hkv, D, D, f, RopeLayout::NeoxHalves, 1.25f); },
                     ErrorKind::Unsupported,
                     {"cuda backend: rope_freqs with cos and sin scaled", "LongRoPE"});
}

}  // namespace
}  // namespace minigpt
