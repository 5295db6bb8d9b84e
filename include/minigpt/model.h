// A loaded model: config plus weights prepared for one backend. Immutable after load, so several Sessions
// may share it. Which tensors a checkpoint holds and where each goes is its architecture's description
// (src/arch/); the weights are named here by their role.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "minigpt/backend.h"
#include "minigpt/block.h"
#include "minigpt/config.h"
#include "minigpt/model_source.h"

namespace minigpt {

struct LayerWeights {
  Tensor attn_norm_w, attn_norm_b;  // [1, C]
  Linear attn_qkv;                  // C -> (H + 2 Hkv) D   (q | k | v, heads side by side in each)
  // q, k and v apart, each writing its own columns of attn_qkv's output, where their block types differ
  // (llama-quantize's Q4_K_M keeps some layers' attn_v in Q6_K beside Q4_K q and k); attn_qkv is then empty
  std::vector<Linear> attn_qkv_parts;
  Tensor attn_q_norm, attn_k_norm;  // [1, D] per-head RMSNorm weights (Config::qk_norm); else empty
  Linear attn_out;                  // H D -> C
  Tensor ffn_norm_w, ffn_norm_b;    // [1, C]
  // [1, C] Gemma's sandwich norms of the attention's and the MLP's outputs (LayerDesc::post_norms); else
  // empty
  Tensor attn_post_norm_w, ffn_post_norm_w;
  Linear ffn_up;                     // C -> F, or C -> 2F (gate | up) for a gated MLP
  std::vector<Linear> ffn_up_parts;  // gate and up apart where their block types differ (as attn_qkv_parts)
  Linear ffn_down;                   // F -> C
};

struct ModelWeights {
  Linear token_embd;  // [V, E] token embeddings, held as a linear layer E -> V: it doubles as the tied head
  Linear proj_in;     // E -> C after the lookup (OPT's project_in); n_out = 0 when E == C
  Linear proj_out;    // C -> E before the head; n_out = 0 when E == C
  Tensor pos_embd;    // [S, C] position embeddings (learned, or the sinusoidal table built at load); empty
                      // for rotary positions
  // [1, rotary_dim / 2] each: BlockDesc::rope_tables as the backend holds them (LayerDesc::rope_table
  // indexes)
  std::vector<Tensor> rope_tables;
  std::vector<LayerWeights> layers;
  Tensor out_norm_w, out_norm_b;  // [1, C]; empty without a final norm (Config::output_norm)
  Linear output;                  // E -> V (token_embd itself when tied)
};

// An llm.c checkpoint's header, as `minigpt info` shows it.
struct LlmcSummary {
  int32_t version = 0;         // 3: F32 parameters, 5: BF16 parameters
  int64_t n_vocab = 0;         // V: the tokens
  int64_t n_vocab_padded = 0;  // Vp >= V: the embedding's rows in the file
};

// A llama2.c checkpoint's header, as `minigpt info` shows it.
struct Llama2cSummary {
  int32_t version = 0;            // 0: legacy, 1: float32, 2: Q8_0 groups (dequantized to F32 at load)
  int64_t group_size = 0;         // version 2: values per scale
  bool shared_classifier = true;  // the head is the token embedding
};

// What a model directory holds, read from config.json and the weight files' headers only (no weight is
// read): `minigpt info`.
struct ModelSummary {
  Config config;
  int64_t n_params = 0;
  std::vector<std::pair<std::string, size_t>> stored_bytes;  // by dtype name
  std::vector<std::string> files;                            // the weight files
  std::string
      file_type;  // a GGUF file's general.file_type as llama.cpp names it ("Q4_K - Medium"); else empty
  std::optional<LlmcSummary> llmc;  // an llm.c checkpoint's header (version, V and the padded Vp); else unset
  std::optional<Llama2cSummary> llama2c;  // a llama2.c checkpoint's header; else unset
};

struct LoadOptions {
  std::shared_ptr<Backend> backend;  // null: the "cpu" backend of the registry with n_threads
  int n_threads = 0;                 // 0: all cores
  // The dtype the weight matrices are computed in (F32, F16, BF16), converted at load; unset: as stored
  // (a file of mixed dtypes keeps each). Layer norms, biases and positions stay F32.
  std::optional<DType> weight_dtype;

  static LoadOptions threads(int n) {
    LoadOptions o;
    o.n_threads = n;
    return o;
  }
};

class Model {
 public:
  // Loads `dir` (config.json + model.safetensors, or shards + model.safetensors.index.json), a GGUF file,
  // an llm.c checkpoint (src/formats/llmc.h) or a llama2.c checkpoint (src/formats/llama2c.h).
  static std::shared_ptr<const Model> load(const std::filesystem::path& dir, const LoadOptions& options = {});
  // The same from a path already opened (its tokenizer, generation defaults and chat template read it too).
  static std::shared_ptr<const Model> load(const ModelSource& source, const LoadOptions& options = {});
  // A model of this config with the counter-based random weights of random_weights.h, built in memory.
  static std::shared_ptr<const Model> random(const Config& config, const LoadOptions& options = {});
  // Reads config.json and the weight files' headers of `dir` and checks every tensor's name, dtype and
  // shape against the architecture, as load() does, without reading a weight.
  static ModelSummary inspect(const std::filesystem::path& dir);
  static ModelSummary inspect(const ModelSource& source);

  const Config& config() const { return config_; }
  // Its layers as the forward pass reads them.
  const BlockDesc& block() const { return block_; }
  const ModelWeights& weights() const { return weights_; }
  Backend& backend() const { return *backend_; }
  const std::filesystem::path& dir() const { return dir_; }
  int64_t n_params() const { return n_params_; }
  // Bytes of weights as stored in the files, by dtype name ("F32" -> bytes).
  const std::vector<std::pair<std::string, size_t>>& stored_bytes() const { return stored_bytes_; }
  // Bytes of weights one decode step reads as the backend holds them (every matrix and vector once).
  size_t bytes_per_token() const { return bytes_per_token_; }
  // Bytes of every weight as the backend holds it (in the dtype computed in, with its padding and the
  // tables made at load): the model's size in the backend's memory (`bench`'s size column).
  size_t weight_bytes() const;

 private:
  Model() = default;
  Config config_;
  BlockDesc block_;
  std::filesystem::path dir_;
  std::shared_ptr<Backend> backend_;
  std::vector<std::unique_ptr<Buffer>> owned_;  // every weight, as the backend holds it
  ModelWeights weights_;
  int64_t n_params_ = 0;
  std::vector<std::pair<std::string, size_t>> stored_bytes_;
  size_t bytes_per_token_ = 0;

  friend struct ModelBuilder;  // src/model/model.cpp: fills a Model from its architecture's tensors
};

// The sinusoidal table of "Attention Is All You Need": PE(p, 2i) = sin(p / 10000^(2i/d)),
// PE(p, 2i+1) = cos(p / 10000^(2i/d)); computed in double, stored as float. [n_pos * d], row-major.
std::vector<float> sinusoidal_positions(int64_t n_pos, int64_t d);

}  // namespace minigpt
