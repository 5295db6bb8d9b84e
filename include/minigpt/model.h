// A loaded GPT-2-family model: config plus weights prepared for one backend. Immutable after load, so
// several Sessions may share it.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "minigpt/backend.h"
#include "minigpt/config.h"
#include "minigpt/safetensors.h"

namespace minigpt {

struct LayerWeights {
  Tensor ln_1_w, ln_1_b;  // [1, C]
  Linear attn_qkv;        // C -> 3C   (q | k | v, heads side by side in each)
  Linear attn_proj;       // C -> C
  Tensor ln_2_w, ln_2_b;  // [1, C]
  Linear mlp_fc;          // C -> F
  Linear mlp_proj;        // F -> C
};

struct ModelWeights {
  Tensor wte;  // [V, C] token embeddings
  Tensor wpe;  // [S, C] position embeddings (learned, or the sinusoidal table built at load)
  std::vector<LayerWeights> layers;
  Tensor ln_f_w, ln_f_b;  // [1, C]
  Linear lm_head;         // C -> V, W stored [V, C] (wte itself when tied)
};

struct LoadOptions {
  std::shared_ptr<Backend> backend;  // null: the CPU backend with n_threads
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
  // Loads `dir` (config.json + model.safetensors, or shards + model.safetensors.index.json).
  static std::shared_ptr<const Model> load(const std::filesystem::path& dir, const LoadOptions& options = {});
  // A model of this config with the counter-based random weights of random_weights.h, built in memory.
  static std::shared_ptr<const Model> random(const Config& config, const LoadOptions& options = {});

  const Config& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  Backend& backend() const { return *backend_; }
  const std::filesystem::path& dir() const { return dir_; }
  int64_t n_params() const { return n_params_; }
  // Bytes of weights as stored in the files, by dtype name ("F32" -> bytes).
  const std::vector<std::pair<std::string, size_t>>& stored_bytes() const { return stored_bytes_; }
  // Bytes of weights one decode step reads as the backend holds them (every matrix and vector once).
  size_t bytes_per_token() const { return bytes_per_token_; }

 private:
  Model() = default;
  Config config_;
  std::filesystem::path dir_;
  std::shared_ptr<Backend> backend_;
  std::vector<std::unique_ptr<Buffer>> owned_;  // every weight, as the backend holds it
  ModelWeights weights_;
  int64_t n_params_ = 0;
  std::vector<std::pair<std::string, size_t>> stored_bytes_;
  size_t bytes_per_token_ = 0;

  struct HostTensor;
  // Reads each tensor of `all` once into a short-lived host buffer, checks it and hands it to the backend,
  // which keeps its own copy: nothing of the files (or of Model::random's values) stays referenced, and the
  // peak memory is the model plus its largest tensor. `weights_where` names the files in messages.
  void assemble(const std::map<std::string, HostTensor>& all, const std::string& prefix, const LoadOptions& options,
                const std::string& weights_where);
};

// The sinusoidal table of "Attention Is All You Need": PE(p, 2i) = sin(p / 10000^(2i/d)),
// PE(p, 2i+1) = cos(p / 10000^(2i/d)); computed in double, stored as float. [n_pos * d], row-major.
std::vector<float> sinusoidal_positions(int64_t n_pos, int64_t d);

}  // namespace minigpt
