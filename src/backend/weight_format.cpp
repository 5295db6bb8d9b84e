// WeightFormat's GGUF block types (apart from backend.cpp, which the CUDA module also links, without the
// GGUF type table).
#include <string>

#include "minigpt/backend.h"
#include "minigpt/error.h"

namespace minigpt {

WeightFormat WeightFormat::quantized(GgmlType t) {
  const GgmlTypeInfo* info = ggml_type_info(uint32_t(t));
  if (info == nullptr || info->block_size < 2) {
    throw Error(ErrorKind::Argument, "not a quantized block type: " +
                                         std::string(info ? info->name : std::to_string(uint32_t(t))));
  }
  return {DType::F32, int32_t(info->block_size), int32_t(info->block_bytes), t};
}

std::string WeightFormat::name() const {
  if (!is_quantized()) return std::string(dtype_name(dtype));
  const GgmlTypeInfo* info = ggml_type_info(uint32_t(quant));
  return info ? info->name : "?";
}

}  // namespace minigpt
