// What the Llama-shaped families share (llama, mistral, qwen2, qwen3): RMSNorm, a SiLU-gated MLP of
// gate_proj, up_proj and down_proj, rotary positions on whole heads, separate q_proj, k_proj and v_proj with
// grouped-query attention. Each family's file (src/arch/<family>.cpp) says what it changes: a Variant.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "arch/arch.h"

namespace minigpt::arch::llama_family {

struct Variant {
  const char* model_type;    // config.json's model_type, written back by to_json
  const char* hf_class;      // the transformers class
  const char* display_name;  // for messages
  // llama.cpp's general.architecture of its converter's files: "llama" rotates adjacent pairs (q and k rows
  // permuted), the others keep the halves
  const char* gguf_arch;
  bool reads_gguf = true;  // false: llama.cpp converts the family as another (Mistral as llama)
  // The attention's biases: Llama's attention_bias (q, k, v and o, all or none, read from config.json), or
  // Qwen2's fixed q, k and v biases (o none).
  bool qkv_bias_fixed = false;
  bool qk_norm = false;        // Qwen3's q_norm and k_norm
  bool reads_window = false;   // Mistral's sliding_window (others refuse use_sliding_window)
  bool tied_default = false;   // tie_word_embeddings when config.json does not say
  double theta_default = 1e4;  // rope_theta when config.json does not say
  // SmolLM3's NoPE layers: no_rope_layers (1: the layer rotates, 0: it has no positions), else every
  // no_rope_layer_interval-th layer without; llama.cpp's smollm3 fixes the interval at 4.
  bool nope_layers = false;
};

// Whether llama.cpp's converter permutes q and k for the family's GGUF files (LlamaModel and its
// subclasses that keep `undo_permute`): its rope then rotates adjacent pairs.
constexpr bool gguf_permuted(const Variant& v) {
  return std::string_view(v.gguf_arch) == "llama" || std::string_view(v.gguf_arch) == "smollm3";
}

void parse(const Variant& v, const nlohmann::json& j, const std::string& source, Config& c);
nlohmann::json to_json(const Variant& v, const Config& c);
std::vector<TensorDesc> tensors(const Variant& v, const Config& c);

// GGUF as llama.cpp's convert_hf_to_gguf.py writes it under `gguf_arch` ("llama", "qwen2", "qwen3"): its
// `llama` files hold q and k rows permuted so that rotary pairs are adjacent (read with
// RopeLayout::AdjacentPairs, written permuted); qwen2 and qwen3 keep the halves.
void parse_gguf(const Variant& v, const char* gguf_arch, const GgufFile& f, Config& c);
void check_gguf_form(const Variant& v, const Config& c, const std::string& source);
void write_gguf(const Variant& v, const char* gguf_arch, const Config& c, const nlohmann::json& j,
                const std::string& source, GgufKv& kv);
// rope_freqs.weight for a llama3 rope_scaling, as LlamaModel.generate_extra_tensors computes it.
std::vector<std::pair<std::string, std::vector<float>>> gguf_extra_tensors(const Config& c);

// A variant's line of the architecture table: the functions above bound to V.
template <const Variant& V>
constexpr Architecture architecture() {
  using json = nlohmann::json;
  return Architecture{
      .model_type = V.model_type,
      .hf_class = V.hf_class,
      .display_name = V.display_name,
      .parse = [](const json& j, const std::string& source, Config& c) { parse(V, j, source, c); },
      .to_json = [](const Config& c) { return to_json(V, c); },
      .tensors = [](const Config& c) { return tensors(V, c); },
      .gguf_arch = V.gguf_arch,
      .parse_gguf =
          V.reads_gguf ? +[](const GgufFile& f, Config& c) { parse_gguf(V, V.gguf_arch, f, c); } : nullptr,
      .check_gguf_form = [](const Config& c, const std::string& source) { check_gguf_form(V, c, source); },
      .write_gguf = [](const Config& c, const json& j, const std::string& source,
                       GgufKv& kv) { write_gguf(V, V.gguf_arch, c, j, source, kv); },
      .gguf_tensor_name = gguf_name,
      .gguf_permutes_qk = gguf_permuted(V),
      .gguf_extra_tensors = gguf_extra_tensors,
  };
}

}  // namespace minigpt::arch::llama_family
