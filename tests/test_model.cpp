// The forward pass against transformers' logits (fixtures from tools/reference/make_reference.py), and the
// session's guarantees: KV cache == full prefill, chunking, independent sessions.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <thread>

#include "cpu/cpu.h"
#include "cpu/kernels.h"
#include "minigpt/generate.h"
#include "minigpt/model.h"
#include "minigpt/registry.h"
#include "minigpt/session.h"
#include "model/random_weights.h"
#include "test_util.h"

namespace minigpt {
namespace {

using test::argmax;
using test::load_reference;
using test::read_tensor;
using test::Reference;

// max |a - b| over n values, and the first position (row of width V) where the argmax differs (-1: none).
struct Diff {
  double max_abs = 0;
  int64_t argmax_mismatch = -1;
};
Diff compare(const float* got, const float* want, int64_t rows, int64_t V) {
  Diff d;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < V; ++i)
      d.max_abs = std::max(d.max_abs, double(std::fabs(got[r * V + i] - want[r * V + i])));
    if (d.argmax_mismatch < 0 && argmax(got + r * V, V) != argmax(want + r * V, V)) d.argmax_mismatch = r;
  }
  return d;
}

std::shared_ptr<const Model> load(const std::string& fixture, int threads = 2) {
  return Model::load(test::fixture_dir(fixture), LoadOptions::threads(threads));
}

// F32 arithmetic in a different order than PyTorch's: differences are rounding noise of ~1e-6 on logits
// of magnitude ~1, so the 1e-4 bound has two orders of margin and still catches any real bug
// (a wrong scale, epsilon or activation moves logits by 1e-2 or more on these fixtures).
constexpr double kTolF32 = 1e-4;

class Fixture : public ::testing::TestWithParam<const char*> {};

TEST_P(Fixture, LogitsMatchTransformers) {
  const Reference ref = load_reference(GetParam());
  auto model = load(GetParam());
  const int64_t V = model->config().n_vocab, T = int64_t(ref.tokens.size());
  ASSERT_EQ(int64_t(ref.logits.size()), T * V);
  Session s(model);
  auto got = s.eval_all(ref.tokens);
  const Diff d = compare(got.data(), ref.logits.data(), T, V);
  std::printf("[ measured ] %s: max |logit - transformers| = %.3g over %lld positions\n", GetParam(),
              d.max_abs, (long long)T);
  const bool bf16 = test::bf16_arithmetic(*model);
  const double tol = bf16 ? test::kTolBf16Math : kTolF32;
  EXPECT_LE(d.max_abs, tol) << GetParam();
  if (!bf16) {
    EXPECT_EQ(d.argmax_mismatch, -1) << GetParam() << ": argmax differs at position " << d.argmax_mismatch;
  } else {  // the top choice wherever transformers' top two are further apart than twice the difference
    for (int64_t t = 0; t < T; ++t) {
      if (test::top_margin(ref.logits.data() + t * V, V) <= 2 * d.max_abs) continue;
      EXPECT_EQ(argmax(got.data() + t * V, V), argmax(ref.logits.data() + t * V, V)) << "position " << t;
    }
  }
  // eval() returns the last row of the same computation.
  s.reset();
  auto last = s.eval(ref.tokens);
  EXPECT_LE(compare(last.data(), ref.logits.data() + (T - 1) * V, 1, V).max_abs, tol);
}

TEST_P(Fixture, TokenByTokenWithTheKvCacheEqualsPrefill) {
  const Reference ref = load_reference(GetParam());
  auto model = load(GetParam());
  const int64_t V = model->config().n_vocab, T = int64_t(ref.tokens.size());
  Session s(model);
  for (int64_t t = 0; t < T; ++t) {
    auto row = s.eval(std::span<const int32_t>(&ref.tokens[size_t(t)], 1));
    const Diff d = compare(row.data(), ref.logits.data() + t * V, 1, V);
    ASSERT_LE(d.max_abs, kTolF32) << GetParam() << " position " << t;
    ASSERT_EQ(d.argmax_mismatch, -1) << GetParam() << " position " << t;
  }
  EXPECT_EQ(s.n_past(), T);
}

TEST_P(Fixture, PrefillInChunksOf1And7AndAllAgree) {
  const Reference ref = load_reference(GetParam());
  auto model = load(GetParam());
  const int64_t V = model->config().n_vocab, T = int64_t(ref.tokens.size());
  Session whole(model);
  auto whole_span = whole.eval_all(ref.tokens);
  const std::vector<float> all(whole_span.begin(), whole_span.end());
  for (int64_t chunk : {1, 7}) {
    // Chunks given by the caller...
    Session s(model);
    std::vector<float> got;
    for (int64_t i = 0; i < T; i += chunk) {
      const int64_t n = std::min(chunk, T - i);
      auto part = s.eval_all(std::span<const int32_t>(ref.tokens.data() + i, size_t(n)));
      got.insert(got.end(), part.begin(), part.end());
    }
    // ...and chunks made by the session itself (max_batch).
    Session small(model, SessionOptions{chunk});
    auto inner = small.eval_all(ref.tokens);
    // Same math, different batch shapes: GEMV (F32 [K, N] weights summed in 8 row slabs, added at the end)
    // against OpenBLAS's GEMM blocking, so only the summation order differs. Logits here reach ~6 (ulp
    // 4.8e-7) and measured differences are ~1e-5: 4e-5 allows ~80 ulp, while a chunking bug (a KV row at
    // the wrong position, a missed row) moves logits by 1e-2 or more.
    // BF16 arithmetic (test::bf16_arithmetic): a chunk of 1 is the F32 GEMV, the others round the
    // activations, so chunks differ by that rounding.
    const bool bf16 = test::bf16_arithmetic(*model);
    EXPECT_LE(compare(got.data(), ref.logits.data(), T, V).max_abs, bf16 ? test::kTolBf16Math : kTolF32)
        << "chunk " << chunk;
    EXPECT_LE(compare(got.data(), all.data(), T, V).max_abs, bf16 ? test::kTolBf16Math : 4e-5)
        << "chunk " << chunk;
    EXPECT_LE(compare(inner.data(), all.data(), T, V).max_abs, bf16 ? test::kTolBf16Math : 4e-5)
        << "max_batch " << chunk;
  }
}

// --cache-type f16 / bf16 on the CPU: keys and values rounded to 16 bits, prefill and token-by-token decode,
// against transformers (F32 everywhere). The rounding is the only difference (Kernels.SixteenBitKvCache...
// shows the kernels give the F32 cache's values bit for bit), so the bounds are its effect on these fixtures,
// measured with margin: F16 (11-bit significand) moves logits by up to 5.4e-3, BF16 (8 bits) 4.9e-2. The
// top choice must agree wherever transformers' top two are further apart than twice the difference.
TEST_P(Fixture, SixteenBitKvCacheStaysNearTransformers) {
  const Reference ref = load_reference(GetParam());
  for (DType kv : {DType::F16, DType::BF16}) {
    LoadOptions o;
    o.backend = make_cpu_backend(2, kv);
    auto model = Model::load(test::fixture_dir(GetParam()), o);
    const int64_t V = model->config().n_vocab, T = int64_t(ref.tokens.size());
    Session s(model);
    EXPECT_EQ(s.kv_cache().dtype(), kv);
    const auto prefill = s.eval_all(ref.tokens);
    const std::vector<float> all(prefill.begin(), prefill.end());
    Session d(model);
    std::vector<float> rows;
    for (int64_t t = 0; t < T; ++t) {
      auto row = d.eval(std::span<const int32_t>(&ref.tokens[size_t(t)], 1));
      rows.insert(rows.end(), row.begin(), row.end());
    }
    // The Llama-shaped fixtures (a gated MLP: the product of two projections of the rounded values; wider
    // heads and grouped queries) move further: measured F16 1.2e-2, BF16 1.24e-1; bounds 2x that.
    const bool gated = model->config().ffn == FfnKind::Gated;
    // BF16 arithmetic (test::bf16_arithmetic) adds its own rounding to the cache's.
    const double bound = (kv == DType::F16 ? (gated ? 2.5e-2 : 2e-2) : (gated ? 2.5e-1 : 1e-1)) +
                         (test::bf16_arithmetic(*model) ? test::kTolBf16Math : 0.0);
    for (const std::vector<float>* got : std::array<const std::vector<float>*, 2>{&all, &rows}) {
      const Diff diff = compare(got->data(), ref.logits.data(), T, V);
      std::printf("[ measured ] %s, %s KV cache (%s): max |logit - transformers| = %.3g\n", GetParam(),
                  std::string(dtype_name(kv)).c_str(), got == &all ? "prefill" : "decode", diff.max_abs);
      EXPECT_LE(diff.max_abs, bound) << GetParam() << " " << dtype_name(kv);
      for (int64_t t = 0; t < T; ++t) {
        if (test::top_margin(ref.logits.data() + t * V, V) <= 2 * diff.max_abs) continue;
        EXPECT_EQ(argmax(got->data() + t * V, V), argmax(ref.logits.data() + t * V, V))
            << GetParam() << " " << dtype_name(kv) << " position " << t;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Transformers, Fixture,
    ::testing::Values("tiny", "tiny-untied", "tiny-f16", "tiny-bf16", "tiny-sharded", "tiny-relu-legacy",
                      "tiny-sinusoidal", "neox-parallel", "neox-sequential", "neox-f16", "neox-bf16",
                      "opt-prenorm", "opt-postnorm-proj", "opt-nobias-untied", "opt-bf16", "bigcode-mqa",
                      "bigcode-mha", "bigcode-4x", "bigcode-f16", "llama-gqa62", "llama-gqa93-llama3",
                      "llama-linear-bias", "llama-f16", "llama-bf16", "mistral-window", "qwen2-bias",
                      "qwen3-headdim", "qwen3-bf16", "gemma3-swa", "gemma3-softcap", "gemma3-linear",
                      "gemma3-f16", "gemma3-bf16", "gemma2-softcap", "gemma2-window", "smollm3-nope",
                      "phi3-fused", "phi3-longrope-long", "phi3-partial-tied", "phi3-f16", "phi3-bf16"),
    [](const auto& info) {
      std::string n = info.param;
      std::replace(n.begin(), n.end(), '-', '_');
      return n;
    });

TEST(Session, TwoSessionsOnOneModelDoNotDisturbEachOther) {
  const Reference ref = load_reference("tiny");
  auto model = load("tiny");
  const int64_t V = model->config().n_vocab;
  std::vector<int32_t> other(ref.tokens.rbegin(), ref.tokens.rend());
  Session alone(model);
  auto alone_span = alone.eval_all(other);
  const std::vector<float> other_want(alone_span.begin(), alone_span.end());

  // Interleaved on one thread.
  Session a(model), b(model);
  for (size_t t = 0; t < ref.tokens.size(); ++t) {
    auto ra = a.eval(std::span<const int32_t>(&ref.tokens[t], 1));
    ASSERT_LE(compare(ra.data(), ref.logits.data() + int64_t(t) * V, 1, V).max_abs, kTolF32) << t;
    auto rb = b.eval(std::span<const int32_t>(&other[t], 1));
    ASSERT_LE(compare(rb.data(), other_want.data() + int64_t(t) * V, 1, V).max_abs, 1e-5) << t;
  }

  // Concurrently on two threads.
  std::vector<float> got_a, got_b;
  std::thread ta([&] {
    Session s(model);
    auto r = s.eval_all(ref.tokens);
    got_a.assign(r.begin(), r.end());
  });
  std::thread tb([&] {
    Session s(model);
    auto r = s.eval_all(other);
    got_b.assign(r.begin(), r.end());
  });
  ta.join();
  tb.join();
  const int64_t T = int64_t(ref.tokens.size());
  EXPECT_LE(compare(got_a.data(), ref.logits.data(), T, V).max_abs, kTolF32);
  EXPECT_LE(compare(got_b.data(), other_want.data(), T, V).max_abs, 1e-5);
}

TEST(Session, ResetStartsOver) {
  const Reference ref = load_reference("tiny-untied");
  auto model = load("tiny-untied", 1);
  const int64_t V = model->config().n_vocab, T = int64_t(ref.tokens.size());
  Session s(model);
  s.eval(std::span<const int32_t>(ref.tokens.data(), 5));
  s.reset();
  EXPECT_EQ(s.n_past(), 0);
  auto got = s.eval_all(ref.tokens);
  EXPECT_LE(compare(got.data(), ref.logits.data(), T, V).max_abs, kTolF32);
}

TEST(Session, BadTokensAndContextOverflowLeaveTheSessionUnchanged) {
  auto model = load("tiny", 1);
  const int64_t V = model->config().n_vocab, S = model->config().n_ctx;
  Session s(model);
  const std::vector<int32_t> bad = {1, int32_t(V)};
  test::expect_error([&] { s.eval(bad); }, ErrorKind::Argument, {"token id 320", "index 1", "[0, 320)"});
  const std::vector<int32_t> neg = {-1};
  test::expect_error([&] { s.eval(neg); }, ErrorKind::Argument, {"token id -1"});
  test::expect_error([&] { s.eval({}); }, ErrorKind::Argument, {"no tokens"});
  EXPECT_EQ(s.n_past(), 0);
  std::vector<int32_t> full(size_t(S), 3);
  s.eval(full);  // exactly n_ctx tokens fit
  const std::vector<int32_t> one = {3};
  test::expect_error([&] { s.eval(one); }, ErrorKind::Argument,
                     {"context overflow", "64 tokens in the context + 1 new > n_ctx 64"});
  EXPECT_EQ(s.n_past(), S);
}

// The exact 124M gpt2 shape: weights from the counter-based generator (written to a temporary file and
// loaded through the normal path), logits compared with transformers' for the same weights.
TEST(Gpt2Shape, Random124MMatchesTransformers) {
  const auto dir = test::fixture_dir("gpt2-124m-splitmix");
  auto ref = SafeTensorsFile::open(dir / "reference.safetensors");
  const auto tokens = read_tensor<int32_t>(*ref, "tokens", StDtype::I32);
  const auto want_argmax = read_tensor<int32_t>(*ref, "argmax", StDtype::I32);
  const auto logits_last = read_tensor<float>(*ref, "logits_last", StDtype::F32);
  const auto vocab_ids = read_tensor<int32_t>(*ref, "vocab_ids", StDtype::I32);
  const auto logits_sub = read_tensor<float>(*ref, "logits_sub", StDtype::F32);

  test::TempDir tmp;
  const Config c = load_config(dir / "config.json");
  EXPECT_EQ(c.n_layer, 12);
  EXPECT_EQ(c.n_embd, 768);
  EXPECT_EQ(c.n_vocab, 50257);
  write_random_model(tmp.path(), c);
  auto model = Model::load(tmp.path(), LoadOptions::threads(2));
  EXPECT_EQ(model->n_params(), 124439808);  // GPT-2 small: 124M with the tied head counted once
  Session s(model);
  const int64_t V = c.n_vocab, T = int64_t(tokens.size()), K = int64_t(vocab_ids.size());
  auto got = s.eval_all(tokens);
  // Sums over 768..3072 terms in 12 layers; logits ~0.5 in size: rounding noise stays near 1e-5.
  double max_abs = 0;
  for (int64_t t = 0; t < T; ++t) {
    EXPECT_EQ(argmax(got.data() + t * V, V), want_argmax[size_t(t)]) << "position " << t;
    for (int64_t k = 0; k < K; ++k) {
      max_abs = std::max(max_abs, double(std::fabs(got[size_t(t * V + vocab_ids[size_t(k)])] -
                                                   logits_sub[size_t(t * K + k)])));
    }
  }
  const double last = compare(got.data() + (T - 1) * V, logits_last.data(), 1, V).max_abs;
  std::printf("[ measured ] gpt2 124M shape: max |logit - transformers| = %.3g (subset), %.3g (last row)\n",
              max_abs, last);
  EXPECT_LE(max_abs, kTolF32);
  EXPECT_LE(compare(got.data() + (T - 1) * V, logits_last.data(), 1, V).max_abs, kTolF32);

  // The same weights computed as BF16 and F16 (converted at load): 16-bit rounding moves these logits by
  // 1.6e-2 (BF16) and 2.7e-3 (F16) as measured; the bounds are 2.5x that; argmax must agree at >= 99%.
  for (DType dt : {DType::BF16, DType::F16}) {
    LoadOptions lo;
    lo.n_threads = 2;
    lo.weight_dtype = dt;
    auto m16 = Model::load(tmp.path(), lo);
    Session s16(m16);
    auto g16 = s16.eval_all(tokens);
    int64_t agree = 0;
    for (int64_t t = 0; t < T; ++t) agree += argmax(g16.data() + t * V, V) == want_argmax[size_t(t)];
    const double d16 = compare(g16.data() + (T - 1) * V, logits_last.data(), 1, V).max_abs;
    std::printf(
        "[ measured ] gpt2 124M shape, %s weights: max |logit - transformers F32| = %.3g (last row), argmax "
        "%lld/%lld\n",
        std::string(dtype_name(dt)).c_str(), d16, (long long)agree, (long long)T);
    EXPECT_LE(d16, dt == DType::BF16 ? 4e-2 : 7e-3);
    // BF16 arithmetic (test::bf16_arithmetic) rounds the activations too: on these random weights (logits
    // ~0.5, top two often within 1e-2) one of the 16 positions may flip (measured 15/16 in the portable
    // build, 16/16 in the native one).
    EXPECT_GE(double(agree), test::bf16_arithmetic(*m16) ? double(T - 1) : 0.99 * double(T));
  }
}

}  // namespace
}  // namespace minigpt

namespace minigpt {
namespace {

// Weights converted at load to 16 bits (--dtype): logits against transformers' F32 ones. Rounding a weight
// to BF16 moves it by up to 2^-9 relative (F16: 2^-12), so logits move by ~1e-2 (~1e-3) on these fixtures;
// the bounds below are about 2.5x the largest difference measured, and the argmax agrees wherever the
// reference's margin exceeds twice the difference.
struct SixteenBit {
  DType dtype;
  double tol;
  // The Llama-shaped fixtures' (a gated MLP multiplies two projections of the rounded weights): measured
  // BF16 0.234, F16 0.026; bounds 2x that.
  double tol_gated;
};

class LowPrecision : public ::testing::TestWithParam<SixteenBit> {};

TEST_P(LowPrecision, LogitsCloseAndArgmaxAgreesWithTransformers) {
  const SixteenBit p = GetParam();
  int64_t positions = 0, agree = 0;
  double worst = 0, worst_gated = 0;
  for (const char* name :
       {"tiny", "tiny-untied", "tiny-sharded", "tiny-relu-legacy", "tiny-sinusoidal", "neox-parallel",
        "neox-sequential", "opt-prenorm", "opt-postnorm-proj", "opt-nobias-untied", "bigcode-mqa",
        "bigcode-mha", "llama-gqa62", "llama-gqa93-llama3", "llama-linear-bias", "mistral-window",
        "qwen2-bias", "qwen3-headdim"}) {
    const Reference ref = load_reference(name);
    LoadOptions lo;
    lo.n_threads = 2;
    lo.weight_dtype = p.dtype;
    auto model = Model::load(test::fixture_dir(name), lo);
    EXPECT_EQ(model->weights().layers[0].ffn_up.format.dtype, p.dtype);
    const int64_t V = model->config().n_vocab, T = int64_t(ref.tokens.size());
    Session s(model);
    auto got = s.eval_all(ref.tokens);
    double& w = model->config().ffn == FfnKind::Gated ? worst_gated : worst;
    const double here = compare(got.data(), ref.logits.data(), T, V).max_abs;
    w = std::max(w, here);
    // The top token wherever transformers' top two are further apart than twice this model's difference
    // (a gap the rounding cannot close); closer ties may go either way (the families' random models have
    // many: 417 of 422 positions agree in BF16 over all fixtures together).
    for (int64_t t = 0; t < T; ++t) {
      if (test::top_margin(ref.logits.data() + t * V, V) <= 2 * here) continue;
      EXPECT_EQ(argmax(got.data() + t * V, V), argmax(ref.logits.data() + t * V, V)) << name << " at " << t;
      ++positions;
      agree += argmax(got.data() + t * V, V) == argmax(ref.logits.data() + t * V, V);
    }
    // Decode through the KV cache (GEMV kernels) agrees with prefill (widened GEMM) on the same weights; in
    // BF16 arithmetic (test::bf16_arithmetic) up to the activations' rounding, which prefill has and one row
    // has not.
    Session step(model);
    const double tol = test::bf16_arithmetic(*model) ? test::kTolBf16Math : 1e-4;
    for (int64_t t = 0; t < T; ++t) {
      auto row = step.eval(std::span<const int32_t>(&ref.tokens[size_t(t)], 1));
      ASSERT_LE(compare(row.data(), got.data() + t * V, 1, V).max_abs, tol) << name << " position " << t;
    }
  }
  std::printf(
      "[ measured ] %s weights: max |logit - transformers F32| = %.3g (gated MLP families %.3g), argmax "
      "agreement %lld/%lld where transformers' top two are apart by more than twice the difference\n",
      std::string(dtype_name(p.dtype)).c_str(), worst, worst_gated, (long long)agree, (long long)positions);
  EXPECT_LE(worst, p.tol);
  EXPECT_LE(worst_gated, p.tol_gated);
  EXPECT_GT(positions, 0);
}

INSTANTIATE_TEST_SUITE_P(Weights, LowPrecision,
                         ::testing::Values(SixteenBit{DType::BF16, 0.15, 0.5},
                                           SixteenBit{DType::F16, 0.02, 0.06}),
                         [](const auto& info) { return std::string(dtype_name(info.param.dtype)); });

// --bf16-math f32 (Bf16Math::F32) on every CPU, whatever the default: BF16 weights widened to F32 and
// multiplied as transformers multiplies them, so each BF16 fixture's logits are transformers' on the same
// weights within the F32 bound (kTolF32: summation order alone), with the same argmax everywhere.
TEST(Bf16MathF32, GivesTransformersLogitsOnBf16Weights) {
  for (const char* name :
       {"tiny-bf16", "neox-bf16", "opt-bf16", "llama-bf16", "qwen3-bf16", "gemma3-bf16", "phi3-bf16"}) {
    const Reference ref = load_reference(name);
    LoadOptions lo;
    lo.n_threads = 2;
    BackendOptions bo;
    bo.n_threads = 2;
    bo.bf16_math = Bf16Math::F32;
    lo.backend = make_backend("cpu", bo);
    auto model = Model::load(test::fixture_dir(name), lo);
    ASSERT_FALSE(model->backend().bf16_arithmetic()) << name;
    const int64_t V = model->config().n_vocab, T = int64_t(ref.tokens.size());
    Session s(model);
    auto got = s.eval_all(ref.tokens);
    const Diff d = compare(got.data(), ref.logits.data(), T, V);
    std::printf("[ measured ] %s, --bf16-math f32: max |logit - transformers| = %.3g\n", name, d.max_abs);
    EXPECT_LE(d.max_abs, kTolF32) << name;
    EXPECT_EQ(d.argmax_mismatch, -1) << name;
    // Decode (one row at a time) is the same F32 product.
    Session step(model);
    for (int64_t t = 0; t < T; ++t) {
      auto row = step.eval(std::span<const int32_t>(&ref.tokens[size_t(t)], 1));
      ASSERT_LE(compare(row.data(), ref.logits.data() + t * V, 1, V).max_abs, kTolF32) << name << " at " << t;
    }
  }
}

// --bf16-math bf16 where the kernel level has no BF16 arithmetic: one clear error at load, naming the level.
TEST(Bf16MathBf16, RefusedWhereTheCpuHasNoBf16Arithmetic) {
  if (cpu::bf16_available())
    GTEST_SKIP() << "kernel level " << cpu::kernel_level_name() << " has BF16 arithmetic";
  BackendOptions bo;
  bo.bf16_math = Bf16Math::Bf16;
  try {
    make_backend("cpu", bo);
    FAIL() << "bf16 math was accepted on " << cpu::kernel_level_name();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no BF16 arithmetic"), std::string::npos) << e.what();
  }
}

// BF16 weights multiplied in BF16 (cpu::bf16_math, forced here by MINIGPT_BF16_MATH=bf16:
// cpu::gemv_bf16_rows, cpu::bgemm), where the CPU can: rounding the activations to BF16 moves each product by
// at most 2^-8 of sum |w x|, the same order as rounding the weights, so the logits stay within the
// weights-only bound above (0.15) of transformers' F32 ones, with the same argmax bar; decode (one row: the
// F32 GEMV) and prefill (the BF16 GEMM) then differ by the activations' rounding alone, within that bound
// too.
TEST(LowPrecisionBf16Math, LogitsCloseAndArgmaxAgreesWithTransformers) {
  if (!cpu::bf16_available())
    GTEST_SKIP() << "kernel level " << cpu::kernel_level_name()
                 << " has no BF16 arithmetic (it needs AVX-512 BF16)";
  struct Bf16MathEnv {
    Bf16MathEnv() { setenv("MINIGPT_BF16_MATH", "bf16", 1); }
    ~Bf16MathEnv() { unsetenv("MINIGPT_BF16_MATH"); }
  } env;
  int64_t positions = 0, agree = 0;
  double worst = 0, worst_decode = 0;
  for (const char* name : {"tiny", "tiny-untied", "neox-parallel", "opt-prenorm", "bigcode-mqa"}) {
    const Reference ref = load_reference(name);
    LoadOptions lo;
    lo.n_threads = 2;
    lo.weight_dtype = DType::BF16;
    auto model = Model::load(test::fixture_dir(name), lo);
    const int64_t V = model->config().n_vocab, T = int64_t(ref.tokens.size());
    Session s(model);
    auto got = s.eval_all(ref.tokens);
    worst = std::max(worst, compare(got.data(), ref.logits.data(), T, V).max_abs);
    if (std::string(name).rfind("tiny", 0) == 0) {
      for (int64_t t = 0; t < T; ++t)
        agree += argmax(got.data() + t * V, V) == argmax(ref.logits.data() + t * V, V);
      positions += T;
    }
    Session step(model);
    for (int64_t t = 0; t < T; ++t) {
      auto row = step.eval(std::span<const int32_t>(&ref.tokens[size_t(t)], 1));
      worst_decode = std::max(worst_decode, compare(row.data(), got.data() + t * V, 1, V).max_abs);
    }
  }
  std::printf(
      "[ measured ] BF16 weights in BF16 arithmetic: max |logit - transformers F32| = %.3g, decode against "
      "prefill %.3g, argmax agreement %lld/%lld\n",
      worst, worst_decode, (long long)agree, (long long)positions);
  EXPECT_LE(worst, 0.15);
  EXPECT_LE(worst_decode, 0.15);
  EXPECT_GE(double(agree), 0.99 * double(positions));
}

}  // namespace
}  // namespace minigpt

namespace minigpt {
namespace {

// Greedy generation through the KV cache equals transformers' generate(do_sample=False) on each family's
// fixtures (tools/reference/make_family_reference.py and make_block_family_reference.py: 16 tokens after an
// 8-token prompt).
class FamilyGreedy : public ::testing::TestWithParam<const char*> {};

TEST_P(FamilyGreedy, EqualsTransformersGenerate) {
  const auto j = nlohmann::json::parse(test::read_file(test::fixture_dir(GetParam()) / "greedy.json"));
  const auto want = j["greedy"].get<std::vector<int32_t>>();
  auto model = load(GetParam());
  Session s(model);
  GenerateOptions o;
  o.max_new_tokens = int64_t(want.size());
  o.sampling.temperature = 0;
  o.ignore_eos = true;
  EXPECT_EQ(generate(s, nullptr, j["prompt"].get<std::vector<int32_t>>(), o).tokens, want) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(
    Families, FamilyGreedy,
    ::testing::Values("neox-parallel", "neox-sequential", "neox-f16", "neox-bf16", "opt-prenorm",
                      "opt-postnorm-proj", "opt-nobias-untied", "opt-bf16", "bigcode-mqa", "bigcode-mha",
                      "bigcode-4x", "bigcode-f16", "llama-gqa62", "llama-gqa93-llama3", "llama-linear-bias",
                      "llama-f16", "llama-bf16", "mistral-window", "qwen2-bias", "qwen3-headdim",
                      "qwen3-bf16", "gemma3-swa", "gemma3-softcap", "gemma3-linear", "gemma3-f16",
                      "gemma3-bf16", "gemma2-softcap", "gemma2-window", "smollm3-nope", "phi3-fused",
                      "phi3-longrope-long", "phi3-partial-tied", "phi3-f16", "phi3-bf16"),
    [](const auto& info) {
      std::string n = info.param;
      std::replace(n.begin(), n.end(), '-', '_');
      return n;
    });

// Phi-3's LongRoPE picks its factors by the session's context, as llama.cpp does: a context up to
// original_max_position_embeddings (16 here) rotates by the short factors. phi3-longrope-short's reference is
// transformers' with the short factors (its forward of 12 tokens, its generation of 8 + 8, all within 16):
// a session of 16 positions gives its logits, in one prefill and token by token, and its greedy tokens; a
// session of the model's 128 takes the long factors, which move these logits by more than 1e-2.
TEST(TransformersLongRope, ASessionWithinTheOriginalContextTakesTheShortFactors) {
  const Reference ref = load_reference("phi3-longrope-short");
  auto model = load("phi3-longrope-short");
  const int64_t V = model->config().n_vocab, T = int64_t(ref.tokens.size());
  ASSERT_EQ(model->config().rope_scaling.kind, RopeScalingKind::LongRope);
  ASSERT_EQ(model->config().rope_scaling.original_context, 16);
  Session s(model, SessionOptions{.n_ctx = 16});
  const auto got = s.eval_all(ref.tokens);
  const Diff d = compare(got.data(), ref.logits.data(), T, V);
  std::printf("[ measured ] phi3-longrope-short (n_ctx 16): max |logit - transformers| = %.3g\n", d.max_abs);
  EXPECT_LE(d.max_abs, kTolF32);
  EXPECT_EQ(d.argmax_mismatch, -1);
  Session step(model, SessionOptions{.n_ctx = 16});
  for (int64_t t = 0; t < T; ++t) {
    auto row = step.eval(std::span<const int32_t>(&ref.tokens[size_t(t)], 1));
    const Diff r = compare(row.data(), ref.logits.data() + t * V, 1, V);
    EXPECT_LE(r.max_abs, kTolF32) << "position " << t;
    EXPECT_EQ(r.argmax_mismatch, -1) << "position " << t;
  }
  const auto j =
      nlohmann::json::parse(test::read_file(test::fixture_dir("phi3-longrope-short") / "greedy.json"));
  const auto want = j["greedy"].get<std::vector<int32_t>>();
  Session g(model, SessionOptions{.n_ctx = 16});
  GenerateOptions o;
  o.max_new_tokens = int64_t(want.size());
  o.sampling.temperature = 0;
  o.ignore_eos = true;
  EXPECT_EQ(generate(g, nullptr, j["prompt"].get<std::vector<int32_t>>(), o).tokens, want);

  Session wide(model, SessionOptions{.n_ctx = 128});
  const auto long_factors = wide.eval_all(ref.tokens);
  const double moved = compare(long_factors.data(), ref.logits.data(), T, V).max_abs;
  std::printf(
      "[ measured ] phi3-longrope-short (n_ctx 128, long factors): max |logit - transformers| = %.3g\n",
      moved);
  EXPECT_GT(moved, 1e-2);
}

// What the forward pass reads of a LongRoPE model (phi3-partial-tied, 12 of 16 dimensions rotated): each
// layer's short and long tables, the threshold between them and the attention factor on cos and sin.
TEST(TransformersLongRope, TheLayersCarryBothTablesAndTheAttentionFactor) {
  auto model = load("phi3-partial-tied");
  const Config& c = model->config();
  EXPECT_EQ(c.rotary_dim, 12);
  EXPECT_NEAR(c.rope_scaling.attention_factor, 1.3228756555322954, 1e-6);
  const BlockDesc& b = model->block();
  EXPECT_EQ(b.rope_long_context, 16);
  for (const LayerDesc& d : b.layers) {
    EXPECT_GE(d.rope_table_long, 0);
    EXPECT_NE(d.rope_table_long, d.rope_table);
    EXPECT_FLOAT_EQ(d.rope_mscale, c.rope_scaling.attention_factor);
    EXPECT_EQ(b.rope_table_of(d, 16), d.rope_table);
    EXPECT_EQ(b.rope_table_of(d, 17), d.rope_table_long);
  }
}

}  // namespace
}  // namespace minigpt

namespace minigpt {
namespace {

// A windowed layer keeps a ring of window + max_batch - 1 positions (CpuKvCache): with a batch of 4 and the
// fixtures' window of 8, 11 positions of a 40-token sequence, so the ring wraps several times. Prefill in
// steps of 4 and decode token by token give transformers' logits; a sequence cut back within the ring goes
// on as if never extended, and one cut back further is refused (keepable() says 0).
TEST(WindowRing, WindowedLayersKeepARingAndStillGiveTransformersLogits) {
  for (const char* name : {"gemma3-swa", "gemma2-softcap", "mistral-window"}) {
    const Reference ref = load_reference(name);
    const int64_t T = int64_t(ref.tokens.size());
    for (DType kv : {DType::F32, DType::F16}) {
      LoadOptions o;
      o.backend = make_cpu_backend(2, kv);
      auto m = Model::load(test::fixture_dir(name), o);
      const int64_t V = m->config().n_vocab;
      const double tol = kv == DType::F32 ? kTolF32 : 2.5e-2;
      Session s(m, SessionOptions{4});
      int64_t rings = 0;
      for (int64_t l = 0; l < m->config().n_layer; ++l) {
        const int64_t W = m->block().layers[size_t(l)].window, R = s.kv_cache().ring_capacity(l);
        EXPECT_EQ(R, W > 0 ? W + 3 : 0) << name << " layer " << l;
        rings += R > 0;
      }
      EXPECT_GT(rings, 0) << name;
      ASSERT_GT(T, 2 * (8 + 3)) << name << ": the ring must wrap";
      const auto all = s.eval_all(ref.tokens);
      EXPECT_LE(compare(all.data(), ref.logits.data(), T, V).max_abs, tol)
          << name << " prefill in steps of 4";
      Session d(m, SessionOptions{1});
      for (int64_t t = 0; t < T; ++t) {
        const auto row = d.eval(std::span<const int32_t>(&ref.tokens[size_t(t)], 1));
        ASSERT_LE(compare(row.data(), ref.logits.data() + t * V, 1, V).max_abs, tol)
            << name << " position " << t;
      }
      // Cut back by 3 (within the ring: R - W + 1 = 4 positions) and go on: the same logits.
      EXPECT_EQ(s.keepable(0, T - 3), T - 3);
      s.keep(0, T - 3);
      const auto again = s.eval_all(std::span<const int32_t>(ref.tokens.data() + T - 3, 3));
      EXPECT_LE(compare(again.data(), ref.logits.data() + (T - 3) * V, 3, V).max_abs, tol) << name;
      // Further back the ring has overwritten what position T - 20 sees.
      EXPECT_EQ(s.keepable(0, T - 20), 0);
      test::expect_error([&] { s.keep(0, T - 20); }, ErrorKind::Argument, {"windowed layers"});
      EXPECT_EQ(s.keepable(0, 0), 0);
      s.keep(0, 0);
    }
  }
}

}  // namespace
}  // namespace minigpt
