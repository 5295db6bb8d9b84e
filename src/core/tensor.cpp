#include "minigpt/tensor.h"

#include <array>
#include <cmath>

namespace minigpt {
namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
};
constexpr std::array<DTypeInfo, 3> kDTypes{
    {{DType::F32, "F32", 4}, {DType::F16, "F16", 2}, {DType::BF16, "BF16", 2}}};
}  // namespace

size_t dtype_size(DType t) { return kDTypes[size_t(t)].size; }
std::string_view dtype_name(DType t) { return kDTypes[size_t(t)].name; }

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: value = mant * 2^-24
      float f = std::ldexp(float(mant), -24);
      std::memcpy(&u, &f, 4);
      u |= sign;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) return sign | (abs > 0x7f800000u ? 0x7e00 : 0x7c00);  // NaN / inf
  if (abs >= 0x477ff000u) return sign | 0x7c00;                                 // rounds to inf
  if (abs < 0x38800000u) {  // below the smallest normal: subnormal or zero, rounded to nearest even
    const float a = std::fabs(f);
    const float scaled = a * 16777216.0f;  // a / 2^-24, exact
    return sign | uint16_t(std::nearbyint(scaled));
  }
  // normal: round the 13 dropped mantissa bits to nearest even
  uint32_t v = abs - 0x38000000u;  // rebias exponent 127 -> 15
  v += 0x0fffu + ((v >> 13) & 1);
  return sign | uint16_t(v >> 13);
}

uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

void convert_to_f32(float* dst, const void* src, DType src_type, size_t n) {
  switch (src_type) {
    case DType::F32:
      std::memcpy(dst, src, n * 4);
      break;
    case DType::F16: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);  // the mapping need not be 2-byte aligned
        dst[i] = f16_to_f32(h);
      }
      break;
    }
    case DType::BF16: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      break;
    }
    default:
      // Callers only pass float weight dtypes; anything else is a programming error.
      std::abort();
  }
}

}  // namespace minigpt
