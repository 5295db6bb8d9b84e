// Loads a tokenizer (tokenizer_files.cpp reads the formats) and builds its tables: the byte alphabet, the
// ids' bytes and symbols, the added tokens, the post_processor's template and the merge table.
#include "minigpt/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "formats/gguf.h"
#include "formats/llama2c.h"
#include "formats/llmc.h"
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

// What a SentencePiece token stands for: its text with U+2581 as a space, or, spelled <0xNN>, that byte.
std::string spm_piece_bytes(std::string_view sym, bool may_be_byte) {
  if (may_be_byte && sym.size() == 6 && sym.starts_with("<0x") && sym.back() == '>' &&
      std::isxdigit(static_cast<unsigned char>(sym[3])) && std::isxdigit(static_cast<unsigned char>(sym[4])))
    return std::string(1, static_cast<char>(std::stoi(std::string(sym.substr(3, 2)), nullptr, 16)));
  std::string out;
  const std::string_view space = tokenizer_detail::kSpaceSymbol;
  for (size_t i = 0; i < sym.size();) {
    if (sym.compare(i, space.size(), space) == 0) {
      out += ' ';
      i += space.size();
    } else {
      out += sym[i++];
    }
  }
  return out;
}

std::string read_file(const std::filesystem::path& path) {
  return read_regular_file(path, kMaxTokenizerBytes, "tokenizer file");
}

}  // namespace

namespace {

// A regular file that is neither GGUF nor an llm.c checkpoint: a tokenizer file on its own (--tokenizer).
bool tokenizer_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  unsigned char magic[28] = {};
  in.read(reinterpret_cast<char*>(magic), sizeof magic);
  const size_t n = size_t(in.gcount());
  if (n < 4) return false;  // ModelSource says what is wrong with it
  const int32_t m = int32_t(uint32_t(magic[0]) | uint32_t(magic[1]) << 8 | uint32_t(magic[2]) << 16 |
                            uint32_t(magic[3]) << 24);
  // A model checkpoint (GGUF, llm.c's, llama2.c's with "ak42" or a legacy one, told by its size) goes to
  // ModelSource, which says whether it holds a tokenizer.
  uint64_t implied = 0;
  return std::memcmp(magic, "GGUF", 4) != 0 && !is_llmc_magic(m) && uint32_t(m) != kLlama2cMagic &&
         !probe_llama2c_legacy(magic, n, uint64_t(std::filesystem::file_size(path, ec)), &implied);
}

// llama2.c's tokenizer.bin: a small longest-token length, then (score, length <= it, bytes) to the end, <unk>
// first. Anything else that is not GGUF is taken for a sentencepiece model.
bool looks_like_llama2c(std::string_view b) {
  auto u32 = [&](size_t at) {
    uint32_t u = 0;
    for (int k = 0; k < 4; ++k) u |= uint32_t(static_cast<unsigned char>(b[at + k])) << (8 * k);
    return u;
  };
  if (b.size() < 4 + 8 + 5) return false;
  const uint32_t max_len = u32(0);
  return max_len > 0 && max_len <= 4096 && u32(8) == 5 && b.substr(12, 5) == "<unk>";
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& dir) {
  if (tokenizer_file(dir)) {
    const std::string bytes = read_file(dir);
    if (looks_like_llama2c(bytes)) return from_llama2c(bytes, dir.string());
    return from_sentencepiece(bytes, dir.string());
  }
  return load(ModelSource::open(dir));
}

Tokenizer Tokenizer::from_llama2c(std::string_view bytes, const std::string& source) {
  return build(tokenizer_detail::read_llama2c_tokenizer(bytes, source), source);
}

Tokenizer Tokenizer::from_sentencepiece(std::string_view bytes, const std::string& source) {
  return build(tokenizer_detail::read_sentencepiece_model(bytes, source), source);
}

Tokenizer Tokenizer::load(const ModelSource& source) {
  const std::filesystem::path& dir = source.path();
  // llm.c keeps its tokenizer in a file of its own, token bytes without the merges: it can only decode.
  if (source.format() == ModelFormat::Llmc) throw llmc_no_tokenizer_error(dir);
  if (source.format() == ModelFormat::Llama2c) throw llama2c_no_tokenizer_error(dir);
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
  if (std::filesystem::exists(dir / "tokenizer.model")) {
    const auto path = dir / "tokenizer.model";
    return from_sentencepiece(read_file(path), path.string());
  }
  throw Error(ErrorKind::Io,
              dir.string() + ": no tokenizer.json, nor vocab.json + merges.txt, nor tokenizer.model");
}

Tokenizer Tokenizer::load_for_model(const ModelSource& model, int64_t n_vocab, const std::string& tokenizer) {
  Tokenizer tok = tokenizer.empty() ? load(model) : load(std::filesystem::path(tokenizer));
  if (tok.n_vocab() > n_vocab) {
    throw Error(ErrorKind::Config, (tokenizer.empty() ? model.path().string() : tokenizer) +
                                       ": the tokenizer has " + std::to_string(tok.n_vocab()) +
                                       " tokens, more than the model's vocabulary of " +
                                       std::to_string(n_vocab) + " (vocab_size)");
  }
  // Fewer tokens than the vocabulary is how padded vocabularies look (GPT-2's 50257 tokens in llm.c's and
  // nanoGPT's 50304 rows, Pythia's 50277 in up to 50688): those ids decode to no text, as in transformers.
  // A separate tokenizer short by more than any padding is another model's, whose text would come out empty.
  constexpr int64_t kMaxPadding = 1024;
  if (!tokenizer.empty() && n_vocab - tok.n_vocab() > kMaxPadding) {
    throw Error(ErrorKind::Config, tokenizer + ": the tokenizer has " + std::to_string(tok.n_vocab()) +
                                       " tokens, " + std::to_string(n_vocab - tok.n_vocab()) +
                                       " fewer than the model's vocabulary of " + std::to_string(n_vocab) +
                                       " (vocab_size): it is not this model's tokenizer");
  }
  return tok;
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
  // Gathered by id here, then packed into the tables (StringTable) once every token has its text.
  std::vector<std::string> id_bytes(size_t(t.n_vocab_)), id_symbols(size_t(t.n_vocab_));
  t.has_id_.assign(t.n_vocab_, false);
  for (size_t v = 0; v < raw.vocab.size(); ++v) {
    const auto& [sym, id] = raw.vocab[v];
    if (t.has_id_[id])
      throw Error(ErrorKind::Format, where + ": id " + std::to_string(id) + " is given to both \"" +
                                         id_symbols[id] + "\" and \"" + sym + "\"");
    t.has_id_[id] = true;
    id_symbols[id] = sym;
    if (raw.char_level) {
      // The symbol is the character itself (no byte alphabet): exactly one, valid UTF-8.
      size_t n = 0;
      if (sym.empty() ||
          tokenizer_detail::utf8_next(reinterpret_cast<const unsigned char*>(sym.data()), sym.size(), n) !=
              Utf8Status::Valid ||
          n != sym.size())
        throw Error(ErrorKind::Format, where + ": token " + json_quote(sym) + " (id " + std::to_string(id) +
                                           ") is not one character, in a character-level vocabulary");
      id_bytes[id] = sym;
      t.char_ids_.emplace(sym, static_cast<int32_t>(id));
    } else if (raw.sentencepiece) {
      // A <0xNN> token is its byte when it is byte fallback (its type says so, or tokenizer.json's
      // byte_fallback).
      const bool byte_token =
          raw.types.empty() ? raw.byte_fallback : raw.types[v] == tokenizer_detail::PieceType::byte;
      id_bytes[id] = spm_piece_bytes(sym, byte_token);
    } else {
      id_bytes[id] = symbol_to_bytes(sym);
    }
  }
  t.char_level_ = raw.char_level;
  t.spm_ = raw.sentencepiece;
  t.bos_ = raw.bos_id >= 0 && raw.bos_id < t.n_vocab_ ? static_cast<int32_t>(raw.bos_id) : -1;
  t.eos_ = raw.eos_id >= 0 && raw.eos_id < t.n_vocab_ ? static_cast<int32_t>(raw.eos_id) : -1;
  t.ignore_merges_ = raw.ignore_merges;
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
    id_symbols[a.id] = a.content;
    id_bytes[a.id] = a.content;
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

  const bool byte_level = !t.char_level_ && !t.spm_;
  for (int b = 0; b < 256 && byte_level; ++b) {
    // A vocabulary may lack bytes: valid UTF-8 never holds 0xC0, 0xC1 or 0xF5..0xFF (GPT-NeoX's lacks them),
    // StarCoder's lacks 0xF1..0xF3 (planes 4 to 15, unassigned), falcon's some control characters. A text
    // that needs one is refused by encode() (tokenizers drops the byte silently); a vocabulary without
    // a printable ASCII byte is refused here.
    auto it = sym_to_id.find(alphabet().symbol(static_cast<unsigned char>(b)));
    // Every real one has the printable ASCII bytes and the space; one without is not byte-level at all.
    if (it == sym_to_id.end() && b >= 0x20 && b <= 0x7E)
      throw Error(ErrorKind::Format, where + ": the vocabulary lacks the symbol of byte " +
                                         std::to_string(b) + ", so not every text can be encoded");
    t.byte_ids_[b] = it == sym_to_id.end() ? -1 : it->second;
    t.missing_bytes_ |= it == sym_to_id.end() && !(b == 0xC0 || b == 0xC1 || b >= 0xF5);
  }
  if (t.ignore_merges_) {
    // By the bytes each token stands for; of two with the same bytes, the vocabulary's first.
    for (auto& [sym, id] : raw.vocab) t.piece_ids_.emplace(id_bytes[id], static_cast<int32_t>(id));
  }
  t.id_bytes_.reserve(id_bytes.size());
  t.id_symbols_.reserve(id_symbols.size());
  for (size_t id = 0; id < id_bytes.size(); ++id) {
    t.id_bytes_.push_back(id_bytes[id]);
    t.id_symbols_.push_back(id_symbols[id]);
  }
  t.id_bytes_.shrink_to_fit();
  t.id_symbols_.shrink_to_fit();
  t.char_ids_.shrink_to_fit();
  std::vector<std::pair<uint64_t, Merge>> score_merges;
  if (t.spm_) score_merges = t.build_sentencepiece(raw, sym_to_id, where);
  const size_t n_merge_entries = raw.merges.size() + score_merges.size();
  size_t cap = 1024;
  while (cap < n_merge_entries * 2) cap *= 2;
  t.merge_slots_.assign(cap, MergeSlot{});
  for (const auto& [key, m] : score_merges) t.add_merge(key, m);
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
  t.piece_ids_.shrink_to_fit();
  t.pre_ = std::make_shared<const PreTokenizer>(raw.splits);
  {
    const std::string gpt2 = tokenizer_detail::gpt2_step().pattern;
    const auto& sp = raw.splits;
    const bool digits_first =
        sp.size() == 2 &&
        (sp[0].pattern == tokenizer_detail::digits_step(tokenizer_detail::Digits::individual).pattern ||
         sp[0].pattern == tokenizer_detail::digits_step(tokenizer_detail::Digits::contiguous).pattern);
    t.gpt2_split_ = byte_level && !t.ignore_merges_ && !sp.empty() && sp.back().pattern == gpt2 &&
                    sp.back().utf && (sp.size() == 1 || digits_first);
  }
  return t;
}

// The SentencePiece tables: the characters' ids, the byte-fallback tokens, the unknown token, the space
// rules, and (with scores) the merges the scores imply: for each mergeable token, each way of cutting it into
// two mergeable tokens merges them into it, ranked by its score (equal scores, equal ranks: the leftmost pair
// of those merges first, as in sentencepiece's and llama.cpp's queues).
std::vector<std::pair<uint64_t, Tokenizer::Merge>> Tokenizer::build_sentencepiece(
    const RawTokenizer& raw, const std::unordered_map<std::string, int32_t>& sym_to_id,
    const std::string& where) {
  using tokenizer_detail::PieceType;
  fuse_unk_ = raw.fuse_unk;
  escape_spaces_ = raw.escape_spaces;
  split_on_space_ = raw.split_on_space;
  strip_prefix_ = raw.strip_prefix_on_decode;
  prefix_ = static_cast<uint8_t>(raw.prefix);
  unk_id_ = raw.unk_id >= 0 ? static_cast<int32_t>(raw.unk_id) : -1;
  if (!raw.types.empty() && raw.types.size() != raw.vocab.size())
    throw Error(ErrorKind::Format, where + ": not one token type per token");
  if (!raw.scores.empty() && raw.scores.size() != raw.vocab.size())
    throw Error(ErrorKind::Format, where + ": not one score per token");
  // Mergeable: what sentencepiece's BPE looks pairs up in (normal and user-defined pieces); without types
  // (tokenizer.json), the whole vocabulary, as tokenizers looks characters up.
  auto mergeable = [&](size_t i) {
    return raw.types.empty() || raw.types[i] == PieceType::normal || raw.types[i] == PieceType::user_defined;
  };
  std::fill(std::begin(ascii_ids_), std::end(ascii_ids_), -1);
  for (size_t i = 0; i < raw.vocab.size(); ++i) {
    if (!mergeable(i)) continue;
    const auto& [sym, id] = raw.vocab[i];
    piece_ids_.emplace(sym, static_cast<int32_t>(id));
    if (sym.size() == 1 && static_cast<unsigned char>(sym[0]) < 128)
      ascii_ids_[static_cast<unsigned char>(sym[0])] = static_cast<int32_t>(id);
  }
  spm_split_words_ = true;
  const std::string_view space = tokenizer_detail::kSpaceSymbol;
  for (size_t e = 0; e < piece_ids_.size() && spm_split_words_; ++e) {
    const std::string_view sym = piece_ids_.key(e);
    for (size_t p = sym.find(space, 1); p != std::string::npos && spm_split_words_;
         p = sym.find(space, p + 1))
      if (p < space.size() || sym.compare(p - space.size(), space.size(), space) != 0)
        spm_split_words_ = false;
    if (!spm_split_words_) break;
  }
  std::fill(std::begin(byte_fallback_ids_), std::end(byte_fallback_ids_), -1);
  if (raw.byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      const auto it = sym_to_id.find(name);
      if (it == sym_to_id.end())
        throw Error(ErrorKind::Format, where + ": byte_fallback, but the vocabulary lacks the token " + name);
      byte_fallback_ids_[b] = it->second;
    }
  }
  std::vector<std::pair<uint64_t, Merge>> merges;
  if (raw.scores.empty()) return merges;
  std::vector<float> distinct;
  for (size_t i = 0; i < raw.vocab.size(); ++i)
    if (mergeable(i)) distinct.push_back(raw.scores[i]);
  std::sort(distinct.begin(), distinct.end(), std::greater<float>());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  for (size_t i = 0; i < raw.vocab.size(); ++i) {
    if (!mergeable(i)) continue;
    const std::string& sym = raw.vocab[i].first;
    const int32_t rank = static_cast<int32_t>(
        std::lower_bound(distinct.begin(), distinct.end(), raw.scores[i], std::greater<float>()) -
        distinct.begin());
    for (size_t k = 1; k < sym.size(); ++k) {
      if ((static_cast<unsigned char>(sym[k]) & 0xC0) == 0x80) continue;  // inside a character
      const std::string_view whole = sym;
      const int32_t l = piece_ids_.find(whole.substr(0, k)), r = piece_ids_.find(whole.substr(k));
      if (l < 0 || r < 0) continue;
      merges.emplace_back(pair_key(l, r), Merge{rank, static_cast<int32_t>(raw.vocab[i].second)});
    }
  }
  return merges;
}

Tokenizer Tokenizer::byte_level() {
  Tokenizer t;
  t.n_vocab_ = 256;
  t.has_id_.assign(256, true);
  for (int b = 0; b < 256; ++b) {
    t.byte_ids_[b] = b;
    t.id_bytes_.push_back(std::string(1, static_cast<char>(b)));
    t.id_symbols_.push_back(alphabet().symbol(static_cast<unsigned char>(b)));
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

}  // namespace minigpt
