#include "formats/gguf.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>

#include "minigpt/error.h"

namespace minigpt {

namespace {

// Bounds of what a sane file holds, far above any real model's (llama.cpp's own limits are similar).
constexpr uint64_t kMaxString = uint64_t(1) << 30;  // one metadata string or tensor name
constexpr uint64_t kMaxNameLength = 1 << 16;        // a tensor name
constexpr int kMaxArrayDepth = 4;                   // arrays of arrays
constexpr uint32_t kMaxDims = 4;                    // GGML_MAX_DIMS
constexpr uint64_t kMaxAlignment = uint64_t(1) << 20;
// Array elements in all the metadata: a tokenizer's tokens, scores, types and merges are a few hundred
// thousand; the cap bounds the memory a hostile file can make us allocate (~100 bytes per element).
constexpr uint64_t kMaxArrayElements = uint64_t(1) << 23;

// Reads the file front to back through a buffer, every read checked against the file's size.
class Cursor {
 public:
  Cursor(uint64_t size, const std::string& source, std::function<void(void*, uint64_t, uint64_t)> fetch)
      : size_(size), source_(source), fetch_(std::move(fetch)) {}
  uint64_t elements = 0;  // array elements read so far
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorKind::Format, source_ + ": " + what + " (at byte " + std::to_string(pos_) + ")");
  }
  // n bytes at the cursor, which then moves past them.
  const uint8_t* take(uint64_t n, const char* what) {
    if (n > left())
      fail(std::string("truncated: ") + what + " needs " + std::to_string(n) + " bytes, " +
           std::to_string(left()) + " left");
    if (pos_ < buf_off_ || pos_ + n > buf_off_ + buf_.size()) {
      const uint64_t want = std::max<uint64_t>(n, std::min<uint64_t>(uint64_t(1) << 20, left()));
      buf_.resize(size_t(want));
      fetch_(buf_.data(), want, pos_);
      buf_off_ = pos_;
    }
    const uint8_t* p = buf_.data() + (pos_ - buf_off_);
    pos_ += n;
    return p;
  }
  template <typename T>
  T get(const char* what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));
    return v;
  }
  std::string string(uint64_t max, const char* what) {
    const uint64_t n = get<uint64_t>(what);
    if (n > max)
      fail(std::string(what) + " of " + std::to_string(n) + " bytes is longer than the limit of " +
           std::to_string(max));
    const uint8_t* p = take(n, what);
    return std::string(reinterpret_cast<const char*>(p), size_t(n));
  }

 private:
  uint64_t size_, pos_ = 0, buf_off_ = 0;
  std::string source_;
  std::function<void(void*, uint64_t, uint64_t)> fetch_;
  std::vector<uint8_t> buf_;
};

uint64_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::BOOL:
      return 1;
    case GgufType::U16:
    case GgufType::I16:
      return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32:
      return 4;
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::F64:
      return 8;
    case GgufType::STRING:
      return 8;  // at least its length
    case GgufType::ARRAY:
      return 12;  // at least its element type and count
  }
  return 1;
}

bool valid_type(uint32_t t) { return t <= uint32_t(GgufType::F64); }

GgufValue read_value(Cursor& c, GgufType type, int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::U8:
      v.i = c.get<uint8_t>("a u8 value");
      break;
    case GgufType::I8:
      v.i = c.get<int8_t>("an i8 value");
      break;
    case GgufType::U16:
      v.i = c.get<uint16_t>("a u16 value");
      break;
    case GgufType::I16:
      v.i = c.get<int16_t>("an i16 value");
      break;
    case GgufType::U32:
      v.i = c.get<uint32_t>("a u32 value");
      break;
    case GgufType::I32:
      v.i = c.get<int32_t>("an i32 value");
      break;
    case GgufType::I64:
      v.i = c.get<int64_t>("an i64 value");
      break;
    case GgufType::U64: {
      const uint64_t u = c.get<uint64_t>("a u64 value");
      if (u > uint64_t(std::numeric_limits<int64_t>::max())) c.fail("a u64 value above 2^63");
      v.i = int64_t(u);
      break;
    }
    case GgufType::F32:
      v.f = c.get<float>("an f32 value");
      break;
    case GgufType::F64:
      v.f = c.get<double>("an f64 value");
      break;
    case GgufType::BOOL: {
      const uint8_t b = c.get<uint8_t>("a bool value");
      if (b > 1) c.fail("a bool value of " + std::to_string(b));
      v.i = b;
      break;
    }
    case GgufType::STRING:
      v.s = c.string(kMaxString, "a string value");
      break;
    case GgufType::ARRAY: {
      if (depth >= kMaxArrayDepth) c.fail("arrays nested deeper than " + std::to_string(kMaxArrayDepth));
      const uint32_t elem = c.get<uint32_t>("an array's element type");
      if (!valid_type(elem)) c.fail("unknown array element type " + std::to_string(elem));
      v.elem = GgufType(elem);
      const uint64_t n = c.get<uint64_t>("an array's length");
      // Each element takes at least scalar_size bytes: a count the file cannot hold is refused before any
      // memory is reserved for it.
      if (n > c.left() / scalar_size(v.elem)) {
        c.fail("an array of " + std::to_string(n) + " elements does not fit in the " +
               std::to_string(c.left()) + " bytes left (truncated?)");
      }
      c.elements += n;
      if (c.elements > kMaxArrayElements) {
        c.fail("more than " + std::to_string(kMaxArrayElements) + " array elements in the metadata");
      }
      const size_t reserve = size_t(std::min<uint64_t>(n, 1 << 20));
      switch (gguf_array_kind(v.elem)) {
        case GgufArrayKind::ints:
          v.ints.reserve(reserve);
          for (uint64_t k = 0; k < n; ++k) v.ints.push_back(read_value(c, v.elem, depth + 1).i);
          break;
        case GgufArrayKind::floats:
          v.floats.reserve(reserve);
          for (uint64_t k = 0; k < n; ++k) v.floats.push_back(read_value(c, v.elem, depth + 1).f);
          break;
        case GgufArrayKind::strings:
          v.strings.reserve(reserve);
          for (uint64_t k = 0; k < n; ++k) v.strings.push_back(c.string(kMaxString, "a string value"));
          v.strings.shrink_to_fit();
          break;
        case GgufArrayKind::arrays:
          v.items.reserve(size_t(std::min<uint64_t>(n, 4096)));
          for (uint64_t k = 0; k < n; ++k) v.items.push_back(read_value(c, v.elem, depth + 1));
          break;
      }
      break;
    }
  }
  return v;
}

}  // namespace

GgufArrayKind gguf_array_kind(GgufType t) {
  switch (t) {
    case GgufType::F32:
    case GgufType::F64:
      return GgufArrayKind::floats;
    case GgufType::STRING:
      return GgufArrayKind::strings;
    case GgufType::ARRAY:
      return GgufArrayKind::arrays;
    default:
      return GgufArrayKind::ints;
  }
}

size_t GgufValue::size() const {
  if (type != GgufType::ARRAY) return 0;
  switch (gguf_array_kind(elem)) {
    case GgufArrayKind::ints:
      return ints.size();
    case GgufArrayKind::floats:
      return floats.size();
    case GgufArrayKind::strings:
      return strings.size();
    case GgufArrayKind::arrays:
      break;
  }
  return items.size();
}

std::string_view gguf_type_name(GgufType t) {
  static constexpr const char* kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                           "bool", "string", "array", "u64", "i64", "f64"};
  return uint32_t(t) < 13 ? kNames[uint32_t(t)] : "unknown";
}

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

std::shared_ptr<GgufFile> GgufFile::open(const std::filesystem::path& path) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->bytes_ = ByteSource::open_file(path);
  f->parse(f->bytes_.size());
  return f;
}

std::shared_ptr<GgufFile> GgufFile::from_memory(const uint8_t* bytes, size_t size, std::string source) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->bytes_ = ByteSource::in_memory(bytes, size, std::move(source));
  f->parse(size);
  return f;
}

void GgufFile::read(const GgufTensor& t, void* dst) const { bytes_.fetch(dst, t.nbytes, t.offset); }

void GgufFile::parse(uint64_t file_size) {
  Cursor c(file_size, path(), [this](void* d, uint64_t n, uint64_t o) { bytes_.fetch(d, n, o); });
  const uint8_t* magic = c.take(4, "the magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) c.fail("not a GGUF file (no \"GGUF\" magic)");
  version_ = c.get<uint32_t>("the version");
  if (version_ == 1)
    throw Error(ErrorKind::Unsupported,
                path() + ": GGUF version 1 (2023) is not supported; convert it again");
  if (version_ != 2 && version_ != 3) {
    throw Error(ErrorKind::Format, path() + ": GGUF version " + std::to_string(version_) +
                                       (version_ > 0xffff ? " (a big-endian file?)" : "") +
                                       " (2 and 3 are known)");
  }
  const uint64_t n_tensors = c.get<uint64_t>("the tensor count");
  const uint64_t n_kv = c.get<uint64_t>("the metadata count");
  // A key-value pair takes at least 8 + 4 + 1 bytes, a tensor info 8 + 4 + 8 + 4 + 8.
  // A count the rest of the file cannot hold: a cut file (a partial download) or a corrupt count.
  const std::string size = " of " + std::to_string(c.pos() + c.left()) + " bytes (truncated?)";
  if (n_kv > c.left() / 13) c.fail(std::to_string(n_kv) + " metadata entries cannot fit in the file" + size);
  if (n_tensors > c.left() / 32) c.fail(std::to_string(n_tensors) + " tensors cannot fit in the file" + size);

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.string(kMaxNameLength, "a metadata key");
    const uint32_t type = c.get<uint32_t>("a metadata value type");
    if (!valid_type(type))
      c.fail("metadata '" + key + "' has the unknown value type " + std::to_string(type));
    GgufValue v = read_value(c, GgufType(type), 0);
    if (!kv_.emplace(key, std::move(v)).second) c.fail("metadata key '" + key + "' appears twice");
    key_order_.push_back(std::move(key));
  }
  if (const GgufValue* a = find_value("general.alignment")) {
    if (a->type != GgufType::U32 || a->i == 0 || uint64_t(a->i) > kMaxAlignment || (a->i & (a->i - 1)) != 0) {
      c.fail("general.alignment must be a u32 power of two up to 2^20");
    }
    alignment_ = uint64_t(a->i);
  }

  std::vector<uint64_t> rel_offsets;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = c.string(kMaxNameLength, "a tensor name");
    const uint32_t n_dims = c.get<uint32_t>("a tensor's dimension count");
    if (n_dims < 1 || n_dims > kMaxDims)
      c.fail("tensor '" + t.name + "' has " + std::to_string(n_dims) + " dimensions (1 to 4)");
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = c.get<uint64_t>("a tensor dimension");
      if (ne < 1 || ne > uint64_t(std::numeric_limits<int64_t>::max()) ||
          uint64_t(numel) > uint64_t(std::numeric_limits<int64_t>::max()) / ne) {
        c.fail("tensor '" + t.name + "' has a dimension of " + std::to_string(ne) +
               " (zero, or the element count overflows)");
      }
      numel *= int64_t(ne);
      t.ne.push_back(int64_t(ne));
    }
    const uint32_t type = c.get<uint32_t>("a tensor type");
    const GgmlTypeInfo* info = ggml_type_info(type);
    if (info == nullptr) c.fail("tensor '" + t.name + "' has the unknown ggml type " + std::to_string(type));
    t.type = GgmlType(type);
    if (t.ne[0] % info->block_size != 0) {
      c.fail("tensor '" + t.name + "': its rows of " + std::to_string(t.ne[0]) + " are not whole " +
             info->name + " blocks of " + std::to_string(info->block_size));
    }
    // numel fits an int64, but its bytes need not fit a uint64: 2^62 + 16 F32 values would "take" 64 bytes
    // (the product wraps), a tensor whose size disagrees with its shape (fuzz_gguf's regression input).
    const uint64_t blocks = uint64_t(numel / info->block_size);
    if (blocks > std::numeric_limits<uint64_t>::max() / uint64_t(info->block_bytes)) {
      c.fail("tensor '" + t.name + "' of " + std::to_string(numel) + " " + info->name +
             " values is larger than 2^64 bytes");
    }
    t.nbytes = blocks * uint64_t(info->block_bytes);
    const uint64_t off = c.get<uint64_t>("a tensor offset");
    if (off % alignment_ != 0) {
      c.fail("tensor '" + t.name + "' at offset " + std::to_string(off) +
             ", not a multiple of the alignment " + std::to_string(alignment_));
    }
    rel_offsets.push_back(off);
    if (by_name_.count(t.name)) c.fail("tensor '" + t.name + "' appears twice");
    by_name_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }
  // The data starts at the next multiple of the alignment.
  const uint64_t end = c.pos();
  data_offset_ = (end + alignment_ - 1) / alignment_ * alignment_;
  if (data_offset_ > file_size && !tensors_.empty()) c.fail("truncated: no tensor data after the header");
  for (size_t i = 0; i < tensors_.size(); ++i) {
    GgufTensor& t = tensors_[i];
    const uint64_t room = file_size - std::min(file_size, data_offset_);
    if (rel_offsets[i] > room || t.nbytes > room - rel_offsets[i]) {
      throw Error(ErrorKind::Format, path() + ": tensor '" + t.name + "' (" + std::to_string(t.nbytes) +
                                         " bytes at data offset " + std::to_string(rel_offsets[i]) +
                                         ") lies past the end of the file (truncated?)");
    }
    t.offset = data_offset_ + rel_offsets[i];
  }
  // No two tensors share bytes (as safetensors files are checked): a writer's bug or a crafted file, where
  // one tensor's values would silently be another's.
  std::vector<size_t> order(tensors_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const GgufTensor& prev = tensors_[order[i - 1]];
    const GgufTensor& t = tensors_[order[i]];
    if (prev.nbytes > 0 && t.offset < prev.offset + prev.nbytes) {
      throw Error(ErrorKind::Format, path() + ": tensors '" + prev.name + "' and '" + t.name +
                                         "' overlap (bytes " + std::to_string(t.offset - data_offset_) +
                                         " to " + std::to_string(prev.offset + prev.nbytes - data_offset_) +
                                         " of the data are in both)");
    }
  }
}

const GgufValue* GgufFile::find_value(std::string_view key) const {
  auto it = kv_.find(std::string(key));
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensor* GgufFile::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

namespace {
bool is_int(GgufType t) {
  return t == GgufType::U8 || t == GgufType::I8 || t == GgufType::U16 || t == GgufType::I16 ||
         t == GgufType::U32 || t == GgufType::I32 || t == GgufType::U64 || t == GgufType::I64;
}
}  // namespace

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find_value(key);
  if (v == nullptr) return std::nullopt;
  if (!is_int(v->type)) {
    throw Error(ErrorKind::Format, path() + ": metadata '" + std::string(key) + "' is a " +
                                       std::string(gguf_type_name(v->type)) + ", not an integer");
  }
  return v->i;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find_value(key);
  if (v == nullptr) return std::nullopt;
  if (v->type == GgufType::F32 || v->type == GgufType::F64) return v->f;
  if (is_int(v->type)) return double(v->i);
  throw Error(ErrorKind::Format, path() + ": metadata '" + std::string(key) + "' is a " +
                                     std::string(gguf_type_name(v->type)) + ", not a number");
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find_value(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != GgufType::BOOL) {
    throw Error(ErrorKind::Format, path() + ": metadata '" + std::string(key) + "' is a " +
                                       std::string(gguf_type_name(v->type)) + ", not a bool");
  }
  return v->i != 0;
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find_value(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != GgufType::STRING) {
    throw Error(ErrorKind::Format, path() + ": metadata '" + std::string(key) + "' is a " +
                                       std::string(gguf_type_name(v->type)) + ", not a string");
  }
  return v->s;
}

std::string file_type_name(int64_t file_type) {
  // llama.h's LLAMA_FTYPE_* and llama-model-loader.cpp's names for them (the IQ types and others minigpt
  // does not read are left to "unknown").
  static const std::pair<int64_t, const char*> kNames[] = {{0, "all F32"},        {1, "F16"},
                                                           {2, "Q4_0"},           {3, "Q4_1"},
                                                           {7, "Q8_0"},           {8, "Q5_0"},
                                                           {9, "Q5_1"},           {10, "Q2_K - Medium"},
                                                           {11, "Q3_K - Small"},  {12, "Q3_K - Medium"},
                                                           {13, "Q3_K - Large"},  {14, "Q4_K - Small"},
                                                           {15, "Q4_K - Medium"}, {16, "Q5_K - Small"},
                                                           {17, "Q5_K - Medium"}, {18, "Q6_K"},
                                                           {21, "Q2_K - Small"},  {32, "BF16"}};
  for (const auto& [n, name] : kNames)
    if (n == file_type) return name;
  return "unknown (" + std::to_string(file_type) + ")";
}

}  // namespace minigpt
