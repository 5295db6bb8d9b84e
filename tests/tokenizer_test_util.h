// Helpers shared by the tokenizer test files.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace minigpt::test {

// The GPT-2 tokenizer and tinyshakespeare.txt live in the project (provenance:
// tests/fixtures/gpt2-tokenizer/README.md).
inline const std::filesystem::path kFixtureRoot = MINIGPT_SOURCE_DIR "/tests/fixtures";
inline const std::filesystem::path kGpt2Dir = kFixtureRoot / "gpt2-tokenizer";
inline const std::filesystem::path kShakespeare = kFixtureRoot / "data" / "tinyshakespeare.txt";
inline const std::filesystem::path kFixtures = kFixtureRoot / "tokenizer";  // golden outputs

inline nlohmann::json read_json(const std::filesystem::path& p) {
  return nlohmann::json::parse(read_file(p));
}

// The same FNV-1a 64 as tools/reference/make_tokenizer_reference.py: each value as 4 little-endian bytes.
template <typename Seq>
std::string fnv1a64(const Seq& values) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (auto v : values) {
    auto u = static_cast<uint32_t>(v);
    for (int k = 0; k < 4; ++k) h = (h ^ ((u >> (8 * k)) & 0xFF)) * 0x100000001B3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

inline std::string encode_cp(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

}  // namespace minigpt::test
