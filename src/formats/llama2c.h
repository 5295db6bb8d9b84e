// Reading llama2.c's checkpoints (github.com/karpathy/llama2.c: export.py writes them, run.c reads version 0
// and runq.c version 2). Little-endian; every matrix is nn.Linear's [out, in]; kv_dim = n_kv_heads * dim /
// n_heads. The seven int32 of the model: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
// max_seq_len.
//   version 0 (legacy_export): the seven int32 (28 bytes, no magic; vocab_size negative when the classifier
//     is not the token embedding), then float32 token_embedding_table (V, dim), rms_att_weight (L, dim), wq
//     (L, dim, dim), wk, wv (L, kv_dim, dim), wo (L, dim, dim), rms_ffn_weight (L, dim), w1 (L, hidden, dim),
//     w2 (L, dim, hidden), w3 (L, hidden, dim), rms_final_weight (dim), the rotary tables freq_cis_real and
//     freq_cis_imag (max_seq_len, head_size / 2 each: never read, run.c computes its own), [wcls (V, dim)].
//   version 1 (version1_export): uint32 0x616b3432 ("ak42"), int32 1, the seven int32 (vocab_size
//     positive), uint8 shared_classifier, zeros to 256 bytes; float32 rms_att_weight (L, dim),
//     rms_ffn_weight (L, dim), rms_final_weight, token_embedding_table, wq, wk, wv, wo, w1, w2, w3, [wcls].
//   version 2 (version2_export): the same with int32 2, and after shared_classifier an int32 group size GS;
//     float32 rms_att_weight, rms_ffn_weight, rms_final_weight; then each of token_embedding_table, wq x L,
//     wk x L, wv x L, wo x L, w1 x L, w2 x L, w3 x L, [wcls] as its int8 values followed by its float32
//     scales, one per GS consecutive values (value = q * scale; export.py's quantize_q80: scale = max |w| /
//     127 over the group, q = round(w / scale)).
// A version 0 file has no magic: it is told by the size its header implies, which must be the file's
// (probe_llama2c_legacy). Every field is checked before a size is computed from it, the file must be exactly
// as long as the header implies, and every read is checked against the file (pread, as GgufFile).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "io/io.h"
#include "minigpt/error.h"

namespace minigpt {

inline constexpr uint32_t kLlama2cMagic = 0x616b3432;  // "ak42" as a little-endian uint32: bytes "24ka"

struct Llama2cHeader {
  int32_t version = 0;     // 0: legacy (no magic), 1: float32, 2: Q8_0 groups
  int64_t dim = 0;         // the residual width
  int64_t hidden_dim = 0;  // the FFN's width (w1, w3 outputs)
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t vocab_size = 0;         // |vocab_size| for version 0
  int64_t seq_len = 0;            // max_seq_len
  bool shared_classifier = true;  // the LM head is the token embedding table
  int64_t group_size = 0;         // version 2: values per scale
  uint64_t header_bytes = 0;      // 28 (version 0) or 256

  int64_t head_size() const { return dim / n_heads; }
  int64_t kv_dim() const { return n_kv_heads * head_size(); }
};

// One tensor as minigpt reads it: one layer's slice of a stacked array (version 0), or one tensor.
struct Llama2cTensor {
  std::string name;            // run.c's TransformerWeights field ("wq", "rms_att_weight", "wcls")
  int64_t layer = -1;          // -1 for token_embedding_table, rms_final_weight, wcls
  std::vector<int64_t> shape;  // [rows, cols] ([out, in]) or [n]
  uint64_t offset = 0;         // of the values (float32, or int8 for a quantized one), from the file's start
  uint64_t nbytes = 0;         // of the values
  uint64_t scale_offset = 0;   // a quantized tensor's float32 scales, right after its values
  uint64_t n_scales = 0;       // 0: float32
  bool quantized() const { return n_scales != 0; }
  int64_t numel() const;
};

class Llama2cFile {
 public:
  // Throws Error(Io) when the file cannot be read, Error(Format) for a malformed header or a length other
  // than the header implies, Error(Unsupported) for a version minigpt does not read; one line naming the
  // file.
  static std::shared_ptr<Llama2cFile> open(const std::filesystem::path& path);
  // Parses an in-memory image (tests, the fuzz target); `bytes` must outlive the object.
  static std::shared_ptr<Llama2cFile> from_memory(const uint8_t* bytes, size_t size, std::string source);
  Llama2cFile(const Llama2cFile&) = delete;
  Llama2cFile& operator=(const Llama2cFile&) = delete;

  const Llama2cHeader& header() const { return header_; }
  // In file order; wcls only when the classifier is not shared.
  const std::vector<Llama2cTensor>& tensors() const { return tensors_; }
  // The tensor's numel() values as float32 (a quantized one dequantized: q * its group's scale) into `dst`.
  // Error(Io) when the file has shrunk or cannot be read.
  void read(const Llama2cTensor& t, float* dst) const;
  // A quantized tensor's scales, one per group_size values; empty for a float32 one.
  std::vector<float> read_scales(const Llama2cTensor& t) const;
  const std::string& path() const { return bytes_.source(); }

 private:
  Llama2cFile() = default;
  void parse(uint64_t file_size);

  ByteSource bytes_;
  Llama2cHeader header_;
  std::vector<Llama2cTensor> tensors_;
};

// What the first bytes of a file (up to 28; `n` of them read) say about it as a legacy (version 0)
// llama2.c checkpoint of `file_size` bytes: whether its seven int32 are each in range and imply exactly
// file_size bytes. `implied` is set to the size they imply when they are in range (0 when not).
bool probe_llama2c_legacy(const uint8_t* head, size_t n, uint64_t file_size, uint64_t* implied);

// What is said when a tokenizer is asked of a llama2.c checkpoint: its vocabulary is a file of its own
// (tokenizer.bin, run.c's -z), given apart as the tokenizer. Error(Unsupported), one line.
Error llama2c_no_tokenizer_error(const std::filesystem::path& path);

}  // namespace minigpt
