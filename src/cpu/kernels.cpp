#include "cpu/kernels.h"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

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

#if MINIGPT_AVX2
// Four rows of W against x, accumulated over [0, k8) in a (one vector per step).
template <typename L>
inline void rows4(__m256* a, const typename L::T* w0, int64_t ldw, const float* x, int64_t k8) {
  for (int64_t j = 0; j < k8; j += 8) {
    const __m256 xa = _mm256_loadu_ps(x + j);
    for (int r = 0; r < 4; ++r) a[r] = _mm256_fmadd_ps(L::load8(w0 + r * ldw + j), xa, a[r]);
  }
}

// y[i0 + r] (+)= the dot of row i0 + r with x, r < 4, from the vector sums a and the scalar tail [k8, k).
template <typename L>
inline void finish4(float* y, const __m256* a, const typename L::T* w0, int64_t ldw, const float* x, int64_t k8,
                    int64_t k, bool accumulate) {
  for (int r = 0; r < 4; ++r) {
    float s = hsum(a[r]);
    for (int64_t j = k8; j < k; ++j) s += L::scalar(w0 + r * ldw + j) * x[j];
    y[r] = accumulate ? y[r] + s : s;
  }
}
#endif

// Groups of four rows in pairs half the range apart: two sequential streams per thread keep more DRAM reads
// in flight than one, eight independent FMA chains hide the FMA latency, and each load of x serves 8 rows.
template <typename L>
void gemv(float* y, const typename L::T* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate) {
  int64_t i = 0;
#if MINIGPT_AVX2
  const int64_t k8 = k / 8 * 8, groups = n / 4, half = groups / 2;
  for (int64_t g = 0; g < half; ++g) {
    const typename L::T* p = w + 4 * g * ldw;
    const typename L::T* q = w + 4 * (g + half) * ldw;
    __m256 a[8];
    for (auto& v : a) v = _mm256_setzero_ps();
    for (int64_t j = 0; j < k8; j += 8) {
      const __m256 xa = _mm256_loadu_ps(x + j);
      for (int r = 0; r < 4; ++r) {
        a[r] = _mm256_fmadd_ps(L::load8(p + r * ldw + j), xa, a[r]);
        a[4 + r] = _mm256_fmadd_ps(L::load8(q + r * ldw + j), xa, a[4 + r]);
      }
    }
    finish4<L>(y + 4 * g, a, p, ldw, x, k8, k, accumulate);
    finish4<L>(y + 4 * (g + half), a + 4, q, ldw, x, k8, k, accumulate);
  }
  for (i = 8 * half; i + 4 <= n; i += 4) {  // the odd group out
    __m256 a[4];
    for (auto& v : a) v = _mm256_setzero_ps();
    rows4<L>(a, w + i * ldw, ldw, x, k8);
    finish4<L>(y + i, a, w + i * ldw, ldw, x, k8, k, accumulate);
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

void gemv_f32(float* y, const float* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate) {
  gemv<LoadF32>(y, w, ldw, x, n, k, accumulate);
}

void gemv_inout_f32(float* y, const float* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate) {
  if (!accumulate) std::memset(y, 0, size_t(n) * sizeof(float));
  int64_t j = 0;
#if MINIGPT_AVX2
  // Four rows of W per pass over y: each row is a long sequential stream (what the prefetchers like; a
  // column-block order would jump a whole row between 256-byte pieces), and y's load and store are
  // shared by four rows.
  for (; j + 4 <= k; j += 4) {
    const __m256 x0 = _mm256_broadcast_ss(x + j), x1 = _mm256_broadcast_ss(x + j + 1);
    const __m256 x2 = _mm256_broadcast_ss(x + j + 2), x3 = _mm256_broadcast_ss(x + j + 3);
    const float* r0 = w + j * ldw;
    const float* r1 = r0 + ldw;
    const float* r2 = r1 + ldw;
    const float* r3 = r2 + ldw;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      __m256 ya = _mm256_loadu_ps(y + i), yb = _mm256_loadu_ps(y + i + 8);
      ya = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + i), x0, ya);
      yb = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + i + 8), x0, yb);
      ya = _mm256_fmadd_ps(_mm256_loadu_ps(r1 + i), x1, ya);
      yb = _mm256_fmadd_ps(_mm256_loadu_ps(r1 + i + 8), x1, yb);
      ya = _mm256_fmadd_ps(_mm256_loadu_ps(r2 + i), x2, ya);
      yb = _mm256_fmadd_ps(_mm256_loadu_ps(r2 + i + 8), x2, yb);
      ya = _mm256_fmadd_ps(_mm256_loadu_ps(r3 + i), x3, ya);
      yb = _mm256_fmadd_ps(_mm256_loadu_ps(r3 + i + 8), x3, yb);
      _mm256_storeu_ps(y + i, ya);
      _mm256_storeu_ps(y + i + 8, yb);
    }
    for (; i < n; ++i) y[i] += r0[i] * x[j] + r1[i] * x[j + 1] + r2[i] * x[j + 2] + r3[i] * x[j + 3];
  }
#endif
  for (; j < k; ++j) {
    const float* r = w + j * ldw;
    for (int64_t i = 0; i < n; ++i) y[i] += r[i] * x[j];
  }
}

#if MINIGPT_AVX2
namespace {
// Rows [r0, r0 + n) of a packed matrix (r0 a multiple of 4), x already padded to 16 * chunks. Groups of 4
// rows are taken in pairs half the range apart: two sequential streams per thread keep more reads in flight
// than one (a core reads DRAM faster with several streams), and the pair shares each load of x.
template <typename L>
void packed16_rows(float* y, const uint16_t* w, int64_t chunks, const float* xp, int64_t r0, int64_t n, bool accumulate) {
  const int64_t groups = (n + 3) / 4, half = groups / 2;
  auto put = [&](int64_t g, const __m256* acc) {
    for (int r = 0; r < 4 && 4 * g + r < n; ++r) {
      const float v = hsum(acc[r]);
      y[4 * g + r] = accumulate ? y[4 * g + r] + v : v;
    }
  };
  const uint16_t* base = w + (r0 / 4) * chunks * 64;
  for (int64_t g = 0; g < half; ++g) {
    const uint16_t* p = base + g * chunks * 64;
    const uint16_t* q = base + (g + half) * chunks * 64;
    __m256 a[4], b[4];
    for (int r = 0; r < 4; ++r) a[r] = b[r] = _mm256_setzero_ps();
    for (int64_t c = 0; c < chunks; ++c, p += 64, q += 64) {
      const __m256 xa = _mm256_loadu_ps(xp + 16 * c), xb = _mm256_loadu_ps(xp + 16 * c + 8);
      for (int r = 0; r < 4; ++r) {
        a[r] = _mm256_fmadd_ps(L::load8(p + 16 * r), xa, a[r]);
        b[r] = _mm256_fmadd_ps(L::load8(q + 16 * r), xa, b[r]);
      }
      for (int r = 0; r < 4; ++r) {
        a[r] = _mm256_fmadd_ps(L::load8(p + 16 * r + 8), xb, a[r]);
        b[r] = _mm256_fmadd_ps(L::load8(q + 16 * r + 8), xb, b[r]);
      }
    }
    put(g, a);
    put(g + half, b);
  }
  for (int64_t g = 2 * half; g < groups; ++g) {  // the odd group out
    const uint16_t* p = base + g * chunks * 64;
    __m256 a[4], b[4];
    for (int r = 0; r < 4; ++r) a[r] = b[r] = _mm256_setzero_ps();
    for (int64_t c = 0; c < chunks; ++c, p += 64) {
      const __m256 xa = _mm256_loadu_ps(xp + 16 * c), xb = _mm256_loadu_ps(xp + 16 * c + 8);
      for (int r = 0; r < 4; ++r) {
        a[r] = _mm256_fmadd_ps(L::load8(p + 16 * r), xa, a[r]);
        b[r] = _mm256_fmadd_ps(L::load8(p + 16 * r + 8), xb, b[r]);
      }
    }
    for (int r = 0; r < 4; ++r) a[r] = _mm256_add_ps(a[r], b[r]);
    put(g, a);
  }
}
}  // namespace
#endif

void gemv_packed16(float* y, const uint16_t* w, int64_t kp, const float* x, int64_t r0, int64_t n, int64_t k,
                   bool accumulate, bool is_bf16) {
  // x padded with zeros to kp (the padding columns of W are zeros, but 0 * garbage could be NaN).
  thread_local std::vector<float> xpad;
  const float* xp = x;
  if (kp != k) {
    if (xpad.size() < size_t(kp)) xpad.resize(size_t(kp));
    std::memcpy(xpad.data(), x, size_t(k) * sizeof(float));
    std::fill(xpad.begin() + k, xpad.begin() + kp, 0.0f);
    xp = xpad.data();
  }
  const int64_t chunks = kp / 16;
#if MINIGPT_AVX2
  if (is_bf16) {
    packed16_rows<LoadBF16>(y, w, chunks, xp, r0, n, accumulate);
  } else {
    packed16_rows<LoadF16>(y, w, chunks, xp, r0, n, accumulate);
  }
#else
  for (int64_t i = 0; i < n; i += 4) {
    const uint16_t* blk = w + ((r0 + i) / 4) * chunks * 64;
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t c = 0; c < chunks; ++c, blk += 64) {
      for (int r = 0; r < 4; ++r) {
        for (int e = 0; e < 16; ++e) {
          const uint16_t v = blk[r * 16 + e];
          s[r] += (is_bf16 ? bf16_to_f32(v) : f16_to_f32(v)) * xp[16 * c + e];
        }
      }
    }
    for (int r = 0; r < 4 && i + r < n; ++r) y[i + r] = accumulate ? y[i + r] + s[r] : s[r];
  }
#endif
}

void widen_packed_rows(float* dst, int64_t ld_dst, const uint16_t* w, int64_t kp, int64_t r0, int64_t rows, int64_t k,
                       bool is_bf16) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t r = r0 + i;
    for (int64_t c = 0; c < k; c += 16) {
      widen_rows(dst + i * ld_dst + c, 16, w + Packed16::offset(r, c, kp), 16, 1, std::min<int64_t>(16, k - c), is_bf16);
    }
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

// One block of an online softmax over the scores s[0, n) (s 32-byte aligned): with m_new = max(m, max s),
// s = exp(s - m_new) in place; corr = exp(m - m_new), the factor for what was summed against the old
// maximum (0 on the first block, where m is -inf); m = m_new. Returns the sum of the new s.
inline float softmax_block(float* s, int64_t n, float& m, float& corr) {
  const int64_t n8 = n / 8 * 8;
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  for (int64_t j = 0; j < n8; j += 8) vmax = _mm256_max_ps(vmax, _mm256_load_ps(s + j));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float bm = *std::max_element(lanes, lanes + 8);
  for (int64_t j = n8; j < n; ++j) bm = std::max(bm, s[j]);
  const float m_new = std::max(m, bm);
  corr = std::exp(m - m_new);
  m = m_new;
  const __m256 vm = _mm256_set1_ps(m_new);
  __m256 vsum = _mm256_setzero_ps();
  for (int64_t j = 0; j < n8; j += 8) {
    const __m256 e = exp_neg(_mm256_sub_ps(_mm256_load_ps(s + j), vm));
    vsum = _mm256_add_ps(vsum, e);
    _mm256_store_ps(s + j, e);
  }
  _mm256_store_ps(lanes, vsum);
  float sum = 0.0f;
  for (float x : lanes) sum += x;
  for (int64_t j = n8; j < n; ++j) sum += (s[j] = std::exp(s[j] - m_new));
  return sum;
}
}  // namespace
#endif

#if MINIGPT_AVX2
namespace {
// o[0, 8 NV) = corr o[0, 8 NV) + sum_{j < n} p[j] v[j][0, 8 NV): the output columns in registers, one
// broadcast and NV FMAs per key, V read row after row.
template <int NV>
inline void pv_row(float* o, float corr, const float* p, const float* v, int64_t D, int64_t n) {
  __m256 acc[NV];
  const __m256 c = _mm256_set1_ps(corr);
  for (int i = 0; i < NV; ++i) acc[i] = _mm256_mul_ps(c, _mm256_loadu_ps(o + 8 * i));
  for (int64_t j = 0; j < n; ++j) {
    const __m256 pb = _mm256_broadcast_ss(p + j);
    for (int i = 0; i < NV; ++i) acc[i] = _mm256_fmadd_ps(pb, _mm256_loadu_ps(v + j * D + 8 * i), acc[i]);
  }
  for (int i = 0; i < NV; ++i) _mm256_storeu_ps(o + 8 * i, acc[i]);
}

// One query over its n visible keys (a decode step), D a multiple of 8. Blocks of 1024 keys, online softmax
// across blocks. Scores take four head dimensions (four rows of K^T, four sequential streams) per pass over
// the block, so the scores are loaded and stored once per four FMAs.
void attention_row(float* o, const float* q, int64_t n, const float* kt, const float* v, int64_t S, int64_t D,
                   float scale) {
  constexpr int64_t kB = 1024;
  alignas(32) float s[kB];
  float m = -INFINITY, l = 0.0f;
  std::memset(o, 0, size_t(D) * sizeof(float));
  for (int64_t j0 = 0; j0 < n; j0 += kB) {
    const int64_t nb = std::min(kB, n - j0), nb8 = nb / 8 * 8;
    for (int64_t d = 0; d < D; d += 4) {
      const float* k0 = kt + d * S + j0;
      const float* k1 = k0 + S;
      const float* k2 = k1 + S;
      const float* k3 = k2 + S;
      const float q0 = scale * q[d], q1 = scale * q[d + 1], q2 = scale * q[d + 2], q3 = scale * q[d + 3];
      const __m256 vq0 = _mm256_set1_ps(q0), vq1 = _mm256_set1_ps(q1), vq2 = _mm256_set1_ps(q2), vq3 = _mm256_set1_ps(q3);
      int64_t j = 0;
      for (; j < nb8; j += 8) {
        __m256 a = d == 0 ? _mm256_setzero_ps() : _mm256_load_ps(s + j);
        a = _mm256_fmadd_ps(vq0, _mm256_loadu_ps(k0 + j), a);
        a = _mm256_fmadd_ps(vq1, _mm256_loadu_ps(k1 + j), a);
        a = _mm256_fmadd_ps(vq2, _mm256_loadu_ps(k2 + j), a);
        a = _mm256_fmadd_ps(vq3, _mm256_loadu_ps(k3 + j), a);
        _mm256_store_ps(s + j, a);
      }
      for (; j < nb; ++j) s[j] = (d == 0 ? 0.0f : s[j]) + q0 * k0[j] + q1 * k1[j] + q2 * k2[j] + q3 * k3[j];
    }
    float corr;
    const float sum = softmax_block(s, nb, m, corr);
    l = l * corr + sum;
    const float* vb = v + j0 * D;
    int64_t e = 0;
    for (; e + 64 <= D; e += 64) pv_row<8>(o + e, corr, s, vb + e, D, nb);
    for (; e + 32 <= D; e += 32) pv_row<4>(o + e, corr, s, vb + e, D, nb);
    for (; e < D; e += 8) pv_row<1>(o + e, corr, s, vb + e, D, nb);
  }
  const float inv = 1.0f / l;
  for (int64_t e = 0; e < D; ++e) o[e] *= inv;
}
}  // namespace
#endif

void attention_block(float* o, int64_t ldo, const float* q, int64_t ldq, int64_t nq, int64_t p0, const float* kt,
                     const float* v, int64_t S, int64_t D, float scale) {
#if MINIGPT_AVX2
  if (nq == 1 && D % 8 == 0) {
    attention_row(o, q, p0 + 1, kt, v, S, D, scale);
    return;
  }
#endif
  constexpr int64_t kBlock = 512;  // keys per block: 4 x 512 scores = 8 KB, in L1
  alignas(32) float s[4][kBlock];
  float m[4], l[4];
  const int64_t n_max = p0 + nq;
  for (int64_t i = 0; i < nq; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
    std::memset(o + i * ldo, 0, size_t(D) * sizeof(float));
  }
  for (int64_t j0 = 0; j0 < n_max; j0 += kBlock) {
    const int64_t nb = std::min(kBlock, n_max - j0);
    for (int64_t i = 0; i < nq; ++i) std::memset(s[i], 0, size_t(nb) * sizeof(float));
    // scores: s[i][j] = sum_d q_i[d] kt[d][j0 + j], one row of kt per head dimension
    for (int64_t d = 0; d < D; ++d) {
      const float* krow = kt + d * S + j0;
      int64_t j = 0;
#if MINIGPT_AVX2
      __m256 qd[4];
      for (int64_t i = 0; i < nq; ++i) qd[i] = _mm256_set1_ps(q[i * ldq + d]);
      for (; j + 8 <= nb; j += 8) {
        const __m256 kv = _mm256_loadu_ps(krow + j);
        for (int64_t i = 0; i < nq; ++i) _mm256_store_ps(s[i] + j, _mm256_fmadd_ps(qd[i], kv, _mm256_load_ps(s[i] + j)));
      }
#endif
      for (; j < nb; ++j) {
        for (int64_t i = 0; i < nq; ++i) s[i][j] += q[i * ldq + d] * krow[j];
      }
    }
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t visible = std::min(nb, p0 + i + 1 - j0);  // causal: query i sees keys <= p0 + i
      if (visible <= 0) continue;
      float* si = s[i];
      float bm = -INFINITY;
      for (int64_t j = 0; j < visible; ++j) bm = std::max(bm, si[j] *= scale);
      const float m_new = std::max(m[i], bm);
      const float corr = std::exp(m[i] - m_new);  // 0 on the first block
      float* oi = o + i * ldo;
      if (corr != 1.0f) {
        l[i] *= corr;
        for (int64_t e = 0; e < D; ++e) oi[e] *= corr;
      }
      int64_t j = 0;
#if MINIGPT_AVX2
      const __m256 vm = _mm256_set1_ps(m_new);
      for (; j + 8 <= visible; j += 8) _mm256_store_ps(si + j, exp_neg(_mm256_sub_ps(_mm256_load_ps(si + j), vm)));
#endif
      for (; j < visible; ++j) si[j] = std::exp(si[j] - m_new);
      for (j = 0; j < visible; ++j) {
        const float p = si[j];
        l[i] += p;
        const float* vj = v + (j0 + j) * D;
        int64_t e = 0;
#if MINIGPT_AVX2
        const __m256 pv = _mm256_set1_ps(p);
        for (; e + 8 <= D; e += 8) _mm256_storeu_ps(oi + e, _mm256_fmadd_ps(pv, _mm256_loadu_ps(vj + e), _mm256_loadu_ps(oi + e)));
#endif
        for (; e < D; ++e) oi[e] += p * vj[e];
      }
      m[i] = m_new;
    }
  }
  for (int64_t i = 0; i < nq; ++i) {
    const float inv = 1.0f / l[i];
    for (int64_t e = 0; e < D; ++e) o[i * ldo + e] *= inv;
  }
}

#if MINIGPT_AVX2
namespace {
constexpr int64_t kTileQ = kPrefillTileQueries;  // queries per tile
constexpr int64_t kTileK = 128;                   // keys per block: 36 x 128 scores = 18 KB
// Queries per register block: 6 x 16 accumulators (12 registers) + 2 of K or V + 1 broadcast fill the 16
// AVX2 registers; with 4 queries the loads per FMA are 50% more and a head runs ~1.8x slower.
constexpr int64_t kGroup = 6;

// Lanes [0, n) set, for masked loads of a partial vector.
inline __m256i lane_mask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::clamp<int64_t>(n, 0, 8))), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// s[r][j] = scale * sum_d q[r][d] kt[d][j] for R queries and 16 keys, the keys from nk on not read (their
// scores are left 0). Eight accumulators in registers: one FMA per score and head dimension, no
// horizontal sums (K is stored transposed).
template <int R>
inline void score_tile(float* s, int64_t lds, const float* q, int64_t ldq, const float* kt, int64_t S, int64_t D,
                       int64_t nk, float scale) {
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  auto body = [&](auto load) {
    for (int64_t d = 0; d < D; ++d) {
      const __m256 k0 = load(kt + d * S, 0), k1 = load(kt + d * S + 8, 1);
      for (int r = 0; r < R; ++r) {
        const __m256 qb = _mm256_broadcast_ss(q + r * ldq + d);
        acc[r][0] = _mm256_fmadd_ps(qb, k0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(qb, k1, acc[r][1]);
      }
    }
  };
  if (nk >= 16) {
    body([](const float* p, int) { return _mm256_loadu_ps(p); });
  } else {
    const __m256i mask[2] = {lane_mask(nk), lane_mask(nk - 8)};
    body([&](const float* p, int half) { return _mm256_maskload_ps(p, mask[half]); });
  }
  const __m256 vs = _mm256_set1_ps(scale);
  for (int r = 0; r < R; ++r) {
    _mm256_store_ps(s + r * lds, _mm256_mul_ps(acc[r][0], vs));
    _mm256_store_ps(s + r * lds + 8, _mm256_mul_ps(acc[r][1], vs));
  }
}

// o[r][0, 8 NV) = corr[r] o[r][0, 8 NV) + sum_{j < nk} p[r][j] v[j][0, 8 NV) for R queries.
template <int R, int NV>
inline void pv_tile(float* o, int64_t ldo, const float* corr, const float* p, int64_t ldp, const float* v, int64_t D,
                    int64_t nk) {
  __m256 acc[R][NV];
  for (int r = 0; r < R; ++r) {
    const __m256 c = _mm256_set1_ps(corr[r]);
    for (int i = 0; i < NV; ++i) acc[r][i] = _mm256_mul_ps(c, _mm256_loadu_ps(o + r * ldo + 8 * i));
  }
  for (int64_t j = 0; j < nk; ++j) {
    __m256 vv[NV];
    for (int i = 0; i < NV; ++i) vv[i] = _mm256_loadu_ps(v + j * D + 8 * i);
    for (int r = 0; r < R; ++r) {
      const __m256 pb = _mm256_broadcast_ss(p + r * ldp + j);
      for (int i = 0; i < NV; ++i) acc[r][i] = _mm256_fmadd_ps(pb, vv[i], acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < NV; ++i) _mm256_storeu_ps(o + r * ldo + 8 * i, acc[r][i]);
  }
}

// Runs f with R = rows as a compile-time constant (1 .. kGroup).
template <typename F>
inline void with_rows(int64_t rows, F&& f) {
  static_assert(kGroup == 6);
  switch (rows) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    default: f(std::integral_constant<int, 6>{}); break;
  }
}

// One tile of up to kTileQ queries; D a multiple of 8.
void attention_tile(float* o, int64_t ldo, const float* q, int64_t ldq, int64_t nq, int64_t p0, const float* kt,
                    const float* v, int64_t S, int64_t D, float scale) {
  alignas(32) float s[kTileQ * kTileK];
  float m[kTileQ], l[kTileQ], corr[kTileQ];
  for (int64_t i = 0; i < nq; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
    std::memset(o + i * ldo, 0, size_t(D) * sizeof(float));
  }
  const int64_t n_max = p0 + nq;
  for (int64_t j0 = 0; j0 < n_max; j0 += kTileK) {
    const int64_t nb = std::min(kTileK, n_max - j0);
    // Scores, 16 keys (a 4 KB strip of K, kept in L1) against every group of kGroup queries that sees any of them.
    for (int64_t jj = 0; jj < nb; jj += 16) {
      for (int64_t i0 = 0; i0 < nq; i0 += kGroup) {
        const int64_t rows = std::min(kGroup, nq - i0);
        if (p0 + i0 + rows - 1 < j0 + jj) continue;  // causal: no query of the group sees these keys
        with_rows(rows, [&](auto R) {
          score_tile<R>(s + i0 * kTileK + jj, kTileK, q + i0 * ldq, ldq, kt + j0 + jj, S, D, std::min<int64_t>(16, nb - jj), scale);
        });
      }
    }
    // Online softmax per query: p = exp(s - m_new), the keys it must not see set to 0.
    for (int64_t i = 0; i < nq; ++i) {
      float* si = s + i * kTileK;
      const int64_t visible = std::min(nb, p0 + i + 1 - j0);
      if (visible <= 0) {  // sees none of this block (a later query of its group may)
        corr[i] = 1.0f;
        std::memset(si, 0, size_t(nb) * sizeof(float));
        continue;
      }
      const float sum = softmax_block(si, visible, m[i], corr[i]);
      std::memset(si + visible, 0, size_t(nb - visible) * sizeof(float));
      l[i] = l[i] * corr[i] + sum;
    }
    // o = corr o + P V, 16 output columns (8 at the end) for each group of kGroup queries.
    for (int64_t i0 = 0; i0 < nq; i0 += kGroup) {
      const int64_t rows = std::min(kGroup, nq - i0);
      const int64_t nk = std::min(nb, p0 + i0 + rows - j0);  // keys the group's last query sees
      if (nk <= 0) continue;
      with_rows(rows, [&](auto R) {
        int64_t e = 0;
        for (; e + 16 <= D; e += 16) pv_tile<R, 2>(o + i0 * ldo + e, ldo, corr + i0, s + i0 * kTileK, kTileK, v + j0 * D + e, D, nk);
        if (e < D) pv_tile<R, 1>(o + i0 * ldo + e, ldo, corr + i0, s + i0 * kTileK, kTileK, v + j0 * D + e, D, nk);
      });
    }
  }
  for (int64_t i = 0; i < nq; ++i) {
    const float inv = 1.0f / l[i];
    for (int64_t e = 0; e < D; ++e) o[i * ldo + e] *= inv;
  }
}
}  // namespace
#endif

void attention_prefill(float* o, int64_t ldo, const float* q, int64_t ldq, int64_t nq, int64_t p0, const float* kt,
                       const float* v, int64_t S, int64_t D, float scale) {
#if MINIGPT_AVX2
  if (D % 8 == 0) {
    for (int64_t i0 = 0; i0 < nq; i0 += kTileQ) {
      attention_tile(o + i0 * ldo, ldo, q + i0 * ldq, ldq, std::min(kTileQ, nq - i0), p0 + i0, kt, v, S, D, scale);
    }
    return;
  }
#endif
  for (int64_t i0 = 0; i0 < nq; i0 += 4) {
    attention_block(o + i0 * ldo, ldo, q + i0 * ldq, ldq, std::min<int64_t>(4, nq - i0), p0 + i0, kt, v, S, D, scale);
  }
}

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
