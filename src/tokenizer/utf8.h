// UTF-8 scanning shared by the encoder's input check and the decoders' replacement policy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace minigpt::tokenizer_detail {

enum class Utf8Status { Valid, Invalid, Truncated };

// Looks at the sequence starting at p[0] (n > 0 bytes available). Valid: `len` is its length.
// Invalid: `len` is the maximal subpart to replace by one U+FFFD (Unicode's "maximal subpart"
// practice, as Python's errors="replace"). Truncated: the bytes so far could still become a valid
// character; `len` is how many there are (all of n).
inline Utf8Status utf8_next(const unsigned char* p, size_t n, size_t& len) {
  unsigned char c = p[0];
  if (c < 0x80) {
    len = 1;
    return Utf8Status::Valid;
  }
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    len = 1;  // a continuation byte, C0/C1 or F5..FF: never valid
    return Utf8Status::Invalid;
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= n) {
      len = n;
      return Utf8Status::Truncated;
    }
    unsigned char b = p[i];
    bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) {
      len = i;
      return Utf8Status::Invalid;
    }
  }
  len = need;
  return Utf8Status::Valid;
}

// The code point of one valid UTF-8 sequence (as utf8_next() measured it).
inline uint32_t utf8_decode(std::string_view c) {
  auto p = reinterpret_cast<const unsigned char*>(c.data());
  switch (c.size()) {
    case 1:
      return p[0];
    case 2:
      return ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
    case 3:
      return ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
    default:
      return ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
  }
}

// Byte offset of the first byte that is not part of valid UTF-8, or npos.
inline size_t utf8_first_invalid(std::string_view s) {
  auto p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0, n = s.size();
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    if (utf8_next(p + i, n - i, len) != Utf8Status::Valid) return i;
    i += len;
  }
  return std::string_view::npos;
}

}  // namespace minigpt::tokenizer_detail
