// Element types, devices and the non-owning 2-D tensor view every op works on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

namespace minigpt {

// The element types tensors are computed and held in. (What a file may declare is the loader's business:
// safetensors.h's StDtype, GGUF's types.) Quantized block types join here with their block layout
// (backend.h's WeightFormat).
enum class DType { F32, F16, BF16 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "F32", "F16", "BF16"
inline bool is_float_weight_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// 16-bit float conversions (round to nearest even; NaN stays NaN).
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
inline float bf16_to_f32(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t f32_to_bf16(float f);
// Widens n elements of a float weight dtype to F32.
void convert_to_f32(float* dst, const void* src, DType src_type, size_t n);

enum class Device { Host, Cuda };

// A view of a row-major matrix [rows, cols] whose rows are `stride` elements apart. It owns nothing:
// storage belongs to a Buffer (backend memory) or to a mapped file. `device` says where `data` lives,
// so a host pointer is never handed to a device kernel or the other way round.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  Device device = Device::Host;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;  // elements between the starts of consecutive rows

  bool empty() const { return data == nullptr; }
  int64_t numel() const { return rows * cols; }
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  // Rows [r0, r0 + n).
  Tensor row_slice(int64_t r0, int64_t n) const {
    Tensor t = *this;
    t.data = static_cast<char*>(data) + size_t(r0 * stride) * dtype_size(dtype);
    t.rows = n;
    return t;
  }
  // Columns [c0, c0 + n) of every row (same stride).
  Tensor col_slice(int64_t c0, int64_t n) const {
    Tensor t = *this;
    t.data = static_cast<char*>(data) + size_t(c0) * dtype_size(dtype);
    t.cols = n;
    return t;
  }
};

inline Tensor make_tensor(void* data, DType dtype, Device device, int64_t rows, int64_t cols) {
  return Tensor{data, dtype, device, rows, cols, cols};
}

// Backend memory, freed when the owner goes away.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual size_t bytes() const = 0;
  virtual Device device() const = 0;
};

// The order a matrix is stored in on the host: GPT-2's Conv1D keeps W as [n_in, n_out] (InOut); nn.Linear
// and embeddings used as the LM head keep it as [n_out, n_in] (OutIn).
enum class MatrixOrder { InOut, OutIn };

}  // namespace minigpt
