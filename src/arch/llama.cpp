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
void check_gguf_form(const Config& c, const std::string& source) {
  llama_family::check_gguf_form(kVariant, c, source);
}
void write_gguf(const Config& c, const json& j, const std::string& source, GgufKv& kv) {
  llama_family::write_gguf(kVariant, "llama", c, j, source, kv);
}
void parse_gguf(const GgufFile& f, Config& c) { llama_family::parse_gguf(kVariant, "llama", f, c); }

}  // namespace

extern const Architecture kLlama;
constinit const Architecture kLlama = {
    .model_type = "llama",
    .hf_class = "LlamaForCausalLM",
    .display_name = "Llama",
    .parse = parse,
    .to_json = to_json,
    .tensors = tensors,
    .gguf_arch = "llama",
    .parse_gguf = parse_gguf,
    .check_gguf_form = check_gguf_form,
    .write_gguf = write_gguf,
    .gguf_tensor_name = gguf_name,
    .gguf_permutes_qk = true,
    .gguf_extra_tensors = llama_family::gguf_extra_tensors,
};

}  // namespace minigpt::arch
