// The hyper-parameters of a GPT-2-family model, read from a Hugging Face config.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace minigpt {

enum class Activation { GeluTanh, GeluErf, Relu };  // gelu_new / gelu_pytorch_tanh, gelu, relu
enum class PositionEncoding { Learned, Sinusoidal };

struct Config {
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_embd = 0;   // C: the residual width
  int64_t n_ctx = 0;    // n_positions: the longest sequence the model accepts
  int64_t n_vocab = 0;  // vocab_size
  int64_t n_inner = 0;  // the MLP's hidden width (4 * n_embd when config.json says null)
  float layer_norm_epsilon = 1e-5f;
  Activation activation = Activation::GeluTanh;
  std::string activation_name = "gelu_new";
  bool scale_attn_weights = true;                // scores /= sqrt(head_dim)
  bool scale_attn_by_inverse_layer_idx = false;  // scores /= (layer + 1)
  bool tie_word_embeddings = true;               // lm_head.weight is wte.weight
  PositionEncoding position_encoding = PositionEncoding::Learned;
  // -1: the model has none. transformers accepts ids outside the vocabulary (its default 50256 in a small
  // model's config), so these may be >= n_vocab; whoever uses them checks.
  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;

  int64_t head_dim() const { return n_embd / n_head; }
  // Throws Error(Config) naming `source` when the values are inconsistent or out of range.
  void validate(const std::string& source) const;
};

// Parses config.json text. `source` names the file in error messages.
Config parse_config(const std::string& json_text, const std::string& source);
Config load_config(const std::filesystem::path& path);
// The config.json a Hugging Face GPT2Config would write for these values (for tests and tools).
std::string config_to_json(const Config& c);

}  // namespace minigpt
