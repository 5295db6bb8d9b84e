// The server's host prompt cache: the keys and values of prompt prefixes kept in host memory beyond the
// slots, so that any request that shares a prefix with an earlier one, in any slot, starts from it (vLLM's
// automatic prefix caching). Prefixes are kept in blocks of `block` tokens; a block is keyed by a hash of
// every token up to its end (its parent block's key and its own tokens), so a block stands for the whole
// prefix it ends, and the longest cached prefix of a prompt is its first blocks found in a row. A block
// holds its tokens and its parent's key too: a hash collision is never taken for a hit. The blocks' bytes
// stay within max_bytes: the least recently used go first, and of those used together the deepest (a
// prefix's last blocks before its first, so that what stays is always a whole prefix).
// Not thread-safe: the scheduler's thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <span>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace minigpt::server {

class PromptCache {
 public:
  // `position_bytes`: the keys and values of one position (Session::kv_position_bytes()).
  PromptCache(size_t max_bytes, int64_t block, size_t position_bytes);

  // How many leading tokens of `tokens` the cache holds (a multiple of block), marking them used.
  int64_t lookup(std::span<const int32_t> tokens);
  // Positions [from, to) of the prefix lookup() found (to <= what it returned) into a sequence that holds
  // the first `from`: `write(pos, n, host)` takes n positions from pos, in the layout of Session::write_kv.
  void restore(std::span<const int32_t> tokens, int64_t from, int64_t to,
               const std::function<void(int64_t pos, int64_t n, const void* host)>& write);
  // Keeps the whole blocks of `tokens` (the tokens a sequence holds) that the cache lacks: `read(pos, n,
  // host)` gives n positions from pos. Blocks that would not fit in max_bytes are not kept. Returns the
  // blocks added.
  int64_t store(std::span<const int32_t> tokens,
                const std::function<void(int64_t pos, int64_t n, void* host)>& read);

  size_t bytes() const { return bytes_; }
  size_t max_bytes() const { return max_bytes_; }
  int64_t block() const { return block_; }
  int64_t blocks() const { return int64_t(blocks_.size()); }

 private:
  struct Block {
    uint64_t parent = 0;
    int64_t depth = 0;  // its index in the prefix: 0 for the first block
    std::vector<int32_t> tokens;
    std::unique_ptr<char[]> kv;
    uint64_t used = 0;
  };
  // Eviction order: least recently used first, then deepest first: (used, -depth, key).
  using Order = std::tuple<uint64_t, int64_t, uint64_t>;
  static uint64_t chain(uint64_t parent, std::span<const int32_t> tokens);
  // The block of this key if it is the one for `tokens` after the block `parent`; else null.
  Block* find(uint64_t key, uint64_t parent, std::span<const int32_t> tokens);
  void touch(uint64_t key, Block& b, uint64_t now);
  // Evicts blocks used before `now` until `bytes` more fit; false when they cannot.
  bool make_room(size_t bytes, uint64_t now);

  size_t max_bytes_;
  int64_t block_;
  size_t position_bytes_;
  size_t block_bytes_;
  size_t bytes_ = 0;
  uint64_t clock_ = 0;
  std::unordered_map<uint64_t, Block> blocks_;
  std::set<Order> order_;
};

}  // namespace minigpt::server
