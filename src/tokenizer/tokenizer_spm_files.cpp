// Reads the two SentencePiece files that are not JSON: llama2.c's tokenizer.bin and sentencepiece's
// tokenizer.model (a serialized ModelProto), into a RawTokenizer of a SentencePiece BPE with scores.
//
// tokenizer.model is read here, from the protobuf wire format, rather than with libsentencepiece: Debian's
// libsentencepiece-dev ships only sentencepiece_processor.h, whose API does not expose what decides the ids
// (the model type, the normalizer spec's add_dummy_prefix / remove_extra_whitespaces / rule name,
// trainer_spec.byte_fallback); those need sentencepiece_model.pb.h and protobuf, which it does not ship.
// The fields read are few and fixed (sentencepiece_model.proto): ModelProto.pieces (1: piece, 2: score,
// 3: type), trainer_spec (3: model_type, 24: treat_whitespace_as_suffix, 35: byte_fallback, 41: bos_id,
// 42: eos_id), normalizer_spec
// (1: name, 2: precompiled_charsmap, 3: add_dummy_prefix, 4: remove_extra_whitespaces, 5:
// escape_whitespaces).
#include <cstdint>
#include <cstring>
#include <string>

#include "minigpt/error.h"
#include "tokenizer/tokenizer_internal.h"

namespace minigpt::tokenizer_detail {
namespace {

// ---- llama2.c -------------------------------------------------------------------------------------

// The first 256 byte tokens follow <unk>, <s>, </s> (ids 3..258); tokenizer.py writes each as sentencepiece
// spells it ("<0x0A>"); an earlier export wrote the byte's character (chr(b), UTF-8 encoded).
bool llama2c_byte_token(const std::string& text, int b) {
  char name[8];
  std::snprintf(name, sizeof name, "<0x%02X>", b);
  if (text == name) return true;
  std::string chr;
  if (b < 0x80) {
    chr = std::string(1, static_cast<char>(b));
  } else {
    chr += static_cast<char>(0xC0 | (b >> 6));
    chr += static_cast<char>(0x80 | (b & 0x3F));
  }
  return text == chr;
}

// ---- protobuf wire format -------------------------------------------------------------------------

class Wire {
 public:
  Wire(std::string_view bytes, const std::string& where) : p_(bytes), where_(where) {}
  bool done() const { return pos_ >= p_.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= p_.size()) throw bad("a varint runs past the end");
      const auto c = static_cast<unsigned char>(p_[pos_++]);
      v |= uint64_t(c & 0x7F) << shift;
      if (!(c & 0x80)) return v;
    }
    throw bad("a varint is longer than 10 bytes");
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    if (n > p_.size() - pos_) throw bad("a field's length runs past the end");
    std::string_view s = p_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  float fixed32_float() {
    if (p_.size() - pos_ < 4) throw bad("a 32-bit field runs past the end");
    uint32_t u = 0;
    for (int k = 0; k < 4; ++k) u |= uint32_t(static_cast<unsigned char>(p_[pos_ + k])) << (8 * k);
    pos_ += 4;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  void skip(uint32_t wire_type) {
    switch (wire_type) {
      case 0:
        varint();
        return;
      case 1:
        if (p_.size() - pos_ < 8) throw bad("a 64-bit field runs past the end");
        pos_ += 8;
        return;
      case 2:
        bytes();
        return;
      case 5:
        if (p_.size() - pos_ < 4) throw bad("a 32-bit field runs past the end");
        pos_ += 4;
        return;
      default:
        throw bad("wire type " + std::to_string(wire_type) + " is not protobuf's");
    }
  }
  Error bad(const std::string& what) const {
    return Error(ErrorKind::Format, where_ + ": not a sentencepiece model (protobuf at byte " +
                                        std::to_string(pos_) + "): " + what);
  }

 private:
  std::string_view p_;
  size_t pos_ = 0;
  const std::string& where_;
};

struct SpmModel {
  int model_type = 1;              // UNIGRAM, sentencepiece's default
  int64_t bos_id = 1, eos_id = 2;  // sentencepiece's defaults
  bool byte_fallback = false, treat_whitespace_as_suffix = false;
  std::string normalizer_name;
  bool has_charsmap = false;
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
};

}  // namespace

RawTokenizer read_llama2c_tokenizer(std::string_view bytes, const std::string& where) {
  auto bad = [&](const std::string& what) {
    return Error(ErrorKind::Format, where + ": not a llama2.c tokenizer.bin: " + what);
  };
  size_t pos = 0;
  auto u32 = [&]() {
    if (bytes.size() - pos < 4) throw bad("cut at byte " + std::to_string(pos) + " (truncated?)");
    uint32_t u = 0;
    for (int k = 0; k < 4; ++k) u |= uint32_t(static_cast<unsigned char>(bytes[pos + k])) << (8 * k);
    pos += 4;
    return u;
  };
  const uint32_t max_len = u32();
  if (max_len == 0 || max_len > 4096) throw bad("its longest token is " + std::to_string(max_len) + " bytes");
  RawTokenizer raw;
  while (pos < bytes.size()) {
    const uint32_t score_bits = u32();
    const uint32_t len = u32();
    const size_t id = raw.vocab.size();
    if (len > max_len)
      throw bad("token " + std::to_string(id) + " is " + std::to_string(len) + " bytes, longer than the " +
                std::to_string(max_len) + " the header gives");
    if (bytes.size() - pos < len) throw bad("token " + std::to_string(id) + " is cut (truncated?)");
    float score;
    std::memcpy(&score, &score_bits, 4);
    if (!(score == score)) throw bad("token " + std::to_string(id) + " has a NaN score");
    std::string text(bytes.substr(pos, len));
    pos += len;
    raw.scores.push_back(score);
    raw.vocab.emplace_back(std::move(text), int64_t(id));
  }
  if (raw.vocab.size() < 259)
    throw bad("it has " + std::to_string(raw.vocab.size()) +
              " tokens; llama2.c's have <unk>, <s>, </s> and the 256 byte tokens first");
  if (raw.vocab[0].first != "<unk>" || raw.vocab[1].first != "\n<s>\n" || raw.vocab[2].first != "\n</s>\n")
    throw bad("tokens 0, 1, 2 are not <unk>, <s>, </s> (\"\\n<s>\\n\", \"\\n</s>\\n\")");
  raw.types.assign(raw.vocab.size(), PieceType::normal);
  raw.types[0] = PieceType::unknown;
  raw.types[1] = raw.types[2] = PieceType::control;
  raw.vocab[1].first = "<s>";
  raw.vocab[2].first = "</s>";
  for (int b = 0; b < 256; ++b) {
    auto& [text, id] = raw.vocab[size_t(3 + b)];
    if (!llama2c_byte_token(text, b))
      throw bad("token " + std::to_string(3 + b) + " is not the byte token <0x" + std::to_string(b) + ">");
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    text = name;
    raw.types[size_t(3 + b)] = PieceType::byte;
  }
  // tokenizer.py wrote U+2581 as a space: back to sentencepiece's spelling.
  for (size_t i = 259; i < raw.vocab.size(); ++i) {
    std::string& t = raw.vocab[i].first;
    std::string out;
    for (char c : t) {
      if (c == ' ') {
        out += kSpaceSymbol;
      } else {
        out += c;
      }
    }
    t = std::move(out);
  }
  raw.added.push_back({"<unk>", 0, true});
  raw.added.push_back({"<s>", 1, true});
  raw.added.push_back({"</s>", 2, true});
  raw.sentencepiece = true;
  raw.byte_fallback = true;
  raw.unk_id = 0;
  raw.bos_id = 1;
  raw.eos_id = 2;
  raw.fuse_unk = true;
  raw.escape_spaces = true;
  // run.c's encode() puts the dummy prefix before a non-empty text, and its decode() drops a token's leading
  // space after <s>.
  raw.prefix = Prefix::first_section;
  raw.strip_prefix_on_decode = true;
  return raw;
}

RawTokenizer read_sentencepiece_model(std::string_view bytes, const std::string& where) {
  RawTokenizer raw;
  SpmModel m;
  Wire w(bytes, where);
  while (!w.done()) {
    const uint64_t key = w.varint();
    const uint32_t field = uint32_t(key >> 3), type = uint32_t(key & 7);
    if (field == 1 && type == 2) {  // a SentencePiece
      Wire p(w.bytes(), where);
      std::string piece;
      float score = 0;
      int piece_type = 1;
      while (!p.done()) {
        const uint64_t k = p.varint();
        const uint32_t f = uint32_t(k >> 3), t = uint32_t(k & 7);
        if (f == 1 && t == 2) {
          piece = std::string(p.bytes());
        } else if (f == 2 && t == 5) {
          score = p.fixed32_float();
        } else if (f == 3 && t == 0) {
          piece_type = int(p.varint());
        } else {
          p.skip(t);
        }
      }
      if (piece_type < 1 || piece_type > 6)
        throw Error(ErrorKind::Format, where + ": piece " + std::to_string(raw.vocab.size()) + " has type " +
                                           std::to_string(piece_type) + ", not 1..6");
      raw.scores.push_back(score);
      raw.types.push_back(static_cast<PieceType>(piece_type));
      raw.vocab.emplace_back(std::move(piece), int64_t(raw.vocab.size()));
    } else if (field == 2 && type == 2) {  // TrainerSpec
      Wire t(w.bytes(), where);
      while (!t.done()) {
        const uint64_t k = t.varint();
        const uint32_t f = uint32_t(k >> 3), wt = uint32_t(k & 7);
        if (f == 3 && wt == 0) {
          m.model_type = int(t.varint());
        } else if (f == 24 && wt == 0) {
          m.treat_whitespace_as_suffix = t.varint() != 0;
        } else if (f == 35 && wt == 0) {
          m.byte_fallback = t.varint() != 0;
        } else if (f == 41 && wt == 0) {
          m.bos_id = int64_t(int32_t(t.varint()));
        } else if (f == 42 && wt == 0) {
          m.eos_id = int64_t(int32_t(t.varint()));
        } else {
          t.skip(wt);
        }
      }
    } else if (field == 3 && type == 2) {  // NormalizerSpec
      Wire n(w.bytes(), where);
      while (!n.done()) {
        const uint64_t k = n.varint();
        const uint32_t f = uint32_t(k >> 3), wt = uint32_t(k & 7);
        if (f == 1 && wt == 2) {
          m.normalizer_name = std::string(n.bytes());
        } else if (f == 2 && wt == 2) {
          m.has_charsmap = !n.bytes().empty();
        } else if (f == 3 && wt == 0) {
          m.add_dummy_prefix = n.varint() != 0;
        } else if (f == 4 && wt == 0) {
          m.remove_extra_whitespaces = n.varint() != 0;
        } else if (f == 5 && wt == 0) {
          m.escape_whitespaces = n.varint() != 0;
        } else {
          n.skip(wt);
        }
      }
    } else {
      w.skip(type);
    }
  }
  if (raw.vocab.empty()) throw Error(ErrorKind::Format, where + ": not a sentencepiece model: no pieces");
  if (m.model_type != 2)
    throw Error(ErrorKind::Unsupported, where + ": sentencepiece model type " +
                                            std::string(m.model_type == 1   ? "UNIGRAM"
                                                        : m.model_type == 3 ? "WORD"
                                                        : m.model_type == 4 ? "CHAR"
                                                                            : std::to_string(m.model_type)) +
                                            " is not supported (BPE is)");
  if (m.has_charsmap || (!m.normalizer_name.empty() && m.normalizer_name != "identity"))
    throw Error(ErrorKind::Unsupported, where + ": sentencepiece normalizer '" + m.normalizer_name +
                                            "' is not supported (identity is)");
  if (m.treat_whitespace_as_suffix)
    throw Error(ErrorKind::Unsupported,
                where + ": sentencepiece treat_whitespace_as_suffix is not supported");
  if (m.remove_extra_whitespaces)
    throw Error(
        ErrorKind::Unsupported,
        where + ": sentencepiece remove_extra_whitespaces is not supported (Llama's models have it false)");
  raw.sentencepiece = true;
  raw.byte_fallback = m.byte_fallback;
  raw.escape_spaces = m.escape_whitespaces;
  raw.prefix = m.add_dummy_prefix ? Prefix::first_section : Prefix::none;
  raw.strip_prefix_on_decode = m.add_dummy_prefix;
  raw.fuse_unk = true;  // sentencepiece merges a run of unknown pieces into one
  if (m.bos_id >= 0 && m.bos_id < int64_t(raw.vocab.size())) raw.bos_id = m.bos_id;
  if (m.eos_id >= 0 && m.eos_id < int64_t(raw.vocab.size())) raw.eos_id = m.eos_id;
  for (size_t i = 0; i < raw.vocab.size(); ++i) {
    const PieceType t = raw.types[i];
    if (t == PieceType::unknown && raw.unk_id < 0) raw.unk_id = int64_t(i);
    if (t == PieceType::control || t == PieceType::unknown || t == PieceType::user_defined)
      raw.added.push_back({raw.vocab[i].first, int64_t(i), /*special=*/t != PieceType::user_defined});
  }
  return raw;
}

}  // namespace minigpt::tokenizer_detail
