#include "cpu/kernels.h"

#include <cmath>
#include <cstring>

#include "minigpt/tensor.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define MINIGPT_AVX2 1
#include <immintrin.h>
#endif

namespace minigpt::cpu {

namespace reference {
namespace {
template <typename Load>
void gemv(float* y, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate, Load load) {
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t j = 0; j < k; ++j) s += double(load(i * ldw + j)) * double(x[j]);
    y[i] = float(accumulate ? double(y[i]) + s : s);
  }
}
}  // namespace
void gemv_bf16(float* y, const uint16_t* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate) {
  gemv(y, ldw, x, n, k, accumulate, [&](int64_t i) { return bf16_to_f32(w[i]); });
}
void gemv_f16(float* y, const uint16_t* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate) {
  gemv(y, ldw, x, n, k, accumulate, [&](int64_t i) { return f16_to_f32(w[i]); });
}
void gemv_f32(float* y, const float* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate) {
  gemv(y, ldw, x, n, k, accumulate, [&](int64_t i) { return w[i]; });
}
void gemv_inout_f32(float* y, const float* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate) {
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t j = 0; j < k; ++j) s += double(w[j * ldw + i]) * double(x[j]);
    y[i] = float(accumulate ? double(y[i]) + s : s);
  }
}
void gelu_tanh(float* x, int64_t n) {
  const float c = std::sqrt(2.0f / float(M_PI));
  for (int64_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::tanh(c * (x[i] + 0.044715f * x[i] * x[i] * x[i])));
}
}  // namespace reference

namespace {

// Eight weights of each kind widened to F32.
struct LoadF32 {
  using T = float;
  static float scalar(const float* p) { return *p; }
#if MINIGPT_AVX2
  static __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
#endif
};
struct LoadBF16 {
  using T = uint16_t;
  static float scalar(const uint16_t* p) { return bf16_to_f32(*p); }
#if MINIGPT_AVX2
  // BF16 is the top half of an F32: zero-extend to 32 bits and shift into place.
  static __m256 load8(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  }
#endif
};
struct LoadF16 {
  using T = uint16_t;
  static float scalar(const uint16_t* p) { return f16_to_f32(*p); }
#if MINIGPT_AVX2
  static __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
#endif
};

#if MINIGPT_AVX2
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

// Four rows at a time, two vectors of k per step: eight independent FMA chains hide the FMA latency, and
// each load of x serves four rows of W.
template <typename L>
void gemv(float* y, const typename L::T* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate) {
  int64_t i = 0;
#if MINIGPT_AVX2
  const int64_t k16 = k / 16 * 16, k8 = k / 8 * 8;
  for (; i + 4 <= n; i += 4) {
    const typename L::T* w0 = w + i * ldw;
    const typename L::T* w1 = w0 + ldw;
    const typename L::T* w2 = w1 + ldw;
    const typename L::T* w3 = w2 + ldw;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    int64_t j = 0;
    for (; j < k16; j += 16) {
      const __m256 xa = _mm256_loadu_ps(x + j), xb = _mm256_loadu_ps(x + j + 8);
      a0 = _mm256_fmadd_ps(L::load8(w0 + j), xa, a0);
      a1 = _mm256_fmadd_ps(L::load8(w1 + j), xa, a1);
      a2 = _mm256_fmadd_ps(L::load8(w2 + j), xa, a2);
      a3 = _mm256_fmadd_ps(L::load8(w3 + j), xa, a3);
      b0 = _mm256_fmadd_ps(L::load8(w0 + j + 8), xb, b0);
      b1 = _mm256_fmadd_ps(L::load8(w1 + j + 8), xb, b1);
      b2 = _mm256_fmadd_ps(L::load8(w2 + j + 8), xb, b2);
      b3 = _mm256_fmadd_ps(L::load8(w3 + j + 8), xb, b3);
    }
    for (; j < k8; j += 8) {
      const __m256 xa = _mm256_loadu_ps(x + j);
      a0 = _mm256_fmadd_ps(L::load8(w0 + j), xa, a0);
      a1 = _mm256_fmadd_ps(L::load8(w1 + j), xa, a1);
      a2 = _mm256_fmadd_ps(L::load8(w2 + j), xa, a2);
      a3 = _mm256_fmadd_ps(L::load8(w3 + j), xa, a3);
    }
    float s[4] = {hsum(_mm256_add_ps(a0, b0)), hsum(_mm256_add_ps(a1, b1)), hsum(_mm256_add_ps(a2, b2)),
                  hsum(_mm256_add_ps(a3, b3))};
    for (; j < k; ++j) {
      s[0] += L::scalar(w0 + j) * x[j];
      s[1] += L::scalar(w1 + j) * x[j];
      s[2] += L::scalar(w2 + j) * x[j];
      s[3] += L::scalar(w3 + j) * x[j];
    }
    for (int r = 0; r < 4; ++r) y[i + r] = accumulate ? y[i + r] + s[r] : s[r];
  }
  for (; i < n; ++i) {
    const typename L::T* wr = w + i * ldw;
    __m256 a = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j < k8; j += 8) a = _mm256_fmadd_ps(L::load8(wr + j), _mm256_loadu_ps(x + j), a);
    float s = hsum(a);
    for (; j < k; ++j) s += L::scalar(wr + j) * x[j];
    y[i] = accumulate ? y[i] + s : s;
  }
#endif
  for (; i < n; ++i) {
    float s = 0.0f;
    for (int64_t j = 0; j < k; ++j) s += L::scalar(w + i * ldw + j) * x[j];
    y[i] = accumulate ? y[i] + s : s;
  }
}

}  // namespace

void gemv_bf16(float* y, const uint16_t* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate) {
  gemv<LoadBF16>(y, w, ldw, x, n, k, accumulate);
}
void gemv_f16(float* y, const uint16_t* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate) {
  gemv<LoadF16>(y, w, ldw, x, n, k, accumulate);
}
void gemv_f32(float* y, const float* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate) {
  gemv<LoadF32>(y, w, ldw, x, n, k, accumulate);
}

void gemv_inout_f32(float* y, const float* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate) {
  int64_t i = 0;
#if MINIGPT_AVX2
  // 64 columns at a time: eight accumulators, one broadcast of x[j] feeding eight FMAs per row.
  for (; i + 64 <= n; i += 64) {
    __m256 a[8];
    for (int r = 0; r < 8; ++r) a[r] = accumulate ? _mm256_loadu_ps(y + i + 8 * r) : _mm256_setzero_ps();
    const float* wc = w + i;
    for (int64_t j = 0; j < k; ++j) {
      const __m256 xj = _mm256_broadcast_ss(x + j);
      const float* row = wc + j * ldw;
      for (int r = 0; r < 8; ++r) a[r] = _mm256_fmadd_ps(_mm256_loadu_ps(row + 8 * r), xj, a[r]);
    }
    for (int r = 0; r < 8; ++r) _mm256_storeu_ps(y + i + 8 * r, a[r]);
  }
  for (; i + 8 <= n; i += 8) {
    __m256 a = accumulate ? _mm256_loadu_ps(y + i) : _mm256_setzero_ps();
    for (int64_t j = 0; j < k; ++j) a = _mm256_fmadd_ps(_mm256_loadu_ps(w + j * ldw + i), _mm256_broadcast_ss(x + j), a);
    _mm256_storeu_ps(y + i, a);
  }
#endif
  for (; i < n; ++i) {
    float s = accumulate ? y[i] : 0.0f;
    for (int64_t j = 0; j < k; ++j) s += w[j * ldw + i] * x[j];
    y[i] = s;
  }
}

void widen_rows(float* dst, int64_t ld_dst, const uint16_t* src, int64_t ld_src, int64_t rows, int64_t cols, bool is_bf16) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* s = src + r * ld_src;
    float* d = dst + r * ld_dst;
    int64_t c = 0;
#if MINIGPT_AVX2
    for (; c + 8 <= cols; c += 8) _mm256_storeu_ps(d + c, is_bf16 ? LoadBF16::load8(s + c) : LoadF16::load8(s + c));
#endif
    for (; c < cols; ++c) d[c] = is_bf16 ? bf16_to_f32(s[c]) : f16_to_f32(s[c]);
  }
}

#if MINIGPT_AVX2
namespace {
// exp(x) for x <= 0 (all tanh needs here): 2^(x log2 e) = 2^n 2^f with f in [-0.5, 0.5], 2^f from its
// degree-6 Taylor polynomial (relative error < 3e-7), 2^n built in the exponent bits; below -87 -> 0.
inline __m256 exp_neg(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 t = _mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f));
  const __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(t, n);
  __m256 p = _mm256_set1_ps(1.5403530393381609e-4f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428443e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.6181291076284772e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5504108664821580e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022650695910071e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.9314718055994531e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
}  // namespace
#endif

void gelu_tanh(float* x, int64_t n) {
  const float c = std::sqrt(2.0f / float(M_PI));
  int64_t i = 0;
#if MINIGPT_AVX2
  // tanh(u) = sign(u) (1 - e) / (1 + e), e = exp(-2|u|): no overflow, and for |u| < 1/16, where that
  // quotient loses relative accuracy, the series u - u^3/3 + 2u^5/15 - 17u^7/315.
  const __m256 vc = _mm256_set1_ps(c), k3 = _mm256_set1_ps(0.044715f), half = _mm256_set1_ps(0.5f);
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 u = _mm256_mul_ps(vc, _mm256_fmadd_ps(_mm256_mul_ps(k3, v), _mm256_mul_ps(v, v), v));
    const __m256 au = _mm256_andnot_ps(sign, u);
    const __m256 e = exp_neg(_mm256_mul_ps(_mm256_set1_ps(-2.0f), au));
    const __m256 quotient = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
    const __m256 u2 = _mm256_mul_ps(au, au);
    __m256 poly = _mm256_fmadd_ps(u2, _mm256_set1_ps(-17.0f / 315.0f), _mm256_set1_ps(2.0f / 15.0f));
    poly = _mm256_fmadd_ps(u2, poly, _mm256_set1_ps(-1.0f / 3.0f));
    const __m256 series = _mm256_fmadd_ps(_mm256_mul_ps(au, u2), poly, au);
    __m256 th = _mm256_blendv_ps(quotient, series, _mm256_cmp_ps(au, _mm256_set1_ps(0.0625f), _CMP_LT_OQ));
    th = _mm256_or_ps(th, _mm256_and_ps(u, sign));
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, th)));
  }
#endif
  for (; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::tanh(c * (x[i] + 0.044715f * x[i] * x[i] * x[i])));
}

}  // namespace minigpt::cpu
