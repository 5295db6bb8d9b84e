// Compiled with -ffp-contract=off (CMakeLists.txt): every a * b + c below rounds twice, as numpy and ggml's
// reference C (built without FMA contraction) compute it. The order of every float operation, and which
// ones are float rather than double, follows the references exactly: a different association would round
// differently and change a quant somewhere.
#include "quant/quantize.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "minigpt/error.h"
#include "minigpt/tensor.h"
#include "quant/quant.h"

namespace minigpt {

namespace {

constexpr int QK = 32;    // values per block of the _0 / _1 types
constexpr int QKK = 256;  // values per super-block of the K types

void put_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}
float get_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// ---- the 32-value types, as gguf.quants (numpy) computes them ----------------------------------------

// float -> int truncating as x86's cvttss2si does (what numpy's and ggml's casts compile to): an out-of-range
// value or NaN (an Inf or NaN input, or a block whose scale's reciprocal overflows) gives INT_MIN, whose low
// byte is 0, instead of undefined behaviour.
int trunc_int(float v) { return v >= -2147483648.0f && v < 2147483648.0f ? int(v) : INT32_MIN; }

// Q8_0: d = max|x| / 127, q = round-half-away(x / d) (numpy: np_roundf of x * (1 / d)).
void block_q8_0(const float* x, uint8_t* b) {
  float amax = 0;
  for (int j = 0; j < QK; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d == 0 ? 0.0f : 1.0f / d;
  put_half(b, d);
  for (int j = 0; j < QK; ++j) b[2 + j] = uint8_t(trunc_int(std::round(x[j] * id)));
}

// The value of largest magnitude (the first such, as numpy's argmax), with its sign.
float signed_absmax(const float* x) {
  float amax = 0, max = 0;
  for (int j = 0; j < QK; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// Q4_0: d = max / -8 (max signed), q = min(15, trunc(x / d + 8.5)); values j and j + 16 share byte j.
void block_q4_0(const float* x, uint8_t* b) {
  const float d = signed_absmax(x) / -8.0f;
  const float id = d == 0 ? 0.0f : 1.0f / d;
  put_half(b, d);
  for (int j = 0; j < QK / 2; ++j) {
    const float v0 = x[j] * id + 8.5f;
    const float v1 = x[j + QK / 2] * id + 8.5f;
    const int q0 = std::min(15, trunc_int(v0));
    const int q1 = std::min(15, trunc_int(v1));
    b[2 + j] = uint8_t(q0 | (q1 << 4));
  }
}

// Q4_1: d = (max - min) / 15, m = min, q = min(15, trunc((x - min) / d + 0.5)).
void block_q4_1(const float* x, uint8_t* b) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < QK; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
  const float d = (hi - lo) / 15.0f;
  const float id = d == 0 ? 0.0f : 1.0f / d;
  put_half(b, d);
  put_half(b + 2, lo);
  for (int j = 0; j < QK / 2; ++j) {
    const float v0 = (x[j] - lo) * id + 0.5f;
    const float v1 = (x[j + QK / 2] - lo) * id + 0.5f;
    const int q0 = std::min(15, trunc_int(v0));
    const int q1 = std::min(15, trunc_int(v1));
    b[4 + j] = uint8_t(q0 | (q1 << 4));
  }
}

// Q5_0: d = max / -16, q = min(31, trunc(x / d + 16.5)); the fifth bits in a 32-bit qh (bit j: value j).
void block_q5_0(const float* x, uint8_t* b) {
  const float d = signed_absmax(x) / -16.0f;
  const float id = d == 0 ? 0.0f : 1.0f / d;
  put_half(b, d);
  uint32_t qh = 0;
  for (int j = 0; j < QK / 2; ++j) {
    const int q0 = std::min(31, trunc_int(x[j] * id + 16.5f));
    const int q1 = std::min(31, trunc_int(x[j + QK / 2] * id + 16.5f));
    b[6 + j] = uint8_t((q0 & 0xF) | ((q1 & 0xF) << 4));
    qh |= uint32_t((q0 >> 4) & 1) << j;
    qh |= uint32_t((q1 >> 4) & 1) << (j + QK / 2);
  }
  std::memcpy(b + 2, &qh, 4);
}

// Q5_1: d = (max - min) / 31, m = min, q = min(31, trunc((x - min) / d + 0.5)).
void block_q5_1(const float* x, uint8_t* b) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < QK; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
  const float d = (hi - lo) / 31.0f;
  const float id = d == 0 ? 0.0f : 1.0f / d;
  put_half(b, d);
  put_half(b + 2, lo);
  uint32_t qh = 0;
  for (int j = 0; j < QK / 2; ++j) {
    const int q0 = std::min(31, trunc_int((x[j] - lo) * id + 0.5f));
    const int q1 = std::min(31, trunc_int((x[j + QK / 2] - lo) * id + 0.5f));
    b[8 + j] = uint8_t((q0 & 0xF) | ((q1 & 0xF) << 4));
    qh |= uint32_t((q0 >> 4) & 1) << j;
    qh |= uint32_t((q1 >> 4) & 1) << (j + QK / 2);
  }
  std::memcpy(b + 4, &qh, 4);
}

// ---- the K types, as ggml's reference quantizers compute them ------------------------------------------

// Round to nearest (ties to even) by adding 1.5 * 2^23 and reading the low mantissa bits, as ggml does;
// exact for |v| < 2^22, and the same bits as ggml's for any other v.
int nearest_int(float v) {
  const float t = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &t, 4);
  return (i & 0x007fffff) - 0x00400000;
}

constexpr float kGroupMaxEps = 1e-15f;  // below this largest |x| a group is all zero

// Fits x[0, n) as scale * L + min (L in [0, nmax], min <= 0) minimising the weighted squared error (the
// weighted absolute error with abs_error): the plain min/max fit first, then nstep + 1 candidate scales
// around it, each with its least-squares scale and offset for the levels it rounds to. Returns the scale;
// *neg_min = -min. (ggml: make_qkx2_quants; abs_error is its use_mad.)
float fit_scale_offset(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool abs_error) {
  float lo = x[0], hi = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;
  if (hi == lo) {
    std::fill(L, L + n, 0);
    *neg_min = -lo;
    return 0.0f;
  }
  const float nm = float(nmax);
  float iscale = nm / (hi - lo);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - lo));
    L[i] = uint8_t(std::max(0, std::min(nmax, l)));
    float diff = scale * float(L[i]) + lo - x[i];
    diff = abs_error ? std::fabs(diff) : diff * diff;
    best_error += w[i] * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * float(is) + nm) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(0, std::min(nmax, nearest_int(iscale * (x[i] - lo))));
      Laux[i] = uint8_t(l);
      const float fl = float(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * float(Laux[i]) + this_min - x[i];
        diff = abs_error ? std::fabs(diff) : diff * diff;
        cur_error += w[i] * diff;
      }
      if (cur_error < best_error) {
        std::copy(Laux, Laux + n, L);
        best_error = cur_error;
        scale = this_scale;
        lo = this_min;
      }
    }
  }
  *neg_min = -lo;
  return scale;
}

// The value of largest magnitude in x[0, n) (the first of equals), or 0 where every |x| is below
// kGroupMaxEps (a group ggml's quantizers write as zeros).
float largest_magnitude(int n, const float* x) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  return amax < kGroupMaxEps ? 0.0f : max;
}

// Fits x[0, n) as scale * (L - nmax), L in [0, 2 nmax - 1], weighting each value by x^2: the scale of the
// largest |x| first, then 18 nearby ones, keeping the best least-squares fit. (ggml: make_qx_quants with
// rmse_type 1 and no importance weights.)
float fit_scale_symmetric(int n, int nmax, const float* x, int8_t* L) {
  const float max = largest_magnitude(n, x);
  if (max == 0.0f) {
    std::fill(L, L + n, int8_t(0));
    return 0.0f;
  }
  const float nm = float(nmax);
  auto level = [&](float iscale, float v) {
    return std::max(-nmax, std::min(nmax - 1, nearest_int(iscale * v)));
  };
  float iscale = -nm / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = level(iscale, x[i]);
    L[i] = int8_t(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nm + 0.1f * float(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = level(iscale, x[i]);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * float(l);
      suml2 += w * float(l) * float(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = int8_t(nmax + level(iscale, x[i]));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Fits x[0, n) as scale * (L - nmax), L in [0, 2 nmax - 1], weighting each value by x^2: the levels of the
// largest |x|'s scale first, then up to 5 passes that move single values to the level their least-squares
// fit without them prefers, where that improves the fit. Returns the least-squares scale of the levels
// kept. (ggml: make_q3_quants with do_rmse.)
float fit_scale_iterative(int n, int nmax, const float* x, int8_t* L) {
  const float max = largest_magnitude(n, x);
  if (max == 0.0f) {
    std::fill(L, L + n, int8_t(0));
    return 0.0f;
  }
  auto clamp = [nmax](int l) { return std::max(-nmax, std::min(nmax - 1, l)); };
  const float iscale = -float(nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp(nearest_int(iscale * x[i]));
    L[i] = int8_t(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * float(L[i]);
      if (!(slx > 0)) continue;  // (a NaN skips, as ggml's `if (slx > 0)`)
      float sl2 = suml2 - w * float(L[i]) * float(L[i]);
      const int l = clamp(nearest_int(x[i] * sl2 / slx));
      if (l == L[i]) continue;
      slx += w * x[i] * float(l);
      sl2 += w * float(l) * float(l);
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = int8_t(l);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = int8_t(L[i] + nmax);
  return suml2 > 0 ? sumlx / suml2 : 0.0f;
}

// The 6-bit scale and min of sub-block j in a Q4_K / Q5_K block's 12 scale bytes, and their packing:
// sub-blocks 0-3 in the low 6 bits of bytes j (scale) and j + 4 (min); 4-7 split into a low nibble in byte
// j + 4 and two high bits in the top of bytes j - 4 (scale) and j (min).
void pack_scales_k4(const uint8_t* ls, const uint8_t* lm, uint8_t* s) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      s[j] = ls[j];
      s[j + 4] = lm[j];
    } else {
      s[j + 4] = uint8_t((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      s[j - 4] |= uint8_t((ls[j] >> 4) << 6);
      s[j] |= uint8_t((lm[j] >> 4) << 6);
    }
  }
}
void unpack_scale_k4(int j, const uint8_t* s, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = uint8_t((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    *m = uint8_t((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// The common part of Q4_K and Q5_K: 8 sub-blocks of 32, each fitted with fit_scale_offset (weights
// sqrt(mean x^2) + |x|), their scales and mins quantized to 6 bits against the block's largest (d, dmin in
// F16 at b[0..3], the 12 scale bytes at b[4..15]), then every value re-rounded against its quantized
// scale and min. L receives the 256 levels in [0, nmax].
void k_scales_and_levels(const float* x, int nmax, float rmin, float rdelta, int nstep, uint8_t* b,
                         uint8_t* L) {
  float scales[8], mins[8], weights[32];
  uint8_t Laux[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32.0f);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] =
        fit_scale_offset(32, nmax, xs, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    // As ggml: the int narrowed to a byte first (modulo 256), then capped.
    ls[j] = std::min<uint8_t>(63, uint8_t(nearest_int(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, uint8_t(nearest_int(inv_min * mins[j])));
  }
  put_half(b, max_scale / 63.0f);
  put_half(b + 2, max_min / 63.0f);
  pack_scales_k4(ls, lm, b + 4);
  const float d_all = get_half(b), dmin_all = get_half(b + 2);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    unpack_scale_k4(j, b + 4, &sc, &m);
    const float d = d_all * float(sc);
    if (d == 0) continue;  // the sub-block keeps the levels of its own fit
    const float dm = dmin_all * float(m);
    for (int i = 0; i < 32; ++i) {
      const int l = nearest_int((x[32 * j + i] + dm) / d);
      L[32 * j + i] = uint8_t(std::max(0, std::min(nmax, l)));
    }
  }
}

// The 2-bit levels of Q2_K and the low 2 bits of Q3_K's: per 128 values, 32 bytes holding values l, l + 32,
// l + 64, l + 96 in bits 0-1, 2-3, 4-5, 6-7 of byte l.
void pack_2bit(const uint8_t* L, uint8_t* q) {
  for (int j = 0; j < QKK; j += 128, q += 32) {
    for (int l = 0; l < 32; ++l) {
      q[l] = uint8_t(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
  }
}

// Q2_K: 16 bytes of (4-bit scale | 4-bit min << 4), one per 16 values, 64 bytes of 2-bit levels, then d and
// dmin (F16). Each group of 16 is fitted with fit_scale_offset (weights |x|, absolute error), the scales and
// mins quantized to 4 bits against the block's largest, then every value re-rounded against them.
void block_q2_k(const float* x, uint8_t* b) {
  uint8_t L[QKK], Laux[16];
  float weights[16], scales[16], mins[16];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
    scales[j] =
        fit_scale_offset(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  std::memset(b, 0, 84);  // an all-zero block keeps d = dmin = +0 and every level 0
  uint8_t* sc = b;
  if (max_scale > 0) {
    const float iscale = 15.0f / max_scale;
    for (int j = 0; j < 16; ++j) sc[j] = uint8_t(nearest_int(iscale * scales[j]));  // as ggml: modulo 256
    put_half(b + 80, max_scale / 15.0f);
  }
  if (max_min > 0) {
    const float iscale = 15.0f / max_min;
    for (int j = 0; j < 16; ++j) sc[j] = uint8_t(sc[j] | (uint32_t(nearest_int(iscale * mins[j])) << 4));
    put_half(b + 82, max_min / 15.0f);
  }
  const float d_all = get_half(b + 80), dmin_all = get_half(b + 82);
  for (int j = 0; j < 16; ++j) {
    const float d = d_all * float(sc[j] & 0xF);
    if (d == 0) continue;  // the group keeps the levels of its own fit
    const float dm = dmin_all * float(sc[j] >> 4);
    for (int i = 0; i < 16; ++i) {
      L[16 * j + i] = uint8_t(std::max(0, std::min(3, nearest_int((x[16 * j + i] + dm) / d))));
    }
  }
  pack_2bit(L, b + 16);
}

// Q3_K: hmask (32 bytes: bit k of byte l is the third bit of value 32 k + l), 64 bytes of the low 2 bits
// (as Q2_K's), 12 bytes of 6-bit signed scales (one per 16 values: the low nibbles of scales 0-7 and 8-15
// in bytes 0-7, their top 2 bits in bytes 8-11, scale j at bits 2 (j / 4) of byte 8 + j % 4), then d (F16).
// Each group of 16 is fitted with fit_scale_iterative, the scales quantized against the largest |scale|,
// then every value re-rounded against them.
void block_q3_k(const float* x, uint8_t* b) {
  int8_t L[QKK];
  float scales[16];
  float max_scale = 0, amax = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_scale_iterative(16, 4, x + 16 * j, L + 16 * j);
    if (std::fabs(scales[j]) > amax) {
      amax = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  std::memset(b, 0, 110);
  uint8_t* hmask = b;
  uint8_t* s = b + 96;
  if (max_scale != 0) {
    const float iscale = -32.0f / max_scale;
    for (int j = 0; j < 16; ++j) {
      // As ggml: the int narrowed to int8 first (modulo 256), then clamped.
      const int l = std::max(-32, std::min(31, int(int8_t(nearest_int(iscale * scales[j]))))) + 32;
      if (j < 8) {
        s[j] = uint8_t(l & 0xF);
      } else {
        s[j - 8] = uint8_t(s[j - 8] | ((l & 0xF) << 4));
      }
      s[8 + j % 4] = uint8_t(s[8 + j % 4] | ((l >> 4) << (2 * (j / 4))));
    }
    put_half(b + 108, 1 / iscale);
  }
  const float d_all = get_half(b + 108);
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    const int sc = (low | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
    const float d = d_all * float(sc);
    if (d == 0) continue;  // the group keeps the levels of its own fit
    for (int i = 0; i < 16; ++i) {
      L[16 * j + i] = int8_t(std::max(-4, std::min(3, nearest_int(x[16 * j + i] / d))) + 4);
    }
  }
  uint8_t low[QKK];
  for (int j = 0; j < QKK; ++j) {
    int l = L[j];
    if (l > 3) {
      hmask[j % 32] = uint8_t(hmask[j % 32] | (1 << (j / 32)));
      l -= 4;
    }
    low[j] = uint8_t(l);
  }
  pack_2bit(low, b + 32);
}

// Q4_K: d, dmin, 12 scale bytes, then 128 bytes: per 64 values, 32 bytes of (L[i] | L[i + 32] << 4).
void block_q4_k(const float* x, uint8_t* b) {
  uint8_t L[QKK];
  std::memset(b, 0, 144);
  k_scales_and_levels(x, 15, -1.0f, 0.1f, 20, b, L);
  uint8_t* q = b + 16;
  for (int j = 0; j < QKK; j += 64, q += 32) {
    for (int l = 0; l < 32; ++l) q[l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
  }
}

// Q5_K: d, dmin, 12 scale bytes, 32 bytes qh (bit 2c / 2c + 1 of qh[l]: the fifth bit of value 64c + l /
// 64c + 32 + l), 128 bytes of low nibbles laid out as Q4_K's.
void block_q5_k(const float* x, uint8_t* b) {
  uint8_t L[QKK];
  std::memset(b, 0, 176);
  k_scales_and_levels(x, 31, -0.5f, 0.1f, 15, b, L);
  uint8_t* qh = b + 16;
  uint8_t* ql = b + 48;
  uint8_t m1 = 1, m2 = 2;
  for (int n = 0; n < QKK; n += 64, ql += 32) {
    for (int j = 0; j < 32; ++j) {
      int l1 = L[n + j], l2 = L[n + j + 32];
      if (l1 > 15) l1 -= 16, qh[j] |= m1;
      if (l2 > 15) l2 -= 16, qh[j] |= m2;
      ql[j] = uint8_t(l1 | (l2 << 4));
    }
    m1 = uint8_t(m1 << 2), m2 = uint8_t(m2 << 2);
  }
}

// Q6_K: ql (128 bytes), qh (64), 16 int8 scales (one per 16 values), d (F16). Each group of 16 is fitted
// with fit_scale_symmetric, the scales quantized to int8 against the largest, then every value re-rounded.
void block_q6_k(const float* x, uint8_t* b) {
  int8_t L[QKK];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    const float scale = fit_scale_symmetric(16, 32, x + 16 * ib, L + 16 * ib);
    scales[ib] = scale;
    if (std::fabs(scale) > max_abs_scale) {
      max_abs_scale = std::fabs(scale);
      max_scale = scale;
    }
  }
  std::memset(b, 0, 210);
  if (max_abs_scale < kGroupMaxEps) return;  // all zero, d = +0
  auto* sc = reinterpret_cast<int8_t*>(b + 192);
  const float iscale = -128.0f / max_scale;
  put_half(b + 208, 1 / iscale);
  for (int ib = 0; ib < 16; ++ib) sc[ib] = int8_t(std::min(127, nearest_int(iscale * scales[ib])));
  const float d_all = get_half(b + 208);
  for (int j = 0; j < 16; ++j) {
    const float d = d_all * float(sc[j]);
    if (d == 0) continue;
    for (int i = 0; i < 16; ++i) {
      const int l = nearest_int(x[16 * j + i] / d);
      L[16 * j + i] = int8_t(std::max(-32, std::min(31, l)) + 32);
    }
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  for (int j = 0; j < QKK; j += 128, ql += 64, qh += 32) {
    for (int l = 0; l < 32; ++l) {
      const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
      ql[l] = uint8_t((q1 & 0xF) | ((q3 & 0xF) << 4));
      ql[l + 32] = uint8_t((q2 & 0xF) | ((q4 & 0xF) << 4));
      qh[l] = uint8_t((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
    }
  }
}

}  // namespace

bool can_quantize(GgmlType t) { return can_dequantize(t); }  // the same types, both ways

uint64_t quantized_size(GgmlType type, int64_t n) {
  const GgmlTypeInfo* info = ggml_type_info(uint32_t(type));
  if (info == nullptr || n < 0 || n % info->block_size != 0) {
    throw Error(ErrorKind::Unsupported, std::string("quantized_size: type ") + (info ? info->name : "?") +
                                            " with " + std::to_string(n) + " values");
  }
  return uint64_t(n / info->block_size) * uint64_t(info->block_bytes);
}

void quantize(GgmlType type, const float* src, uint8_t* dst, int64_t n) {
  const GgmlTypeInfo* info = ggml_type_info(uint32_t(type));
  if (info == nullptr || !can_quantize(type) || n < 0 || n % info->block_size != 0) {
    throw Error(ErrorKind::Unsupported, std::string("quantize: type ") + (info ? info->name : "?") +
                                            " with " + std::to_string(n) + " values");
  }
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    default:
      break;
  }
  void (*fn)(const float*, uint8_t*) = nullptr;
  switch (type) {
    case GgmlType::Q8_0:
      fn = block_q8_0;
      break;
    case GgmlType::Q4_0:
      fn = block_q4_0;
      break;
    case GgmlType::Q4_1:
      fn = block_q4_1;
      break;
    case GgmlType::Q5_0:
      fn = block_q5_0;
      break;
    case GgmlType::Q5_1:
      fn = block_q5_1;
      break;
    case GgmlType::Q2_K:
      fn = block_q2_k;
      break;
    case GgmlType::Q3_K:
      fn = block_q3_k;
      break;
    case GgmlType::Q4_K:
      fn = block_q4_k;
      break;
    case GgmlType::Q5_K:
      fn = block_q5_k;
      break;
    case GgmlType::Q6_K:
      fn = block_q6_k;
      break;
    default:
      break;
  }
  const int64_t blocks = n / info->block_size;
  for (int64_t i = 0; i < blocks; ++i) fn(src + i * info->block_size, dst + i * info->block_bytes);
}

}  // namespace minigpt
