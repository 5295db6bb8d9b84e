// Gemma 2 (transformers' Gemma2ForCausalLM; GGUF gemma2): the Gemma block (gemma_family.h) with local and
// global layers alternating (the even layers local), one rotary base for all, and soft-capping of the
// attention scores (attn_logit_softcapping) and of the final logits (final_logit_softcapping).
#include "arch/gemma_family.h"

namespace minigpt::arch {
namespace {

constexpr gemma_family::Variant kVariant = {.model_type = "gemma2",
                                            .hf_class = "Gemma2ForCausalLM",
                                            .display_name = "Gemma 2",
                                            .gguf_arch = "gemma2",
                                            .qk_norm = false,
                                            .softcaps = true,
                                            .window_pattern = 2,
                                            .local_theta = false,
                                            .head_dim_default = 256,
                                            .gguf_window_default = 4096,
                                            .gguf_attn_softcap_default = 50,
                                            .gguf_final_softcap_default = 30};

}  // namespace

extern const Architecture kGemma2;
constinit const Architecture kGemma2 = gemma_family::architecture<kVariant>();

}  // namespace minigpt::arch
