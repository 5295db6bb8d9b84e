// Compact string lists and string -> id maps, for the few hundred thousand short strings of a vocabulary.
// A std::vector<std::string> takes 32 bytes per string plus a heap block for each one longer than 15
// bytes, and an std::unordered_map<std::string, int32_t> ~70 per entry; these take the strings' bytes plus
// 8 (StringTable) or ~20 (StringIdMap) per string. Gemma 3's 262144 tokens are held by the GGUF reader and
// the tokenizer several times over (tokens, symbols, the bytes each stands for, the mergeable pieces): in
// standard containers that is ~70 MB, most of a 270M model's memory beyond its weights and KV cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace minigpt {

// A list of strings in one buffer: string i is the bytes [end(i - 1), end(i)) of the buffer.
class StringTable {
 public:
  StringTable() = default;
  StringTable(std::initializer_list<std::string_view> items) {
    for (std::string_view s : items) push_back(s);
  }

  size_t size() const { return ends_.size(); }
  bool empty() const { return ends_.empty(); }
  std::string_view operator[](size_t i) const {
    const size_t begin = i == 0 ? 0 : size_t(ends_[i - 1]);
    return std::string_view(chars_.data() + begin, size_t(ends_[i]) - begin);
  }
  std::string_view back() const { return (*this)[size() - 1]; }
  size_t bytes() const { return chars_.size(); }  // of all the strings together

  void push_back(std::string_view s) {
    chars_.append(s);
    ends_.push_back(chars_.size());
  }
  void reserve(size_t n) { ends_.reserve(n); }
  void clear() {
    chars_.clear();
    ends_.clear();
  }
  void shrink_to_fit() {
    chars_.shrink_to_fit();
    ends_.shrink_to_fit();
  }

  bool operator==(const StringTable& o) const { return ends_ == o.ends_ && chars_ == o.chars_; }

  class iterator {
   public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = std::string_view;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = std::string_view;
    iterator() = default;
    iterator(const StringTable* t, size_t i) : t_(t), i_(i) {}
    std::string_view operator*() const { return (*t_)[i_]; }
    iterator& operator++() {
      ++i_;
      return *this;
    }
    iterator operator++(int) {
      iterator r = *this;
      ++i_;
      return r;
    }
    iterator& operator+=(difference_type n) {
      i_ = size_t(difference_type(i_) + n);
      return *this;
    }
    difference_type operator-(const iterator& o) const { return difference_type(i_) - difference_type(o.i_); }
    bool operator==(const iterator& o) const { return i_ == o.i_; }
    bool operator!=(const iterator& o) const { return i_ != o.i_; }

   private:
    const StringTable* t_ = nullptr;
    size_t i_ = 0;
  };
  iterator begin() const { return iterator(this, 0); }
  iterator end() const { return iterator(this, size()); }

 private:
  std::string chars_;
  std::vector<uint64_t> ends_;
};

// Strings to ids: open addressing over the keys kept in a StringTable, in insertion order.
class StringIdMap {
 public:
  // Adds `key` -> `id` unless `key` is already there (the first id stays, as unordered_map::emplace does).
  // Returns whether it was added.
  bool emplace(std::string_view key, int32_t id);
  // The id of `key`, or -1.
  int32_t find(std::string_view key) const;
  bool contains(std::string_view key) const { return find(key) >= 0; }
  size_t size() const { return ids_.size(); }
  bool empty() const { return ids_.empty(); }
  // The entries in insertion order.
  std::string_view key(size_t i) const { return keys_[i]; }
  int32_t id(size_t i) const { return ids_[i]; }
  void shrink_to_fit() {
    keys_.shrink_to_fit();
    ids_.shrink_to_fit();
  }

 private:
  static uint64_t hash(std::string_view s);
  void grow();
  StringTable keys_;
  std::vector<int32_t> ids_;
  std::vector<uint32_t> slots_;  // entry index + 1; 0 = empty. A power of two, at most half full.
};

}  // namespace minigpt
