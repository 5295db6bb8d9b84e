// Qwen2 / Qwen2.5 (transformers' Qwen2ForCausalLM): Llama's block with biases on q, k and v (none on o).
#include "arch/llama_family.h"

namespace minigpt::arch {
namespace {

constexpr llama_family::Variant kVariant = {.model_type = "qwen2",
                                            .hf_class = "Qwen2ForCausalLM",
                                            .display_name = "Qwen2",
                                            .gguf_arch = "qwen2",
                                            .qkv_bias_fixed = true};

}  // namespace

extern const Architecture kQwen2;
constinit const Architecture kQwen2 = llama_family::architecture<kVariant>();

}  // namespace minigpt::arch
