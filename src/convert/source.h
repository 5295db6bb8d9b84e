// What the writer reads: a source's tensors (named as GGUF names them, each readable as float32, a GGUF
// input's also as its raw bytes) and its metadata, from a Hugging Face directory (read_hf.cpp) or a GGUF
// file (read_gguf.cpp); and the metadata a Hugging Face directory becomes (general_kv.cpp, tokenizer_kv.cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "arch/arch.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"

namespace minigpt::convert {

// GGUF metadata as written: key, value, in file order (what an architecture's write_gguf appends to).
using Kv = arch::GgufKv;

struct SourceTensor {
  std::string name;         // the GGUF name
  std::vector<int64_t> ne;  // innermost first
  GgmlType type;          // as llama-quantize would see it (an HF tensor: F32, as the converter's f32 output)
  uint64_t stored_bytes;  // in the input file
  std::string stored_type;            // for the log: "F32", "BF16", "Q8_0"
  std::function<void(uint8_t*)> raw;  // the tensor's bytes of `type` (GGUF inputs only)
  std::function<void(float*)> f32;    // the values as float32
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    return n;
  }
};

struct Source {
  std::string where;  // the input, for messages
  bool gguf = false;
  Kv metadata;                        // in file order
  std::vector<SourceTensor> tensors;  // in the converter's order
  int64_t n_layer = 0;
  std::vector<std::filesystem::path> files;  // every file the input reads
  GgmlType auto_type = GgmlType::F16;
  // Keeps the files open while the tensors are read.
  std::vector<std::shared_ptr<SafeTensorsFile>> st_files;
  std::shared_ptr<GgufFile> gguf_file;
};

// A Hugging Face model directory as convert_hf_to_gguf.py reads it: its architecture's tensors under their
// GGUF names, in the converter's order, and the converter's metadata, in its order. Refuses a model whose
// architecture has no GGUF form, or a variant its GGUF keys cannot express.
Source read_hf(const std::filesystem::path& dir);
// A GGUF file as llama-quantize reads it: every key and tensor as they are.
Source read_gguf_source(const std::filesystem::path& path);

// gguf-py's general.* keys of a converted directory (general.architecture `gguf_arch`, general.type, the
// sampling settings of generation_config.json, general.name from the directory's name, general.size_label
// from `n_params`), in the converter's order.
void add_general_kv(const std::filesystem::path& dir, const std::string& gguf_arch, int64_t n_params, Kv& kv);

// The tokenizer.* keys convert_hf_to_gguf.py writes for a byte-level BPE tokenizer (_set_vocab_gpt2), from
// the directory's tokenizer files and config.json; the files read are added to s.files, the keys to
// s.metadata.
void add_tokenizer_kv(const std::filesystem::path& dir, const nlohmann::json& config, int64_t n_vocab,
                      Source& s);

}  // namespace minigpt::convert
