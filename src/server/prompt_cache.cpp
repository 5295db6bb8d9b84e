#include "server/prompt_cache.h"

#include <algorithm>

#include "core/hash.h"

namespace minigpt::server {

PromptCache::PromptCache(size_t max_bytes, int64_t block, size_t position_bytes)
    : max_bytes_(max_bytes),
      block_(std::max<int64_t>(block, 1)),
      position_bytes_(position_bytes),
      block_bytes_(size_t(block_) * position_bytes) {}

uint64_t PromptCache::chain(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = splitmix64(parent ^ 0x70726f6d70747331ull);
  for (int32_t t : tokens) h = splitmix64(h ^ uint64_t(uint32_t(t)));
  return h;
}

PromptCache::Block* PromptCache::find(uint64_t key, uint64_t parent, std::span<const int32_t> tokens) {
  auto it = blocks_.find(key);
  if (it == blocks_.end()) return nullptr;
  Block& b = it->second;
  if (b.parent != parent || !std::equal(tokens.begin(), tokens.end(), b.tokens.begin(), b.tokens.end())) {
    return nullptr;
  }
  return &b;
}

void PromptCache::touch(uint64_t key, Block& b, uint64_t now) {
  order_.erase({b.used, -b.depth, key});
  b.used = now;
  order_.insert({b.used, -b.depth, key});
}

int64_t PromptCache::lookup(std::span<const int32_t> tokens) {
  const uint64_t now = ++clock_;
  uint64_t parent = 0;
  int64_t n = 0;
  for (; (n + 1) * block_ <= int64_t(tokens.size()); ++n) {
    const auto bt = tokens.subspan(size_t(n * block_), size_t(block_));
    const uint64_t key = chain(parent, bt);
    Block* b = find(key, parent, bt);
    if (b == nullptr) break;
    touch(key, *b, now);
    parent = key;
  }
  return n * block_;
}

void PromptCache::restore(std::span<const int32_t> tokens, int64_t from, int64_t to,
                          const std::function<void(int64_t pos, int64_t n, const void* host)>& write) {
  uint64_t parent = 0;
  for (int64_t i = 0; i * block_ < to; ++i) {
    const auto bt = tokens.subspan(size_t(i * block_), size_t(block_));
    const uint64_t key = chain(parent, bt);
    const int64_t b0 = i * block_, b1 = b0 + block_;
    if (b1 > from) {
      const Block* b = find(key, parent, bt);
      if (b == nullptr) return;  // lookup() found it: never here
      const int64_t p0 = std::max(from, b0), p1 = std::min(to, b1);
      write(p0, p1 - p0, b->kv.get() + size_t(p0 - b0) * position_bytes_);
    }
    parent = key;
  }
}

bool PromptCache::make_room(size_t bytes, uint64_t now) {
  if (bytes > max_bytes_) return false;
  while (bytes_ + bytes > max_bytes_) {
    if (order_.empty()) return false;
    const auto [used, depth, key] = *order_.begin();
    if (used >= now) return false;  // only the prefix being stored is left
    order_.erase(order_.begin());
    blocks_.erase(key);
    bytes_ -= block_bytes_;
  }
  return true;
}

int64_t PromptCache::store(std::span<const int32_t> tokens,
                           const std::function<void(int64_t pos, int64_t n, void* host)>& read) {
  const uint64_t now = ++clock_;
  uint64_t parent = 0;
  int64_t added = 0;
  for (int64_t i = 0; (i + 1) * block_ <= int64_t(tokens.size()); ++i) {
    const auto bt = tokens.subspan(size_t(i * block_), size_t(block_));
    const uint64_t key = chain(parent, bt);
    if (Block* b = find(key, parent, bt)) {
      touch(key, *b, now);
    } else {
      if (blocks_.count(key) != 0) break;  // another prefix's block under the same key: keep that one
      if (!make_room(block_bytes_, now)) break;
      Block nb;
      nb.parent = parent;
      nb.depth = i;
      nb.tokens.assign(bt.begin(), bt.end());
      nb.kv.reset(new char[block_bytes_]);  // not zeroed: read() fills it
      read(i * block_, block_, nb.kv.get());
      nb.used = now;
      order_.insert({now, -i, key});
      blocks_.emplace(key, std::move(nb));
      bytes_ += block_bytes_;
      ++added;
    }
    parent = key;
  }
  return added;
}

}  // namespace minigpt::server
