// OPT (transformers' OPTForCausalLM): learned positions whose table starts with 2 unused rows, separate
// q/k/v projections (stacked at load), ReLU, pre-norm blocks or post-norm ones (do_layer_norm_before =
// false, OPT-350m: then no final norm), and, where word_embed_proj_dim differs from hidden_size, project_in
// after the embeddings and project_out before the tied head.
#include <nlohmann/json.hpp>

#include "arch/arch.h"
#include "arch/config_json.h"

namespace minigpt::arch {
namespace {

using json = nlohmann::json;

// OPTLearnedPositionalEmbedding: position p reads row p + 2.
constexpr int64_t kOptPositionOffset = 2;

void parse(const json& j, const std::string& source, Config& c) {
  c.n_layer = get_int(j, "num_hidden_layers", source, true, 0);
  c.n_head = get_int(j, "num_attention_heads", source, true, 0);
  c.n_kv_head = c.n_head;
  c.n_embd = get_int(j, "hidden_size", source, true, 0);
  c.n_vocab = get_int(j, "vocab_size", source, true, 0);
  c.n_ctx = get_int(j, "max_position_embeddings", source, true, 0);
  c.n_inner = get_int(j, "ffn_dim", source, true, 0);
  c.n_embd_io = get_int(j, "word_embed_proj_dim", source, false, c.n_embd);
  set_activation(get_string(j, "activation_function", source, "relu"), "activation_function", source, c);
  c.pre_norm = get_bool(j, "do_layer_norm_before", source, true);
  c.output_norm = c.pre_norm && !get_bool(j, "_remove_final_layer_norm", source, false);
  c.norm = NormKind::Layer;  // the block (config.h): LayerNorm, plain MLP
  c.ffn = FfnKind::Plain;
  if (!get_bool(j, "layer_norm_elementwise_affine", source, true)) {
    throw Error(
        ErrorKind::Unsupported,
        source + ": layer_norm_elementwise_affine = false (layer norms without weights) is not supported");
  }
  c.attn_bias = c.mlp_bias = get_bool(j, "enable_bias", source, true);
  c.layer_norm_epsilon = 1e-5f;  // nn.LayerNorm's default: OPT's config has no field for it
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", source, true);
  c.pos_offset = kOptPositionOffset;
  c.bos_token_id = get_int(j, "bos_token_id", source, false, -1);
  read_eos(j, source, c);
}

json to_json(const Config& c) {
  json j = {
      {"model_type", "opt"},
      {"architectures", {"OPTForCausalLM"}},
      {"num_hidden_layers", c.n_layer},
      {"num_attention_heads", c.n_head},
      {"hidden_size", c.n_embd},
      {"ffn_dim", c.n_inner},
      {"word_embed_proj_dim", c.embd_io()},
      {"max_position_embeddings", c.n_ctx},
      {"vocab_size", c.n_vocab},
      {"activation_function", c.activation_name},
      {"do_layer_norm_before", c.pre_norm},
      {"_remove_final_layer_norm", c.pre_norm && !c.output_norm},
      {"enable_bias", c.attn_bias},
      {"tie_word_embeddings", c.tie_word_embeddings},
  };
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  write_eos(c, j);
  return j;
}

// OPTForCausalLM's names ("model.decoder."), and OPTModel's ("decoder.").
TensorDesc t(Role role, int64_t layer, const std::string& bare, std::vector<int64_t> shape) {
  TensorDesc d;
  d.role = role;
  d.layer = layer;
  d.names = {"model.decoder." + bare, "decoder." + bare};
  d.shape = std::move(shape);
  return d;
}

std::vector<TensorDesc> tensors(const Config& c) {
  const int64_t C = c.n_embd, F = c.n_inner, V = c.n_vocab, E = c.embd_io();
  std::vector<TensorDesc> v;
  v.push_back(t(Role::TokenEmbd, -1, "embed_tokens.weight", {V, E}));
  v.push_back(t(Role::PosEmbd, -1, "embed_positions.weight", {c.n_ctx + kOptPositionOffset, C}));
  if (c.projects_io()) {
    v.push_back(t(Role::ProjOut, -1, "project_out.weight", {E, C}));
    v.push_back(t(Role::ProjIn, -1, "project_in.weight", {C, E}));
  }
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "layers." + std::to_string(l) + ".";
    const Role w[4] = {Role::AttnK, Role::AttnV, Role::AttnQ, Role::AttnOut};
    const Role b[4] = {Role::AttnKBias, Role::AttnVBias, Role::AttnQBias, Role::AttnOutBias};
    const char* name[4] = {"k_proj", "v_proj", "q_proj", "out_proj"};
    for (int i = 0; i < 4; ++i) {
      v.push_back(t(w[i], l, h + "self_attn." + name[i] + ".weight", {C, C}));
      if (c.attn_bias) v.push_back(t(b[i], l, h + "self_attn." + name[i] + ".bias", {C}));
    }
    v.push_back(t(Role::AttnNorm, l, h + "self_attn_layer_norm.weight", {C}));
    v.push_back(t(Role::AttnNormBias, l, h + "self_attn_layer_norm.bias", {C}));
    v.push_back(t(Role::FfnUp, l, h + "fc1.weight", {F, C}));
    if (c.mlp_bias) v.push_back(t(Role::FfnUpBias, l, h + "fc1.bias", {F}));
    v.push_back(t(Role::FfnDown, l, h + "fc2.weight", {C, F}));
    if (c.mlp_bias) v.push_back(t(Role::FfnDownBias, l, h + "fc2.bias", {C}));
    v.push_back(t(Role::FfnNorm, l, h + "final_layer_norm.weight", {C}));
    v.push_back(t(Role::FfnNormBias, l, h + "final_layer_norm.bias", {C}));
  }
  if (c.output_norm) {
    v.push_back(t(Role::OutputNorm, -1, "final_layer_norm.weight", {C}));
    v.push_back(t(Role::OutputNormBias, -1, "final_layer_norm.bias", {C}));
  }
  TensorDesc head;
  head.role = Role::Output;
  head.names = {"lm_head.weight"};
  head.shape = {V, E};
  head.optional = c.tie_word_embeddings;
  v.push_back(head);
  return v;
}

}  // namespace

extern const Architecture kOpt;
// llama.cpp has no OPT architecture: no GGUF name, no GGUF metadata.
constinit const Architecture kOpt = {
    .model_type = "opt",
    .hf_class = "OPTForCausalLM",
    .display_name = "OPT",
    .parse = parse,
    .to_json = to_json,
    .tensors = tensors,
};

}  // namespace minigpt::arch
