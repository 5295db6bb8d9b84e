// Llama (transformers' LlamaForCausalLM: SmolLM2, TinyLlama, Llama 3.2, the HF ports of TinyStories): the
// Llama-shaped block of llama_family.h with attention_bias and mlp_bias as config.json says, rope_scaling
// linear or llama3, tied or untied head.
#include "arch/llama_family.h"

namespace minigpt::arch {
namespace {

constexpr llama_family::Variant kVariant = {
    .model_type = "llama", .hf_class = "LlamaForCausalLM", .display_name = "Llama", .gguf_arch = "llama"};

}  // namespace

extern const Architecture kLlama;
constinit const Architecture kLlama = llama_family::architecture<kVariant>();

}  // namespace minigpt::arch
