// Writing a model as GGUF, as llama.cpp's own tools would:
//   - from a Hugging Face directory (config.json, model.safetensors or its shards, the tokenizer files) with
//     the metadata, tensor names, tensor order and tokenizer keys of convert_hf_to_gguf.py (Conv1D weights
//     transposed to [n_out, n_in]), for every architecture of src/arch/ that has a GGUF form;
//   - quantized with the tensor types llama-quantize chooses for a preset (llama_tensor_get_type in
//     src/llama-quant.cpp: 1-D tensors and position_embd untouched, the tied token_embd at the output's
//     type, the layers that get more bits, the fallbacks of K types for rows that are not a multiple of 256),
//     its tensor order, general.file_type and general.quantization_version; from a GGUF file all metadata is
//     kept, as llama-quantize keeps it.
// `minigpt convert` and `minigpt quantize` (cli/cmd_quantize.cpp) are thin wrappers over write_gguf().
//
// The converter (src/convert/), one file one job:
//   quant_policy.cpp  the presets and llama-quantize's choice of types (GGUF tensor names only)
//   read_hf.cpp       a Hugging Face directory as a source: tensors by their architecture's description
//   general_kv.cpp    the general.* keys of a converted directory (name, size label, sampling)
//   tokenizer_kv.cpp  the tokenizer.* keys of a converted directory
//   read_gguf.cpp     a GGUF file as a source (quantize)
//   write_gguf.cpp    write_gguf(): order, types, checks, metadata, quantization, the file
// What differs between architectures (their GGUF keys, tensor names, refusals) is in src/arch/.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/gguf.h"

namespace minigpt {

// What the output's tensors become: llama-quantize's presets (and the converter's --outtype for F32, F16,
// BF16; Auto is the converter's default: the 16-bit type of the checkpoint's first matrix, else F16).
enum class GgufPreset {
  F32,
  F16,
  BF16,
  Q8_0,
  Q4_0,
  Q4_1,
  Q5_0,
  Q5_1,
  Q2_K,
  Q3_K_S,
  Q3_K_M,
  Q3_K_L,
  Q4_K_S,
  Q4_K_M,
  Q5_K_S,
  Q5_K_M,
  Q6_K,
  Auto
};
struct GgufPresetInfo {
  const char* name;         // as minigpt's --type spells it: "q4_k_m"
  uint32_t file_type;       // general.file_type: LLAMA_FTYPE_* (llama.h)
  GgmlType default_type;    // llama_ftype_get_default_type
  const char* description;  // for --help and the README
};
const GgufPresetInfo& preset_info(GgufPreset p);
// "q4_k_m" (any case) -> Q4_K_M; nullopt for a name minigpt does not offer. Auto is not a name.
std::optional<GgufPreset> parse_preset(std::string_view name);
std::string preset_names();  // "q8_0, q4_0, q4_k_s, ..." for messages
// (general.file_type's names: file_type_name in minigpt/gguf.h)

// One tensor as llama-quantize sees it: its GGUF name, ne (innermost first) and current type.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> ne;
  GgmlType type;
};
struct TypeChoice {
  GgmlType type;
  std::string fallback;  // non-empty when a K type did not fit the rows: what was wanted and why not
};
// llama.cpp's tensor order (llama_model_loader's weights_map): the tensors outside blocks by name, then
// block by block in numeric order (blk.2 before blk.10), by name within a block.
bool llama_tensor_less(const std::string& a, const std::string& b);
// llama-quantize's options that change its choice of types (as its --help names them).
struct TypeOverrides {
  std::optional<GgmlType> output_tensor_type;    // --output-tensor-type: output.weight (the tied token_embd
                                                 // too, unless --pure or an unquantized preset)
  std::optional<GgmlType> token_embedding_type;  // --token-embedding-type: token_embd.weight, as given
  bool pure = false;                 // --pure: no mixtures, every quantized tensor at the preset's type
  bool leave_output_tensor = false;  // --leave-output-tensor: output.weight keeps its type
  // --tensor-type NAME=TYPE, in order: the first NAME (lower-cased, a regular expression: PCRE2) found
  // in a tensor's name gives its type, under a quantized preset only, the fallbacks still applying
  std::vector<std::pair<std::string, GgmlType>> tensor_types;
  bool any() const {
    return output_tensor_type || token_embedding_type || pure || leave_output_tensor || !tensor_types.empty();
  }
};
// What llama-quantize's choice reads of the model besides its tensors (llama_model's hparams and type).
struct QuantModel {
  int64_t n_layer = 0;  // {arch}.block_count
  int64_t n_gqa = 1;    // query heads per KV head: head_count / head_count_kv (of the first layer)
  bool is_70b = false;  // llama.cpp's LLM_TYPE_70B: a llama of 80 layers with GQA, a qwen2 of 80 layers
};
// A ggml type by its name in any case ("q8_0", "Q6_K", "bf16"); nullopt for a name ggml does not define.
std::optional<GgmlType> parse_ggml_type(std::string_view name);
// The type llama-quantize (no imatrix) gives each tensor of `model` under preset `p` and the options `ov`,
// as its --dry-run lists them; `tensors` must be in llama's order (the counters of "use
// more bits" layers run in it). Tensors llama-quantize does not quantize keep their type. A type named by
// --token-embedding-type or --output-tensor-type (for output.weight) is taken as given, as llama-quantize
// takes it: it may not fit the rows (write_gguf refuses that; llama-quantize crashes on it).
std::vector<TypeChoice> choose_types(GgufPreset p, const std::vector<TensorSpec>& tensors,
                                     const QuantModel& model, const TypeOverrides& ov = {});

struct GgufWriteOptions {
  GgufPreset preset = GgufPreset::Auto;
  // convert: the converter's types (F32/F16/BF16/Auto only) and tensor order; otherwise llama-quantize's.
  bool converter = false;
  bool allow_requantize = false;  // llama-quantize's --allow-requantize
  TypeOverrides overrides;        // quantize only (not with converter)
  int threads = 0;                // 0: all cores
  // One line per tensor and the notes (fallbacks), without a newline; nullptr: silent.
  std::function<void(const std::string&)> log;
};
struct GgufWriteSummary {
  int64_t n_tensors = 0;
  int64_t n_elements = 0;                // in all tensors
  uint64_t bytes_in = 0;                 // the input's tensor data, as stored
  uint64_t bytes_out = 0;                // the output's tensor data (without padding)
  uint64_t file_bytes = 0;               // the output file
  int n_fallback = 0;                    // tensors whose K type fell back
  GgufPreset preset = GgufPreset::Auto;  // the preset applied (Auto resolved)
};
// Reads `in` (a Hugging Face model directory, or a GGUF file unless options.converter) and writes `out`
// atomically (minigpt/gguf_writer.h). Every check that needs no tensor data runs before anything is written:
// a missing or unreadable input, an output in a missing directory, an output that is a directory or one of
// the input's files, a model its architecture's GGUF keys cannot express (src/arch/: check_gguf_form), an
// already quantized tensor that would be requantized without allow_requantize. Errors are minigpt::Error with
// one line naming the file, tensor or key.
GgufWriteSummary write_gguf(const std::filesystem::path& in, const std::filesystem::path& out,
                            const GgufWriteOptions& options);

}  // namespace minigpt
