#include "arch/llama2c.h"

#include <cstring>

#include "minigpt/error.h"

namespace minigpt {

const arch::Architecture& llama2c_architecture() {
  if (const arch::Architecture* a = arch::find("llama")) return *a;
  throw Error(ErrorKind::Unsupported,
              "llama2.c checkpoints hold Llama models, which this build does not run");
}

Config llama2c_config(const Llama2cHeader& h) {
  Config c;
  c.arch = llama2c_architecture().model_type;
  c.n_layer = h.n_layers;
  c.n_head = h.n_heads;
  c.n_kv_head = h.n_kv_heads;
  c.n_embd = h.dim;
  c.n_ctx = h.seq_len;
  c.n_vocab = h.vocab_size;
  c.n_inner = h.hidden_dim;
  c.layer_norm_epsilon = 1e-5f;  // run.c's rmsnorm
  c.activation = Activation::Silu;
  c.activation_name = "silu";
  c.norm = NormKind::Rms;
  c.ffn = FfnKind::Gated;
  c.position_encoding = PositionEncoding::Rotary;
  c.rotary_dim = h.head_size();
  c.rope_theta = 10000.0f;
  c.rope_layout = RopeLayout::AdjacentPairs;  // run.c rotates (vec[i], vec[i + 1])
  c.tie_word_embeddings = h.shared_classifier;
  c.attn_bias = false;
  c.mlp_bias = false;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  c.eos_token_ids = {2, 1};
  return c;
}

arch::Role llama2c_role(const Llama2cTensor& t) {
  using arch::Role;
  struct Entry {
    const char* name;
    Role role;
  };
  static constexpr Entry kRoles[] = {
      {"token_embedding_table", Role::TokenEmbd},
      {"rms_att_weight", Role::AttnNorm},
      {"wq", Role::AttnQ},
      {"wk", Role::AttnK},
      {"wv", Role::AttnV},
      {"wo", Role::AttnOut},
      {"rms_ffn_weight", Role::FfnNorm},
      {"w1", Role::FfnGate},
      {"w2", Role::FfnDown},
      {"w3", Role::FfnUp},
      {"rms_final_weight", Role::OutputNorm},
      {"wcls", Role::Output},
  };
  for (const Entry& e : kRoles)
    if (t.name == e.name) return e.role;
  throw Error(ErrorKind::Format, "llama2.c tensor '" + t.name + "' has no role");
}

}  // namespace minigpt
