// Qwen3 (transformers' Qwen3ForCausalLM): Llama's block with a per-head RMSNorm of q and k before the rotary
// positions (q_norm, k_norm), and head_dim independent of hidden_size / num_attention_heads.
#include "arch/llama_family.h"

namespace minigpt::arch {
namespace {

constexpr llama_family::Variant kVariant = {.model_type = "qwen3",
                                            .hf_class = "Qwen3ForCausalLM",
                                            .display_name = "Qwen3",
                                            .gguf_arch = "qwen3",
                                            .qk_norm = true};

}  // namespace

extern const Architecture kQwen3;
constinit const Architecture kQwen3 = llama_family::architecture<kVariant>();

}  // namespace minigpt::arch
