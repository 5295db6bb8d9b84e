// Llama (transformers' LlamaForCausalLM: SmolLM2, TinyLlama, Llama 3.2, the HF ports of TinyStories): the
// Llama-shaped block of llama_family.h with attention_bias and mlp_bias as config.json says, rope_scaling
// linear or llama3, tied or untied head.
#include "arch/llama_family.h"

namespace minigpt::arch {
namespace {

using json = nlohmann::json;

constexpr llama_family::Variant kVariant = {.model_type = "llama", .hf_class = "LlamaForCausalLM"};

void parse(const json& j, const std::string& source, Config& c) {
  llama_family::parse(kVariant, j, source, c);
}
json to_json(const Config& c) { return llama_family::to_json(kVariant, c); }
std::vector<TensorDesc> tensors(const Config& c) { return llama_family::tensors(kVariant, c); }

}  // namespace

extern const Architecture kLlama;
constinit const Architecture kLlama = {
    .model_type = "llama",
    .hf_class = "LlamaForCausalLM",
    .display_name = "Llama",
    .parse = parse,
    .to_json = to_json,
    .tensors = tensors,
};

}  // namespace minigpt::arch
