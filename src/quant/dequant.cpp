// Compiled with -ffp-contract=off (CMakeLists.txt): d * q + m must round twice, as numpy does, not once
// as a fused multiply-add would.
#include <cstring>

#include "minigpt/error.h"
#include "minigpt/tensor.h"
#include "quant/quant.h"

namespace minigpt {

namespace {

float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block's 12 scale bytes.
void scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void q8_0(const uint8_t* b, float* y) {  // d, 32 x i8
  const float d = half(b);
  for (int j = 0; j < 32; ++j) y[j] = float(int8_t(b[2 + j])) * d;
}

void q4_0(const uint8_t* b, float* y) {  // d, 16 bytes: low nibbles are values 0..15, high 16..31
  const float d = half(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float(int(b[2 + j] & 0xF) - 8);
    y[j + 16] = d * float(int(b[2 + j] >> 4) - 8);
  }
}

void q4_1(const uint8_t* b, float* y) {  // d, m, 16 bytes
  const float d = half(b), m = half(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float(b[4 + j] & 0xF) + m;
    y[j + 16] = d * float(b[4 + j] >> 4) + m;
  }
}

void q5_0(const uint8_t* b, float* y) {  // d, qh (32 fifth bits), 16 bytes
  const float d = half(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  for (int j = 0; j < 16; ++j) {
    const int lo = (b[6 + j] & 0xF) | int(((qh >> j) & 1) << 4);
    const int hi = (b[6 + j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
    y[j] = d * float(lo - 16);
    y[j + 16] = d * float(hi - 16);
  }
}

void q5_1(const uint8_t* b, float* y) {  // d, m, qh, 16 bytes
  const float d = half(b), m = half(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  for (int j = 0; j < 16; ++j) {
    const int lo = (b[8 + j] & 0xF) | int(((qh >> j) & 1) << 4);
    const int hi = (b[8 + j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
    y[j] = d * float(lo) + m;
    y[j + 16] = d * float(hi) + m;
  }
}

// Q4_K: d, dmin, 12 scale bytes, 128 bytes: 4 chunks of 64 values, each 32 low nibbles (sub-block 2c) then
// 32 high nibbles (sub-block 2c + 1); value = (d sc) q - (dmin m).
void q4_k(const uint8_t* b, float* y) {
  const float d = half(b), dmin = half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int c = 0; c < 4; ++c) {
    uint8_t sc, m;
    scale_min_k4(2 * c, scales, &sc, &m);
    const float d1 = d * float(sc), m1 = dmin * float(m);
    scale_min_k4(2 * c + 1, scales, &sc, &m);
    const float d2 = d * float(sc), m2 = dmin * float(m);
    for (int l = 0; l < 32; ++l) {
      y[64 * c + l] = d1 * float(q[32 * c + l] & 0xF) - m1;
      y[64 * c + 32 + l] = d2 * float(q[32 * c + l] >> 4) - m2;
    }
  }
}

// Q2_K: 16 bytes of (4-bit scale | 4-bit min << 4), one per 16 values, 64 bytes of 2-bit levels (value
// 128 h + 32 k + l in bits 2k..2k+1 of byte 32 h + l), d, dmin: value = d * scale * q - dmin * min.
void q2_k(const uint8_t* b, float* y) {
  const uint8_t* sc = b;
  const uint8_t* q = b + 16;
  const float d = half(b + 80), dmin = half(b + 82);
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, k = (i % 128) / 32, l = i % 32;
    const float dl = d * float(sc[i / 16] & 0xF), ml = dmin * float(sc[i / 16] >> 4);
    y[i] = dl * float((q[32 * h + l] >> (2 * k)) & 3) - ml;
  }
}

// Q3_K: hmask (bit k of byte l: the third bit of value 32 k + l), the low 2 bits as Q2_K's, 12 bytes of
// 6-bit scales biased by 32 (low nibbles in bytes 0-7, top 2 bits in bytes 8-11), d: value = d * (scale -
// 32) * (q - 4), where q's third bit is set.
void q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* q = b + 32;
  const uint8_t* s = b + 96;
  const float d = half(b + 108);
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, k = (i % 128) / 32, l = i % 32, j = i / 16;
    const int low = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    const int sc = (low | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
    const int v = ((q[32 * h + l] >> (2 * k)) & 3) - ((hmask[l] >> (i / 32)) & 1 ? 0 : 4);
    y[i] = d * float(sc) * float(v);
  }
}

// Q5_K: as Q4_K with a fifth bit per value from qh (32 bytes; bit k of qh[l] belongs to sub-block k).
void q5_k(const uint8_t* b, float* y) {
  const float d = half(b), dmin = half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  for (int c = 0; c < 4; ++c) {
    uint8_t sc, m;
    scale_min_k4(2 * c, scales, &sc, &m);
    const float d1 = d * float(sc), m1 = dmin * float(m);
    scale_min_k4(2 * c + 1, scales, &sc, &m);
    const float d2 = d * float(sc), m2 = dmin * float(m);
    for (int l = 0; l < 32; ++l) {
      const int lo = (ql[32 * c + l] & 0xF) | (((qh[l] >> (2 * c)) & 1) << 4);
      const int hi = (ql[32 * c + l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4);
      y[64 * c + l] = d1 * float(lo) - m1;
      y[64 * c + 32 + l] = d2 * float(hi) - m2;
    }
  }
}

// Q6_K: ql (128 bytes: low 4 bits), qh (64 bytes: high 2 bits), 16 int8 scales (one per 16 values), d.
// Two halves of 128 values; in each, value l + 32 k (k = 0..3) takes ql's low/high nibble of byte l or
// l + 32 and bits 2k..2k+1 of qh[l].
void q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half(b + 208);
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const int q[4] = {(ql[64 * h + l] & 0xF) | (((qh[32 * h + l] >> 0) & 3) << 4),
                        (ql[64 * h + l + 32] & 0xF) | (((qh[32 * h + l] >> 2) & 3) << 4),
                        (ql[64 * h + l] >> 4) | (((qh[32 * h + l] >> 4) & 3) << 4),
                        (ql[64 * h + l + 32] >> 4) | (((qh[32 * h + l] >> 6) & 3) << 4)};
      for (int k = 0; k < 4; ++k) {
        const int i = 128 * h + 32 * k + l;  // the value's index in the block
        const float dd = d * float(sc[i / 16]);
        y[i] = dd * float(q[k] - 32);
      }
    }
  }
}

}  // namespace

bool can_dequantize(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

void dequantize(GgmlType type, const uint8_t* src, float* dst, int64_t n) {
  const GgmlTypeInfo* info = ggml_type_info(uint32_t(type));
  if (info == nullptr || !can_dequantize(type) || n % info->block_size != 0) {
    throw Error(ErrorKind::Unsupported, std::string("dequantize: type ") + (info ? info->name : "?") +
                                            " with " + std::to_string(n) + " values");
  }
  const int64_t blocks = n / info->block_size;
  void (*fn)(const uint8_t*, float*) = nullptr;
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case GgmlType::F16:
      convert_to_f32(dst, src, DType::F16, size_t(n));
      return;
    case GgmlType::BF16:
      convert_to_f32(dst, src, DType::BF16, size_t(n));
      return;
    case GgmlType::Q8_0:
      fn = q8_0;
      break;
    case GgmlType::Q4_0:
      fn = q4_0;
      break;
    case GgmlType::Q4_1:
      fn = q4_1;
      break;
    case GgmlType::Q5_0:
      fn = q5_0;
      break;
    case GgmlType::Q5_1:
      fn = q5_1;
      break;
    case GgmlType::Q2_K:
      fn = q2_k;
      break;
    case GgmlType::Q3_K:
      fn = q3_k;
      break;
    case GgmlType::Q4_K:
      fn = q4_k;
      break;
    case GgmlType::Q5_K:
      fn = q5_k;
      break;
    case GgmlType::Q6_K:
      fn = q6_k;
      break;
    default:
      break;
  }
  for (int64_t i = 0; i < blocks; ++i) fn(src + i * info->block_bytes, dst + i * info->block_size);
}

}  // namespace minigpt
