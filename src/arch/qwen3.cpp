// Qwen3 (transformers' Qwen3ForCausalLM): Llama's block with a per-head RMSNorm of q and k before the rotary
// positions (q_norm, k_norm), and head_dim independent of hidden_size / num_attention_heads.
#include "arch/llama_family.h"

namespace minigpt::arch {
namespace {

using json = nlohmann::json;

constexpr llama_family::Variant kVariant = {
    .model_type = "qwen3", .hf_class = "Qwen3ForCausalLM", .qk_norm = true};

void parse(const json& j, const std::string& source, Config& c) {
  llama_family::parse(kVariant, j, source, c);
}
json to_json(const Config& c) { return llama_family::to_json(kVariant, c); }
std::vector<TensorDesc> tensors(const Config& c) { return llama_family::tensors(kVariant, c); }
void check_gguf_form(const Config& c, const std::string& source) {
  llama_family::check_gguf_form(kVariant, c, source);
}
void write_gguf(const Config& c, const json& j, const std::string& source, GgufKv& kv) {
  llama_family::write_gguf(kVariant, "qwen3", c, j, source, kv);
}
void parse_gguf(const GgufFile& f, Config& c) { llama_family::parse_gguf(kVariant, "qwen3", f, c); }

}  // namespace

extern const Architecture kQwen3;
constinit const Architecture kQwen3 = {
    .model_type = "qwen3",
    .hf_class = "Qwen3ForCausalLM",
    .display_name = "Qwen3",
    .parse = parse,
    .to_json = to_json,
    .tensors = tensors,
    .gguf_arch = "qwen3",
    .parse_gguf = parse_gguf,
    .check_gguf_form = check_gguf_form,
    .write_gguf = write_gguf,
    .gguf_tensor_name = gguf_name,
    .gguf_permutes_qk = false,
    .gguf_extra_tensors = llama_family::gguf_extra_tensors,
};

}  // namespace minigpt::arch
