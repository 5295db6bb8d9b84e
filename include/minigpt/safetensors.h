// Reading and writing the safetensors format: an 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data.
// Every offset and size is checked against the file before a byte of data is touched.
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

struct SafeTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data;  // inside the mapping; not necessarily aligned to the dtype
  size_t nbytes;
  int64_t numel() const;
};

// A read-only memory-mapped safetensors file. Tensors point into the mapping, which lives as long as
// the file object.
class SafeTensorsFile {
 public:
  static std::shared_ptr<SafeTensorsFile> open(const std::filesystem::path& path);
  // Parses an in-memory image (used by open() and by tests); `bytes` must outlive the object.
  static std::shared_ptr<SafeTensorsFile> from_memory(const uint8_t* bytes, size_t size, std::string source);
  ~SafeTensorsFile();
  SafeTensorsFile(const SafeTensorsFile&) = delete;
  SafeTensorsFile& operator=(const SafeTensorsFile&) = delete;

  const SafeTensor* find(std::string_view name) const;  // nullptr when absent
  const std::vector<SafeTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return source_; }

 private:
  SafeTensorsFile() = default;
  void parse(const uint8_t* bytes, size_t size);

  std::string source_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::vector<SafeTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct SafeTensorWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;  // numel * dtype_size bytes
};

// Writes a safetensors file atomically (a temporary file renamed into place), the header padded to a
// multiple of 8 bytes as the reference implementation does.
void write_safetensors(const std::filesystem::path& path, const std::vector<SafeTensorWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace minigpt
