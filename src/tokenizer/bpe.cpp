// Encoding: added tokens split off, the normalizer, the pre-tokenizer and the BPE merges of each pre-token.
// The hot path (encode -> split_added -> encode_ordinary -> bpe -> find_merge) stays in this one file, so
// that the compiler inlines it.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <list>
#include <nlohmann/json.hpp>

#include "minigpt/error.h"
#include "minigpt/tokenizer.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/utf8.h"

namespace minigpt {

using tokenizer_detail::json_quote;
using tokenizer_detail::pair_key;

namespace {
// Pre-tokens longer than this (in bytes) go through the heap merge; shorter ones through the
// simple scan, which is faster when there are only a few symbols.
constexpr size_t kHeapThreshold = 48;
}  // namespace

static size_t merge_slot(uint64_t key, size_t mask) { return (key * 0x9E3779B97F4A7C15ull >> 20) & mask; }

void Tokenizer::add_merge(uint64_t key, Merge m) {
  size_t mask = merge_slots_.size() - 1;
  size_t i = merge_slot(key, mask);
  while (merge_slots_[i].key != UINT64_MAX && merge_slots_[i].key != key) i = (i + 1) & mask;
  if (merge_slots_[i].key == UINT64_MAX) ++n_merges_;
  merge_slots_[i] = {key, m};
}

const Tokenizer::Merge* Tokenizer::find_merge(int32_t left, int32_t right) const {
  if (n_merges_ == 0) return nullptr;
  uint64_t key = pair_key(left, right);
  size_t mask = merge_slots_.size() - 1;
  for (size_t i = merge_slot(key, mask);; i = (i + 1) & mask) {
    const MergeSlot& s = merge_slots_[i];
    if (s.key == key) return &s.merge;
    if (s.key == UINT64_MAX) return nullptr;
  }
}

void Tokenizer::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  const size_t n = piece.size();
  if (n == 1) {
    out.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
  } else if (n > kHeapThreshold) {
    std::vector<int32_t> syms(n);
    for (size_t i = 0; i < n; ++i) syms[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
    merge_long(syms.data(), n, out);
  } else {
    int32_t syms[kHeapThreshold + 1];
    for (size_t i = 0; i < n; ++i) syms[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
    merge_short(syms, n, out);
  }
}

// Repeatedly merges the adjacent pair of lowest rank, leftmost first: O(n^2), but for a handful of
// symbols a linear scan beats any heap. n <= kHeapThreshold.
void Tokenizer::merge_short(int32_t* syms, size_t n, std::vector<int32_t>& out) const {
  int32_t ranks[kHeapThreshold + 1];  // ranks[i]: rank of the pair (syms[i], syms[i+1])
  auto rank_at = [&](size_t i) {
    const Merge* m = find_merge(syms[i], syms[i + 1]);
    return m ? m->rank : INT32_MAX;
  };
  for (size_t i = 0; i + 1 < n; ++i) ranks[i] = rank_at(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (ranks[i] < ranks[best]) best = i;
    if (ranks[best] == INT32_MAX) break;
    syms[best] = find_merge(syms[best], syms[best + 1])->id;
    for (size_t i = best + 1; i + 1 < n; ++i) {
      syms[i] = syms[i + 1];
      ranks[i] = ranks[i + 1];
    }
    --n;
    if (best > 0) ranks[best - 1] = rank_at(best - 1);
    if (best + 1 < n) ranks[best] = rank_at(best);
  }
  out.insert(out.end(), syms, syms + n);
}

// The same merge order as merge_short (lowest rank, then leftmost), with a heap over candidate pairs
// and a linked list of symbols: O(n log n), so that a pre-token of 100k identical characters does
// not take minutes. Stale heap entries are skipped when popped, as in HF tokenizers' Word::merge_all.
void Tokenizer::merge_long(const int32_t* init, size_t count, std::vector<int32_t>& out) const {
  struct Cand {
    int32_t rank;
    int32_t pos;
    int32_t left, right;  // the pair when pushed: if either symbol changed since, the entry is stale
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const int32_t n = static_cast<int32_t>(count);
  std::vector<int32_t> sym(init, init + count), prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  // A min-heap (lowest rank, then leftmost, on top) kept in a vector with room for every first pair.
  std::vector<Cand> heap;
  heap.reserve(size_t(n));
  const std::greater<Cand> later;
  auto push = [&](int32_t i) {
    if (i < 0 || next[i] < 0) return;
    if (const Merge* m = find_merge(sym[i], sym[next[i]])) {
      heap.push_back({m->rank, i, sym[i], sym[next[i]]});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Cand c = heap.back();
    heap.pop_back();
    int32_t i = c.pos;
    if (sym[i] != c.left || next[i] < 0 || sym[next[i]] != c.right) continue;
    int32_t j = next[i];
    sym[i] = find_merge(c.left, c.right)->id;
    sym[j] = INT32_MIN;  // removed
    next[i] = next[j];
    if (next[i] >= 0) prev[next[i]] = i;
    push(prev[i]);
    push(i);
  }
  for (int32_t i = 0; i >= 0 && n > 0; i = next[i]) out.push_back(sym[i]);
}

// One SentencePiece pre-token: its characters (a character the vocabulary lacks: its byte-fallback tokens,
// or -1 for the unknown token), merged, then the unknown ones replaced (fused when fuse_unk).
void Tokenizer::spm_bpe(std::string_view piece, std::vector<int32_t>& out) const {
  std::vector<int32_t> syms;
  syms.reserve(piece.size());
  const auto* p = reinterpret_cast<const unsigned char*>(piece.data());
  for (size_t i = 0; i < piece.size();) {
    size_t len = 1;
    if (p[i] < 0x80) {
      const int32_t id = ascii_ids_[p[i]];
      if (id >= 0) {
        syms.push_back(id);
        ++i;
        continue;
      }
    } else {
      tokenizer_detail::utf8_next(p + i, piece.size() - i, len);
      const int32_t id = piece_ids_.find(piece.substr(i, len));
      if (id >= 0) {
        syms.push_back(id);
        i += len;
        continue;
      }
    }
    if (byte_fallback_ids_[0] >= 0) {
      for (size_t k = 0; k < len; ++k) syms.push_back(byte_fallback_ids_[p[i + k]]);
    } else {
      syms.push_back(-1);
    }
    i += len;
  }
  const size_t before = out.size();
  if (syms.size() == 1) {
    out.push_back(syms[0]);
  } else if (syms.size() > kHeapThreshold) {
    merge_long(syms.data(), syms.size(), out);
  } else if (!syms.empty()) {
    merge_short(syms.data(), syms.size(), out);
  }
  // Unknown characters: the unknown token, one per run with fuse_unk (sentencepiece always fuses).
  size_t w = before;
  bool prev_unknown = false;
  for (size_t r = before; r < out.size(); ++r) {
    const int32_t id = out[r];
    if (id >= 0) {
      out[w++] = id;
      prev_unknown = false;
      continue;
    }
    if (unk_id_ < 0)
      throw Error(ErrorKind::Argument,
                  "tokenizer: a character of the text is not in the vocabulary, which has neither byte "
                  "fallback nor an unknown token");
    if (!(fuse_unk_ && prev_unknown)) out[w++] = unk_id_;
    prev_unknown = true;
  }
  out.resize(w);
}

std::vector<int32_t> Tokenizer::bpe_for_test(std::string_view piece, BpeImpl impl) const {
  std::vector<int32_t> out;
  if (piece.empty()) return out;
  std::vector<int32_t> syms;
  for (unsigned char ch : piece) syms.push_back(byte_ids_[ch]);
  if (impl == BpeImpl::heap) {
    merge_long(syms.data(), syms.size(), out);
  } else if (impl == BpeImpl::scan) {
    if (piece.size() > kHeapThreshold)
      throw Error(ErrorKind::Argument, "bpe_for_test: piece too long for the scan");
    merge_short(syms.data(), syms.size(), out);
  } else {
    // The obvious reference: find the lowest-rank pair (leftmost on ties), merge it, repeat.
    for (unsigned char ch : piece) out.push_back(byte_ids_[ch]);
    while (out.size() > 1) {
      size_t best = 0;
      int32_t best_rank = INT32_MAX;
      for (size_t i = 0; i + 1 < out.size(); ++i) {
        const Merge* m = find_merge(out[i], out[i + 1]);
        if (m && m->rank < best_rank) best_rank = m->rank, best = i;
      }
      if (best_rank == INT32_MAX) break;
      out[best] = find_merge(out[best], out[best + 1])->id;
      out.erase(out.begin() + best + 1);
    }
  }
  return out;
}

namespace {

uint64_t hash_bytes(std::string_view s) {
  // Multiply-xorshift over 8-byte words: pre-tokens are short, so this beats std::hash's loop.
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  if (i < s.size()) {
    uint64_t w = 0;
    std::memcpy(&w, s.data() + i, s.size() - i);
    h = (h ^ w) * 0x94D049BB133111EBull;
    h ^= h >> 29;
  }
  return h;
}

}  // namespace

namespace tokenizer_detail {

// The ids of the pre-tokens seen so far in one encode() call: open addressing, keys are views of
// the caller's text (or of its normalized pieces, which live as long), values are spans of one shared id
// array. Exact: a hit compares the bytes.
class PieceCache {
 public:
  PieceCache() : slots_(1024) {}

  // The cached ids of `piece`, or null; on a miss `hash` is kept for insert().
  const int32_t* find(std::string_view piece, uint32_t& n) {
    hash_ = hash_bytes(piece);
    for (size_t i = hash_ & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      const Slot& s = slots_[i];
      if (!s.key.data()) {
        free_ = i;
        return nullptr;
      }
      if (s.hash == hash_ && s.key == piece) {
        n = s.len;
        return ids_.data() + s.begin;
      }
    }
  }

  // After a find() miss of the same piece.
  void insert(std::string_view piece, const int32_t* ids, uint32_t n) {
    slots_[free_] = Slot{hash_, piece, static_cast<uint32_t>(ids_.size()), n};
    ids_.insert(ids_.end(), ids, ids + n);
    if (++used_ * 2 > slots_.size()) grow();
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    std::string_view key;  // data() == nullptr: empty
    uint32_t begin = 0, len = 0;
  };
  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    for (const Slot& s : old) {
      if (!s.key.data()) continue;
      size_t i = s.hash & (slots_.size() - 1);
      while (slots_[i].key.data()) i = (i + 1) & (slots_.size() - 1);
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  std::vector<int32_t> ids_;
  size_t used_ = 0, free_ = 0;
  uint64_t hash_ = 0;
};

}  // namespace tokenizer_detail

using tokenizer_detail::PieceCache;

void Tokenizer::encode_ordinary(std::string_view text, bool at_start, std::vector<int32_t>& out,
                                PieceCache& cache, std::list<std::string>& keep) const {
  if (spm_) {
    encode_sentencepiece(text, at_start, out, cache, keep);
    return;
  }
  if (char_level_) {
    // One id per character (the text is valid UTF-8: encode() checked it). tokenizers drops a character
    // its vocabulary lacks, silently; nanoGPT's stoi[c] fails on it: refused, naming it.
    for (size_t i = 0; i < text.size();) {
      size_t n = 1;
      tokenizer_detail::utf8_next(reinterpret_cast<const unsigned char*>(text.data() + i), text.size() - i,
                                  n);
      const std::string_view c = text.substr(i, n);
      const int32_t id = char_ids_.find(c);
      if (id < 0) {
        char cp[16];
        std::snprintf(cp, sizeof cp, "U+%04X", tokenizer_detail::utf8_decode(c));
        throw Error(ErrorKind::Argument, "tokenizer: the character " + json_quote(std::string(c)) + " (" +
                                             cp + ") is not in this character-level vocabulary");
      }
      out.push_back(id);
      i += n;
    }
    return;
  }
  if (n_merges_ == 0) {
    // No merges: every byte is its own token whatever the split, so skip the regex.
    const size_t before = out.size();
    for (unsigned char c : text) out.push_back(byte_ids_[c]);
    if (missing_bytes_) check_missing_bytes(text, out, before);
    return;
  }
  // Text is mostly a few thousand distinct words repeated. The cache lives in one encode() call (its
  // keys view the caller's text), so concurrent encodes share nothing and need no lock.
  pre_->split(text, [&](std::string_view piece) {
    if (piece.size() == 1) {
      out.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
      if (missing_bytes_) check_missing_bytes(piece, out, out.size() - 1);
      return;
    }
    uint32_t n = 0;
    if (const int32_t* ids = cache.find(piece, n)) {
      out.insert(out.end(), ids, ids + n);
      return;
    }
    size_t before = out.size();
    if (ignore_merges_) {
      // tokenizers' ignore_merges: a pre-token the vocabulary has is that token, whatever the merges say.
      const int32_t id = piece_ids_.find(piece);
      if (id >= 0) {
        out.push_back(id);
        cache.insert(piece, out.data() + before, 1);
        return;
      }
    }
    bpe(piece, out);
    if (missing_bytes_) check_missing_bytes(piece, out, before);
    cache.insert(piece, out.data() + before, static_cast<uint32_t>(out.size() - before));
  });
}

// A byte the vocabulary has no symbol for merges with nothing and stays -1: refused, naming it.
void Tokenizer::check_missing_bytes(std::string_view piece, const std::vector<int32_t>& out,
                                    size_t from) const {
  for (size_t i = from; i < out.size(); ++i) {
    if (out[i] >= 0) continue;
    for (unsigned char c : piece) {
      if (byte_ids_[c] >= 0) continue;
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", c);
      throw Error(ErrorKind::Argument, std::string("tokenizer: the text needs byte ") + hex + " (in " +
                                           json_quote(std::string(piece)) +
                                           "), which this byte-level vocabulary has no symbol for");
    }
  }
}

void Tokenizer::encode_sentencepiece(std::string_view text, bool at_start, std::vector<int32_t>& out,
                                     PieceCache& cache, std::list<std::string>& keep) const {
  using tokenizer_detail::Prefix;
  if (text.empty()) return;
  const std::string_view space = tokenizer_detail::kSpaceSymbol;
  const bool starts_with_space = text.starts_with(' ') || text.starts_with(space);
  bool prefix = false;
  switch (static_cast<Prefix>(prefix_)) {
    case Prefix::none:
      break;
    case Prefix::every_section:
      prefix = true;
      break;
    case Prefix::every_section_unless_space:
      prefix = !starts_with_space;
      break;
    case Prefix::first_section:
      prefix = at_start;
      break;
    case Prefix::first_section_unless_space:
      prefix = at_start && !starts_with_space;
      break;
  }
  // The cache's keys view the normalized text, which lives in `keep` until the end of the call.
  std::string& norm = keep.emplace_back();
  norm.reserve(text.size() + text.size() / 4 + 3);
  if (prefix) norm += space;
  for (char c : text) {
    if (c == ' ' && escape_spaces_) {
      norm += space;
    } else {
      norm += c;
    }
  }
  auto one = [&](std::string_view piece) {
    uint32_t n = 0;
    if (const int32_t* ids = cache.find(piece, n)) {
      out.insert(out.end(), ids, ids + n);
      return;
    }
    const size_t before = out.size();
    spm_bpe(piece, out);
    cache.insert(piece, out.data() + before, static_cast<uint32_t>(out.size() - before));
  };
  const std::string_view all(norm);
  if (!split_on_space_ && spm_split_words_) {
    // Words: each starts at a U+2581 that follows another character (spm_split_words_ says why this is
    // exact).
    size_t begin = 0;
    for (size_t p = all.find(space, 1); p != std::string_view::npos; p = all.find(space, p + 1)) {
      if (p >= space.size() && all.compare(p - space.size(), space.size(), space) == 0) continue;
      one(all.substr(begin, p - begin));
      begin = p;
    }
    one(all.substr(begin));
    return;
  }
  if (!split_on_space_) {
    one(all);
    return;
  }
  // Metaspace's split: each U+2581 begins a piece (tokenizers' MergedWithNext).
  size_t begin = 0;
  while (begin < all.size()) {
    size_t next = all.find(space, begin + 1);
    if (next == std::string_view::npos) next = all.size();
    one(all.substr(begin, next - begin));
    begin = next;
  }
}

static void check_utf8(std::string_view text) {
  size_t bad = tokenizer_detail::utf8_first_invalid(text);
  if (bad != std::string_view::npos)
    throw Error(ErrorKind::Argument,
                "tokenizer: the text is not valid UTF-8 at byte offset " + std::to_string(bad));
}

std::vector<std::string_view> Tokenizer::pre_tokenize(std::string_view text) const {
  check_utf8(text);
  if (char_level_) return {text};  // no pre_tokenizer: the text is one piece
  std::vector<std::string_view> pieces;
  pre_->split(text, [&](std::string_view piece) { pieces.push_back(piece); });
  return pieces;
}

namespace {

// Where the Unicode white space at the end of `s` begins (tokenizers' lstrip: the regex \s*$).
size_t white_space_start_at_end(std::string_view s) {
  size_t i = s.size();
  while (i > 0) {
    size_t begin = i - 1;
    while (begin > 0 && (static_cast<unsigned char>(s[begin]) & 0xC0) == 0x80) --begin;
    size_t len = 0;
    tokenizer_detail::utf8_next(reinterpret_cast<const unsigned char*>(s.data()) + begin, i - begin, len);
    if (!tokenizer_detail::is_white_space(tokenizer_detail::utf8_decode(s.substr(begin, len)))) break;
    i = begin;
  }
  return i;
}

// How many bytes of Unicode white space `s` starts with (tokenizers' rstrip: the regex ^\s*).
size_t white_space_length_at_start(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    tokenizer_detail::utf8_next(reinterpret_cast<const unsigned char*>(s.data()) + i, s.size() - i, len);
    if (!tokenizer_detail::is_white_space(tokenizer_detail::utf8_decode(s.substr(i, len)))) break;
    i += len;
  }
  return i;
}

}  // namespace

// tokenizers' AddedVocabulary::find_matches with one pass's tokens, step for step: the leftmost-longest
// matches, without overlaps, in order; a special token without allow_special is skipped (its text stays
// text, and the search goes on after it); lstrip / rstrip widen a match over white space. The text
// between the matches goes to on_text, the ids to `out`.
template <typename OnText>
void Tokenizer::split_added(std::string_view text, const AddedPass& pass, bool allow_special,
                            OnText&& on_text, std::vector<int32_t>& out) const {
  if (!pass.active(allow_special)) {
    on_text(text);
    return;
  }
  const size_t n = text.size();
  // The longest token of the pass at `at`, or null.
  auto match_at = [&](size_t at) -> const AddedToken* {
    if (!pass.starts[static_cast<unsigned char>(text[at])]) return nullptr;
    for (uint32_t k : pass.tokens) {  // longest first
      const std::string& m = added_[k].match;
      if (m.size() <= n - at && std::memcmp(text.data() + at, m.data(), m.size()) == 0) return &added_[k];
    }
    return nullptr;
  };
  size_t pos = 0;           // where the search for the next match starts
  size_t start_offset = 0;  // where the text not yet handed on starts
  while (pos < n) {
    const AddedToken* hit = nullptr;
    size_t begin = pos;
    while (begin < n && !(hit = match_at(begin))) ++begin;
    if (!hit) break;
    size_t start = begin, stop = begin + hit->match.size();
    pos = stop;  // the search goes on after the match, whatever rstrip takes
    if (hit->special && !allow_special) continue;
    if (hit->lstrip) start = std::max(white_space_start_at_end(text.substr(0, start)), start_offset);
    if (hit->rstrip) stop += white_space_length_at_start(text.substr(stop));
    if (start_offset < start) on_text(text.substr(start_offset, start - start_offset));
    out.push_back(hit->id);
    // As in tokenizers, a match inside white space an rstrip took can move this back.
    start_offset = stop;
  }
  if (start_offset < n) on_text(text.substr(start_offset));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  check_utf8(text);
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 8);
  PieceCache cache;
  // As tokenizers' AddedVocabulary::extract_and_normalize: the "normalized": false tokens split the text
  // as given; each piece between them is normalized on its own, and the "normalized": true tokens split
  // that. Normalized pieces live until the end of the call: the cache's keys view them (a list: its
  // strings never move, and an empty one allocates nothing).
  std::list<std::string> normalized;
  auto normalized_pass = [&](std::string_view piece) {
    const bool at_start = piece.data() == text.data();
    if (nfc_) {
      std::string nfc;
      if (tokenizer_detail::nfc_normalize(piece, nfc)) {
        normalized.push_back(std::move(nfc));
        piece = normalized.back();
      }
    }
    const char* section_start = piece.data();
    split_added(
        piece, normalized_pass_, allow_special,
        [&](std::string_view p) {
          encode_ordinary(p, at_start && p.data() == section_start, out, cache, normalized);
        },
        out);
  };
  split_added(text, raw_pass_, allow_special, normalized_pass, out);
  return out;
}

std::string Tokenizer::normalize(std::string_view text) const {
  check_utf8(text);
  std::string nfc;
  if (nfc_ && tokenizer_detail::nfc_normalize(text, nfc)) return nfc;
  return std::string(text);
}

std::vector<int32_t> Tokenizer::add_special_tokens(std::span<const int32_t> ids) const {
  std::vector<int32_t> out;
  out.reserve(special_prefix_.size() + ids.size() + special_suffix_.size());
  out.insert(out.end(), special_prefix_.begin(), special_prefix_.end());
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), special_suffix_.begin(), special_suffix_.end());
  return out;
}

std::vector<int32_t> Tokenizer::encode_with_specials(std::string_view text, bool allow_special) const {
  std::vector<int32_t> ids = encode(text, allow_special);
  if (special_prefix_.empty() && special_suffix_.empty()) return ids;
  return add_special_tokens(ids);
}

}  // namespace minigpt
