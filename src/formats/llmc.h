// Reading llm.c's GPT-2 checkpoints (github.com/karpathy/llm.c: train_gpt2.py's write_model and
// train_gpt2.cu's gpt2_write_to_checkpoint write them, train_gpt2.c's gpt2_build_from_checkpoint reads them).
// Little-endian:
//   a header of 256 int32 (1024 bytes): [0] magic 20240326, [1] version (3: every parameter F32, 5: every
//   parameter BF16), [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp (V padded for the GPU, 50257 -> 50304);
//   then the 16 parameter arrays back to back, each stacked over the L layers:
//     wte (Vp, C)  wpe (maxT, C)  ln1w, ln1b (L, C)  qkvw (L, 3C, C)  qkvb (L, 3C)  attprojw (L, C, C)
//     attprojb (L, C)  ln2w, ln2b (L, C)  fcw (L, 4C, C)  fcb (L, 4C)  fcprojw (L, C, 4C)  fcprojb (L, C)
//     lnfw, lnfb (C)
// Every matrix is nn.Linear's [out, in], as in GGUF. The LM head is wte; its rows V..Vp-1 are padding that
// no token has, and are never read: the model has V tokens. The file must be exactly as long as the header
// says (1024 + every parameter); each field is checked before a size is computed from it, and every read is
// checked against the file (pread, as GgufFile). What the file means as a model (GPT-2's Config, each array's
// GGUF name) is src/arch/llmc.h's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "io/io.h"
#include "minigpt/error.h"

namespace minigpt {

// The first int32 of each kind of file llm.c writes: how a path is told to be an llm.c file
// (src/formats/model_source.cpp) before it is read.
inline constexpr int32_t kLlmcMagic = 20240326;           // a model checkpoint (write_model)
inline constexpr int32_t kLlmcStateMagic = 20240327;      // train_gpt2.py's write_state: a debugging dump
inline constexpr int32_t kLlmcTokenizerMagic = 20240328;  // write_tokenizer: token bytes, decoding only

inline bool is_llmc_magic(int32_t m) {
  return m == kLlmcMagic || m == kLlmcStateMagic || m == kLlmcTokenizerMagic;
}

struct LlmcHeader {
  int32_t version = 0;         // 3: F32 parameters, 5: BF16 parameters
  int64_t max_t = 0;           // maxT: positions, wpe's rows (n_ctx)
  int64_t n_vocab = 0;         // V: the tokens
  int64_t n_layer = 0;         // L
  int64_t n_head = 0;          // NH
  int64_t n_embd = 0;          // C
  int64_t n_vocab_padded = 0;  // Vp >= V: wte's rows in the file
};

// One parameter as minigpt reads it: one layer's slice of a stacked array, or wte's first V rows.
struct LlmcTensor {
  std::string name;            // llm.c's ("qkvw")
  int64_t layer = -1;          // the slice of a stacked array; -1 for wte, wpe, lnfw, lnfb
  std::vector<int64_t> shape;  // [rows, cols] ([out, in]) or [n]
  uint64_t offset = 0;         // from the start of the file
  uint64_t nbytes = 0;
};

class LlmcFile {
 public:
  // Throws Error(Io) when the file cannot be read, Error(Format) for a malformed header or a length other
  // than the header implies, Error(Unsupported) for an llm.c file minigpt does not read (another version,
  // the debug state or tokenizer file); each one line naming the file.
  static std::shared_ptr<LlmcFile> open(const std::filesystem::path& path);
  // Parses an in-memory image (tests, the fuzz target); `bytes` must outlive the object.
  static std::shared_ptr<LlmcFile> from_memory(const uint8_t* bytes, size_t size, std::string source);
  LlmcFile(const LlmcFile&) = delete;
  LlmcFile& operator=(const LlmcFile&) = delete;

  const LlmcHeader& header() const { return header_; }
  StDtype dtype() const { return header_.version == 5 ? StDtype::BF16 : StDtype::F32; }
  // wte (first V rows), wpe, each layer's 12 slices, lnfw, lnfb: file order.
  const std::vector<LlmcTensor>& tensors() const { return tensors_; }
  // Copies the tensor's nbytes bytes to `dst`. Error(Io) when the file has shrunk or cannot be read.
  void read(const LlmcTensor& t, void* dst) const;
  const std::string& path() const { return bytes_.source(); }

 private:
  LlmcFile() = default;
  void parse(uint64_t file_size);

  ByteSource bytes_;
  LlmcHeader header_;
  std::vector<LlmcTensor> tensors_;
};

// What is said when a tokenizer is asked of an llm.c checkpoint: its tokenizer file (token bytes, no merges)
// can only decode, so encoding text needs a tokenizer given apart. Error(Unsupported), one line.
Error llmc_no_tokenizer_error(const std::filesystem::path& path);

}  // namespace minigpt
