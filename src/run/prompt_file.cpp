#include "run/prompt_file.h"

#include <cstring>

#include "core/hash.h"
#include "minigpt/error.h"

namespace minigpt {
namespace {

constexpr char kMagic[8] = {'M', 'G', 'P', 'T', 'P', 'C', 'F', '1'};

uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint32_t get_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(char(uint8_t(v >> (8 * i))));
}
void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(char(uint8_t(v >> (8 * i))));
}

uint32_t dtype_code(DType t) { return t == DType::F32 ? 0 : t == DType::F16 ? 1 : 2; }

// A running checksum over bytes given in pieces: splitmix64 of each 8-byte little-endian word, the last one
// zero-padded.
class Checksum {
 public:
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    size_t i = 0;
    for (; fill_ > 0 && i < n; ++i) {
      word_ |= uint64_t(p[i]) << (8 * fill_);
      if (++fill_ == 8) flush();
    }
    for (; i + 8 <= n; i += 8) {  // whole words: what the loop below would do a byte at a time
      uint64_t w = 0;
      for (int k = 7; k >= 0; --k) w = (w << 8) | p[i + size_t(k)];
      h_ = splitmix64(h_ ^ w);
    }
    for (; i < n; ++i) {
      word_ |= uint64_t(p[i]) << (8 * fill_);
      if (++fill_ == 8) flush();
    }
  }
  uint64_t done() {
    if (fill_ > 0) flush();
    return h_;
  }

 private:
  void flush() {
    h_ = splitmix64(h_ ^ word_);
    word_ = 0;
    fill_ = 0;
  }
  uint64_t h_ = 0x6d696e6967707400ull, word_ = 0;
  int fill_ = 0;
};

[[noreturn]] void bad(const std::string& source, const std::string& what) {
  throw Error(ErrorKind::Format, source + ": not a usable prompt cache file: " + what);
}

}  // namespace

PromptFileHeader read_prompt_file_header(const ByteSource& src) {
  const std::string& s = src.source();
  if (src.size() < kPromptFileHeaderBytes) {
    bad(s, std::to_string(src.size()) + " bytes, shorter than its " + std::to_string(kPromptFileHeaderBytes) +
               "-byte header");
  }
  uint8_t b[kPromptFileHeaderBytes];
  src.fetch(b, kPromptFileHeaderBytes, 0);
  if (std::memcmp(b, kMagic, 8) != 0) bad(s, "it does not begin with MGPTPCF1");
  PromptFileHeader h;
  const uint32_t dtype = get_u32(b + 8);
  if (dtype > 2) bad(s, "dtype code " + std::to_string(dtype) + " is not 0 (F32), 1 (F16) or 2 (BF16)");
  h.model.dtype = dtype == 0 ? DType::F32 : dtype == 1 ? DType::F16 : DType::BF16;
  if (get_u32(b + 12) != 0) bad(s, "the reserved field is not 0");
  h.model.identity = get_u64(b + 16);
  h.model.position_bytes = get_u64(b + 24);
  const uint64_t n_vocab = get_u64(b + 32), n_tokens = get_u64(b + 40), name_bytes = get_u64(b + 48);
  h.checksum = get_u64(b + 56);
  if (h.model.position_bytes == 0 || h.model.position_bytes > (uint64_t(1) << 32)) {
    bad(s, "position_bytes " + std::to_string(h.model.position_bytes) + " is outside [1, 2^32]");
  }
  if (n_vocab == 0 || n_vocab > (uint64_t(1) << 31))
    bad(s, "n_vocab " + std::to_string(n_vocab) + " is out of range");
  if (n_tokens > (uint64_t(1) << 31)) bad(s, "n_tokens " + std::to_string(n_tokens) + " is out of range");
  if (name_bytes > kMaxNameBytes) bad(s, "the model's name is " + std::to_string(name_bytes) + " bytes");
  h.model.n_vocab = int64_t(n_vocab);
  h.n_tokens = int64_t(n_tokens);
  // Each term below 2^63: n_tokens <= 2^31, position_bytes <= 2^32.
  h.name_offset = kPromptFileHeaderBytes;
  h.tokens_offset = h.name_offset + name_bytes;
  h.kv_offset = h.tokens_offset + 4 * n_tokens;
  const uint64_t end = h.kv_offset + n_tokens * h.model.position_bytes;
  if (src.size() != end) {
    bad(s, std::to_string(src.size()) + " bytes where its header says " + std::to_string(end) + " (" +
               std::to_string(n_tokens) + " tokens of " + std::to_string(h.model.position_bytes) +
               " bytes): " + (src.size() < end ? "truncated" : "trailing bytes"));
  }
  h.model.name.resize(size_t(name_bytes));
  src.fetch(h.model.name.data(), name_bytes, h.name_offset);
  return h;
}

void check_prompt_file_model(const PromptFileHeader& h, const PromptFileModel& want,
                             const std::string& source) {
  const PromptFileModel& got = h.model;
  if (got.identity != want.identity || got.position_bytes != want.position_bytes ||
      got.n_vocab != want.n_vocab) {
    throw Error(ErrorKind::Argument, source + ": the prompt cache was made for " + got.name + ", not for " +
                                         want.name + " (delete it, or give another file)");
  }
  if (got.dtype != want.dtype) {
    throw Error(ErrorKind::Argument, source + ": the prompt cache holds " +
                                         std::string(dtype_name(got.dtype)) +
                                         " keys and values, this run's cache is " +
                                         std::string(dtype_name(want.dtype)) + " (--cache-type)");
  }
}

std::vector<int32_t> read_prompt_file_tokens(const ByteSource& src, const PromptFileHeader& h) {
  std::vector<uint8_t> bytes(size_t(h.n_tokens) * 4);
  if (!bytes.empty()) src.fetch(bytes.data(), bytes.size(), h.tokens_offset);
  std::vector<int32_t> out(size_t(h.n_tokens));
  for (int64_t i = 0; i < h.n_tokens; ++i) {
    const int32_t id = int32_t(get_u32(bytes.data() + 4 * i));
    if (id < 0 || id >= h.model.n_vocab) {
      bad(src.source(), "token " + std::to_string(i) + " is " + std::to_string(id) +
                            ", outside the vocabulary of " + std::to_string(h.model.n_vocab));
    }
    out[size_t(i)] = id;
  }
  return out;
}

PromptFileBody read_prompt_file_body(const ByteSource& src, const PromptFileHeader& h, int64_t n) {
  const std::string& s = src.source();
  if (n < 0 || n > h.n_tokens) n = h.n_tokens;
  // The whole body is read for its checksum; only the first n positions are kept.
  Checksum sum;
  sum.add(h.model.name.data(), h.model.name.size());
  const std::vector<int32_t> tokens = read_prompt_file_tokens(src, h);
  for (int32_t t : tokens) {
    uint8_t b[4] = {uint8_t(t), uint8_t(uint32_t(t) >> 8), uint8_t(uint32_t(t) >> 16),
                    uint8_t(uint32_t(t) >> 24)};
    sum.add(b, 4);
  }
  PromptFileBody body;
  body.tokens.assign(tokens.begin(), tokens.begin() + n);
  const uint64_t pb = h.model.position_bytes;
  body.kv.resize(size_t(uint64_t(n) * pb));
  if (!body.kv.empty()) src.fetch(body.kv.data(), body.kv.size(), h.kv_offset);
  sum.add(body.kv.data(), body.kv.size());
  std::vector<char> rest(size_t(std::min<uint64_t>(uint64_t(16) << 20, std::max<uint64_t>(pb, 1))));
  for (uint64_t off = uint64_t(n) * pb, end = uint64_t(h.n_tokens) * pb; off < end;) {
    const uint64_t k = std::min<uint64_t>(rest.size(), end - off);
    src.fetch(rest.data(), k, h.kv_offset + off);
    sum.add(rest.data(), size_t(k));
    off += k;
  }
  if (sum.done() != h.checksum) bad(s, "its checksum does not match its contents (the file is corrupt)");
  return body;
}

void write_prompt_file(const std::filesystem::path& path, const PromptFileModel& model,
                       std::span<const int32_t> tokens, std::span<const char> kv) {
  if (kv.size() != tokens.size() * model.position_bytes) {
    throw Error(ErrorKind::Argument, "write_prompt_file: " + std::to_string(kv.size()) +
                                         " bytes of keys and values for " + std::to_string(tokens.size()) +
                                         " tokens of " + std::to_string(model.position_bytes));
  }
  const std::string name = model.name.substr(0, size_t(kMaxNameBytes));
  std::string tok_bytes;
  tok_bytes.reserve(tokens.size() * 4);
  for (int32_t t : tokens) put_u32(tok_bytes, uint32_t(t));
  Checksum sum;
  sum.add(name.data(), name.size());
  sum.add(tok_bytes.data(), tok_bytes.size());
  sum.add(kv.data(), kv.size());
  std::string head(kMagic, 8);
  put_u32(head, dtype_code(model.dtype));
  put_u32(head, 0);
  put_u64(head, model.identity);
  put_u64(head, model.position_bytes);
  put_u64(head, uint64_t(model.n_vocab));
  put_u64(head, tokens.size());
  put_u64(head, name.size());
  put_u64(head, sum.done());
  AtomicFile f(path, path.string());
  f.write(head.data(), head.size());
  f.write(name.data(), name.size());
  f.write(tok_bytes.data(), tok_bytes.size());
  f.write(kv.data(), kv.size());
  f.commit();
}

}  // namespace minigpt
