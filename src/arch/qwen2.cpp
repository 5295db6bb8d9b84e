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
void check_gguf_form(const Config& c, const std::string& source) {
  llama_family::check_gguf_form(kVariant, c, source);
}
void write_gguf(const Config& c, const json& j, const std::string& source, GgufKv& kv) {
  llama_family::write_gguf(kVariant, "qwen2", c, j, source, kv);
}
void parse_gguf(const GgufFile& f, Config& c) { llama_family::parse_gguf(kVariant, "qwen2", f, c); }

}  // namespace

extern const Architecture kQwen2;
constinit const Architecture kQwen2 = {
    .model_type = "qwen2",
    .hf_class = "Qwen2ForCausalLM",
    .display_name = "Qwen2",
    .parse = parse,
    .to_json = to_json,
    .tensors = tensors,
    .gguf_arch = "qwen2",
    .parse_gguf = parse_gguf,
    .check_gguf_form = check_gguf_form,
    .write_gguf = write_gguf,
    .gguf_tensor_name = gguf_name,
    .gguf_permutes_qk = false,
    .gguf_extra_tensors = llama_family::gguf_extra_tensors,
};

}  // namespace minigpt::arch
