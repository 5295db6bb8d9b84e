#include "arch/llmc.h"

#include "minigpt/error.h"

namespace minigpt {

Config llmc_config(const LlmcHeader& h) {
  Config c;
  c.arch = arch::llmc_architecture().model_type;
  c.n_layer = h.n_layer;
  c.n_head = h.n_head;
  c.n_kv_head = h.n_head;
  c.n_embd = h.n_embd;
  c.n_ctx = h.max_t;
  c.n_vocab = h.n_vocab;
  c.n_inner = 4 * h.n_embd;
  c.layer_norm_epsilon = 1e-5f;
  c.activation = Activation::GeluTanh;  // llm.c's gelu is the tanh approximation
  c.activation_name = "gelu_new";
  c.position_encoding = PositionEncoding::Learned;
  c.norm = NormKind::Layer;  // the block (config.h): LayerNorm, plain MLP
  c.ffn = FfnKind::Plain;
  c.tie_word_embeddings = true;
  return c;  // bos/eos: llm.c keeps <|endoftext|> in its tokenizer file only; the tokenizer supplies it
}

arch::Role llmc_role(const LlmcTensor& t) {
  using arch::Role;
  struct Entry {
    const char* name;
    Role role;
  };
  static constexpr Entry kRoles[] = {
      {"wte", Role::TokenEmbd},    {"wpe", Role::PosEmbd},
      {"ln1w", Role::AttnNorm},    {"ln1b", Role::AttnNormBias},
      {"qkvw", Role::AttnQkv},     {"qkvb", Role::AttnQkvBias},
      {"attprojw", Role::AttnOut}, {"attprojb", Role::AttnOutBias},
      {"ln2w", Role::FfnNorm},     {"ln2b", Role::FfnNormBias},
      {"fcw", Role::FfnUp},        {"fcb", Role::FfnUpBias},
      {"fcprojw", Role::FfnDown},  {"fcprojb", Role::FfnDownBias},
      {"lnfw", Role::OutputNorm},  {"lnfb", Role::OutputNormBias},
  };
  for (const Entry& e : kRoles)
    if (t.name == e.name) return e.role;
  throw Error(ErrorKind::Format, "llm.c array '" + t.name + "' has no role");
}

std::string llmc_gguf_name(const LlmcTensor& t) {
  return arch::llmc_architecture().gguf_tensor_name(llmc_role(t), t.layer);
}

}  // namespace minigpt
