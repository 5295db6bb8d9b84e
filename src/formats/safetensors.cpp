#include "formats/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "io/io.h"
#include "io/json_parse.h"
#include "minigpt/error.h"

namespace minigpt {

namespace {
struct StDtypeInfo {
  StDtype type;
  std::string_view name;
  size_t size;
};
constexpr StDtypeInfo kStDtypes[] = {
    {StDtype::F64, "F64", 8},   {StDtype::F32, "F32", 4},         {StDtype::F16, "F16", 2},
    {StDtype::BF16, "BF16", 2}, {StDtype::I64, "I64", 8},         {StDtype::I32, "I32", 4},
    {StDtype::I16, "I16", 2},   {StDtype::I8, "I8", 1},           {StDtype::U64, "U64", 8},
    {StDtype::U32, "U32", 4},   {StDtype::U16, "U16", 2},         {StDtype::U8, "U8", 1},
    {StDtype::BOOL, "BOOL", 1}, {StDtype::F8_E4M3, "F8_E4M3", 1}, {StDtype::F8_E5M2, "F8_E5M2", 1},
};
}  // namespace

size_t st_dtype_size(StDtype t) { return kStDtypes[size_t(t)].size; }
std::string_view st_dtype_name(StDtype t) { return kStDtypes[size_t(t)].name; }
bool st_dtype_from_name(std::string_view name, StDtype* out) {
  for (const auto& d : kStDtypes) {
    if (d.name == name) {
      *out = d.type;
      return true;
    }
  }
  return false;
}
bool to_dtype(StDtype t, DType* out) {
  switch (t) {
    case StDtype::F32:
      *out = DType::F32;
      return true;
    case StDtype::F16:
      *out = DType::F16;
      return true;
    case StDtype::BF16:
      *out = DType::BF16;
      return true;
    default:
      return false;
  }
}
StDtype to_st_dtype(DType t) {
  switch (t) {
    case DType::F32:
      return StDtype::F32;
    case DType::F16:
      return StDtype::F16;
    case DType::BF16:
      return StDtype::BF16;
  }
  return StDtype::F32;
}
namespace {

using json = nlohmann::json;

// The reference implementation refuses headers over 100 MB; so do we, before allocating anything.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw Error(ErrorKind::Format, source + ": " + what);
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint64_t json_u64(const json& v, const std::string& source, const std::string& what) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
    fail(source, what + " must be a non-negative integer, got " + v.dump());
  }
  return v.get<uint64_t>();
}

void check_header_len(const std::string& src, uint64_t header_len, uint64_t size) {
  if (header_len > size - 8) {
    fail(src, "header length " + std::to_string(header_len) + " exceeds the file size (" +
                  std::to_string(size) + " bytes): truncated or not a safetensors file");
  }
  if (header_len > kMaxHeaderBytes)
    fail(src, "header length " + std::to_string(header_len) + " exceeds 100 MB");
  if (header_len < 2) fail(src, "header of " + std::to_string(header_len) + " bytes is too short to be JSON");
}

}  // namespace

int64_t SafeTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::shared_ptr<SafeTensorsFile> SafeTensorsFile::open(const std::filesystem::path& path) {
  const std::string source = path.string();
  // O_NONBLOCK: a FIFO would otherwise block the open until a writer came; it is refused below.
  const int fd = ::open(source.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(ErrorKind::Io, source + ": cannot open: " + std::strerror(errno));
  std::shared_ptr<SafeTensorsFile> file(new SafeTensorsFile());  // closes fd on a throw from here on
  file->source_ = source;
  file->fd_ = fd;
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(ErrorKind::Io, source + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) {
    throw Error(ErrorKind::Io, source + ": not a regular file (" +
                                   (S_ISDIR(st.st_mode)    ? "a directory"
                                    : S_ISFIFO(st.st_mode) ? "a FIFO"
                                                           : "a device or socket") +
                                   ")");
  }
  const uint64_t size = uint64_t(st.st_size);
  if (size < 8)
    fail(source, "truncated: " + std::to_string(size) + " bytes, smaller than the 8-byte header length");
  uint8_t len[8];
  file->pread_exact(len, 8, 0, "the header length");
  const uint64_t header_len = read_u64_le(len);
  check_header_len(source, header_len, size);
  std::string header(size_t(header_len), '\0');
  file->pread_exact(header.data(), header.size(), 8, "the header");
  file->parse(header.data(), header_len, size);
  return file;
}

std::shared_ptr<SafeTensorsFile> SafeTensorsFile::from_memory(const uint8_t* bytes, size_t size,
                                                              std::string source) {
  std::shared_ptr<SafeTensorsFile> file(new SafeTensorsFile());
  file->source_ = std::move(source);
  file->image_ = bytes;
  if (size < 8) {
    fail(file->source_,
         "truncated: " + std::to_string(size) + " bytes, smaller than the 8-byte header length");
  }
  const uint64_t header_len = read_u64_le(bytes);
  check_header_len(file->source_, header_len, size);
  file->parse(reinterpret_cast<const char*>(bytes + 8), header_len, size);
  return file;
}

SafeTensorsFile::~SafeTensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

void SafeTensorsFile::pread_exact(void* dst, size_t n, uint64_t offset, const std::string& what) const {
  auto* p = static_cast<uint8_t*>(dst);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd_, p + done, n - done, off_t(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw Error(ErrorKind::Io, source_ + ": reading " + what + " failed: " + std::strerror(errno));
    if (r == 0) {
      throw Error(ErrorKind::Io, source_ + ": the file ended at byte " + std::to_string(offset + done) +
                                     " while reading " + what + ": it was truncated after it was opened");
    }
    done += size_t(r);
  }
}

void SafeTensorsFile::read(const SafeTensor& t, void* dst) const {
  if (t.nbytes == 0) return;
  if (image_ != nullptr) {
    std::memcpy(dst, image_ + t.offset, t.nbytes);
    return;
  }
  pread_exact(dst, t.nbytes, t.offset, "tensor '" + t.name + "'");
}

void SafeTensorsFile::parse(const char* header, uint64_t header_len, uint64_t size) {
  const std::string& src = source_;
  if (header[0] != '{') fail(src, "header does not start with '{': not a safetensors file");

  json h;
  try {
    h = parse_json_bounded(true, header, header + header_len);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    fail(src, std::string("header is not valid JSON: ") + e.what());
  }
  if (!h.is_object()) fail(src, "header is not a JSON object");

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;

  struct Span {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Span> spans;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it->is_object()) fail(src, "__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail(src, "__metadata__ value '" + m.key() + "' is not a string");
        metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    const json& e = *it;
    if (!e.is_object()) fail(src, where + ": entry is not an object");
    if (!e.contains("dtype") || !e["dtype"].is_string()) fail(src, where + ": missing or non-string 'dtype'");
    if (!e.contains("shape") || !e["shape"].is_array()) fail(src, where + ": missing or non-array 'shape'");
    if (!e.contains("data_offsets") || !e["data_offsets"].is_array() || e["data_offsets"].size() != 2) {
      fail(src, where + ": 'data_offsets' must be an array [begin, end]");
    }
    SafeTensor t;
    t.name = name;
    const std::string dt = e["dtype"].get<std::string>();
    if (!st_dtype_from_name(dt, &t.dtype)) fail(src, where + ": unknown dtype '" + dt + "'");

    // numel * element size without overflow: every intermediate stays below 2^63.
    uint64_t numel = 1;
    for (const json& d : e["shape"]) {
      const uint64_t dim = json_u64(d, src, where + ": shape dimension");
      if (dim > uint64_t(std::numeric_limits<int64_t>::max()))
        fail(src, where + ": shape dimension too large");
      if (dim != 0 && numel > (uint64_t(1) << 62) / dim) fail(src, where + ": shape has too many elements");
      numel *= dim;
      t.shape.push_back(int64_t(dim));
    }
    if (numel > (uint64_t(1) << 59)) fail(src, where + ": shape has too many elements");
    const uint64_t nbytes = numel * st_dtype_size(t.dtype);  // < 2^62: no overflow
    const uint64_t begin = json_u64(e["data_offsets"][0], src, where + ": data_offsets[0]");
    const uint64_t end = json_u64(e["data_offsets"][1], src, where + ": data_offsets[1]");
    if (end < begin)
      fail(src, where + ": data_offsets end " + std::to_string(end) + " < begin " + std::to_string(begin));
    if (end > data_size) {
      fail(src, where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                    "] run past the end of the data (" + std::to_string(data_size) +
                    " bytes): file truncated?");
    }
    if (end - begin != nbytes) {
      fail(src, where + ": data_offsets cover " + std::to_string(end - begin) + " bytes but dtype " + dt +
                    " and the shape need " + std::to_string(nbytes));
    }
    t.offset = data_start + begin;
    t.data = image_ != nullptr ? image_ + t.offset : nullptr;
    t.nbytes = size_t(nbytes);
    spans.push_back({begin, end, tensors_.size()});
    tensors_.push_back(std::move(t));
  }

  // The tensors must tile the data section exactly: no overlap, no gap, nothing left over.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expect = 0;
  const std::string* prev = nullptr;
  for (const Span& s : spans) {
    const std::string& name = tensors_[s.index].name;
    if (s.begin < expect) {
      fail(src, "tensors '" + (prev ? *prev : name) + "' and '" + name + "' overlap (byte " +
                    std::to_string(s.begin) + " < " + std::to_string(expect) + ")");
    }
    if (s.begin > expect) {
      fail(src, "bytes " + std::to_string(expect) + ".." + std::to_string(s.begin) +
                    " of the data belong to no tensor (gap before '" + name + "')");
    }
    expect = s.end;
    prev = &name;
  }
  if (expect != data_size) {
    fail(src, "the data section has " + std::to_string(data_size - expect) +
                  " bytes after the last tensor that belong to no tensor");
  }
}

const SafeTensor* SafeTensorsFile::find(std::string_view name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<SafeTensorWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const auto& t : tensors) {
    uint64_t n = st_dtype_size(t.dtype);
    for (int64_t d : t.shape) n *= uint64_t(d);
    h[t.name] = {{"dtype", std::string(st_dtype_name(t.dtype))},
                 {"shape", t.shape},
                 {"data_offsets", {offset, offset + n}}};
    sizes.push_back(n);
    offset += n;
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');

  AtomicFile out(path, path.string());
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  out.write(len, 8);
  out.write(header.data(), header.size());
  for (size_t i = 0; i < tensors.size(); ++i) out.write(tensors[i].data, size_t(sizes[i]));
  out.commit();
}

}  // namespace minigpt
