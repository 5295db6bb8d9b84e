// Reading and writing the safetensors format: an 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data.
// Every offset and size is checked against the file before a byte of data is touched. A file is read with
// pread, never mapped: a model file truncated or rewritten while minigpt runs cannot kill it with SIGBUS,
// and what was read at load stays what the model computes with.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "minigpt/tensor.h"

namespace minigpt {

// The element types a safetensors file may declare. Weights must be F32, F16 or BF16 (to_dtype); the
// integer types appear in reference files and legacy buffers.
enum class StDtype { F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL, F8_E4M3, F8_E5M2 };
size_t st_dtype_size(StDtype t);
std::string_view st_dtype_name(StDtype t);  // the file's spelling: "F32", "BF16", "I32", ...
bool st_dtype_from_name(std::string_view name, StDtype* out);
// The compute type of a stored float type; false for the others.
bool to_dtype(StDtype t, DType* out);
StDtype to_st_dtype(DType t);

struct SafeTensor {
  std::string name;
  StDtype dtype;
  std::vector<int64_t> shape;
  const uint8_t* data;  // inside an in-memory image (from_memory); null for a file: use read()
  uint64_t offset;      // of the first byte, from the start of the file
  size_t nbytes;
  int64_t numel() const;
};

// A safetensors file opened for reading: the header parsed and checked, the data read on demand.
class SafeTensorsFile {
 public:
  static std::shared_ptr<SafeTensorsFile> open(const std::filesystem::path& path);
  // Parses an in-memory image (used by open() and by tests); `bytes` must outlive the object.
  static std::shared_ptr<SafeTensorsFile> from_memory(const uint8_t* bytes, size_t size, std::string source);
  ~SafeTensorsFile();
  SafeTensorsFile(const SafeTensorsFile&) = delete;
  SafeTensorsFile& operator=(const SafeTensorsFile&) = delete;

  const SafeTensor* find(std::string_view name) const;  // nullptr when absent
  // Copies the tensor's nbytes bytes to `dst`. Throws Error(Io) when the file has shrunk or cannot be read.
  void read(const SafeTensor& t, void* dst) const;
  const std::vector<SafeTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return source_; }

 private:
  SafeTensorsFile() = default;
  // Checks the header (`header_len` bytes of JSON) against a file of `file_size` bytes.
  void parse(const char* header, uint64_t header_len, uint64_t file_size);
  void pread_exact(void* dst, size_t n, uint64_t offset, const std::string& what) const;

  std::string source_;
  int fd_ = -1;                     // a file
  const uint8_t* image_ = nullptr;  // or an in-memory image
  std::vector<SafeTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// The weight files of a Hugging Face model directory, opened: model.safetensors, else the shards
// model.safetensors.index.json names (each a plain file name beside it, every tensor it lists in the shard it
// names). Throws Error (Io, Format) naming the file. Model::load and quantize/convert read the same files.
std::vector<std::shared_ptr<SafeTensorsFile>> open_weight_files(const std::filesystem::path& dir);

struct SafeTensorWrite {
  std::string name;
  StDtype dtype;
  std::vector<int64_t> shape;
  const void* data;  // numel * dtype_size bytes
};

// Writes a safetensors file atomically (a temporary file renamed into place), the header padded to a
// multiple of 8 bytes as the reference implementation does.
void write_safetensors(const std::filesystem::path& path, const std::vector<SafeTensorWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace minigpt
