// Mistral (transformers' MistralForCausalLM): Llama's block with sliding-window attention (sliding_window:
// a key older than the window is never attended). llama.cpp converts it as a llama model.
#include "arch/llama_family.h"

namespace minigpt::arch {
namespace {

using json = nlohmann::json;

constexpr llama_family::Variant kVariant = {
    .model_type = "mistral", .hf_class = "MistralForCausalLM", .reads_window = true};

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

}  // namespace

extern const Architecture kMistral;
constinit const Architecture kMistral = {
    .model_type = "mistral",
    .hf_class = "MistralForCausalLM",
    .display_name = "Mistral",
    .parse = parse,
    .to_json = to_json,
    .tensors = tensors,
    // llama.cpp converts it as llama (and reads that back as llama): no parse_gguf of its own
    .gguf_arch = "llama",
    .check_gguf_form = check_gguf_form,
    .write_gguf = write_gguf,
    .gguf_tensor_name = gguf_name,
    .gguf_permutes_qk = true,
    .gguf_extra_tensors = llama_family::gguf_extra_tensors,
};

}  // namespace minigpt::arch
