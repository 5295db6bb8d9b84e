// Gemma 3's text model (transformers' Gemma3ForCausalLM, model_type gemma3_text; GGUF gemma3): the Gemma
// block (gemma_family.h) with a per-head RMSNorm of q and k, five local layers (a sliding window, rotary
// base rope_local_base_freq) to each global one (rope_theta, and rope_scaling where set).
#include "arch/gemma_family.h"

namespace minigpt::arch {
namespace {

constexpr gemma_family::Variant kVariant = {.model_type = "gemma3_text",
                                            .hf_class = "Gemma3ForCausalLM",
                                            .display_name = "Gemma 3",
                                            .gguf_arch = "gemma3",
                                            .qk_norm = true,
                                            .softcaps = false,
                                            .window_pattern = 6,
                                            .local_theta = true,
                                            .head_dim_default = 256,
                                            .gguf_window_default = 0,
                                            .gguf_attn_softcap_default = 0,
                                            .gguf_final_softcap_default = 0};

}  // namespace

extern const Architecture kGemma3;
constinit const Architecture kGemma3 = gemma_family::architecture<kVariant>();

}  // namespace minigpt::arch
