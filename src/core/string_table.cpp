#include "minigpt/string_table.h"

#include <functional>

namespace minigpt {

uint64_t StringIdMap::hash(std::string_view s) { return std::hash<std::string_view>{}(s); }

int32_t StringIdMap::find(std::string_view key) const {
  if (slots_.empty()) return -1;
  const size_t mask = slots_.size() - 1;
  for (size_t i = size_t(hash(key)) & mask;; i = (i + 1) & mask) {
    const uint32_t e = slots_[i];
    if (e == 0) return -1;
    if (keys_[e - 1] == key) return ids_[e - 1];
  }
}

bool StringIdMap::emplace(std::string_view key, int32_t id) {
  if (find(key) >= 0) return false;
  if ((ids_.size() + 1) * 2 > slots_.size()) grow();
  keys_.push_back(key);
  ids_.push_back(id);
  const size_t mask = slots_.size() - 1;
  size_t i = size_t(hash(key)) & mask;
  while (slots_[i] != 0) i = (i + 1) & mask;
  slots_[i] = uint32_t(ids_.size());
  return true;
}

void StringIdMap::grow() {
  std::vector<uint32_t> slots(slots_.empty() ? 64 : slots_.size() * 2, 0);
  const size_t mask = slots.size() - 1;
  for (size_t e = 0; e < ids_.size(); ++e) {
    size_t i = size_t(hash(keys_[e])) & mask;
    while (slots[i] != 0) i = (i + 1) & mask;
    slots[i] = uint32_t(e + 1);
  }
  slots_ = std::move(slots);
}

}  // namespace minigpt
