// The kernels that compute BF16 products in BF16 (src/cpu/kernels_bf16.inc: the batched-decode GEMV and the
// prefill GEMM), at every kernel level this binary holds, each forced in turn through its table. A level
// this CPU cannot run, or one without BF16 arithmetic, skips with the reason. Each product is checked twice:
// - against the double product of the stored weights with the activations rounded to BF16 (what the
//   kernel multiplies), within F32 summation error: this one catches a wrong, missing or doubled term;
// - against the F32-widening path it replaces (gemv_packed16_rows, fgemm on the widened rows, or the double
//   product where the level has no fgemm), within the bound BF16's rounding of the activations gives:
//   |x - bf16(x)| <= 2^-8 |x|, so the two differ by at most 2^-8 sum |w x| plus both sides' F32 error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu/kernels.h"
#include "minigpt/error.h"
#include "minigpt/tensor.h"

namespace minigpt {
namespace {

// F32 summation against the double product: the F32 kernels' tests' 1e-5 of sum |w x| (far above the
// rounding of sums of a few thousand terms in 16-lane order, far below one term of the sum of |w x|).
constexpr double kF32SumTol = 1e-5;
// BF16 keeps 8 significant bits: rounding to nearest moves a value by at most 2^-8 of it.
constexpr double kBf16Round = 1.0 / 256;

class Bf16KernelsAtLevel : public ::testing::TestWithParam<std::string> {
 protected:
  // A level this binary lacks or this CPU cannot run: skipped, saying which (kernels_for's message).
  void SetUp() override {
    try {
      table_ = &cpu::kernels_for(GetParam());
    } catch (const Error& e) {
      GTEST_SKIP() << e.what();
    }
  }
  std::string no_bf16() const {
    return GetParam() +
           " has no BF16 arithmetic (it needs AVX-512 BF16): BF16 weights are widened to F32 there";
  }
  const cpu::KernelTable* table_ = nullptr;
};
INSTANTIATE_TEST_SUITE_P(Levels, Bf16KernelsAtLevel, ::testing::ValuesIn(cpu::all_levels()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The value a BF16 kernel multiplies: minigpt's round-to-nearest-even F32 -> BF16 (tensor.h), denormals to
// a signed zero as the instruction's conversion does.
float rounded_bf16(float x) {
  if (x != 0.0f && std::fabs(x) < std::numeric_limits<float>::min()) return std::signbit(x) ? -0.0f : 0.0f;
  return bf16_to_f32(f32_to_bf16(x));
}

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// A BF16 [n, k] matrix (the random F32 values rounded) and its Packed16 form.
struct PackedBf16Matrix {
  int64_t n, k, kp;
  std::vector<uint16_t> rows;    // [n, k]
  std::vector<uint16_t> packed;  // Packed16, padded
  PackedBf16Matrix(int64_t n_, int64_t k_, uint32_t seed) : n(n_), k(k_), kp(cpu::Packed16::padded_cols(k_)) {
    const std::vector<float> f = random_values(size_t(n * k), seed);
    rows.resize(f.size());
    for (size_t i = 0; i < f.size(); ++i) rows[i] = f32_to_bf16(f[i]);
    packed.assign(size_t(cpu::Packed16::padded_rows(n) * kp), 0);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c)
        packed[size_t(cpu::Packed16::offset(r, c, kp))] = rows[size_t(r * k + c)];
  }
  double w(int64_t r, int64_t c) const { return bf16_to_f32(rows[size_t(r * k + c)]); }
};

// Every level converts the same way: round to nearest even, ties to even, denormals to zero, NaN stays NaN,
// and the row padded with zeros to a multiple of 16.
TEST_P(Bf16KernelsAtLevel, ToBf16RowsRoundsToNearestEven) {
  const cpu::KernelTable* K = table_;
  const float tiny = std::numeric_limits<float>::denorm_min();
  std::vector<float> x = {0.0f,  -0.0f,        1.0f,     1.0f + 1.0f / 256, 1.0f + 3.0f / 256,
                          -1.5f, 3.0e38f,      -3.4e38f, INFINITY,          -INFINITY,
                          tiny,  -tiny * 1000, 1.0e-38f, 1.0f + 1.0f / 512, 65504.0f};
  const std::vector<float> r = random_values(70, 5);
  for (float v : r) x.push_back(v * 1000.0f);
  for (int64_t k : {int64_t(1), int64_t(15), int64_t(16), int64_t(17), int64_t(x.size())}) {
    const int64_t ld = cpu::Packed16::padded_cols(k) + 3, nt = 2;
    std::vector<float> in(size_t(nt * (k + 1)));
    for (int64_t t = 0; t < nt; ++t)
      for (int64_t c = 0; c < k; ++c) in[size_t(t * (k + 1) + c)] = x[size_t((c + t) % int64_t(x.size()))];
    std::vector<uint16_t> out(size_t(nt * ld), 0x1234);
    K->to_bf16_rows(out.data(), ld, in.data(), k + 1, nt, k);
    for (int64_t t = 0; t < nt; ++t) {
      for (int64_t c = 0; c < k; ++c) {
        const float v = in[size_t(t * (k + 1) + c)];
        const uint16_t got = out[size_t(t * ld + c)];
        const float want = rounded_bf16(v);
        ASSERT_EQ(bf16_to_f32(got), want) << "k " << k << " t " << t << " c " << c << " x " << v;
        ASSERT_EQ(std::signbit(bf16_to_f32(got)), std::signbit(want)) << v;
      }
      for (int64_t c = k; c < cpu::Packed16::padded_cols(k); ++c) ASSERT_EQ(out[size_t(t * ld + c)], 0) << c;
      for (int64_t c = cpu::Packed16::padded_cols(k); c < ld; ++c) ASSERT_EQ(out[size_t(t * ld + c)], 0x1234);
    }
  }
  float nan = std::numeric_limits<float>::quiet_NaN();
  // A row of one value is written out to its padded width, zeros after the value.
  std::vector<uint16_t> b(size_t(cpu::Packed16::padded_cols(1)), 0x1234);
  K->to_bf16_rows(b.data(), int64_t(b.size()), &nan, 1, 1, 1);
  EXPECT_TRUE(std::isnan(bf16_to_f32(b[0])));
}

// The batched-decode GEMV at odd sizes, nx = 1 .. 17 rows of activations (passes of up to 8: every
// remainder, one and three passes), from row 0 and from row 4, with and without accumulating, row strides
// that are not the row lengths; nothing written past n.
TEST_P(Bf16KernelsAtLevel, GemvRowsIsTheBf16ProductWithinTheRoundingOfTheActivations) {
  const cpu::KernelTable* K = table_;
  if (K->gemv_bf16_rows == nullptr) {
    EXPECT_EQ(K->bgemm, nullptr);
    GTEST_SKIP() << no_bf16();
  }
  for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {3, 5}, {5, 17}, {7, 33}, {13, 100}, {9, 768}, {6, 1031}, {35, 21}, {48, 70}}) {
    const PackedBf16Matrix w(n, k, uint32_t(n * 1000 + k));
    const int64_t ldx = k + 5, ldy = n + 2, ldxb = w.kp + 16;
    for (int64_t nx = 1; nx <= 17; ++nx) {
      const std::vector<float> x = random_values(size_t(nx * ldx), uint32_t(k + 31 * nx));
      const std::vector<float> init = random_values(size_t(nx * ldy), uint32_t(nx));
      std::vector<uint16_t> xb(size_t(nx * ldxb));
      K->to_bf16_rows(xb.data(), ldxb, x.data(), ldx, nx, k);
      for (int64_t r0 : {int64_t(0), n > 4 ? int64_t(4) : int64_t(0)}) {
        for (bool acc : {false, true}) {
          SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k) + " nx=" + std::to_string(nx) +
                       " r0=" + std::to_string(r0) + " acc=" + std::to_string(acc));
          std::vector<float> got = init, widened = init;
          K->gemv_bf16_rows(got.data() + r0, ldy, w.packed.data(), w.kp, xb.data(), ldxb, nx, r0, n - r0, k,
                            acc);
          K->gemv_packed16_rows(widened.data() + r0, ldy, w.packed.data(), w.kp, x.data(), ldx, nx, r0,
                                n - r0, k, acc, true);
          for (int64_t t = 0; t < nx; ++t) {
            for (int64_t i = 0; i < ldy; ++i) {
              const size_t at = size_t(t * ldy + i);
              if (i < r0 || i >= n) {
                ASSERT_EQ(got[at], init[at]) << "t " << t << " column " << i << " written";
                continue;
              }
              double exact = acc ? init[at] : 0.0, mag = 0.0, mag_rounded = 0.0;
              for (int64_t c = 0; c < k; ++c) {
                const double xv = x[size_t(t * ldx + c)];
                exact += w.w(i, c) * rounded_bf16(float(xv));
                mag += std::fabs(w.w(i, c) * xv);
                mag_rounded += std::fabs(w.w(i, c) * rounded_bf16(float(xv)));
              }
              ASSERT_NEAR(got[at], exact, kF32SumTol * mag_rounded + 1e-6) << "t " << t << " row " << i;
              ASSERT_NEAR(got[at], widened[at], (kBf16Round + 2 * kF32SumTol) * mag + 1e-6)
                  << "t " << t << " row " << i;
            }
          }
        }
      }
    }
  }
}

// The prefill GEMM on shapes with every tail (rows past a multiple of 12 and of 4, tokens past a multiple of
// 32, K odd and past a multiple of 16 and 32), from row 0 and row 4, the activations packed in two shares
// (two threads' work); y += only in [nt, rows) of a wider canvas.
TEST_P(Bf16KernelsAtLevel, GemmIsTheBf16ProductWithinTheRoundingOfTheActivations) {
  const cpu::KernelTable* K = table_;
  if (K->bgemm == nullptr) {
    EXPECT_EQ(K->gemv_bf16_rows, nullptr);
    EXPECT_EQ(K->bgemm_pack_x, nullptr);
    GTEST_SKIP() << no_bf16();
  }
  ASSERT_NE(K->bgemm_pack_x, nullptr);
  // K 1601 and 3000 (13 rows): columns in 3 and 4 blocks, and at 3000, 330 tokens in two groups (bgemm
  // runs fgemm's loops)
  for (int64_t k : {1, 7, 16, 17, 48, 100, 1601, 3000}) {
    for (int64_t n : {1, 5, 12, 13, 29}) {
      if (k > 100 && n != 13) continue;
      const PackedBf16Matrix w(n + 4, k, uint32_t(n * 100 + k));
      for (int64_t nt : {1, 31, 32, 33, 70, 330}) {
        if ((nt == 330) != (k == 3000) && nt != 70) continue;
        const int64_t ldx = k + 5, ldy = n + 2;
        const std::vector<float> x = random_values(size_t(nt * ldx), uint32_t(k * 7 + nt));
        const std::vector<float> init = random_values(size_t(nt * ldy), uint32_t(nt + 11));
        std::vector<uint16_t> buf(size_t(cpu::bgemm_packed_halves(nt, k)) + 32);
        uint16_t* xp = buf.data() + (32 - (reinterpret_cast<uintptr_t>(buf.data()) / 2) % 32) % 32;
        K->bgemm_pack_x(xp, x.data(), ldx, nt, k, 0, std::min<int64_t>(nt, 32));
        if (nt > 32) K->bgemm_pack_x(xp, x.data(), ldx, nt, k, 32, nt);
        // The F32 path at this level: the rows widened, then fgemm (AVX-512) or the double product.
        std::vector<float> wf(size_t((n + 4) * k));
        K->widen_packed_rows(wf.data(), k, w.packed.data(), w.kp, 0, n + 4, k, true);
        std::vector<float> fbuf(size_t(cpu::fgemm_packed_floats(nt, k)) + 16);
        float* fxp = fbuf.data() + (16 - (reinterpret_cast<uintptr_t>(fbuf.data()) / 4) % 16) % 16;
        if (K->fgemm != nullptr) K->fgemm_pack_x(fxp, x.data(), ldx, nt, k, 0, nt);
        for (int64_t r0 : {int64_t(0), int64_t(4)}) {
          SCOPED_TRACE("k=" + std::to_string(k) + " n=" + std::to_string(n) + " nt=" + std::to_string(nt) +
                       " r0=" + std::to_string(r0));
          std::vector<float> got = init, widened = init;
          K->bgemm(got.data(), ldy, w.packed.data(), w.kp, r0, n, xp, nt, k);
          if (K->fgemm != nullptr) K->fgemm(widened.data(), ldy, wf.data() + r0 * k, k, n, fxp, nt, k);
          for (int64_t t = 0; t < nt; ++t) {
            for (int64_t i = 0; i < ldy; ++i) {
              const size_t at = size_t(t * ldy + i);
              if (i >= n) {
                ASSERT_EQ(got[at], init[at]) << "t " << t << " column " << i << " written";
                continue;
              }
              double exact = init[at], f32 = init[at], mag = 0.0, mag_rounded = 0.0;
              for (int64_t c = 0; c < k; ++c) {
                const double xv = x[size_t(t * ldx + c)], wv = w.w(r0 + i, c);
                exact += wv * rounded_bf16(float(xv));
                f32 += wv * xv;
                mag += std::fabs(wv * xv);
                mag_rounded += std::fabs(wv * rounded_bf16(float(xv)));
              }
              ASSERT_NEAR(got[at], exact, kF32SumTol * mag_rounded + 1e-6) << "t " << t << " row " << i;
              const double ref = K->fgemm != nullptr ? double(widened[at]) : f32;
              ASSERT_NEAR(got[at], ref, (kBf16Round + 2 * kF32SumTol) * mag + 1e-6)
                  << "t " << t << " row " << i;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace minigpt
