// The CPU kernels against plain loops, at sizes that are not multiples of the vector width, at every
// kernel level this binary holds and this CPU runs (Levels/KernelsAtLevel.*/<level>; the other levels skip,
// saying why).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>

#include "cpu/kernels.h"
#include "minigpt/backend.h"
#if __has_include("cpu/cpu.h")
#include "cpu/cpu.h"  // make_cpu_backend
#endif
#include "minigpt/error.h"
#include "minigpt/tensor.h"
#include "quant/quant.h"
#include "quant/quantize.h"
#include "test_util.h"

namespace minigpt {
namespace {

using test::randn;

TEST(Half, EveryF16AndBF16ValueRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
    } else {
      ASSERT_EQ(f32_to_f16(f), h) << "f16 " << h;
    }
    const float b = bf16_to_f32(uint16_t(h));
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(b))));
    } else {
      ASSERT_EQ(f32_to_bf16(b), h) << "bf16 " << h;
    }
  }
}

TEST(Half, RoundsToNearestEven) {
  // Midpoints between neighbouring 16-bit values go to the even one; anything past a midpoint goes up.
  for (uint16_t h :
       {uint16_t(0x3c00), uint16_t(0x3c01), uint16_t(0x0001), uint16_t(0x03ff), uint16_t(0x7bfe)}) {
    const double lo = f16_to_f32(h), hi = f16_to_f32(uint16_t(h + 1));
    const float mid = float((lo + hi) / 2);
    EXPECT_EQ(f32_to_f16(mid), (h % 2 == 0) ? h : uint16_t(h + 1)) << h;
    EXPECT_EQ(f32_to_f16(std::nextafter(mid, 1e9f)), uint16_t(h + 1)) << h;
    EXPECT_EQ(f32_to_f16(std::nextafter(mid, -1e9f)), h) << h;
  }
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);                           // overflow -> inf
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), f32_to_bf16(1.0f));  // tie -> even
}

// |got - want| <= 1e-5 * sum |w x| + 1e-6: F32 accumulation in another order than the double reference.
void expect_gemv_close(const std::vector<float>& got, const std::vector<float>& want,
                       const std::vector<float>& scale) {
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * scale[i] + 1e-6) << "row " << i;
}

class KernelsAtLevel : public ::testing::TestWithParam<std::string> {
 protected:
  // A level this binary lacks or this CPU cannot run: skipped, saying which (kernels_for's message).
  void SetUp() override {
    try {
      cpu::kernels_for(GetParam());
    } catch (const Error& e) {
      GTEST_SKIP() << e.what();
    }
  }
  const cpu::KernelTable& k() const { return cpu::kernels_for(GetParam()); }
};
INSTANTIATE_TEST_SUITE_P(Levels, KernelsAtLevel, ::testing::ValuesIn(cpu::all_levels()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST_P(KernelsAtLevel, GemvAtOddSizes) {
  const cpu::KernelTable& K = k();
  for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {3, 5}, {5, 17}, {7, 33}, {13, 100}, {9, 768}, {6, 3071}}) {
    const int64_t ldw = k + 3;  // rows not packed: the stride is honoured
    const auto wf = randn(size_t(n * ldw), uint32_t(n * 1000 + k));
    const auto x = randn(size_t(k), uint32_t(k));
    std::vector<uint16_t> wb(wf.size()), wh(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) wb[i] = f32_to_bf16(wf[i]), wh[i] = f32_to_f16(wf[i]);
    std::vector<float> scale(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j) scale[size_t(i)] += std::fabs(wf[size_t(i * ldw + j)] * x[size_t(j)]);
    for (bool acc : {false, true}) {
      const auto init = randn(size_t(n), 7);
      auto run = [&](auto kernel, auto ref, const auto* w) {
        std::vector<float> got = init, want = init;
        kernel(got.data(), w, ldw, x.data(), n, k, acc);
        ref(want.data(), w, ldw, x.data(), n, k, acc);
        expect_gemv_close(got, want, scale);
      };
      SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k) + " acc=" + std::to_string(acc));
      run(K.gemv_f32, cpu::reference::gemv_f32, wf.data());
      // The packed 16-bit kernel against the plain loop on the unpacked matrix, all rows and a later block.
      for (bool bf16 : {true, false}) {
        const auto& w16 = bf16 ? wb : wh;
        const int64_t kp = cpu::Packed16::padded_cols(k);
        std::vector<uint16_t> packed(size_t(cpu::Packed16::padded_rows(n) * kp), 0);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < k; ++c)
            packed[size_t(cpu::Packed16::offset(r, c, kp))] = w16[size_t(r * ldw + c)];
        for (int64_t r0 : {int64_t(0), n > 4 ? int64_t(4) : int64_t(0)}) {
          std::vector<float> got = init, want = init;
          K.gemv_packed16(got.data() + r0, packed.data(), kp, x.data(), r0, n - r0, k, acc, bf16);
          (bf16 ? cpu::reference::gemv_bf16 : cpu::reference::gemv_f16)(
              want.data() + r0, w16.data() + r0 * ldw, ldw, x.data(), n - r0, k, acc);
          expect_gemv_close(got, want, scale);
        }
        // Widening packed rows gives the stored values back.
        std::vector<float> rows(size_t(n * k));
        K.widen_packed_rows(rows.data(), k, packed.data(), kp, 0, n, k, bf16);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < k; ++c) {
            const uint16_t v = w16[size_t(r * ldw + c)];
            ASSERT_EQ(rows[size_t(r * k + c)], bf16 ? bf16_to_f32(v) : f16_to_f32(v));
          }
      }
    }
  }
}

TEST_P(KernelsAtLevel, WidenRowsIsExact) {
  const int64_t rows = 3, cols = 21, ld = 25;
  const auto f = randn(size_t(rows * ld), 3, 10.0f);
  std::vector<uint16_t> b(f.size()), h(f.size());
  for (size_t i = 0; i < f.size(); ++i) b[i] = f32_to_bf16(f[i]), h[i] = f32_to_f16(f[i]);
  std::vector<float> out(static_cast<size_t>(rows * cols));
  k().widen_rows(out.data(), cols, b.data(), ld, rows, cols, true);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(out[size_t(r * cols + c)], bf16_to_f32(b[size_t(r * ld + c)]));
  k().widen_rows(out.data(), cols, h.data(), ld, rows, cols, false);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(out[size_t(r * cols + c)], f16_to_f32(h[size_t(r * ld + c)]));
}

// narrow_rows rounds as f32_to_bf16 / f32_to_f16 (the 16-bit KV cache's stores must not depend on the
// level): random values over a wide range, halfway cases of both types, F16 subnormals, values that round
// to F16's infinity, infinities and NaN, in rows wider than a vector with a tail.
TEST_P(KernelsAtLevel, NarrowRowsRoundsAsTheScalarConversions) {
  const int64_t rows = 4, cols = 45, ld = 47;
  std::vector<float> f = randn(size_t(rows * ld), 11, 1000.0f);
  const float special[] = {0.0f,
                           -0.0f,
                           1.0f + 1.0f / 256,
                           1.0f + 3.0f / 256,
                           1.0f + 1.0f / 2048,
                           1.0f + 3.0f / 2048,
                           3e-6f,
                           -7e-8f,
                           2.9802322e-8f,
                           65520.0f,
                           70000.0f,
                           -1e30f,
                           INFINITY,
                           -INFINITY,
                           1e-40f};
  for (size_t i = 0; i < std::size(special); ++i) f[i * 3] = special[i];
  for (int64_t r = 0; r < rows; ++r) f[size_t(r * ld + 5)] *= 1e-6f;  // F16 subnormals
  f[size_t(ld + 20)] = NAN;
  for (const bool bf16 : {true, false}) {
    std::vector<uint16_t> out(size_t(rows * cols), 0xAAAA);
    k().narrow_rows(out.data(), cols, f.data(), ld, rows, cols, bf16);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const float x = f[size_t(r * ld + c)];
        const uint16_t got = out[size_t(r * cols + c)];
        if (std::isnan(x)) {
          ASSERT_TRUE(std::isnan(bf16 ? bf16_to_f32(got) : f16_to_f32(got))) << r << "," << c;
          continue;
        }
        ASSERT_EQ(got, bf16 ? f32_to_bf16(x) : f32_to_f16(x))
            << (bf16 ? "bf16 " : "f16 ") << "x = " << x << " at " << r << "," << c;
      }
  }
}

TEST_P(KernelsAtLevel, GeluTanhMatchesStdTanh) {
  // Everywhere from tiny to huge, both signs, zero, and an odd count (vector body + scalar tail).
  std::vector<float> x = {0.0f,  -0.0f,  1e-30f, -1e-30f, 1e-4f,  -3e-3f,
                          0.06f, -0.07f, 30.0f,  -30.0f,  200.0f, -200.0f};
  for (int i = -2000; i <= 2000; ++i) x.push_back(float(i) * 0.00437f);
  const auto r = randn(1001, 5, 3.0f);
  x.insert(x.end(), r.begin(), r.end());
  std::vector<float> got = x, want = x;
  k().gelu_tanh(got.data(), int64_t(got.size()));
  cpu::reference::gelu_tanh(want.data(), int64_t(want.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    // A few float ulps of the result, plus one ulp of 1 + tanh(u) scaled by x/2: for very negative x both
    // versions lose everything but that to cancellation (as PyTorch's float gelu does too).
    const double eps = std::numeric_limits<float>::epsilon();
    const double tol = 4.0 * eps * std::fabs(want[i]) + eps * std::fabs(x[i]) + 1e-7;
    EXPECT_NEAR(got[i], want[i], tol) << "x = " << x[i];
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
  }
  std::printf("[ measured ] %s gelu_tanh: max |vector - std::tanh version| = %.3g\n", GetParam().c_str(),
              worst);
}

TEST_P(KernelsAtLevel, SiluMatchesStdExp) {
  // Everywhere from tiny to huge, both signs, zero, past exp's range (|x| > 88), and an odd count (vector
  // body
  // + scalar tail).
  std::vector<float> x = {0.0f,  -0.0f,  1e-30f, -1e-30f, 1e-4f, -3e-3f, 0.5f,  -0.5f,  2.0f,   -2.0f,
                          10.0f, -10.0f, 30.0f,  -30.0f,  87.0f, -87.0f, 90.0f, -90.0f, 500.0f, -500.0f};
  const auto r = randn(1001, 15, 4.0f);
  x.insert(x.end(), r.begin(), r.end());
  std::vector<float> got = x, want = x;
  k().silu(got.data(), int64_t(got.size()));
  cpu::reference::silu(want.data(), int64_t(want.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    // exp(-|x|) to < 3e-7 relative (the vector polynomial; expf: 1 ulp), then a division and a product:
    // 6 float ulps of the result. Below -87 the vector exp is held at exp(-87) ~ 1.6e-38 where the true one
    // underflows: an absolute error of |x| 1.7e-38, under 1e-30 here.
    const double eps = std::numeric_limits<float>::epsilon();
    EXPECT_NEAR(got[i], want[i], 6.0 * eps * std::fabs(want[i]) + 1e-30) << "x = " << x[i];
    if (std::fabs(want[i]) > 1e-30)
      worst = std::max(worst, std::fabs(double(got[i]) - want[i]) / std::fabs(double(want[i])));
  }
  std::printf(
      "[ measured ] %s silu: max relative |vector - std::exp version| = %.3g (where |silu| > 1e-30)\n",
      GetParam().c_str(), worst);
}

// Several rows of x at once (batched decode) against the double reference row by row, nx = 1 .. 17 (the
// kernels take 3 rows of x at a time: every remainder, several groups), with row strides that are not the
// row lengths, for F32 and both packed 16-bit types. 35 and 48 rows: blocks whose next block is prefetched.
TEST_P(KernelsAtLevel, MultiRowGemvAtOddSizes) {
  const cpu::KernelTable& K = k();
  for (auto [n, kk] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {3, 5}, {5, 17}, {7, 33}, {13, 100}, {9, 768}, {6, 1031}, {35, 21}, {48, 70}}) {
    const int64_t ldw = kk + 3, ldx = std::max(n, kk) + 5, ldy = std::max(n, kk) + 2;
    const auto wf = randn(size_t(n * ldw), uint32_t(n * 1000 + kk));
    std::vector<uint16_t> wb(wf.size()), wh(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) wb[i] = f32_to_bf16(wf[i]), wh[i] = f32_to_f16(wf[i]);
    const int64_t kp = cpu::Packed16::padded_cols(kk);
    std::vector<uint16_t> pb(size_t(cpu::Packed16::padded_rows(n) * kp), 0), ph(pb.size(), 0);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < kk; ++c) {
        pb[size_t(cpu::Packed16::offset(r, c, kp))] = wb[size_t(r * ldw + c)];
        ph[size_t(cpu::Packed16::offset(r, c, kp))] = wh[size_t(r * ldw + c)];
      }
    for (int64_t nx = 1; nx <= 17; ++nx) {
      const auto x = randn(size_t(nx * ldx), uint32_t(kk + 31 * nx));
      const auto init = randn(size_t(nx * ldy), uint32_t(nx));
      for (bool acc : {false, true}) {
        SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(kk) + " nx=" + std::to_string(nx) +
                     " acc=" + std::to_string(acc));
        // OutIn [n, k]: F32, and packed BF16 / F16 from row r0 on.
        auto check_outin = [&](const std::vector<float>& got, auto ref, const auto* w, int64_t r0) {
          for (int64_t t = 0; t < nx; ++t) {
            std::vector<float> want(init.begin() + t * ldy + r0, init.begin() + t * ldy + n);
            std::vector<float> g(got.begin() + t * ldy + r0, got.begin() + t * ldy + n),
                scale(static_cast<size_t>(n - r0));
            for (int64_t i = r0; i < n; ++i)
              for (int64_t j = 0; j < kk; ++j)
                scale[size_t(i - r0)] += std::fabs(wf[size_t(i * ldw + j)] * x[size_t(t * ldx + j)]);
            ref(want.data(), w + r0 * ldw, ldw, x.data() + t * ldx, n - r0, kk, acc);
            SCOPED_TRACE("t=" + std::to_string(t));
            expect_gemv_close(g, want, scale);
            // Columns past n (the row stride's gap) untouched.
            for (int64_t i = n; i < ldy && t + 1 < nx; ++i)
              ASSERT_EQ(got[size_t(t * ldy + i)], init[size_t(t * ldy + i)]);
          }
        };
        {
          std::vector<float> got = init;
          K.gemv_f32_rows(got.data(), ldy, wf.data(), ldw, x.data(), ldx, nx, n, kk, acc);
          check_outin(got, cpu::reference::gemv_f32, wf.data(), 0);
        }
        for (bool bf16 : {true, false}) {
          for (int64_t r0 : {int64_t(0), n > 4 ? int64_t(4) : int64_t(0)}) {
            std::vector<float> got = init;
            K.gemv_packed16_rows(got.data() + r0, ldy, (bf16 ? pb : ph).data(), kp, x.data(), ldx, nx, r0,
                                 n - r0, kk, acc, bf16);
            check_outin(got, bf16 ? cpu::reference::gemv_bf16 : cpu::reference::gemv_f16,
                        (bf16 ? wb : wh).data(), r0);
          }
        }
      }
    }
  }
}

// attention_block (up to 4 queries) and attention_prefill of one head, called directly, against a direct
// softmax: decode steps, short steps, and prefills over several tiles and key blocks, D % 8 == 0 or not, D
// past a multiple of 64, 32 and 16 (the AVX-512 tiles' column vectors).
TEST_P(KernelsAtLevel, AttentionKernelsMatchDirectSoftmax) {
  const cpu::KernelTable& K = k();
  for (auto [T, pos0, D] : std::vector<std::array<int64_t, 3>>{{1, 0, 1},
                                                               {3, 5, 7},
                                                               {1, 150, 64},
                                                               {4, 9, 16},
                                                               {1, 1500, 16},
                                                               {1, 30, 40},
                                                               {1, 10, 72},
                                                               {70, 0, 5},
                                                               {9, 5, 8},
                                                               {33, 0, 16},
                                                               {37, 11, 24},
                                                               {41, 7, 8},
                                                               {80, 130, 64},
                                                               {45, 20, 72},
                                                               {38, 3, 40},
                                                               {40, 100, 128}}) {
    const int64_t S = pos0 + T, ldq = D + 3, ldo = D + 1;
    const auto q = randn(size_t(T * ldq), 1), kt = randn(size_t(D * S), 2), v = randn(size_t(S * D), 3);
    const float scale = 0.7f;
    std::vector<double> want(size_t(T * D));
    for (int64_t t = 0; t < T; ++t) {
      const int64_t n = pos0 + t + 1;
      std::vector<double> s(static_cast<size_t>(n));
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        double d = 0;
        for (int64_t i = 0; i < D; ++i) d += double(q[size_t(t * ldq + i)]) * kt[size_t(i * S + j)];
        s[size_t(j)] = scale * d;
        mx = std::max(mx, s[size_t(j)]);
      }
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (int64_t i = 0; i < D; ++i) {
        double o = 0;
        for (int64_t j = 0; j < n; ++j) o += s[size_t(j)] / sum * v[size_t(j * D + i)];
        want[size_t(t * D + i)] = o;
      }
    }
    std::vector<float> a(size_t(T * ldo)), b(size_t(T * ldo));
    for (int64_t t0 = 0; t0 < T; t0 += 4) {
      K.attention_block(a.data() + t0 * ldo, ldo, q.data() + t0 * ldq, ldq, std::min<int64_t>(4, T - t0),
                        pos0 + t0, kt.data(), v.data(), S, D, scale);
    }
    K.attention_prefill(b.data(), ldo, q.data(), ldq, T, pos0, kt.data(), v.data(), S, D, scale);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < D; ++i) {
        ASSERT_NEAR(a[size_t(t * ldo + i)], want[size_t(t * D + i)], 1e-5)
            << "block T=" << T << " pos0=" << pos0 << " t=" << t;
        ASSERT_NEAR(b[size_t(t * ldo + i)], want[size_t(t * D + i)], 1e-5)
            << "prefill T=" << T << " pos0=" << pos0 << " t=" << t;
      }
  }
}

// attention_row16 (a decode step read straight from a 16-bit cache) equals, bit for bit, attention_block on
// the same keys and values widened to F32, for F16 and BF16, K^T rows longer than the keys (S > n) as in the
// cache; where it returns false (the generic level, or D not a multiple of 8) it must not have written.
TEST_P(KernelsAtLevel, SixteenBitDecodeAttentionEqualsWidened) {
  const cpu::KernelTable& K = k();
  for (auto [n, D] : std::vector<std::array<int64_t, 2>>{
           {1, 8}, {7, 16}, {150, 64}, {1025, 64}, {2100, 16}, {33, 40}, {10, 72}, {12, 5}, {3, 1}}) {
    const int64_t S = n + 9;
    const auto q = randn(size_t(D), 21), ktf = randn(size_t(D * S), 22), vf = randn(size_t(S * D), 23);
    for (bool bf16 : {false, true}) {
      std::vector<uint16_t> kt(ktf.size()), v(vf.size());
      for (size_t i = 0; i < kt.size(); ++i) kt[i] = bf16 ? f32_to_bf16(ktf[i]) : f32_to_f16(ktf[i]);
      for (size_t i = 0; i < v.size(); ++i) v[i] = bf16 ? f32_to_bf16(vf[i]) : f32_to_f16(vf[i]);
      std::vector<float> kw(size_t(D * S)), vw(size_t(S * D));
      for (size_t i = 0; i < kw.size(); ++i) kw[i] = bf16 ? bf16_to_f32(kt[i]) : f16_to_f32(kt[i]);
      for (size_t i = 0; i < vw.size(); ++i) vw[i] = bf16 ? bf16_to_f32(v[i]) : f16_to_f32(v[i]);
      const float scale = 0.4f;
      std::vector<float> want(static_cast<size_t>(D)), got(static_cast<size_t>(D), -7.0f);
      K.attention_block(want.data(), D, q.data(), D, 1, n - 1, kw.data(), vw.data(), S, D, scale);
      const bool done = K.attention_row16(got.data(), q.data(), n, kt.data(), v.data(), S, D, scale, bf16);
      const std::string what =
          GetParam() + (bf16 ? " bf16" : " f16") + " n=" + std::to_string(n) + " D=" + std::to_string(D);
      if (done) {
        ASSERT_EQ(got, want) << what;
      } else {
        EXPECT_TRUE(GetParam() == "generic" || D % 8 != 0) << what << ": refused where it has the path";
        ASSERT_EQ(got, std::vector<float>(size_t(D), -7.0f)) << what << ": wrote although it refused";
      }
    }
  }
}

// attention_decode (a decode step's query heads of one KV head together, read straight from the cache,
// unnormalized) against a direct softmax in double over the same keys and values (16-bit ones rounded
// first): o / l, m and l, for groups of 1 to 9 heads (register groups of 1 to 3), keys across
// several 512-key blocks with partial ones, K^T rows longer than the keys (S > n) and q and o rows apart by
// more than D. Tolerance 1e-5 as AttentionKernelsMatchDirectSoftmax (F32 sums in another order than the
// double reference; values ~N(0, 1)). A 16-bit cache gives bit for bit the F32 kernel's result on the
// rounded values (the backend's Kernels.SixteenBitKvCacheEqualsF32CacheOfTheRoundedValues rests on it).
// Where the level has no such kernel (generic) the entry is null; D % 8 != 0 is refused without writing.
TEST_P(KernelsAtLevel, GroupedDecodeAttentionMatchesDirectSoftmax) {
  const cpu::KernelTable& K = k();
  if (K.attention_decode == nullptr) {
    EXPECT_EQ(GetParam(), "generic");
    GTEST_SKIP() << GetParam() << " has no attention_decode (the backend widens per head instead)";
  }
  for (auto [G, n, D] : std::vector<std::array<int64_t, 3>>{
           {1, 1, 8}, {3, 700, 64}, {4, 1025, 16}, {5, 37, 24}, {9, 513, 8}, {2, 2100, 40}, {1, 300, 72}}) {
    const int64_t S = n + 11, ldq = D + 3, ldo = D + 5;
    const auto q = randn(size_t(G * ldq), 31), ktf = randn(size_t(D * S), 32), vf = randn(size_t(S * D), 33);
    const float scale = 0.35f;
    std::vector<float> out32;
    for (cpu::KvKind kind : {cpu::KvKind::F32, cpu::KvKind::F16, cpu::KvKind::BF16}) {
      std::vector<uint16_t> kt16(ktf.size()), v16(vf.size());
      std::vector<float> kr = ktf, vr = vf;  // the values the kernel sees
      if (kind != cpu::KvKind::F32) {
        const bool bf = kind == cpu::KvKind::BF16;
        for (size_t i = 0; i < kr.size(); ++i) {
          kt16[i] = bf ? f32_to_bf16(ktf[i]) : f32_to_f16(ktf[i]);
          kr[i] = bf ? bf16_to_f32(kt16[i]) : f16_to_f32(kt16[i]);
        }
        for (size_t i = 0; i < vr.size(); ++i) {
          v16[i] = bf ? f32_to_bf16(vf[i]) : f32_to_f16(vf[i]);
          vr[i] = bf ? bf16_to_f32(v16[i]) : f16_to_f32(v16[i]);
        }
      }
      std::vector<float> o(size_t(G * ldo), 0.0f), m(static_cast<size_t>(G)), l(static_cast<size_t>(G));
      const void* kp = kind == cpu::KvKind::F32 ? static_cast<const void*>(ktf.data()) : kt16.data();
      const void* vp = kind == cpu::KvKind::F32 ? static_cast<const void*>(vf.data()) : v16.data();
      ASSERT_TRUE(K.attention_decode(o.data(), ldo, m.data(), l.data(), q.data(), ldq, G, n, kp, vp, S, D,
                                     scale, kind));
      const std::string what = GetParam() + " kind " + std::to_string(int(kind)) + " G=" + std::to_string(G) +
                               " n=" + std::to_string(n) + " D=" + std::to_string(D);
      for (int64_t g = 0; g < G; ++g) {
        std::vector<double> sc(static_cast<size_t>(n));
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          double d = 0;
          for (int64_t i = 0; i < D; ++i) d += double(q[size_t(g * ldq + i)]) * kr[size_t(i * S + j)];
          sc[size_t(j)] = double(scale) * d;
          mx = std::max(mx, sc[size_t(j)]);
        }
        for (auto& e : sc) sum += (e = std::exp(e - mx));
        ASSERT_NEAR(m[size_t(g)], mx, 1e-5 * std::abs(mx) + 1e-6) << what << " g=" << g;
        ASSERT_NEAR(l[size_t(g)], sum, 1e-5 * sum) << what << " g=" << g;
        for (int64_t i = 0; i < D; ++i) {
          double want = 0;
          for (int64_t j = 0; j < n; ++j) want += sc[size_t(j)] / sum * vr[size_t(j * D + i)];
          ASSERT_NEAR(o[size_t(g * ldo + i)] / l[size_t(g)], want, 1e-5) << what << " g=" << g << " i=" << i;
        }
      }
      if (kind == cpu::KvKind::F32) continue;
      // The F32 kernel on the rounded values: the same bits.
      std::vector<float> o32(size_t(G * ldo), 0.0f), m32(static_cast<size_t>(G)), l32(static_cast<size_t>(G));
      K.attention_decode(o32.data(), ldo, m32.data(), l32.data(), q.data(), ldq, G, n, kr.data(), vr.data(),
                         S, D, scale, cpu::KvKind::F32);
      ASSERT_EQ(o, o32) << what;
      ASSERT_EQ(m, m32) << what;
      ASSERT_EQ(l, l32) << what;
    }
  }
  std::vector<float> o(5, -7.0f), m(1, -7.0f), l(1, -7.0f), kv(50, 1.0f);
  EXPECT_FALSE(K.attention_decode(o.data(), 5, m.data(), l.data(), kv.data(), 5, 1, 10, kv.data(), kv.data(),
                                  5, 5, 1.0f, cpu::KvKind::F32));
  EXPECT_EQ(o, std::vector<float>(5, -7.0f));
  EXPECT_EQ(m[0], -7.0f);
}

TEST(KernelLevels, ChosenLevelIsSupported) {
  const auto levels = cpu::supported_levels();
  ASSERT_FALSE(levels.empty());
  EXPECT_EQ(levels.front(), "generic");
  EXPECT_NE(std::find(levels.begin(), levels.end(), cpu::kernel_level_name()), levels.end())
      << cpu::kernel_level_name();
  for (const auto& l : levels) EXPECT_EQ(cpu::kernels_for(l).name, l);
  std::string all;
  for (const auto& l : levels) all += " " + l;
  std::printf("[ measured ] kernel level %s; supported:%s; CPU features: %s\n", cpu::kernel_level_name(),
              all.c_str(), cpu::cpu_features().c_str());
}

TEST(KernelLevels, UnknownOrUnsupportedLevelIsAnError) {
  try {
    cpu::kernels_for("nonsense");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Argument);
    EXPECT_NE(std::string(e.what()).find("unknown kernel level"), std::string::npos) << e.what();
  }
  const auto levels = cpu::supported_levels();
  // (appended, not " " + features + " ": GCC 12 reports a false -Wrestrict in that operator+)
  std::string features = " ";
  features.append(cpu::cpu_features()).append(" ");
  for (const std::string& l : cpu::all_levels()) {
    if (std::find(levels.begin(), levels.end(), l) != levels.end()) continue;
    try {
      cpu::kernels_for(l);
      FAIL() << l << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Argument);
      const std::string msg = e.what();
      // Either this build lacks the level, or the message names a feature this CPU lacks.
      const auto at = msg.find("this CPU lacks ");
      if (at == std::string::npos) {
        EXPECT_NE(msg.find("this build has no"), std::string::npos) << msg;
      } else {
        const std::string f = msg.substr(at + 15, msg.find(' ', at + 15) - (at + 15));
        EXPECT_EQ(features.find(" " + f + " "), std::string::npos) << msg;
        EXPECT_NE(msg.find("it supports: generic"), std::string::npos) << msg;
      }
      std::printf("[ measured ] %s\n", msg.c_str());
    }
  }
}

// The CPU backend's store_kv + attention (blockwise, online softmax) against a direct softmax over all
// scores: decode steps, and prefills across several 32-query tiles and 128-key blocks with partial ones at
// every edge.
TEST(Kernels, AttentionMatchesDirectSoftmax) {
  auto be = make_cpu_backend(2);
  for (auto [T, pos0, H, D] :
       std::vector<std::array<int64_t, 4>>{{1, 0, 1, 1},
                                           {5, 3, 3, 7},
                                           {1, 150, 2, 64},
                                           {4, 9, 2, 16},  // decode and short steps
                                           {1, 1500, 4, 16},
                                           {1, 30, 2, 40},
                                           {1, 10, 1, 72},  // one query: > 1024 keys, D = 32 + 8, 64 + 8
                                           {70, 0, 2, 5},   // prefill, D % 8 != 0: the 4-query path
                                           {9, 5, 1, 8},
                                           {33, 0, 3, 16},
                                           {37, 11, 2, 24},  // tiles: partial groups, D = 16 k + 8
                                           {38, 1, 2, 8},
                                           {40, 0, 1, 16},
                                           {41, 7, 2, 8},  // a last group of every size
                                           {300, 200, 2, 64}}) {
    const int64_t C = H * D, S = pos0 + T;
    const auto q = randn(size_t(T * C), 1), k = randn(size_t(S * C), 2), v = randn(size_t(S * C), 3);
    std::vector<float> out(static_cast<size_t>(T * C));
    const float scale = 0.7f;
    auto view = [](const std::vector<float>& v, int64_t rows, int64_t cols) {
      return make_tensor(const_cast<float*>(v.data()), DType::F32, Device::Host, rows, cols);
    };
    const auto cache = be->make_kv_cache(KvCacheSpec{1, H, D, S, 1});
    const std::vector<int32_t> no_ids(static_cast<size_t>(S), 0);  // the ops below do not read ids
    // Rows 0 .. pos0-1 as earlier steps stored them, then this step's T rows; then attention.
    if (pos0 > 0) {
      const SeqRun before{0, 0, pos0, 0};
      be->store_kv(*cache, 0, view(k, pos0, C), view(v, pos0, C), Step{no_ids.data(), pos0, {&before, 1}});
    }
    const SeqRun run{0, 0, T, pos0};
    const Step step{no_ids.data(), T, {&run, 1}};
    be->store_kv(*cache, 0, view(k, S, C).row_slice(pos0, T), view(v, S, C).row_slice(pos0, T), step);
    be->attention(view(out, T, C), view(q, T, C), *cache, 0, step, H, scale);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t n = pos0 + t + 1;
        std::vector<double> s(static_cast<size_t>(n));
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          double d = 0;
          for (int64_t i = 0; i < D; ++i)
            d += double(q[size_t(t * C + h * D + i)]) * k[size_t(j * C + h * D + i)];
          s[size_t(j)] = scale * d;
          mx = std::max(mx, s[size_t(j)]);
        }
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (int64_t i = 0; i < D; ++i) {
          double o = 0;
          for (int64_t j = 0; j < n; ++j) o += s[size_t(j)] / sum * v[size_t(j * C + h * D + i)];
          ASSERT_NEAR(out[size_t(t * C + h * D + i)], o, 1e-5)
              << "T=" << T << " pos0=" << pos0 << " t=" << t << " h=" << h;
        }
      }
    }
  }
}

// A decode step through the CPU backend's grouped path against a direct softmax: several query heads per
// KV head (SmolLM2's 9 over 3, multi-query 4 over 1), sequences at different depths in one step (batched
// decode), a sliding window, and the keys of a KV head split over the threads where its tasks would not
// share out evenly (3 KV heads on 2 threads, 1 on 3), the parts merged. Tolerance 1e-5 as above.
TEST(Kernels, GroupedDecodeSplitOverThreadsMatchesDirectSoftmax) {
  struct GroupedDecodeCase {
    int threads;
    int64_t H, Hkv, D, window;
    std::vector<int64_t> pos;  // each sequence's position (its keys: 0 .. pos)
  };
  for (const GroupedDecodeCase& c : std::vector<GroupedDecodeCase>{{2, 9, 3, 64, 0, {700}},
                                                                   {4, 9, 3, 64, 0, {1300, 40}},
                                                                   {3, 4, 1, 16, 0, {1500}},
                                                                   {2, 6, 3, 8, 300, {900}},
                                                                   {2, 2, 1, 24, 0, {100}},
                                                                   {2, 8, 8, 16, 0, {520}}}) {
    auto be = make_cpu_backend(c.threads);
    const int64_t B = int64_t(c.pos.size()), C = c.H * c.D, KV = c.Hkv * c.D, group = c.H / c.Hkv;
    const int64_t S = *std::max_element(c.pos.begin(), c.pos.end()) + 1;
    const auto cache = be->make_kv_cache(KvCacheSpec{1, c.Hkv, c.D, S, B, c.window});
    auto view = [](const std::vector<float>& x, int64_t rows, int64_t cols) {
      return make_tensor(const_cast<float*>(x.data()), DType::F32, Device::Host, rows, cols);
    };
    std::vector<std::vector<float>> ks, vs;
    const std::vector<int32_t> no_ids(static_cast<size_t>(S), 0);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = c.pos[size_t(b)] + 1;
      ks.push_back(randn(size_t(n * KV), uint32_t(40 + b)));
      vs.push_back(randn(size_t(n * KV), uint32_t(50 + b)));
      const SeqRun all{b, 0, n, 0};
      be->store_kv(*cache, 0, view(ks.back(), n, KV), view(vs.back(), n, KV),
                   Step{no_ids.data(), n, {&all, 1}});
    }
    // One decode step: query b of sequence b at position pos[b] (its key and value stored above).
    std::vector<SeqRun> runs;
    for (int64_t b = 0; b < B; ++b) runs.push_back({b, b, 1, c.pos[size_t(b)]});
    const auto q = randn(size_t(B * C), 60);
    std::vector<float> out(size_t(B * C), 0.0f);
    const float scale = 0.125f;
    be->attention(view(out, B, C), view(q, B, C), *cache, 0, Step{no_ids.data(), B, runs}, c.H, scale);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t p = c.pos[size_t(b)], first = c.window > 0 ? std::max<int64_t>(0, p - c.window + 1) : 0;
      for (int64_t h = 0; h < c.H; ++h) {
        const int64_t kvh = h / group;
        std::vector<double> sc(size_t(p + 1 - first));
        double mx = -1e300, sum = 0;
        for (int64_t j = first; j <= p; ++j) {
          double d = 0;
          for (int64_t i = 0; i < c.D; ++i)
            d += double(q[size_t(b * C + h * c.D + i)]) * ks[size_t(b)][size_t(j * KV + kvh * c.D + i)];
          sc[size_t(j - first)] = scale * d;
          mx = std::max(mx, sc[size_t(j - first)]);
        }
        for (auto& e : sc) sum += (e = std::exp(e - mx));
        for (int64_t i = 0; i < c.D; ++i) {
          double want = 0;
          for (int64_t j = first; j <= p; ++j)
            want += sc[size_t(j - first)] / sum * vs[size_t(b)][size_t(j * KV + kvh * c.D + i)];
          ASSERT_NEAR(out[size_t(b * C + h * c.D + i)], want, 1e-5)
              << "threads " << c.threads << " H=" << c.H << " Hkv=" << c.Hkv << " seq " << b << " pos " << p
              << " head " << h << " i " << i;
        }
      }
    }
  }
}

// --cache-type f16 / bf16 on the CPU: the cache holds the keys and values rounded to 16 bits (nearest even,
// as CUDA stores them) and the attention kernels read them widened, so the outputs equal bit for bit those of
// the F32 cache given the rounded values: prefill tiles, short steps, decode, grouped heads (8 query heads
// over 2 KV heads), and a prefix copied to another sequence (copy_kv) that a decode step then reads.
TEST(Kernels, SixteenBitKvCacheEqualsF32CacheOfTheRoundedValues) {
  auto f32 = make_cpu_backend(2);
  for (DType t : {DType::F16, DType::BF16}) {
    auto half = make_cpu_backend(2, t);
    auto round = [t](float x) {
      return t == DType::F16 ? f16_to_f32(f32_to_f16(x)) : bf16_to_f32(f32_to_bf16(x));
    };
    for (auto [T, pos0, H, Hkv, D] : std::vector<std::array<int64_t, 5>>{{1, 0, 1, 1, 1},
                                                                         {5, 3, 3, 3, 7},
                                                                         {1, 150, 2, 2, 64},
                                                                         {4, 9, 8, 2, 16},
                                                                         {70, 0, 2, 1, 5},
                                                                         {41, 7, 2, 2, 8},
                                                                         {300, 200, 4, 2, 64},
                                                                         {1, 1500, 4, 4, 16}}) {
      const int64_t C = H * D, KV = Hkv * D, S = pos0 + T + 1;
      const auto q = randn(size_t((T + 1) * C), 11), k = randn(size_t(S * KV), 12),
                 v = randn(size_t(S * KV), 13);
      std::vector<float> kr = k, vr = v;
      for (auto& e : kr) e = round(e);
      for (auto& e : vr) e = round(e);
      const float scale = 0.3f;
      auto view = [](const std::vector<float>& x, int64_t rows, int64_t cols) {
        return make_tensor(const_cast<float*>(x.data()), DType::F32, Device::Host, rows, cols);
      };
      const std::vector<int32_t> no_ids(static_cast<size_t>(S), 0);
      std::vector<float> out[2], dec[2];
      for (int b = 0; b < 2; ++b) {
        Backend& be = b == 0 ? *half : *f32;
        const std::vector<float>& kk = b == 0 ? k : kr;
        const std::vector<float>& vv = b == 0 ? v : vr;
        const auto cache = be.make_kv_cache(KvCacheSpec{1, Hkv, D, S, 2});
        EXPECT_EQ(cache->dtype(), b == 0 ? t : DType::F32);
        if (pos0 > 0) {
          const SeqRun before{0, 0, pos0, 0};
          be.store_kv(*cache, 0, view(kk, pos0, KV), view(vv, pos0, KV),
                      Step{no_ids.data(), pos0, {&before, 1}});
        }
        const SeqRun run{0, 0, T, pos0};
        const Step step{no_ids.data(), T, {&run, 1}};
        be.store_kv(*cache, 0, view(kk, S, KV).row_slice(pos0, T), view(vv, S, KV).row_slice(pos0, T), step);
        out[b].assign(size_t(T * C), 0.0f);
        be.attention(view(out[b], T, C), view(q, T, C), *cache, 0, step, H, scale);
        // Sequence 1 takes sequence 0's pos0 + T positions, then decodes one more token there.
        be.copy_kv(*cache, 0, 1, pos0 + T);
        const SeqRun next{1, 0, 1, pos0 + T};
        const Step one{no_ids.data(), 1, {&next, 1}};
        be.store_kv(*cache, 0, view(kk, S, KV).row_slice(pos0 + T, 1), view(vv, S, KV).row_slice(pos0 + T, 1),
                    one);
        dec[b].assign(size_t(C), 0.0f);
        be.attention(view(dec[b], 1, C), view(q, T + 1, C).row_slice(T, 1), *cache, 0, one, H, scale);
      }
      const std::string what = std::string(dtype_name(t)) + " T=" + std::to_string(T) +
                               " pos0=" + std::to_string(pos0) + " H=" + std::to_string(H) +
                               " Hkv=" + std::to_string(Hkv);
      ASSERT_EQ(out[0], out[1]) << what;
      ASSERT_EQ(dec[0], dec[1]) << what << " (after copy_kv)";
    }
  }
}

// ---- the block's ops of each kind on the CPU backend, against slow double references ----------------

// x row r at x + r * ld. transformers' LayerNorm / LlamaRMSNorm in double: mean (Layer), variance around it
// or the mean of the squares (Rms), (x - mean) / sqrt(v + eps) * w + b.
std::vector<double> norm_reference(const std::vector<float>& x, int64_t ld, int64_t T, int64_t C,
                                   const std::vector<float>& w, const std::vector<float>* b, NormKind kind,
                                   float eps) {
  std::vector<double> y(size_t(T * C));
  for (int64_t t = 0; t < T; ++t) {
    const float* r = x.data() + t * ld;
    double mean = 0, v = 0;
    if (kind == NormKind::Layer) {
      for (int64_t i = 0; i < C; ++i) mean += r[i];
      mean /= double(C);
    }
    for (int64_t i = 0; i < C; ++i) v += (r[i] - mean) * (r[i] - mean);
    const double rstd = 1.0 / std::sqrt(v / double(C) + double(eps));
    for (int64_t i = 0; i < C; ++i)
      y[size_t(t * C + i)] = (r[i] - mean) * rstd * w[size_t(i)] + (b ? (*b)[size_t(i)] : 0.0);
  }
  return y;
}

// Both kinds, with and without a bias, on strided rows, one row, a few (the session's thread) and many (the
// pool's). The backend sums in F32 in another order (the mean, the squares): relative error ~sqrt(C) ulp of
// the sums, far under |diff| <= 1e-5 (|ref| + 1) (the Layer kind's rows have a mean of 3, as the CUDA
// test's).
TEST(Kernels, NormKindsMatchDoubleReference) {
  auto be = make_cpu_backend(2);
  for (auto [T, C] : std::vector<std::array<int64_t, 2>>{{1, 1}, {1, 768}, {5, 771}, {9, 1600}, {33, 64}}) {
    const int64_t ld = C + 5;
    auto x = randn(size_t(T * ld), 3, 2.0f), w = randn(size_t(C), 4), b = randn(size_t(C), 5);
    for (auto& v : x) v += 3.0f;
    for (NormKind kind : {NormKind::Layer, NormKind::Rms}) {
      for (bool bias : {true, false}) {
        std::vector<float> out(size_t(T * C), -1.0f);
        Tensor in = make_tensor(x.data(), DType::F32, Device::Host, T, ld).col_slice(0, C);
        const Tensor wt = make_tensor(w.data(), DType::F32, Device::Host, 1, C);
        const Tensor bt = bias ? make_tensor(b.data(), DType::F32, Device::Host, 1, C) : Tensor{};
        be->norm(make_tensor(out.data(), DType::F32, Device::Host, T, C), in, wt, bt, kind, 1e-5f);
        const auto want = norm_reference(x, ld, T, C, w, bias ? &b : nullptr, kind, 1e-5f);
        for (size_t i = 0; i < out.size(); ++i) {
          ASSERT_NEAR(out[i], want[i], 1e-5 * (1 + std::fabs(want[i])))
              << (kind == NormKind::Rms ? "rms" : "layer") << " bias=" << bias << " T=" << T << " C=" << C
              << " i=" << i;
        }
      }
    }
  }
}

double act_reference(double x, Activation act) {
  switch (act) {
    case Activation::GeluTanh:
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case Activation::GeluErf:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Activation::Relu:
      return x > 0 ? x : 0.0;
    case Activation::Silu:
      return x / (1.0 + std::exp(-x));
  }
  return x;
}

// SiLU through activation(), and the gated MLP's act(gate) * up for every activation (SwiGLU, GeGLU, ReGLU),
// into another tensor and in place of the gate, on strided rows: one row (decode) and several (the pool's),
// F odd (the vector kernels' tails). The activation in F32 to a few ulp (GELU-tanh: its tolerance in
// GeluTanhMatchesStdTanh, the cancellation of 1 + tanh for very negative x), then one product:
// |diff| <= (8 ulp |act| + 1 ulp |g| + 1e-7) |up| + 1 ulp |ref|.
TEST(Kernels, SiluAndGatedActivationsMatchDoubleReference) {
  auto be = make_cpu_backend(2);
  const double eps = std::numeric_limits<float>::epsilon();
  for (int64_t T : {1, 2, 7}) {
    const int64_t F = 1001, ld = 2 * F + 3;
    auto gu = randn(size_t(T * ld), 16, 3.0f);
    // SiLU alone, in place.
    {
      std::vector<float> x = gu;
      be->activation(make_tensor(x.data(), DType::F32, Device::Host, T, ld).col_slice(0, F),
                     Activation::Silu);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < ld; ++i) {
          const size_t at = size_t(t * ld + i);
          const double want = i < F ? act_reference(gu[at], Activation::Silu) : gu[at];  // the rest untouched
          ASSERT_NEAR(x[at], want, 8 * eps * std::fabs(want) + 1e-30) << "T=" << T << " i=" << i;
        }
    }
    for (Activation act : {Activation::Silu, Activation::GeluTanh, Activation::GeluErf, Activation::Relu}) {
      for (bool in_place : {false, true}) {
        std::vector<float> buf = gu;
        std::vector<float> sep(size_t(T * F), -1.0f);
        const Tensor src = make_tensor(buf.data(), DType::F32, Device::Host, T, ld).col_slice(0, 2 * F);
        const Tensor out =
            in_place ? src.col_slice(0, F) : make_tensor(sep.data(), DType::F32, Device::Host, T, F);
        be->gated_act(out, src, act);
        for (int64_t t = 0; t < T; ++t)
          for (int64_t i = 0; i < F; ++i) {
            const double g = gu[size_t(t * ld + i)], u = gu[size_t(t * ld + F + i)];
            const double a = act_reference(g, act), want = a * u;
            const float got = in_place ? buf[size_t(t * ld + i)] : sep[size_t(t * F + i)];
            ASSERT_NEAR(
                got, want,
                (8 * eps * std::fabs(a) + eps * std::fabs(g) + 1e-7) * std::fabs(u) + eps * std::fabs(want))
                << "act=" << int(act) << " in_place=" << in_place << " T=" << T << " i=" << i;
          }
        if (in_place) {  // the up half is read, never written
          for (int64_t t = 0; t < T; ++t)
            for (int64_t i = F; i < ld; ++i) ASSERT_EQ(buf[size_t(t * ld + i)], gu[size_t(t * ld + i)]);
        }
      }
    }
  }
}

// A projection kept in quantized parts of different types (llama-quantize's Q4_K_M of a model whose width is
// no multiple of 256: q and k in Q5_0, v in Q8_0; of one whose width is: Q4_K beside Q6_K): the CPU backend's
// one-dispatch decode product of all the parts equals the parts' products one by one bit for bit (the same
// kernels on the same rows and activations), on one token and three, with a bias on one part; prefill's rows
// take the parts one by one. Both against the dequantized weights in double: the activations are rounded to
// 8 bits per block (a step of 1/127 of the block's largest, at most half a step each), so
// |diff| <= 1/127 sum |w x| + 1e-5.
TEST(Kernels, QuantizedPartsInOneProductEqualThePartsOneByOne) {
  auto be = make_cpu_backend(2);
  struct Case {
    int64_t K;
    std::vector<std::pair<GgmlType, int64_t>> parts;  // type, rows
  };
  const Case cases[] = {
      {576, {{GgmlType::Q5_0, 576}, {GgmlType::Q5_0, 192}, {GgmlType::Q8_0, 192}}},
      {512, {{GgmlType::Q4_K, 256}, {GgmlType::Q6_K, 68}, {GgmlType::Q8_0, 36}}},
  };
  for (const Case& c : cases) {
    std::vector<std::unique_ptr<Buffer>> keep;
    std::vector<Linear> parts;
    std::vector<std::vector<float>> deq, biases;
    int64_t N = 0;
    for (size_t i = 0; i < c.parts.size(); ++i) {
      const auto [type, rows] = c.parts[i];
      const std::vector<float> w = randn(size_t(rows * c.K), 100 + uint32_t(i));
      const WeightFormat f = WeightFormat::quantized(type);
      std::vector<uint8_t> blocks(f.row_bytes(c.K) * size_t(rows));
      quantize(type, w.data(), blocks.data(), rows * c.K);
      deq.emplace_back(size_t(rows * c.K));
      dequantize(type, blocks.data(), deq.back().data(), rows * c.K);
      biases.push_back(i == 1 ? randn(size_t(rows), 7) : std::vector<float>(size_t(rows), 0.0f));
      HostLinear h;
      h.w = make_tensor(blocks.data(), DType::F32, Device::Host, rows, c.K);  // the blocks; dtype unused
      if (i == 1) h.b = make_tensor(biases.back().data(), DType::F32, Device::Host, 1, rows);
      h.order = MatrixOrder::OutIn;
      h.n_in = c.K;
      h.n_out = rows;
      h.stored = f;
      parts.push_back(be->prepare_linear(h, f, keep));
      N += rows;
    }
    for (int64_t T : {1, 3, 40}) {
      std::vector<float> x = randn(size_t(T * c.K), 5), one(size_t(T * N), -1.0f),
                         apart(size_t(T * N), -2.0f);
      const Tensor in = make_tensor(x.data(), DType::F32, Device::Host, T, c.K);
      be->linear_parts(make_tensor(one.data(), DType::F32, Device::Host, T, N), in, parts);
      be->Backend::linear_parts(make_tensor(apart.data(), DType::F32, Device::Host, T, N), in, parts);
      for (size_t i = 0; i < one.size(); ++i)
        ASSERT_EQ(one[i], apart[i]) << "K=" << c.K << " T=" << T << " at " << i;
      for (int64_t t = 0; t < T; ++t) {
        int64_t col = 0;
        for (size_t p = 0; p < c.parts.size(); ++p) {
          for (int64_t r = 0; r < c.parts[p].second; ++r, ++col) {
            double want = biases[p][size_t(r)], mag = 0;
            for (int64_t k = 0; k < c.K; ++k) {
              const double wx = double(deq[p][size_t(r * c.K + k)]) * x[size_t(t * c.K + k)];
              want += wx, mag += std::fabs(wx);
            }
            ASSERT_NEAR(one[size_t(t * N + col)], want, mag / 127 + 1e-5)
                << "K=" << c.K << " T=" << T << " part " << p << " row " << r;
          }
        }
      }
    }
  }
}

// Rotary positions in both layouts against the rotation written out: pair i of a head is (i, i + rd / 2)
// (NeoxHalves) or (2i, 2i + 1) (AdjacentPairs), turned by the angle transformers computes in F32 (inv_freq =
// 1 / theta^(2i / rd), angle = position * inv_freq, each rounded to F32), cos and sin of it and the rotation
// in double. The backend rounds cos and sin to F32 and rotates in F32: |diff| <= 4 ulp (|a| + |b|). Partial
// rotary (the rest of the head untouched), a strided view (q inside qkv), two runs at their own positions in
// one step, a far position, and enough tokens for the pool's path.
TEST(Kernels, RopeLayoutsMatchTheRotationWrittenOut) {
  auto be = make_cpu_backend(2);
  const double eps = std::numeric_limits<float>::epsilon();
  struct Case {
    std::vector<SeqRun> runs;
    int64_t H, D, rotary;
    float theta;
  };
  for (const Case& c :
       {Case{{SeqRun{0, 0, 7, 0}}, 3, 16, 4, 10000.0f}, Case{{SeqRun{0, 0, 1, 1900}}, 4, 64, 64, 10000.0f},
        Case{{SeqRun{1, 0, 3, 40}, SeqRun{0, 3, 20, 5}}, 2, 32, 16, 500.0f},
        Case{{SeqRun{0, 0, 2, 3}}, 1, 10, 6, 10000.0f}}) {
    int64_t T = 0;
    for (const SeqRun& r : c.runs) T += r.n;
    const std::vector<int32_t> ids(size_t(T), 0);
    const Step step{ids.data(), T, std::span<const SeqRun>(c.runs)};
    std::vector<int64_t> pos(static_cast<size_t>(T));
    for (const SeqRun& r : c.runs)
      for (int64_t t = 0; t < r.n; ++t) pos[size_t(r.first + t)] = r.pos0 + t;
    const int64_t W = c.H * c.D + 8;  // inside a wider row, as q in qkv
    const auto x = randn(size_t(T * W), 41);
    const int64_t half = c.rotary / 2;
    for (RopeLayout layout : {RopeLayout::NeoxHalves, RopeLayout::AdjacentPairs}) {
      std::vector<float> got = x;
      be->rope(make_tensor(got.data(), DType::F32, Device::Host, T, W).col_slice(0, c.H * c.D), step, c.H,
               c.D, c.rotary, c.theta, layout);
      std::vector<double> want(x.begin(), x.end());
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < c.H; ++h)
          for (int64_t i = 0; i < half; ++i) {
            const float inv = 1.0f / std::pow(c.theta, float(2 * i) / float(c.rotary));
            const double angle = float(pos[size_t(t)]) * inv;
            const int64_t ia = layout == RopeLayout::AdjacentPairs ? 2 * i : i;
            const int64_t ib = layout == RopeLayout::AdjacentPairs ? 2 * i + 1 : i + half;
            const size_t pa = size_t(t * W + h * c.D + ia), pb = size_t(t * W + h * c.D + ib);
            const double a = x[pa], b = x[pb];
            want[pa] = a * std::cos(angle) - b * std::sin(angle);
            want[pb] = b * std::cos(angle) + a * std::sin(angle);
          }
      for (size_t i = 0; i < got.size(); ++i) {
        // the pair's |a| + |b| bounds the rotated value; untouched values exactly equal
        const int64_t col = int64_t(i) % W, h = col / c.D, d = col % c.D;
        double mag = 0;
        if (col < c.H * c.D && d < c.rotary) {
          const int64_t i0 = layout == RopeLayout::AdjacentPairs ? d / 2 : d % half;
          const int64_t ia = layout == RopeLayout::AdjacentPairs ? 2 * i0 : i0;
          const int64_t ib = layout == RopeLayout::AdjacentPairs ? 2 * i0 + 1 : i0 + half;
          const size_t row = i - size_t(col);
          mag = std::fabs(x[row + size_t(h * c.D + ia)]) + std::fabs(x[row + size_t(h * c.D + ib)]);
        }
        ASSERT_NEAR(got[i], want[i], 4 * eps * mag)
            << (layout == RopeLayout::AdjacentPairs ? "adjacent" : "halves") << " T=" << T << " i=" << i;
      }
    }
  }
}

// rope_freqs' mscale (LongRoPE's attention factor) multiplies cos and sin: the rotated dimensions come out
// mscale times the unscaled rotation (within the F32 roundings of the products), the rest of each head and
// of the row untouched; mscale 1 is rope() bit for bit. The cos/sin tables the backend keeps per thread are
// told apart by the scale too: 1, then 1.3, then 1 again on the same frequencies gives the first result.
TEST(Kernels, RopeFreqsScalesCosAndSinOfTheRotatedDimensionsOnly) {
  auto be = make_cpu_backend(2);
  const double eps = std::numeric_limits<float>::epsilon();
  const int64_t H = 3, D = 16, rotary = 12, half = rotary / 2, T = 20, W = H * D + 8;
  const float theta = 10000.0f, m = 1.3228756f;
  const std::vector<SeqRun> runs = {SeqRun{0, 0, T, 5}};
  const std::vector<int32_t> ids(size_t(T), 0);
  const Step step{ids.data(), T, std::span<const SeqRun>(runs)};
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) inv[size_t(i)] = 1.0f / std::pow(theta, float(2 * i) / float(rotary));
  const Tensor f = make_tensor(inv.data(), DType::F32, Device::Host, 1, half);
  const auto x = randn(size_t(T * W), 43);
  auto run = [&](float mscale) {
    std::vector<float> v = x;
    be->rope_freqs(make_tensor(v.data(), DType::F32, Device::Host, T, W).col_slice(0, H * D), step, H, D,
                   rotary, f, RopeLayout::NeoxHalves, mscale);
    return v;
  };
  const std::vector<float> one = run(1.0f), scaled = run(m), again = run(1.0f);
  std::vector<float> plain = x;
  be->rope(make_tensor(plain.data(), DType::F32, Device::Host, T, W).col_slice(0, H * D), step, H, D, rotary,
           theta, RopeLayout::NeoxHalves);
  EXPECT_EQ(one, plain);
  EXPECT_EQ(again, one);
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t col = int64_t(i) % W, h = col / D, d = col % D;
    if (col >= H * D || d >= rotary) {
      ASSERT_EQ(scaled[i], x[i]) << "i=" << i;
      continue;
    }
    const size_t row = i - size_t(col);
    const double mag =
        std::fabs(x[row + size_t(h * D + d % half)]) + std::fabs(x[row + size_t(h * D + d % half + half)]);
    ASSERT_NEAR(scaled[i], double(m) * one[i], 4 * eps * m * mag) << "i=" << i;
  }
  std::vector<float> v = x;
  test::expect_error(
      [&] {
        be->rope_freqs(make_tensor(v.data(), DType::F32, Device::Host, T, W).col_slice(0, H * D), step, H, D,
                       rotary, f, RopeLayout::NeoxHalves, 0.0f);
      },
      ErrorKind::Argument, {"cpu rope_freqs: the cos/sin scale 0.000000 is not a finite number > 0"});
}

}  // namespace
}  // namespace minigpt
