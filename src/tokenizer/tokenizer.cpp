// Loads a tokenizer (tokenizer_files.cpp reads the formats), builds its tables, encodes text and decodes
// ids.
#include "minigpt/tokenizer.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <list>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "arch/llmc.h"
#include "formats/gguf.h"
#include "io/io.h"
#include "minigpt/error.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/utf8.h"

namespace minigpt {

using tokenizer_detail::json_quote;
using tokenizer_detail::pair_key;
using tokenizer_detail::PreTokenizer;
using tokenizer_detail::RawTokenizer;
using tokenizer_detail::Utf8Status;

namespace {

// Ids beyond this are surely a corrupt file, and would make the id tables huge.
constexpr int64_t kMaxId = 1 << 24;

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68 bytes are
// shifted to U+0100.. so that every vocabulary symbol is printable text.
struct ByteAlphabet {
  uint32_t byte_to_cp[256];
  int16_t cp_to_byte[512];  // -1: not a byte symbol; all byte code points are < 256 + 68
  ByteAlphabet() {
    std::fill(std::begin(cp_to_byte), std::end(cp_to_byte), int16_t{-1});
    uint32_t shifted = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byte_to_cp[b] = printable ? b : shifted++;
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
    }
  }
  std::string symbol(unsigned char b) const {
    std::string s;
    append_utf8(s, byte_to_cp[b]);
    return s;
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

// The bytes a vocabulary symbol stands for. A symbol with characters outside the byte alphabet
// (e.g. an added "<pad>" is fine, but "<é>" is not) can only be a special token: it stands for its
// own UTF-8 text.
std::string symbol_to_bytes(std::string_view sym) {
  std::string out;
  auto p = reinterpret_cast<const unsigned char*>(sym.data());
  size_t i = 0;
  while (i < sym.size()) {
    size_t len = 0;
    if (tokenizer_detail::utf8_next(p + i, sym.size() - i, len) != Utf8Status::Valid) return std::string(sym);
    uint32_t cp = p[i];
    if (len == 2) cp = ((p[i] & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu);
    if (len > 2) return std::string(sym);
    int b = cp < 512 ? alphabet().cp_to_byte[cp] : -1;
    if (b < 0) return std::string(sym);
    out += static_cast<char>(b);
    i += len;
  }
  return out;
}

std::string read_file(const std::filesystem::path& path) {
  return read_regular_file(path, kMaxTokenizerBytes, "tokenizer file");
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& dir) { return load(ModelSource::open(dir)); }

Tokenizer Tokenizer::load(const ModelSource& source) {
  const std::filesystem::path& dir = source.path();
  // llm.c keeps its tokenizer in a file of its own, token bytes without the merges: it can only decode.
  if (source.format() == ModelFormat::Llmc) throw llmc_no_tokenizer_error(dir);
  if (source.format() == ModelFormat::Gguf) return from_gguf(source.gguf());
  if (std::filesystem::exists(dir / "tokenizer.json")) {
    const auto path = dir / "tokenizer.json";
    return from_tokenizer_json(read_file(path), path.string());
  }
  if (std::filesystem::exists(dir / "vocab.json") && std::filesystem::exists(dir / "merges.txt")) {
    const auto vocab_path = dir / "vocab.json", merges_path = dir / "merges.txt";
    const auto config_path = dir / "tokenizer_config.json";
    const std::string config = std::filesystem::exists(config_path)
                                   ? read_regular_file(config_path, kMaxConfigBytes, "tokenizer config")
                                   : std::string();
    return from_vocab_merges(read_file(vocab_path), read_file(merges_path), vocab_path.string(),
                             merges_path.string(), config, config_path.string());
  }
  throw Error(ErrorKind::Io, dir.string() + ": no tokenizer.json, nor vocab.json + merges.txt");
}

Tokenizer Tokenizer::from_gguf(const GgufFile& f) {
  return build(tokenizer_detail::read_gguf_tokenizer(f), f.path());
}

Tokenizer Tokenizer::from_tokenizer_json(std::string_view text, const std::string& source) {
  return build(tokenizer_detail::read_tokenizer_json(text, source), source);
}

Tokenizer Tokenizer::from_vocab_merges(std::string_view vocab_json, std::string_view merges_txt,
                                       const std::string& vocab_source, const std::string& merges_source,
                                       std::string_view tokenizer_config, const std::string& config_source) {
  RawTokenizer raw = tokenizer_detail::read_vocab_merges(vocab_json, merges_txt, vocab_source, merges_source);
  if (!tokenizer_config.empty())
    tokenizer_detail::read_tokenizer_config(tokenizer_config, config_source, raw);
  return build(raw, merges_source);
}

Tokenizer Tokenizer::build(const RawTokenizer& raw, const std::string& where) {
  Tokenizer t;

  std::unordered_map<std::string, int32_t> sym_to_id;
  sym_to_id.reserve(raw.vocab.size());
  int64_t max_id = -1;
  for (auto& [sym, id] : raw.vocab) {
    if (id < 0 || id >= kMaxId)
      throw Error(ErrorKind::Format,
                  where + ": token \"" + sym + "\" has id " + std::to_string(id) + ", out of range");
    max_id = std::max(max_id, id);
    sym_to_id.emplace(sym, static_cast<int32_t>(id));
  }
  for (const auto& a : raw.added) {
    if (a.id < 0 || a.id >= kMaxId)
      throw Error(ErrorKind::Format, where + ": special token \"" + a.content + "\" has id " +
                                         std::to_string(a.id) + ", out of range");
    if (a.content.empty()) throw Error(ErrorKind::Format, where + ": a special token is empty");
    max_id = std::max(max_id, a.id);
  }
  t.n_vocab_ = static_cast<int32_t>(max_id + 1);
  t.id_bytes_.assign(t.n_vocab_, std::string());
  t.id_symbols_.assign(t.n_vocab_, std::string());
  t.has_id_.assign(t.n_vocab_, false);
  for (auto& [sym, id] : raw.vocab) {
    if (t.has_id_[id])
      throw Error(ErrorKind::Format, where + ": id " + std::to_string(id) + " is given to both \"" +
                                         t.id_symbols_[id] + "\" and \"" + sym + "\"");
    t.has_id_[id] = true;
    t.id_symbols_[id] = sym;
    if (raw.char_level) {
      // The symbol is the character itself (no byte alphabet): exactly one, valid UTF-8.
      size_t n = 0;
      if (sym.empty() ||
          tokenizer_detail::utf8_next(reinterpret_cast<const unsigned char*>(sym.data()), sym.size(), n) !=
              Utf8Status::Valid ||
          n != sym.size())
        throw Error(ErrorKind::Format, where + ": token " + json_quote(sym) + " (id " + std::to_string(id) +
                                           ") is not one character, in a character-level vocabulary");
      t.id_bytes_[id] = sym;
      t.char_ids_.emplace(sym, static_cast<int32_t>(id));
    } else {
      t.id_bytes_[id] = symbol_to_bytes(sym);
    }
  }
  t.char_level_ = raw.char_level;
  t.nfc_ = raw.nfc;
  if (t.nfc_) tokenizer_detail::nfc_check_available();
  std::vector<const std::string*> added_text(size_t(t.n_vocab_), nullptr);
  for (const auto& a : raw.added) {
    // Two added tokens with one id and different texts: either text would encode to the id and it would
    // decode to one of them (tokenizers keeps the last, silently), so the other would not round-trip.
    const std::string*& seen = added_text[size_t(a.id)];
    if (seen != nullptr && *seen != a.content)
      throw Error(ErrorKind::Format, where + ": added tokens " + json_quote(*seen) + " and " +
                                         json_quote(a.content) + " have the same id " + std::to_string(a.id));
    seen = &a.content;
    // An added token stands for its text as is, even where the vocabulary also has its id.
    t.has_id_[a.id] = true;
    t.id_symbols_[a.id] = a.content;
    t.id_bytes_[a.id] = a.content;
    AddedToken at{a.content, a.content, static_cast<int32_t>(a.id), a.special, a.normalized,
                  a.lstrip,  a.rstrip};
    // tokenizers matches a normalized token by its normalized content.
    if (at.normalized && t.nfc_) {
      if (tokenizer_detail::utf8_first_invalid(a.content) != std::string_view::npos)
        throw Error(ErrorKind::Format,
                    where + ": added token " + json_quote(a.content) + " is not valid UTF-8");
      tokenizer_detail::nfc_normalize(a.content, at.match);
    }
    t.added_.push_back(std::move(at));
  }
  t.index_added();
  for (auto* part : {&raw.template_prefix, &raw.template_suffix}) {
    for (auto& [name, id] : *part) {
      if (id < 0 || id >= t.n_vocab_ || !t.has_id_[id])
        throw Error(ErrorKind::Format, where + ": post_processor: special token " + json_quote(name) +
                                           " has id " + std::to_string(id) +
                                           ", which no token has (n_vocab " + std::to_string(t.n_vocab_) +
                                           ")");
      (part == &raw.template_prefix ? t.special_prefix_ : t.special_suffix_)
          .push_back(static_cast<int32_t>(id));
    }
  }

  for (int b = 0; b < 256 && !t.char_level_; ++b) {
    auto it = sym_to_id.find(alphabet().symbol(static_cast<unsigned char>(b)));
    if (it == sym_to_id.end())
      throw Error(ErrorKind::Format, where + ": the vocabulary lacks the symbol of byte " +
                                         std::to_string(b) + ", so not every text can be encoded");
    t.byte_ids_[b] = it->second;
  }
  size_t cap = 1024;
  while (cap < raw.merges.size() * 2) cap *= 2;
  t.merge_slots_.assign(cap, MergeSlot{});
  for (size_t r = 0; r < raw.merges.size(); ++r) {
    auto& [l, rt] = raw.merges[r];
    auto li = sym_to_id.find(l), ri = sym_to_id.find(rt), mi = sym_to_id.find(l + rt);
    const char* missing = li == sym_to_id.end()   ? "left"
                          : ri == sym_to_id.end() ? "right"
                          : mi == sym_to_id.end() ? "merged"
                                                  : nullptr;
    if (missing)
      throw Error(ErrorKind::Format, where + ": merge " + std::to_string(raw.merge_lines[r]) + " (\"" + l +
                                         " " + rt + "\"): the " + missing +
                                         " token is not in the vocabulary");
    // A later duplicate wins, as in HF tokenizers (it collects the merges into a map).
    t.add_merge(pair_key(li->second, ri->second), Merge{static_cast<int32_t>(r), mi->second});
  }
  t.pre_ = std::make_shared<const PreTokenizer>(raw.digits);
  return t;
}

Tokenizer Tokenizer::byte_level() {
  Tokenizer t;
  t.n_vocab_ = 256;
  t.id_bytes_.resize(256);
  t.id_symbols_.resize(256);
  t.has_id_.assign(256, true);
  for (int b = 0; b < 256; ++b) {
    t.byte_ids_[b] = b;
    t.id_bytes_[b] = std::string(1, static_cast<char>(b));
    t.id_symbols_[b] = alphabet().symbol(static_cast<unsigned char>(b));
  }
  t.index_added();
  t.pre_ = std::make_shared<const PreTokenizer>();
  return t;
}

void Tokenizer::index_added() {
  raw_pass_ = AddedPass{};
  normalized_pass_ = AddedPass{};
  std::vector<uint32_t> order(added_.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  // Longest first, so that of two tokens matching at the same place the longer one is taken.
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return added_[a].match.size() > added_[b].match.size(); });
  for (uint32_t i : order) {
    const AddedToken& a = added_[i];
    AddedPass& pass = a.normalized ? normalized_pass_ : raw_pass_;
    pass.tokens.push_back(i);
    pass.starts[static_cast<unsigned char>(a.match[0])] = true;
    pass.any_plain |= !a.special;
  }
}

// --- encoding -----------------------------------------------------------------------------------

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
  if (piece.size() == 1) {
    out.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
  } else if (piece.size() > kHeapThreshold) {
    bpe_long(piece, out);
  } else {
    bpe_short(piece, out);
  }
}

// Repeatedly merges the adjacent pair of lowest rank, leftmost first: O(n^2), but for a handful of
// symbols a linear scan beats any heap.
void Tokenizer::bpe_short(std::string_view piece, std::vector<int32_t>& out) const {
  int32_t syms[kHeapThreshold + 1];
  int32_t ranks[kHeapThreshold + 1];  // ranks[i]: rank of the pair (syms[i], syms[i+1])
  size_t n = piece.size();
  for (size_t i = 0; i < n; ++i) syms[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
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

// The same merge order as bpe_short (lowest rank, then leftmost), with a heap over candidate pairs
// and a linked list of symbols: O(n log n), so that a pre-token of 100k identical characters does
// not take minutes. Stale heap entries are skipped when popped, as in HF tokenizers' Word::merge_all.
void Tokenizer::bpe_long(std::string_view piece, std::vector<int32_t>& out) const {
  struct Cand {
    int32_t rank;
    int32_t pos;
    int32_t left, right;  // the pair when pushed: if either symbol changed since, the entry is stale
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const int32_t n = static_cast<int32_t>(piece.size());
  std::vector<int32_t> sym(n), prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    sym[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
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
    sym[j] = -1;  // removed
    next[i] = next[j];
    if (next[i] >= 0) prev[next[i]] = i;
    push(prev[i]);
    push(i);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(sym[i]);
}

std::vector<int32_t> Tokenizer::bpe_for_test(std::string_view piece, BpeImpl impl) const {
  std::vector<int32_t> out;
  if (piece.empty()) return out;
  if (impl == BpeImpl::heap) {
    bpe_long(piece, out);
  } else if (impl == BpeImpl::scan) {
    if (piece.size() > kHeapThreshold)
      throw Error(ErrorKind::Argument, "bpe_for_test: piece too long for the scan");
    bpe_short(piece, out);
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

void Tokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out, PieceCache& cache) const {
  if (char_level_) {
    // One id per character (the text is valid UTF-8: encode() checked it). tokenizers drops a character
    // its vocabulary lacks, silently; nanoGPT's stoi[c] fails on it: refused, naming it.
    for (size_t i = 0; i < text.size();) {
      size_t n = 1;
      tokenizer_detail::utf8_next(reinterpret_cast<const unsigned char*>(text.data() + i), text.size() - i,
                                  n);
      const std::string_view c = text.substr(i, n);
      const auto it = char_ids_.find(std::string(c));
      if (it == char_ids_.end()) {
        char cp[16];
        std::snprintf(cp, sizeof cp, "U+%04X", tokenizer_detail::utf8_decode(c));
        throw Error(ErrorKind::Argument, "tokenizer: the character " + json_quote(std::string(c)) + " (" +
                                             cp + ") is not in this character-level vocabulary");
      }
      out.push_back(it->second);
      i += n;
    }
    return;
  }
  if (n_merges_ == 0) {
    // No merges: every byte is its own token whatever the split, so skip the regex.
    for (unsigned char c : text) out.push_back(byte_ids_[c]);
    return;
  }
  // Text is mostly a few thousand distinct words repeated. The cache lives in one encode() call (its
  // keys view the caller's text), so concurrent encodes share nothing and need no lock.
  pre_->split(text, [&](std::string_view piece) {
    if (piece.size() == 1) {
      out.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
      return;
    }
    uint32_t n = 0;
    if (const int32_t* ids = cache.find(piece, n)) {
      out.insert(out.end(), ids, ids + n);
      return;
    }
    size_t before = out.size();
    bpe(piece, out);
    cache.insert(piece, out.data() + before, static_cast<uint32_t>(out.size() - before));
  });
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
    if (nfc_) {
      std::string nfc;
      if (tokenizer_detail::nfc_normalize(piece, nfc)) {
        normalized.push_back(std::move(nfc));
        piece = normalized.back();
      }
    }
    split_added(
        piece, normalized_pass_, allow_special, [&](std::string_view p) { encode_ordinary(p, out, cache); },
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

// --- decoding -----------------------------------------------------------------------------------

std::string Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= n_vocab_ || !has_id_[id])
    throw Error(ErrorKind::Argument, "tokenizer: token id " + std::to_string(id) +
                                         " is not in the vocabulary (n_vocab " + std::to_string(n_vocab_) +
                                         ")");
  return id_bytes_[id];
}

std::string Tokenizer::token_symbol(int32_t id) const {
  token_bytes(id);  // the range check
  return id_symbols_[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = ids[i];
    if (id < 0 || id >= n_vocab_ || !has_id_[id])
      throw Error(ErrorKind::Argument, "tokenizer: id " + std::to_string(id) + " at position " +
                                           std::to_string(i) + " is not in the vocabulary (n_vocab " +
                                           std::to_string(n_vocab_) + ")");
    out += id_bytes_[id];
  }
  return out;
}

std::optional<int32_t> Tokenizer::special_id(std::string_view text) const {
  for (const AddedToken& a : added_)
    if (a.content == text) return a.id;
  return std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const {
  for (const AddedToken& a : added_)
    if (a.id == id && a.special) return true;
  return false;
}

// --- UTF-8 for display --------------------------------------------------------------------------

namespace {
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Appends the decodable part of `bytes` to out with U+FFFD for invalid subparts; returns how many
// bytes were consumed. With final = false a trailing incomplete character is left unconsumed.
size_t sanitize_into(std::string_view bytes, std::string& out, bool final) {
  auto p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0, n = bytes.size();
  while (i < n) {
    size_t len = 0;
    Utf8Status st = tokenizer_detail::utf8_next(p + i, n - i, len);
    if (st == Utf8Status::Truncated && !final) break;
    if (st == Utf8Status::Valid) {
      out.append(bytes.substr(i, len));
    } else {
      out.append(kReplacement);
    }
    i += len;
  }
  return i;
}
}  // namespace

std::string utf8_sanitize(std::string_view bytes) {
  std::string out;
  sanitize_into(bytes, out, true);
  return out;
}

std::string StreamDecoder::push(int32_t id) {
  pending_ += tokenizer_->token_bytes(id);
  std::string out;
  size_t used = sanitize_into(pending_, out, false);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8_sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace minigpt
