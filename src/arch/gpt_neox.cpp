// GPT-NeoX / Pythia (transformers' GPTNeoXForCausalLM): rotary positions on the leading fraction of each head
// (rotate_half form), a fused query_key_value stored head by head ([H][q, k, v][D], reordered at load), a
// parallel (default) or sequential residual, GELU MLP, an untied embed_out by default.
#include <cmath>
#include <nlohmann/json.hpp>

#include "arch/arch.h"
#include "arch/config_json.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"

namespace minigpt::arch {
namespace {

using json = nlohmann::json;

void parse(const json& j, const std::string& source, Config& c) {
  c.n_layer = get_int(j, "num_hidden_layers", source, true, 0);
  c.n_head = get_int(j, "num_attention_heads", source, true, 0);
  c.n_kv_head = c.n_head;
  c.n_embd = get_int(j, "hidden_size", source, true, 0);
  c.n_vocab = get_int(j, "vocab_size", source, true, 0);
  c.n_ctx = get_int(j, "max_position_embeddings", source, true, 0);
  c.n_inner = get_int(j, "intermediate_size", source, true, 0);
  c.layer_norm_epsilon = get_positive_float(j, "layer_norm_eps", source, 1e-5f, 1.0, "1");
  set_activation(get_string(j, "hidden_act", source, "gelu"), "hidden_act", source, c);
  c.parallel_residual = get_bool(j, "use_parallel_residual", source, true);
  c.norm = NormKind::Layer;  // the block (config.h): LayerNorm, plain MLP, rotate_half rotary
  c.ffn = FfnKind::Plain;
  c.rope_layout = RopeLayout::NeoxHalves;
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", source, false);
  c.position_encoding = PositionEncoding::Rotary;
  // transformers 5 writes rope_parameters {rope_type, rope_theta, partial_rotary_factor}; older files (and
  // every Pythia on the hub) rotary_pct and rotary_emb_base.
  double pct = 0.25, theta = 10000.0;
  if (has(j, "rope_parameters") || has(j, "rope_scaling")) {
    const json& r = has(j, "rope_parameters") ? j["rope_parameters"] : j["rope_scaling"];
    if (!r.is_object()) config_fail(source, "field 'rope_parameters' must be an object, got " + r.dump());
    const std::string type = get_string(r, "rope_type", source, get_string(r, "type", source, "default"));
    if (type != "default") {
      throw Error(ErrorKind::Unsupported,
                  source + ": rope_type '" + type + "' is not supported (only the default rotary positions)");
    }
    pct = get_positive_float(r, "partial_rotary_factor", source, 0.25f, 1.0, "1");
    if (has(r, "rope_theta")) theta = get_positive_float(r, "rope_theta", source, 1e4f, 1e12, "1e12");
  }
  if (has(j, "rotary_pct")) pct = get_positive_float(j, "rotary_pct", source, 0.25f, 1.0, "1");
  if (has(j, "rotary_emb_base")) theta = get_positive_float(j, "rotary_emb_base", source, 1e4f, 1e12, "1e12");
  // transformers: int(head_size * partial_rotary_factor)
  if (c.n_head > 0 && c.n_embd % c.n_head == 0)
    c.rotary_dim = int64_t(std::floor(double(c.n_embd / c.n_head) * pct));
  c.rope_theta = float(theta);
  c.bos_token_id = get_int(j, "bos_token_id", source, false, -1);
  read_eos(j, source, c);
  c.attn_bias = get_bool(j, "attention_bias", source, true);
}

json to_json(const Config& c) {
  json j = {
      {"model_type", "gpt_neox"},
      {"architectures", {"GPTNeoXForCausalLM"}},
      {"num_hidden_layers", c.n_layer},
      {"num_attention_heads", c.n_head},
      {"hidden_size", c.n_embd},
      {"intermediate_size", c.n_inner},
      {"max_position_embeddings", c.n_ctx},
      {"vocab_size", c.n_vocab},
      {"layer_norm_eps", c.layer_norm_epsilon},
      {"hidden_act", c.activation_name},
      {"use_parallel_residual", c.parallel_residual},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"attention_bias", c.attn_bias},
      {"rotary_pct", double(c.rotary_dim) / double(c.head_dim())},
      {"rotary_emb_base", c.rope_theta},
  };
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  write_eos(c, j);
  return j;
}

TensorDesc t(Role role, int64_t layer, const std::string& bare, std::vector<int64_t> shape) {
  TensorDesc d;
  d.role = role;
  d.layer = layer;
  d.names = {"gpt_neox." + bare, bare};  // GPTNeoXForCausalLM's names, and GPTNeoXModel's
  d.shape = std::move(shape);
  return d;
}

std::vector<TensorDesc> tensors(const Config& c) {
  const int64_t C = c.n_embd, F = c.n_inner, V = c.n_vocab;
  std::vector<TensorDesc> v;
  v.push_back(t(Role::TokenEmbd, -1, "embed_in.weight", {V, C}));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "layers." + std::to_string(l) + ".";
    v.push_back(t(Role::AttnNorm, l, h + "input_layernorm.weight", {C}));
    v.push_back(t(Role::AttnNormBias, l, h + "input_layernorm.bias", {C}));
    TensorDesc qkv = t(Role::AttnQkv, l, h + "attention.query_key_value.weight", {3 * C, C});
    qkv.qkv_heads = c.n_head;
    v.push_back(qkv);
    if (c.attn_bias) {
      TensorDesc b = t(Role::AttnQkvBias, l, h + "attention.query_key_value.bias", {3 * C});
      b.qkv_heads = c.n_head;
      v.push_back(b);
    }
    v.push_back(t(Role::AttnOut, l, h + "attention.dense.weight", {C, C}));
    if (c.attn_bias) v.push_back(t(Role::AttnOutBias, l, h + "attention.dense.bias", {C}));
    v.push_back(t(Role::FfnNorm, l, h + "post_attention_layernorm.weight", {C}));
    v.push_back(t(Role::FfnNormBias, l, h + "post_attention_layernorm.bias", {C}));
    v.push_back(t(Role::FfnUp, l, h + "mlp.dense_h_to_4h.weight", {F, C}));
    v.push_back(t(Role::FfnUpBias, l, h + "mlp.dense_h_to_4h.bias", {F}));
    v.push_back(t(Role::FfnDown, l, h + "mlp.dense_4h_to_h.weight", {C, F}));
    v.push_back(t(Role::FfnDownBias, l, h + "mlp.dense_4h_to_h.bias", {C}));
    // Buffers older transformers saved: the causal mask, its fill value, the rotary frequencies.
    for (const char* buffer : {"attention.bias", "attention.masked_bias", "attention.rotary_emb.inv_freq"}) {
      TensorDesc d = t(Role::Ignored, l, h + buffer, {});
      d.optional = true;
      v.push_back(d);
    }
  }
  v.push_back(t(Role::OutputNorm, -1, "final_layer_norm.weight", {C}));
  v.push_back(t(Role::OutputNormBias, -1, "final_layer_norm.bias", {C}));
  TensorDesc head;
  head.role = Role::Output;
  head.names = {"embed_out.weight"};
  head.shape = {V, C};
  head.optional = c.tie_word_embeddings;
  v.push_back(head);
  return v;
}

// The keys llama.cpp's convert_hf_to_gguf.py writes for GPT-NeoX (GPTNeoXModel.set_gguf_parameters).
void parse_gguf(const GgufFile& f, Config& c) {
  auto need = [&](const std::string& key) {
    const auto v = f.get_int("gptneox." + key);
    if (!v) throw Error(ErrorKind::Format, f.path() + ": missing metadata 'gptneox." + key + "'");
    return *v;
  };
  c.n_ctx = need("context_length");
  c.n_embd = need("embedding_length");
  c.n_inner = need("feed_forward_length");
  c.n_layer = need("block_count");
  c.n_head = need("attention.head_count");
  c.n_kv_head = c.n_head;
  c.rotary_dim = need("rope.dimension_count");
  c.rope_theta = float(f.get_float("gptneox.rope.freq_base").value_or(10000.0));
  c.position_encoding = PositionEncoding::Rotary;
  const auto par = f.get_bool("gptneox.use_parallel_residual");
  c.parallel_residual = par.value_or(true);
  c.norm = NormKind::Layer;  // the block (config.h): LayerNorm, plain MLP, rotate_half rotary
  c.ffn = FfnKind::Plain;
  c.rope_layout = RopeLayout::NeoxHalves;
  const auto eps = f.get_float("gptneox.attention.layer_norm_epsilon");
  if (!eps)
    throw Error(ErrorKind::Format, f.path() + ": missing metadata 'gptneox.attention.layer_norm_epsilon'");
  if (!(*eps > 0 && *eps < 1)) {
    throw Error(ErrorKind::Config, f.path() + ": gptneox.attention.layer_norm_epsilon " +
                                       std::to_string(*eps) + " is outside (0, 1)");
  }
  c.layer_norm_epsilon = float(*eps);
  // The file does not say; GPTNeoXForCausalLM (every Pythia) computes hidden_act "gelu", the exact erf form,
  // which is what transformers gives for the model converted. (llama.cpp's graph computes ggml_gelu, the tanh
  // approximation: its logits differ from transformers' by that.)
  c.activation = Activation::GeluErf;
  c.activation_name = "gelu";
  c.attn_bias = f.find("blk.0.attn_qkv.bias") != nullptr;
  c.bos_token_id = f.get_int("tokenizer.ggml.bos_token_id").value_or(-1);
  c.eos_token_id = f.get_int("tokenizer.ggml.eos_token_id").value_or(-1);
}

// A gptneox file has no key for the activation: its readers (minigpt's, as transformers) take "gelu".
void check_gguf_form(const Config& c, const std::string& src) {
  if (c.activation != Activation::GeluErf) {
    throw Error(ErrorKind::Unsupported, src + ": hidden_act '" + c.activation_name +
                                            "' cannot be written as GGUF (a gptneox file has no key for "
                                            "the activation; its readers take gelu)");
  }
}

// GPTNeoXModel.set_gguf_parameters (conversion/gptneox.py), its keys in its order.
void write_gguf(const Config& c, const json&, const std::string& src, GgufKv& kv) {
  const std::string ga = "gptneox";
  put_gguf_u32(kv, ga, "context_length", c.n_ctx, src);
  put_gguf_u32(kv, ga, "embedding_length", c.n_embd, src);
  put_gguf_u32(kv, ga, "block_count", c.n_layer, src);
  put_gguf_u32(kv, ga, "feed_forward_length", c.n_inner, src);
  put_gguf_u32(kv, ga, "rope.dimension_count", c.rotary_dim, src);
  put_gguf_u32(kv, ga, "attention.head_count", c.n_head, src);
  kv.emplace_back(ga + ".use_parallel_residual", gguf_bool(c.parallel_residual));
  kv.emplace_back(ga + ".attention.layer_norm_epsilon", gguf_f32(c.layer_norm_epsilon));
  // The converter writes no base and llama.cpp then takes 10000; any other base goes in llama.cpp's key
  // for it, which its gptneox loader and minigpt's read.
  if (c.rope_theta != 10000.0f) kv.emplace_back(ga + ".rope.freq_base", gguf_f32(c.rope_theta));
  // (no general.file_type: GPTNeoXModel writes none; quantize adds it at the end, as llama-quantize)
}

}  // namespace

extern const Architecture kGptNeox;
constinit const Architecture kGptNeox = {
    .model_type = "gpt_neox",
    .hf_class = "GPTNeoXForCausalLM",
    .display_name = "GPT-NeoX",
    .parse = parse,
    .to_json = to_json,
    .tensors = tensors,
    .gguf_arch = "gptneox",
    .parse_gguf = parse_gguf,
    .check_gguf_form = check_gguf_form,
    .write_gguf = write_gguf,
    .gguf_tensor_name = gguf_name,
};

}  // namespace minigpt::arch
