#include "formats/gguf_writer.h"

#include <algorithm>
#include <limits>
#include <memory>

#include "io/io.h"
#include "minigpt/error.h"
#include "quant/quantize.h"

namespace minigpt {

namespace {

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void put_string(std::string& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out += s;
}

// Whether integer `i` fits in a value of type `t` (an integer or BOOL type).
bool int_fits(GgufType t, int64_t i) {
  auto in = [&](int64_t lo, int64_t hi) { return i >= lo && i <= hi; };
  switch (t) {
    case GgufType::U8:
      return in(0, 255);
    case GgufType::I8:
      return in(-128, 127);
    case GgufType::U16:
      return in(0, 65535);
    case GgufType::I16:
      return in(-32768, 32767);
    case GgufType::U32:
      return in(0, int64_t(std::numeric_limits<uint32_t>::max()));
    case GgufType::I32:
      return in(std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
    case GgufType::U64:
      return i >= 0;
    case GgufType::BOOL:
      return in(0, 1);
    default:
      return true;
  }
}

// Whether `v` holds a value of its type that the file can store (integers in range, arrays homogeneous:
// their elements in the one vector their element type names).
void check_value(const std::string& key, const GgufValue& v, int depth) {
  auto fail = [&](const std::string& what) {
    throw Error(ErrorKind::Argument, "GGUF metadata '" + key + "': " + what);
  };
  auto check_int = [&](GgufType t, int64_t i) {
    if (!int_fits(t, i)) fail(std::to_string(i) + " does not fit in a " + std::string(gguf_type_name(t)));
  };
  if (uint32_t(v.type) > uint32_t(GgufType::F64))
    fail("unknown value type " + std::to_string(uint32_t(v.type)));
  if (v.type != GgufType::ARRAY) return check_int(v.type, v.i);
  if (depth >= 4) fail("arrays nested deeper than 4");
  if (uint32_t(v.elem) > uint32_t(GgufType::F64)) fail("unknown array element type");
  const GgufArrayKind kind = gguf_array_kind(v.elem);
  const bool stray = (kind != GgufArrayKind::ints && !v.ints.empty()) ||
                     (kind != GgufArrayKind::floats && !v.floats.empty()) ||
                     (kind != GgufArrayKind::strings && !v.strings.empty()) ||
                     (kind != GgufArrayKind::arrays && !v.items.empty());
  if (stray) fail("an array of " + std::string(gguf_type_name(v.elem)) + " holds elements of another type");
  for (int64_t i : v.ints) check_int(v.elem, i);
  for (const GgufValue& item : v.items) {
    if (item.type != v.elem)
      fail("an array of " + std::string(gguf_type_name(v.elem)) + " holds a " +
           std::string(gguf_type_name(item.type)));
    check_value(key, item, depth + 1);
  }
}

void put_int(std::string& out, GgufType t, int64_t i) {
  switch (t) {
    case GgufType::U8:
    case GgufType::BOOL:
      return put<uint8_t>(out, uint8_t(i));
    case GgufType::I8:
      return put<int8_t>(out, int8_t(i));
    case GgufType::U16:
      return put<uint16_t>(out, uint16_t(i));
    case GgufType::I16:
      return put<int16_t>(out, int16_t(i));
    case GgufType::U32:
      return put<uint32_t>(out, uint32_t(i));
    case GgufType::I32:
      return put<int32_t>(out, int32_t(i));
    case GgufType::U64:
      return put<uint64_t>(out, uint64_t(i));
    default:
      return put<int64_t>(out, i);
  }
}

void put_float(std::string& out, GgufType t, double f) {
  if (t == GgufType::F32) return put<float>(out, float(f));
  put<double>(out, f);
}

void put_value(std::string& out, const GgufValue& v) {
  switch (v.type) {
    case GgufType::F32:
    case GgufType::F64:
      return put_float(out, v.type, v.f);
    case GgufType::STRING:
      return put_string(out, v.s);
    case GgufType::ARRAY:
      put<uint32_t>(out, uint32_t(v.elem));
      put<uint64_t>(out, v.size());
      for (int64_t i : v.ints) put_int(out, v.elem, i);
      for (double f : v.floats) put_float(out, v.elem, f);
      for (std::string_view str : v.strings) put_string(out, str);
      for (const GgufValue& item : v.items) put_value(out, item);
      return;
    default:
      return put_int(out, v.type, v.i);
  }
}

uint64_t pad_to(uint64_t n, uint64_t align) { return (n + align - 1) / align * align; }

}  // namespace

GgufValue gguf_u32(uint32_t v) {
  GgufValue g;
  g.type = GgufType::U32;
  g.i = v;
  return g;
}
GgufValue gguf_i32(int32_t v) {
  GgufValue g;
  g.type = GgufType::I32;
  g.i = v;
  return g;
}
GgufValue gguf_u64(uint64_t v) {
  if (v > uint64_t(std::numeric_limits<int64_t>::max()))
    throw Error(ErrorKind::Argument, "GGUF u64 value above 2^63 (minigpt holds them as int64)");
  GgufValue g;
  g.type = GgufType::U64;
  g.i = int64_t(v);
  return g;
}
GgufValue gguf_f32(float v) {
  GgufValue g;
  g.type = GgufType::F32;
  g.f = v;
  return g;
}
GgufValue gguf_bool(bool v) {
  GgufValue g;
  g.type = GgufType::BOOL;
  g.i = v ? 1 : 0;
  return g;
}
GgufValue gguf_string(std::string v) {
  GgufValue g;
  g.type = GgufType::STRING;
  g.s = std::move(v);
  return g;
}
GgufValue gguf_string_array(std::vector<std::string> v) {
  GgufValue g;
  g.type = GgufType::ARRAY;
  g.elem = GgufType::STRING;
  g.strings.reserve(v.size());
  for (const std::string& s : v) g.strings.push_back(s);
  return g;
}
GgufValue gguf_i32_array(const std::vector<int32_t>& v) {
  GgufValue g;
  g.type = GgufType::ARRAY;
  g.elem = GgufType::I32;
  g.ints.assign(v.begin(), v.end());
  return g;
}

void GgufWriter::set(const std::string& key, GgufValue value) {
  check_value(key, value, 0);
  if (key == "general.alignment" && (value.type != GgufType::U32 || value.i == 0 ||
                                     (value.i & (value.i - 1)) != 0 || value.i > (1 << 20))) {
    throw Error(ErrorKind::Argument,
                "GGUF metadata 'general.alignment' must be a u32 power of two up to 2^20");
  }
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

bool GgufWriter::remove(const std::string& key) {
  auto it = std::find_if(kv_.begin(), kv_.end(), [&](const auto& kv) { return kv.first == key; });
  if (it == kv_.end()) return false;
  kv_.erase(it);
  return true;
}

const GgufValue* GgufWriter::find(const std::string& key) const {
  for (const auto& [k, v] : kv_)
    if (k == key) return &v;
  return nullptr;
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, Fill fill) {
  const GgmlTypeInfo* info = ggml_type_info(uint32_t(type));
  if (info == nullptr) throw Error(ErrorKind::Argument, "GGUF tensor '" + name + "': unknown type");
  if (ne.empty() || ne.size() > 4)
    throw Error(ErrorKind::Argument,
                "GGUF tensor '" + name + "': 1 to 4 dimensions, not " + std::to_string(ne.size()));
  int64_t numel = 1;
  for (int64_t d : ne) {
    if (d < 1)
      throw Error(ErrorKind::Argument, "GGUF tensor '" + name + "': a dimension of " + std::to_string(d));
    numel *= d;
  }
  if (ne[0] % info->block_size != 0) {
    throw Error(ErrorKind::Argument, "GGUF tensor '" + name + "': rows of " + std::to_string(ne[0]) +
                                         " are not whole " + info->name + " blocks of " +
                                         std::to_string(info->block_size));
  }
  for (const Tensor& t : tensors_)
    if (t.name == name) throw Error(ErrorKind::Argument, "GGUF tensor '" + name + "' added twice");
  tensors_.push_back({name, type, std::move(ne), quantized_size(type, numel), 0, std::move(fill)});
}

uint64_t GgufWriter::alignment() const {
  const GgufValue* a = find("general.alignment");
  return a != nullptr ? uint64_t(a->i) : 32;
}

std::string GgufWriter::header() const {
  std::string out = "GGUF";
  put<uint32_t>(out, 3);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, kv_.size());
  for (const auto& [key, v] : kv_) {
    put_string(out, key);
    put<uint32_t>(out, uint32_t(v.type));
    put_value(out, v);
  }
  const uint64_t align = alignment();
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, uint32_t(t.ne.size()));
    for (int64_t d : t.ne) put<uint64_t>(out, uint64_t(d));
    put<uint32_t>(out, uint32_t(t.type));
    put<uint64_t>(out, offset);
    offset = pad_to(offset + t.nbytes, align);
  }
  out.resize(size_t(pad_to(out.size(), align)), '\0');
  return out;
}

uint64_t GgufWriter::write(const std::filesystem::path& path) const {
  const std::string head = header();
  const uint64_t align = alignment();
  AtomicFile out(path, path.string());
  out.write(head.data(), head.size());
  std::vector<uint8_t> buf;
  const std::vector<uint8_t> zeros(size_t(align), 0);
  for (const Tensor& t : tensors_) {
    buf.assign(size_t(t.nbytes), 0);
    t.fill(buf.data());
    out.write(buf.data(), buf.size());
    out.write(zeros.data(), size_t(pad_to(t.nbytes, align) - t.nbytes));
  }
  buf.clear();
  buf.shrink_to_fit();
  out.commit();
  return out.size();
}

}  // namespace minigpt
