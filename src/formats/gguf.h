// Reading GGUF, the file format of llama.cpp (versions 2 and 3; little-endian):
//   "GGUF", u32 version, u64 n_tensors, u64 n_kv,
//   n_kv x { string key, u32 value_type, value }          (string = u64 length + bytes, no NUL)
//   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
//   padding to general.alignment (default 32), then the tensor data; each tensor at data start + offset.
// ne[0] is the innermost (contiguous) dimension: a [rows, cols] matrix has ne = {cols, rows}.
// Every count, length, offset, alignment and size product is checked against the file before it is used
// (GGUF readers have had overflow CVEs in exactly these places); tensors are read with pread, as
// safetensors files are (src/formats/safetensors.h), never mapped.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/io.h"
#include "minigpt/ggml_type.h"
#include "minigpt/string_table.h"

namespace minigpt {

// The value types of the metadata.
enum class GgufType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};
std::string_view gguf_type_name(GgufType t);

// general.file_type as llama.cpp names it (llama_model_ftype_name): 15 -> "Q4_K - Medium", 7 -> "Q8_0";
// "unknown (N)" for a number llama.h does not define (or one minigpt cannot read, named all the same).
std::string file_type_name(int64_t file_type);

// One metadata value. Scalars: the integer ones in `i` (U64 above INT64_MAX are refused), F32/F64 in `f`,
// BOOL in `i` (0/1), STRING in `s`. ARRAY: `elem` its element type and its elements, unboxed by kind: the
// integers and bools in `ints`, F32/F64 in `floats`, strings in `strings`, arrays (of arrays) in `items`.
// Unboxed, a tokenizer's few hundred thousand tokens, scores and types take 8 bytes each (plus a token's
// bytes) rather than the ~90 of a GgufValue apiece.
struct GgufValue {
  GgufType type = GgufType::U8;
  int64_t i = 0;
  double f = 0;
  std::string s;
  GgufType elem = GgufType::U8;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  StringTable strings;
  std::vector<GgufValue> items;
  // An array's element count (0 for a scalar).
  size_t size() const;
};
// Whether arrays of `t` hold their elements in GgufValue::ints, floats, strings or items.
enum class GgufArrayKind { ints, floats, strings, arrays };
GgufArrayKind gguf_array_kind(GgufType t);

struct GgufTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;  // ne[0] innermost
  uint64_t offset = 0;      // from the start of the file
  uint64_t nbytes = 0;
  int64_t numel() const;
  // The shape outermost first, as safetensors and torch write it: ne reversed.
  std::vector<int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }
};

class GgufFile {
 public:
  static std::shared_ptr<GgufFile> open(const std::filesystem::path& path);
  // Parses an in-memory image (tests, the fuzz target); `bytes` must outlive the object.
  static std::shared_ptr<GgufFile> from_memory(const uint8_t* bytes, size_t size, std::string source);
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  // The metadata keys in the order the file lists them (a writer copying a file keeps its order).
  const std::vector<std::string>& keys() const { return key_order_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufValue* find_value(std::string_view key) const;  // nullptr when absent
  const GgufTensor* find(std::string_view name) const;      // nullptr when absent
  // Typed metadata: Error(Format) naming the key when present with another type; nullopt when absent.
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;  // F32/F64, or an integer
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  // Copies the tensor's nbytes bytes to `dst`. Error(Io) when the file has shrunk or cannot be read.
  void read(const GgufTensor& t, void* dst) const;
  const std::string& path() const { return bytes_.source(); }

 private:
  GgufFile() = default;
  void parse(uint64_t file_size);

  ByteSource bytes_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<std::string> key_order_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;
};

}  // namespace minigpt
