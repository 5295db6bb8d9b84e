// The quantized-weight kernels (src/cpu/kernels_quant_gemv.inc, kernels_quant_gemm.inc) at every kernel
// level this machine runs, against the dequantizer (src/quant/dequant.cpp, itself checked bit for bit
// against the gguf package) and a double-precision dot product.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cpu/kernels.h"
#include "minigpt/error.h"
#include "minigpt/tensor.h"
#include "quant/quant.h"

namespace minigpt {
namespace {

struct Kind {
  cpu::QKind kind;
  GgmlType type;
  int64_t block;
  int64_t bytes;
  const char* name;
};
const Kind kKinds[] = {
    {cpu::QKind::Q8_0, GgmlType::Q8_0, 32, 34, "Q8_0"},
    {cpu::QKind::Q4_0, GgmlType::Q4_0, 32, 18, "Q4_0"},
    {cpu::QKind::Q4_K, GgmlType::Q4_K, 256, 144, "Q4_K"},
    {cpu::QKind::Q5_K, GgmlType::Q5_K, 256, 176, "Q5_K"},
    {cpu::QKind::Q6_K, GgmlType::Q6_K, 256, 210, "Q6_K"},
    {cpu::QKind::Q5_0, GgmlType::Q5_0, 32, 22, "Q5_0"},
    {cpu::QKind::Q5_1, GgmlType::Q5_1, 32, 24, "Q5_1"},
    {cpu::QKind::Q4_1, GgmlType::Q4_1, 32, 20, "Q4_1"},
};

void put_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// n rows of k values of random blocks: every bit pattern of the quantized values is a valid block, so the
// bytes are random except the F16 scales, set to sizes like a real model's (the sign of d varies too).
std::vector<uint8_t> random_blocks(const Kind& t, int64_t n, int64_t k, std::mt19937& rng) {
  std::vector<uint8_t> w(size_t(n * (k / t.block) * t.bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f);
  for (auto& b : w) b = uint8_t(byte(rng));
  for (size_t off = 0; off < w.size(); off += size_t(t.bytes)) {
    uint8_t* b = w.data() + off;
    const float sign = byte(rng) % 2 ? 1.0f : -1.0f;
    switch (t.kind) {
      case cpu::QKind::Q8_0:
      case cpu::QKind::Q4_0:
      case cpu::QKind::Q5_0:
        put_half(b, sign * scale(rng));
        break;
      case cpu::QKind::Q5_1:
      case cpu::QKind::Q4_1:  // d and the min m (of either sign, as a row's least value is)
        put_half(b, scale(rng) / 2);
        put_half(b + 2, -sign * scale(rng) * 8);
        break;
      case cpu::QKind::Q4_K:
      case cpu::QKind::Q5_K:
        put_half(b, scale(rng) / 8);
        put_half(b + 2, scale(rng) / 8);
        break;
      case cpu::QKind::Q6_K:
        put_half(b + 208, sign * scale(rng) / 16);
        break;
    }
  }
  return w;
}

// Quantized activations of x, one row, as the level makes them: int8 per `block`, or int16 per 32.
struct Acts {
  std::vector<int8_t> q;  // over-allocated for 64-byte alignment
  std::vector<int16_t> q16;
  std::vector<float> d;
  std::vector<int16_t> s;
  int8_t* qa = nullptr;
  int16_t* q16a = nullptr;
  int64_t block;
  bool wide;
  Acts(const cpu::KernelTable& kt, const float* x, int64_t k, int64_t block_ = 32, bool wide_ = false)
      : q(size_t(k + 64)),
        q16(size_t(k + 32)),
        d(size_t(k / block_)),
        s(size_t(k / 16)),
        block(block_),
        wide(wide_) {
    qa = q.data() + (64 - reinterpret_cast<uintptr_t>(q.data()) % 64) % 64;
    q16a = q16.data() + (64 - reinterpret_cast<uintptr_t>(q16.data()) % 64) % 64 / 2;
    if (wide)
      kt.quantize_acts16(x, k, q16a, d.data());
    else
      kt.quantize_acts(x, k, qa, d.data(), s.data(), block);
  }
  Acts(const cpu::KernelTable& kt, const float* x, int64_t k, cpu::QKind kind)
      : Acts(kt, x, k, cpu::act_block_size(kind), cpu::acts_int16(kind)) {}
  cpu::QAct view() const {
    return wide ? cpu::QAct{nullptr, d.data(), nullptr, q16a} : cpu::QAct{qa, d.data(), s.data(), nullptr};
  }
  float value(int64_t i) const { return float(wide ? q16a[i] : qa[i]) * d[size_t(i / block)]; }
};

// y (T + 1 rows of ldy) for a GEMM's output: random, and -0.0 outside the T x N results, where a kernel that
// adds even a zero (to a row of another thread's: a race) leaves +0.0.
std::vector<float> gemm_canvas(int64_t ldy, int64_t T, int64_t N, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> y(size_t((T + 1) * ldy));
  for (int64_t t = 0; t <= T; ++t)
    for (int64_t n = 0; n < ldy; ++n) y[size_t(t * ldy + n)] = t < T && n < N ? nd(rng) : -0.0f;
  return y;
}

// A GEMM's output: y (T + 1 rows of ldy) equals y0 plus sum over c < K of product(t, n, c) for t < T, n < N,
// within rel of the sum of the terms' magnitudes (and of y0's), and is y0, bit for bit, everywhere else.
// Returns false at the first difference (reported with `what`).
template <class Product>
bool gemm_output_is(const std::vector<float>& y, const std::vector<float>& y0, int64_t ldy, int64_t T,
                    int64_t N, int64_t K, double rel, Product product, const std::string& what) {
  for (int64_t t = 0; t <= T; ++t) {
    for (int64_t n = 0; n < ldy; ++n) {
      const size_t i = size_t(t * ldy + n);
      if (t == T || n >= N) {
        if (std::memcmp(&y[i], &y0[i], sizeof(float)) != 0) {
          ADD_FAILURE() << what << ": written outside: token " << t << " row " << n;
          return false;
        }
        continue;
      }
      double want = y0[i], mag = std::fabs(y0[i]);
      for (int64_t c = 0; c < K; ++c) {
        const double p = product(t, n, c);
        want += p;
        mag += std::fabs(p);
      }
      if (std::fabs(double(y[i]) - want) > rel * mag + 1e-6) {
        ADD_FAILURE() << what << ": token " << t << " row " << n << ": " << y[i] << " against " << want;
        return false;
      }
    }
  }
  return true;
}

class QuantKernelsAtLevel : public ::testing::TestWithParam<std::string> {
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
INSTANTIATE_TEST_SUITE_P(Levels, QuantKernelsAtLevel, ::testing::ValuesIn(cpu::all_levels()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The activation quantization: each value within half a step of its block's scale, the sums of 16 right,
// and the same bytes at every level (so a product does not depend on the CPU beyond F32 summation order).
TEST_P(QuantKernelsAtLevel, QuantizedActivationsAreWithinHalfAStepAndEqualAtEveryLevel) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t K = 512;
  std::vector<float> x(static_cast<size_t>(K));
  for (auto& v : x) v = nd(rng);
  for (int i = 0; i < 32; ++i) x[size_t(64 + i)] = 0.0f;  // an all-zero block of 32
  x[200] = 1e3f;                                          // one large value
  for (int64_t block : {32, 256}) {
    const Acts a(k(), x.data(), K, block);
    const Acts g(cpu::kernels_for("generic"), x.data(), K, block);
    for (int64_t i = 0; i < K; ++i) {
      EXPECT_LE(std::fabs(a.value(i) - x[size_t(i)]), a.d[size_t(i / block)] * 0.5f * (1 + 1e-5f) + 1e-30f)
          << i;
      EXPECT_EQ(a.qa[i], g.qa[i]) << i;
    }
    for (int64_t j = 0; j < K / 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += a.qa[16 * j + i];
      EXPECT_EQ(a.s[size_t(j)], sum) << j;
    }
    EXPECT_EQ(a.qa[200], 127);
    if (block == 32) {
      EXPECT_EQ(a.d[2], 0.0f);
    } else {
      EXPECT_EQ(a.d[0], 1e3f / 127.0f);  // the block of the large value: its scale
    }
  }
  // Q8_0's 16-bit activations (per 32): the same properties with 32767 steps (a step 127 / 32767 of the
  // int8 one's), the block's largest value at +-32767.
  const Acts a(k(), x.data(), K, 32, true);
  const Acts g(cpu::kernels_for("generic"), x.data(), K, 32, true);
  const Acts a8(k(), x.data(), K, 32);
  for (int64_t i = 0; i < K; ++i) {
    EXPECT_LE(std::fabs(a.value(i) - x[size_t(i)]), a.d[size_t(i / 32)] * 0.5f * (1 + 1e-5f) + 1e-30f) << i;
    EXPECT_EQ(a.q16a[i], g.q16a[i]) << i;
  }
  EXPECT_EQ(a.q16a[200], 32767);
  EXPECT_EQ(a.d[2], 0.0f);
  EXPECT_EQ(a.d[6], 1e3f / 32767.0f);
  for (int64_t j = 0; j < K / 32; ++j) {
    int16_t top = 0;
    for (int i = 0; i < 32; ++i) top = std::max<int16_t>(top, int16_t(std::abs(a.q16a[32 * j + i])));
    EXPECT_EQ(top, j == 2 ? 0 : 32767) << "block " << j;
    if (j != 2) {
      EXPECT_NEAR(a.d[size_t(j)] / a8.d[size_t(j)], 127.0 / 32767.0, 1e-6) << "block " << j;
    }
  }
}

// Every kind, 1..9 rows (the 4-row groups and the rows left over), 1 and 3 rows of activations, K of one
// block and several: y = the double dot of the dequantized weights with the dequantized activations, within
// 1e-5 of sum |w x| (F32 accumulation in another order), plus the accumulate form adding to y.
TEST_P(QuantKernelsAtLevel, GemvEqualsTheDequantizedProduct) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Kind& t : kKinds) {
    for (int64_t K : {t.block, 3 * t.block, t.block == 32 ? int64_t(768) : int64_t(1024)}) {
      for (int64_t N : {1, 3, 4, 5, 9}) {
        const std::vector<uint8_t> w = random_blocks(t, N, K, rng);
        const int64_t nb = K / t.block;
        std::vector<float> wf(size_t(N * K));
        dequantize(t.type, w.data(), wf.data(), N * K);
        // The kernels' layout, and back: gathering each row gives the file's bytes again.
        std::vector<uint8_t> wi(size_t(cpu::QuantInterleave::padded_rows(N) * nb * t.bytes));
        cpu::interleave_quant_rows(wi.data(), w.data(), N, nb, t.bytes, cpu::quant_layout(t.kind));
        for (int64_t r = 0; r < N; ++r) {
          std::vector<uint8_t> row(size_t(nb * t.bytes));
          cpu::gather_quant_row(row.data(), wi.data(), r, nb, t.bytes, cpu::quant_layout(t.kind));
          ASSERT_EQ(std::memcmp(row.data(), w.data() + r * nb * t.bytes, row.size()), 0) << r;
        }
        for (int64_t nx : {1, 3}) {
          std::vector<std::vector<float>> xs(static_cast<size_t>(nx),
                                             std::vector<float>(static_cast<size_t>(K)));
          std::vector<Acts> acts;
          std::vector<cpu::QAct> views;
          for (auto& x : xs) {
            for (auto& v : x) v = nd(rng);
            acts.emplace_back(k(), x.data(), K, t.kind);
          }
          for (const auto& a : acts) views.push_back(a.view());
          const int64_t ldy = N + 2;
          std::vector<float> y(size_t(nx * ldy), 0.5f), y0 = y;
          k().gemv_quant(t.kind, y.data(), ldy, wi.data(), 0, views.data(), nx, N, K, false, 0);
          std::vector<float> ya = y0;
          k().gemv_quant(t.kind, ya.data(), ldy, wi.data(), 0, views.data(), nx, N, K, true,
                         cpu::quant_prefetch_bytes());
          for (int64_t s = 0; s < nx; ++s) {
            for (int64_t i = 0; i < N; ++i) {
              double want = 0, mag = 0;
              for (int64_t c = 0; c < K; ++c) {
                const double p = double(wf[size_t(i * K + c)]) * double(acts[size_t(s)].value(c));
                want += p;
                mag += std::fabs(p);
              }
              const double tol = 1e-5 * mag + 1e-6;
              EXPECT_NEAR(y[size_t(s * ldy + i)], want, tol)
                  << t.name << " K " << K << " N " << N << " row " << i;
              EXPECT_NEAR(ya[size_t(s * ldy + i)], 0.5 + want, tol) << t.name << " accumulate";
            }
            // Nothing written past the N outputs of a row.
            EXPECT_EQ(y[size_t(s * ldy + N)], 0.5f);
            EXPECT_EQ(y[size_t(s * ldy + N + 1)], 0.5f);
          }
          // Rows from r0 = 4 on (a thread's share of the rows).
          if (N > 4) {
            std::vector<float> yr(size_t(nx * ldy), 0.0f);
            k().gemv_quant(t.kind, yr.data(), ldy, wi.data(), 4, views.data(), nx, N - 4, K, false, 1024);
            for (int64_t s = 0; s < nx; ++s)
              for (int64_t i = 4; i < N; ++i)
                EXPECT_EQ(yr[size_t(s * ldy + i - 4)], y[size_t(s * ldy + i)]) << i;
          }
        }
      }
    }
  }
}

// The F32 GEMM of prefill (cpu::fgemm, AVX-512 levels only): y += W x for every token, against the product
// in double, on shapes with every tail (rows past a multiple of 12 and of 4, tokens past a multiple of 32,
// odd K), leading dimensions wider than the data, and nothing written outside [nt, rows).
TEST_P(QuantKernelsAtLevel, F32GemmEqualsTheDoubleProduct) {
  const bool avx512 = GetParam() == "avx512" || GetParam() == "avx512bf16" || GetParam() == "amx";
  if (!avx512) {
    EXPECT_EQ(k().fgemm, nullptr) << GetParam();
    GTEST_SKIP() << GetParam() << " has no F32 GEMM (it needs AVX-512): prefill runs OpenBLAS's sgemm there";
  }
  ASSERT_NE(k().fgemm, nullptr) << GetParam();
  std::mt19937 rng(29);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  // K 1600 and 3000: columns in 3 and 4 blocks, and at 3000 tokens in groups of 160 (fgemm's loops)
  const std::vector<std::array<int64_t, 3>> extra = {{1600, 13, 70}, {3000, 17, 200}};
  std::vector<std::array<int64_t, 3>> shapes;
  for (int64_t K : {1, 7, 64, 100})
    for (int64_t N : {1, 5, 12, 13, 29})
      for (int64_t T : {1, 31, 32, 33, 70}) shapes.push_back({K, N, T});
  shapes.insert(shapes.end(), extra.begin(), extra.end());
  for (const auto& [K, N, T] : shapes) {
    {
      {
        const int64_t ldw = K + 3, ldx = K + 5, ldy = N + 2;
        std::vector<float> w(size_t(N * ldw)), x(size_t(T * ldx)), y = gemm_canvas(ldy, T, N, rng);
        for (auto& v : w) v = nd(rng);
        for (auto& v : x) v = nd(rng);
        const std::vector<float> y0 = y;
        std::vector<float> buf(size_t(cpu::fgemm_packed_floats(T, K)) + 16);
        float* xp = buf.data() + (16 - (reinterpret_cast<uintptr_t>(buf.data()) / 4) % 16) % 16;
        cpu::fgemm_pack_x(xp, x.data(), ldx, T, K, 0, T);
        k().fgemm(y.data(), ldy, w.data(), ldw, N, xp, T, K);
        // F32 sums of up to 3000 terms: 2e-6 of the terms' magnitude is far above their rounding (~sqrt(K)
        // x 6e-8 of it for random signs) and far below a missing or doubled term
        ASSERT_TRUE(gemm_output_is(
            y, y0, ldy, T, N, K, 2e-6,
            [&](int64_t t, int64_t n, int64_t c) {
              return double(w[size_t(n * ldw + c)]) * x[size_t(t * ldx + c)];
            },
            "K " + std::to_string(K) + " N " + std::to_string(N) + " T " + std::to_string(T)));
      }
    }
  }
}

// Q8_0's 16-bit GEMM of prefill (cpu::q8gemm, VNNI only): panels of 1..8 rows from a first row of 0 or 4,
// 1..70 tokens (a block of 32 and the rest), K of one block and several, accumulating into y and writing it
// alone: y (+)= the double dot of the dequantized weights with the activations as the GEMV quantizes them
// (quantize_acts16), within 1e-5 of sum |w x|; nothing written past the rows or tokens.
TEST_P(QuantKernelsAtLevel, Q8GemmEqualsTheDequantizedProduct) {
  if (GetParam() != "avx512bf16" && GetParam() != "amx") {
    EXPECT_EQ(k().q8gemm, nullptr) << GetParam();
    EXPECT_EQ(k().q8gemm_pack_x, nullptr) << GetParam();
    EXPECT_EQ(k().q8gemm_pack_w, nullptr) << GetParam();
    GTEST_SKIP() << GetParam()
                 << " has no Q8_0 GEMM (it needs AVX-512 VNNI): Q8_0 prefill widens to F32 there";
  }
  ASSERT_NE(k().q8gemm, nullptr);
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const Kind& t = kKinds[0];
  ASSERT_EQ(t.kind, cpu::QKind::Q8_0);
  for (int64_t K : {int64_t(32), int64_t(96), int64_t(768)}) {
    const int64_t N = 13, nb = K / 32;
    const std::vector<uint8_t> w = random_blocks(t, N, K, rng);
    std::vector<float> wf(size_t(N * K));
    dequantize(t.type, w.data(), wf.data(), N * K);
    std::vector<uint8_t> wi(size_t(cpu::QuantInterleave::padded_rows(N) * nb * t.bytes));
    cpu::interleave_quant_rows(wi.data(), w.data(), N, nb, t.bytes, cpu::quant_layout(t.kind));
    for (int64_t T : {1, 5, 32, 33, 70}) {
      const int64_t ldx = K + 3;
      std::vector<float> x(size_t(T * ldx));
      for (auto& v : x) v = nd(rng);
      std::vector<uint8_t> xbuf(size_t(cpu::q8gemm_x_bytes(T, K)) + 64);
      uint8_t* xp = xbuf.data() + (64 - reinterpret_cast<uintptr_t>(xbuf.data()) % 64) % 64;
      k().q8gemm_pack_x(xp, x.data(), ldx, T, K, 0, std::min<int64_t>(T, 32));
      if (T > 32) k().q8gemm_pack_x(xp, x.data(), ldx, T, K, 32, T);  // a second thread's share
      std::vector<Acts> acts;
      for (int64_t s = 0; s < T; ++s) acts.emplace_back(k(), x.data() + s * ldx, K, t.kind);
      std::vector<uint8_t> pbuf(size_t(cpu::q8gemm_panel_bytes(K)) + 64);
      uint8_t* panel = pbuf.data() + (64 - reinterpret_cast<uintptr_t>(pbuf.data()) % 64) % 64;
      for (const auto& [r0, rows] : {std::pair<int64_t, int64_t>{0, 8}, {4, 8}, {8, 5}, {0, 1}, {4, 3}}) {
        for (const bool accumulate : {true, false}) {
          const int64_t ldy = rows + 2;
          std::vector<float> y = gemm_canvas(ldy, T, rows, rng);
          // Not accumulating, the product alone: what the canvas held where it writes is not added.
          std::vector<float> y0 = y;
          if (!accumulate)
            for (int64_t s = 0; s < T; ++s) std::fill_n(y0.begin() + s * ldy, rows, 0.0f);
          k().q8gemm_pack_w(panel, wi.data(), r0, rows, K);
          k().q8gemm(y.data(), ldy, panel, xp, T, rows, K, accumulate);
          ASSERT_TRUE(gemm_output_is(
              y, y0, ldy, T, rows, K, 1e-5,
              [&](int64_t t, int64_t n, int64_t c) {
                return double(wf[size_t((r0 + n) * K + c)]) * double(acts[size_t(t)].value(c));
              },
              "K " + std::to_string(K) + " T " + std::to_string(T) + " r0 " + std::to_string(r0) + " rows " +
                  std::to_string(rows) + (accumulate ? " +=" : " =")));
        }
      }
    }
  }
}

// The int8 GEMM of prefill (where the level has it: VNNI, AVX-512, AVX2): every kind it takes, panels
// of 1..16 rows from any first row, 1..11 tokens (a tile of 8 and the rest), K of one file block and several:
// y (+)= the double dot of the dequantized weights with the activations as quantized per 32, within 1e-5 of
// sum |w x|.
TEST_P(QuantKernelsAtLevel, Int8GemmEqualsTheDequantizedProduct) {
  if (GetParam() != "generic") {
    EXPECT_EQ(k().qgemm_kinds, 0xFEu) << "every kind but Q8_0 (16-bit activations: cpu::acts_int16)";
  }
  if (k().qgemm == nullptr) {
    EXPECT_EQ(k().qgemm_kinds, 0u);
    GTEST_SKIP() << GetParam() << " has no int8 GEMM (it needs AVX2): quantized prefill widens to F32 there";
  }
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Kind& t : kKinds) {
    if (((k().qgemm_kinds >> int(t.kind)) & 1u) == 0) continue;  // not taken at this level
    for (int64_t K : {t.block, 3 * t.block}) {
      const int64_t N = 21, nb = K / t.block;
      const std::vector<uint8_t> w = random_blocks(t, N, K, rng);
      std::vector<float> wf(size_t(N * K));
      dequantize(t.type, w.data(), wf.data(), N * K);
      std::vector<uint8_t> wi(size_t(cpu::QuantInterleave::padded_rows(N) * nb * t.bytes));
      cpu::interleave_quant_rows(wi.data(), w.data(), N, nb, t.bytes, cpu::quant_layout(t.kind));
      for (int64_t T : {1, 3, 8, 11}) {
        // Activations: quantized per 32, offset to unsigned bytes, with dx and dx sum(xq) per block.
        std::vector<float> x(size_t(T * K)), xd(size_t(2 * T * (K / 32)));
        std::vector<uint8_t> xu(size_t(T * K));
        std::vector<double> xv(size_t(T * K));
        const int64_t nq = K / 32;
        for (auto& v : x) v = nd(rng);
        for (int64_t i = 0; i < T; ++i) {
          const Acts a(k(), x.data() + i * K, K, 32);
          for (int64_t c = 0; c < K; ++c) {
            xu[size_t(i * K + c)] = uint8_t(a.qa[c]) ^ 0x80u;
            xv[size_t(i * K + c)] = a.value(c);
          }
          for (int64_t b = 0; b < nq; ++b) {
            int sum = 0;
            for (int64_t c = 32 * b; c < 32 * b + 32; ++c) sum += a.qa[c];
            xd[size_t(i * nq + b)] = a.d[size_t(b)];
            xd[size_t(T * nq + i * nq + b)] = a.d[size_t(b)] * float(sum);
          }
        }
        for (const auto& [r0, rows] :
             std::vector<std::pair<int64_t, int64_t>>{{0, 16}, {0, 1}, {5, 16}, {16, 5}}) {
          std::vector<uint8_t> panel(size_t(cpu::qgemm_panel_bytes(K)));
          cpu::qgemm_pack(panel.data(), t.kind, wi.data(), r0, rows, K);
          const int64_t ldy = 19;
          std::vector<float> y = gemm_canvas(ldy, T, rows, rng);
          const std::vector<float> y0 = y;
          k().qgemm(t.kind, y.data(), ldy, panel.data(), xu.data(), K, xd.data(), xd.data() + T * nq, nq, T,
                    rows, K);
          EXPECT_TRUE(gemm_output_is(
              y, y0, ldy, T, rows, K, 1e-5,
              [&](int64_t i, int64_t r, int64_t c) {
                return double(wf[size_t((r0 + r) * K + c)]) * xv[size_t(i * K + c)];
              },
              std::string(t.name) + " K " + std::to_string(K) + " T " + std::to_string(T) + " rows " +
                  std::to_string(r0) + "+" + std::to_string(rows)));
        }
      }
    }
  }
}

}  // namespace
}  // namespace minigpt
