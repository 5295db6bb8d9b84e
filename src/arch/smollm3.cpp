// SmolLM3 (transformers' SmolLM3ForCausalLM; GGUF smollm3): Llama's block with the rotary positions left out
// of every fourth layer (no_rope_layers, "NoPE"), grouped-query attention and a tied head.
#include "arch/llama_family.h"

namespace minigpt::arch {
namespace {

constexpr llama_family::Variant kVariant = {.model_type = "smollm3",
                                            .hf_class = "SmolLM3ForCausalLM",
                                            .display_name = "SmolLM3",
                                            .gguf_arch = "smollm3",
                                            .tied_default = true,
                                            .theta_default = 2e6,
                                            .nope_layers = true};

}  // namespace

extern const Architecture kSmolLM3;
constinit const Architecture kSmolLM3 = llama_family::architecture<kVariant>();

}  // namespace minigpt::arch
