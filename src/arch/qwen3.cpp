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

}  // namespace

extern const Architecture kQwen3;
constinit const Architecture kQwen3 = {
    .model_type = "qwen3",
    .hf_class = "Qwen3ForCausalLM",
    .display_name = "Qwen3",
    .parse = parse,
    .to_json = to_json,
    .tensors = tensors,
};

}  // namespace minigpt::arch
