// Qwen2 / Qwen2.5 (transformers' Qwen2ForCausalLM): Llama's block with biases on q, k and v (none on o).
#include "arch/llama_family.h"

namespace minigpt::arch {
namespace {

using json = nlohmann::json;

constexpr llama_family::Variant kVariant = {
    .model_type = "qwen2", .hf_class = "Qwen2ForCausalLM", .qkv_bias_fixed = true};

void parse(const json& j, const std::string& source, Config& c) {
  llama_family::parse(kVariant, j, source, c);
}
json to_json(const Config& c) { return llama_family::to_json(kVariant, c); }
std::vector<TensorDesc> tensors(const Config& c) { return llama_family::tensors(kVariant, c); }

}  // namespace

extern const Architecture kQwen2;
constinit const Architecture kQwen2 = {
    .model_type = "qwen2",
    .hf_class = "Qwen2ForCausalLM",
    .display_name = "Qwen2",
    .parse = parse,
    .to_json = to_json,
    .tensors = tensors,
};

}  // namespace minigpt::arch
