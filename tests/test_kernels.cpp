// The CPU kernels against plain loops, at sizes that are not multiples of the vector width.
#include <cmath>
#include <limits>
#include <random>

#include "cpu/kernels.h"
#include "minigpt/backend.h"
#include "minigpt/tensor.h"
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
  for (uint16_t h : {uint16_t(0x3c00), uint16_t(0x3c01), uint16_t(0x0001), uint16_t(0x03ff), uint16_t(0x7bfe)}) {
    const double lo = f16_to_f32(h), hi = f16_to_f32(uint16_t(h + 1));
    const float mid = float((lo + hi) / 2);
    EXPECT_EQ(f32_to_f16(mid), (h % 2 == 0) ? h : uint16_t(h + 1)) << h;
    EXPECT_EQ(f32_to_f16(std::nextafter(mid, 1e9f)), uint16_t(h + 1)) << h;
    EXPECT_EQ(f32_to_f16(std::nextafter(mid, -1e9f)), h) << h;
  }
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);  // overflow -> inf
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), f32_to_bf16(1.0f));  // tie -> even
}

// |got - want| <= 1e-5 * sum |w x| + 1e-6: F32 accumulation in another order than the double reference.
void expect_gemv_close(const std::vector<float>& got, const std::vector<float>& want, const std::vector<float>& scale) {
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * scale[i] + 1e-6) << "row " << i;
}

TEST(Kernels, GemvAtOddSizes) {
  for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 5}, {5, 17}, {7, 33}, {13, 100}, {9, 768}, {6, 3071}}) {
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
      // gemv_inout_f32 computes k outputs from n inputs when handed the same [n, ldw] matrix as [K=n, N=k].
      auto run_t = [&](auto kernel, auto ref, const float* w) {
        const auto xt = randn(size_t(n), 11);
        const auto init_t = randn(size_t(k), 8);
        std::vector<float> got = init_t, want = init_t, scale_t(static_cast<size_t>(k));
        for (int64_t j = 0; j < k; ++j)
          for (int64_t i = 0; i < n; ++i) scale_t[size_t(j)] += std::fabs(w[i * ldw + j] * xt[size_t(i)]);
        kernel(got.data(), w, ldw, xt.data(), k, n, acc);
        ref(want.data(), w, ldw, xt.data(), k, n, acc);
        expect_gemv_close(got, want, scale_t);
      };
      SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k) + " acc=" + std::to_string(acc));
      run(cpu::gemv_f32, cpu::reference::gemv_f32, wf.data());
      // The [K, N] layout: the same numbers read as W^T (k rows of ldw >= n).
      if (k + 3 >= n) {
        run_t(cpu::gemv_inout_f32, cpu::reference::gemv_inout_f32, wf.data());
      }
      // The packed 16-bit kernel against the plain loop on the unpacked matrix, all rows and a later block.
      for (bool bf16 : {true, false}) {
        const auto& w16 = bf16 ? wb : wh;
        const int64_t kp = cpu::Packed16::padded_cols(k);
        std::vector<uint16_t> packed(size_t(cpu::Packed16::padded_rows(n) * kp), 0);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < k; ++c) packed[size_t(cpu::Packed16::offset(r, c, kp))] = w16[size_t(r * ldw + c)];
        for (int64_t r0 : {int64_t(0), n > 4 ? int64_t(4) : int64_t(0)}) {
          std::vector<float> got = init, want = init;
          cpu::gemv_packed16(got.data() + r0, packed.data(), kp, x.data(), r0, n - r0, k, acc, bf16);
          (bf16 ? cpu::reference::gemv_bf16 : cpu::reference::gemv_f16)(want.data() + r0, w16.data() + r0 * ldw, ldw,
                                                                         x.data(), n - r0, k, acc);
          expect_gemv_close(got, want, scale);
        }
        // Widening packed rows gives the stored values back.
        std::vector<float> rows(size_t(n * k));
        cpu::widen_packed_rows(rows.data(), k, packed.data(), kp, 0, n, k, bf16);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < k; ++c) {
            const uint16_t v = w16[size_t(r * ldw + c)];
            ASSERT_EQ(rows[size_t(r * k + c)], bf16 ? bf16_to_f32(v) : f16_to_f32(v));
          }
      }
    }
  }
}

TEST(Kernels, WidenRowsIsExact) {
  const int64_t rows = 3, cols = 21, ld = 25;
  const auto f = randn(size_t(rows * ld), 3, 10.0f);
  std::vector<uint16_t> b(f.size()), h(f.size());
  for (size_t i = 0; i < f.size(); ++i) b[i] = f32_to_bf16(f[i]), h[i] = f32_to_f16(f[i]);
  std::vector<float> out(static_cast<size_t>(rows * cols));
  cpu::widen_rows(out.data(), cols, b.data(), ld, rows, cols, true);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(out[size_t(r * cols + c)], bf16_to_f32(b[size_t(r * ld + c)]));
  cpu::widen_rows(out.data(), cols, h.data(), ld, rows, cols, false);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(out[size_t(r * cols + c)], f16_to_f32(h[size_t(r * ld + c)]));
}

TEST(Kernels, GeluTanhMatchesStdTanh) {
  // Everywhere from tiny to huge, both signs, zero, and an odd count (vector body + scalar tail).
  std::vector<float> x = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-4f, -3e-3f, 0.06f, -0.07f, 30.0f, -30.0f, 200.0f, -200.0f};
  for (int i = -2000; i <= 2000; ++i) x.push_back(float(i) * 0.00437f);
  const auto r = randn(1001, 5, 3.0f);
  x.insert(x.end(), r.begin(), r.end());
  std::vector<float> got = x, want = x;
  cpu::gelu_tanh(got.data(), int64_t(got.size()));
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
  std::printf("[ measured ] gelu_tanh: max |vector - std::tanh version| = %.3g\n", worst);
}

// The CPU backend's store_kv + attention (blockwise, online softmax) against a direct softmax over all scores:
// decode steps, and prefills across several 32-query tiles and 128-key blocks with partial ones at every edge.
TEST(Kernels, AttentionMatchesDirectSoftmax) {
  auto be = make_cpu_backend(2);
  for (auto [T, pos0, H, D] : std::vector<std::array<int64_t, 4>>{
           {1, 0, 1, 1}, {5, 3, 3, 7}, {1, 150, 2, 64}, {4, 9, 2, 16},  // decode and short steps
           {1, 1500, 4, 16}, {1, 30, 2, 40}, {1, 10, 1, 72},           // one query: > 1024 keys, D = 32 + 8, 64 + 8
           {70, 0, 2, 5},                                              // prefill, D % 8 != 0: the 4-query path
           {9, 5, 1, 8}, {33, 0, 3, 16}, {37, 11, 2, 24},              // tiles: partial groups, D = 16 k + 8
           {38, 1, 2, 8}, {40, 0, 1, 16}, {41, 7, 2, 8},               // a last group of every size
           {300, 200, 2, 64}}) {
    const int64_t C = H * D, S = pos0 + T;
    const auto q = randn(size_t(T * C), 1), k = randn(size_t(S * C), 2), v = randn(size_t(S * C), 3);
    std::vector<float> out(static_cast<size_t>(T * C)), kc(static_cast<size_t>(S * C)), vc(static_cast<size_t>(S * C));
    const float scale = 0.7f;
    auto view = [](const std::vector<float>& v, int64_t rows, int64_t cols) {
      return make_tensor(const_cast<float*>(v.data()), DType::F32, Device::Host, rows, cols);
    };
    // Rows 0 .. pos0-1 as earlier steps stored them, then this step's T rows; then attention.
    if (pos0 > 0) be->store_kv(view(kc, S, C), view(vc, S, C), view(k, pos0, C), view(v, pos0, C), 0, H);
    be->store_kv(view(kc, S, C), view(vc, S, C), view(k, S, C).row_slice(pos0, T), view(v, S, C).row_slice(pos0, T), pos0, H);
    be->attention(view(out, T, C), view(q, T, C), view(kc, S, C), view(vc, S, C), pos0, H, scale);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t n = pos0 + t + 1;
        std::vector<double> s(static_cast<size_t>(n));
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          double d = 0;
          for (int64_t i = 0; i < D; ++i) d += double(q[size_t(t * C + h * D + i)]) * k[size_t(j * C + h * D + i)];
          s[size_t(j)] = scale * d;
          mx = std::max(mx, s[size_t(j)]);
        }
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (int64_t i = 0; i < D; ++i) {
          double o = 0;
          for (int64_t j = 0; j < n; ++j) o += s[size_t(j)] / sum * v[size_t(j * C + h * D + i)];
          ASSERT_NEAR(out[size_t(t * C + h * D + i)], o, 1e-5) << "T=" << T << " pos0=" << pos0 << " t=" << t << " h=" << h;
        }
      }
    }
  }
}

}  // namespace
}  // namespace minigpt
