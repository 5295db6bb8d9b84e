// Writing GGUF version 3 (the layout src/formats/gguf.h describes): metadata of every value type the reader
// knows, tensor infos, the tensor data each at a multiple of general.alignment (32 unless that key is set),
// padded with zeros. The file is written through an AtomicFile (src/io/io.h): to a temporary beside the
// destination, renamed over it only once complete, so a failure leaves no file behind and any existing file
// at OUT as it was; a device, FIFO or directory at OUT is refused.
// Tensor data is produced one tensor at a time while writing (a callback per tensor), so writing a model
// holds at most one tensor's bytes in memory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "formats/gguf.h"

namespace minigpt {

// Scalar and array values for GgufWriter::set.
GgufValue gguf_u32(uint32_t v);
GgufValue gguf_i32(int32_t v);
GgufValue gguf_u64(uint64_t v);
GgufValue gguf_f32(float v);
GgufValue gguf_bool(bool v);
GgufValue gguf_string(std::string v);
GgufValue gguf_string_array(std::vector<std::string> v);
GgufValue gguf_i32_array(const std::vector<int32_t>& v);

class GgufWriter {
 public:
  // Sets a metadata key. A new key goes last; an existing one keeps its place and takes the new value
  // (as gguf_set_* in ggml does). Error(Argument) for a value its type cannot hold (an integer out of range,
  // an array whose items are not all of its element type, general.alignment not a u32 power of two).
  void set(const std::string& key, GgufValue value);
  bool remove(const std::string& key);
  const GgufValue* find(const std::string& key) const;
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }

  // Writes `fill`'s bytes for the tensor when the file is written: it must fill exactly
  // quantized_size(type, numel) bytes at `dst`. `ne` is innermost first (a [rows, cols] matrix is {cols,
  // rows}).
  using Fill = std::function<void(uint8_t* dst)>;
  void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, Fill fill);
  size_t n_tensors() const { return tensors_.size(); }

  // Writes the whole file to `path` (see above). Returns the file's size in bytes. Error(Io) naming `path`
  // when it cannot be created, written or renamed into place; whatever a Fill throws is passed on, after the
  // temporary is removed.
  uint64_t write(const std::filesystem::path& path) const;
  // The header alone (everything before the tensor data, padding included), for tests.
  std::string header() const;
  uint64_t alignment() const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    uint64_t nbytes;
    uint64_t offset;  // from the start of the data
    Fill fill;
  };
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace minigpt
