// Small helpers the converter's parts share: ggml type facts, name tests, messages, bounded JSON files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "formats/gguf.h"

namespace minigpt::convert {

inline bool is_quantized(GgmlType t) {
  return t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16;
}
inline const char* type_name(GgmlType t) { return ggml_type_info(uint32_t(t))->name; }
inline int64_t block_size(GgmlType t) { return ggml_type_info(uint32_t(t))->block_size; }

inline bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
inline bool contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

// "[768, 50257]"
inline std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

// A JSON file of at most `cap` bytes (`what` names it in errors); Error(Format) when it is not JSON.
nlohmann::json read_json_file(const std::filesystem::path& p, size_t cap, const std::string& what);

}  // namespace minigpt::convert
