// What Gemma 2 and Gemma 3 share: Llama's separate q, k, v and gated MLP (gelu_pytorch_tanh), with RMSNorms
// that multiply by (1 + w), a norm before and after each half of the layer ("sandwich"), the embeddings
// times sqrt(hidden_size), the score scale from query_pre_attn_scalar, and local layers with a sliding
// window between global ones (layer_types). Each family's file (src/arch/gemma2.cpp, gemma3.cpp) gives
// its Variant.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "arch/arch.h"

namespace minigpt::arch::gemma_family {

struct Variant {
  const char* model_type;    // config.json's model_type
  const char* hf_class;      // the transformers class
  const char* display_name;  // for messages
  const char* gguf_arch;     // llama.cpp's general.architecture
  bool qk_norm;              // Gemma 3's q_norm and k_norm
  bool softcaps;             // Gemma 2's attn_logit_softcapping and final_logit_softcapping
  // Every n-th layer is global, the others local, where config.json has no layer_types (Gemma 3: 6,
  // sliding_window_pattern; Gemma 2: 2), as llama.cpp's set_swa_pattern: layer l is local when
  // l % n < n - 1.
  int64_t window_pattern;
  bool local_theta;  // the local layers rotate with their own base (Gemma 3's rope_local_base_freq)
  int64_t head_dim_default;
  // llama.cpp's values where a GGUF file has no key: Gemma 2 is always windowed (4096) and capped (50, 30).
  int64_t gguf_window_default;
  float gguf_attn_softcap_default, gguf_final_softcap_default;
};

void parse(const Variant& v, const nlohmann::json& j, const std::string& source, Config& c);
nlohmann::json to_json(const Variant& v, const Config& c);
std::vector<TensorDesc> tensors(const Variant& v, const Config& c);
void parse_gguf(const Variant& v, const GgufFile& f, Config& c);
void check_gguf_form(const Variant& v, const Config& c, const std::string& source);
void write_gguf(const Variant& v, const Config& c, const nlohmann::json& j, const std::string& source,
                GgufKv& kv);

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
      .parse_gguf = [](const GgufFile& f, Config& c) { parse_gguf(V, f, c); },
      .check_gguf_form = [](const Config& c, const std::string& source) { check_gguf_form(V, c, source); },
      .write_gguf = [](const Config& c, const json& j, const std::string& source,
                       GgufKv& kv) { write_gguf(V, c, j, source, kv); },
      .gguf_tensor_name = gguf_name,
  };
}

}  // namespace minigpt::arch::gemma_family
