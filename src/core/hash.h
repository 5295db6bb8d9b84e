// Two 64-bit hashes that the random-weight models and the sampler share, and that
// tools/reference/make_reference.py implements too, so that both sides derive the same numbers:
//   splitmix64: Steele, Lea and Flood's SplitMix64 finalizer (Java's SplittableRandom), a bijective mix of a
//     counter into well-spread bits; splitmix64(seed + i) for i = 0, 1, ... is a random stream.
//   fnv1a64: Fowler-Noll-Vo 1a over bytes, a name's seed.
#pragma once

#include <cstdint>
#include <string_view>

namespace minigpt {

inline uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char b : s) h = (h ^ b) * 0x100000001B3ull;
  return h;
}

}  // namespace minigpt
