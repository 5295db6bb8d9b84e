// Mistral (transformers' MistralForCausalLM): Llama's block with sliding-window attention (sliding_window:
// a key older than the window is never attended). llama.cpp converts it as a llama model.
#include "arch/llama_family.h"

namespace minigpt::arch {
namespace {

// llama.cpp converts it as a llama model (and reads that back as llama): no GGUF reading of its own.
constexpr llama_family::Variant kVariant = {.model_type = "mistral",
                                            .hf_class = "MistralForCausalLM",
                                            .display_name = "Mistral",
                                            .gguf_arch = "llama",
                                            .reads_gguf = false,
                                            .reads_window = true};

}  // namespace

extern const Architecture kMistral;
constinit const Architecture kMistral = llama_family::architecture<kVariant>();

}  // namespace minigpt::arch
