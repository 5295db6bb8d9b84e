// gpt_bigcode (transformers' GPTBigCodeForCausalLM: santacoder, tiny_starcoder, StarCoder): GPT-2's block
// with nn.Linear weights ([out, in]) and multi-query attention (multi_query = true: one key/value head shared
// by every query head, c_attn = q | k | v of widths C, D, D) or multi-head attention, whose c_attn is then
// stored head by head ([H][q, k, v][D]) and reordered at load.
#include <nlohmann/json.hpp>

#include "arch/arch.h"
#include "arch/config_json.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"

namespace minigpt::arch {
namespace {

using json = nlohmann::json;

void parse(const json& j, const std::string& source, Config& c) {
  if (get_bool(j, "add_cross_attention", source, false)) {
    throw Error(ErrorKind::Unsupported, source + ": add_cross_attention=true is not supported");
  }
  c.n_layer = get_int(j, "n_layer", source, true, 0);
  c.n_head = get_int(j, "n_head", source, true, 0);
  c.n_embd = get_int(j, "n_embd", source, true, 0);
  c.n_vocab = get_int(j, "vocab_size", source, true, 0);
  c.n_ctx = get_int(j, "n_positions", source, true, 0);
  c.n_inner = get_int(j, "n_inner", source, false, 4 * c.n_embd);
  c.layer_norm_epsilon = get_positive_float(j, "layer_norm_epsilon", source, 1e-5f, 1.0, "1");
  set_activation(get_string(j, "activation_function", source, "gelu_pytorch_tanh"), "activation_function",
                 source, c);
  c.n_kv_head = get_bool(j, "multi_query", source, true) ? 1 : c.n_head;
  c.norm = NormKind::Layer;  // the block (config.h): LayerNorm, plain MLP
  c.ffn = FfnKind::Plain;
  c.scale_attn_weights = get_bool(j, "scale_attn_weights", source, true);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", source, true);
  c.bos_token_id = get_int(j, "bos_token_id", source, false, -1);
  read_eos(j, source, c);
}

json to_json(const Config& c) {
  json j = {
      {"model_type", "gpt_bigcode"},
      {"architectures", {"GPTBigCodeForCausalLM"}},
      {"n_layer", c.n_layer},
      {"n_head", c.n_head},
      {"n_embd", c.n_embd},
      {"n_positions", c.n_ctx},
      {"vocab_size", c.n_vocab},
      {"n_inner", c.n_inner},
      {"layer_norm_epsilon", c.layer_norm_epsilon},
      {"activation_function", c.activation_name},
      {"multi_query", c.kv_heads() == 1},
      {"scale_attn_weights", c.scale_attn_weights},
      {"tie_word_embeddings", c.tie_word_embeddings},
  };
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  write_eos(c, j);
  return j;
}

TensorDesc t(Role role, int64_t layer, const std::string& bare, std::vector<int64_t> shape) {
  TensorDesc d;
  d.role = role;
  d.layer = layer;
  d.names = {"transformer." + bare, bare};  // GPTBigCodeForCausalLM's names, and GPTBigCodeModel's
  d.shape = std::move(shape);
  return d;
}

std::vector<TensorDesc> tensors(const Config& c) {
  const int64_t C = c.n_embd, F = c.n_inner, V = c.n_vocab, KV = c.kv_dim();
  const bool mqa = c.kv_heads() == 1 && c.n_head > 1;
  std::vector<TensorDesc> v;
  v.push_back(t(Role::TokenEmbd, -1, "wte.weight", {V, C}));
  v.push_back(t(Role::PosEmbd, -1, "wpe.weight", {c.n_ctx, C}));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    v.push_back(t(Role::AttnNorm, l, h + "ln_1.weight", {C}));
    v.push_back(t(Role::AttnNormBias, l, h + "ln_1.bias", {C}));
    TensorDesc qkv = t(Role::AttnQkv, l, h + "attn.c_attn.weight", {C + 2 * KV, C});
    TensorDesc qkv_b = t(Role::AttnQkvBias, l, h + "attn.c_attn.bias", {C + 2 * KV});
    if (!mqa) qkv.qkv_heads = qkv_b.qkv_heads = c.n_head;
    v.push_back(qkv);
    v.push_back(qkv_b);
    v.push_back(t(Role::AttnOut, l, h + "attn.c_proj.weight", {C, C}));
    v.push_back(t(Role::AttnOutBias, l, h + "attn.c_proj.bias", {C}));
    v.push_back(t(Role::FfnNorm, l, h + "ln_2.weight", {C}));
    v.push_back(t(Role::FfnNormBias, l, h + "ln_2.bias", {C}));
    v.push_back(t(Role::FfnUp, l, h + "mlp.c_fc.weight", {F, C}));
    v.push_back(t(Role::FfnUpBias, l, h + "mlp.c_fc.bias", {F}));
    v.push_back(t(Role::FfnDown, l, h + "mlp.c_proj.weight", {C, F}));
    v.push_back(t(Role::FfnDownBias, l, h + "mlp.c_proj.bias", {C}));
  }
  v.push_back(t(Role::OutputNorm, -1, "ln_f.weight", {C}));
  v.push_back(t(Role::OutputNormBias, -1, "ln_f.bias", {C}));
  TensorDesc head;
  head.role = Role::Output;
  head.names = {"lm_head.weight"};
  head.shape = {V, C};
  head.optional = c.tie_word_embeddings;
  v.push_back(head);
  return v;
}

// The keys llama.cpp's convert_hf_to_gguf.py writes for gpt_bigcode (StarCoderModel.set_gguf_parameters):
// it always writes head_count_kv = 1 (multi-query), as every published gpt_bigcode model is.
void parse_gguf(const GgufFile& f, Config& c) {
  auto need = [&](const std::string& key) {
    const auto v = f.get_int("starcoder." + key);
    if (!v) throw Error(ErrorKind::Format, f.path() + ": missing metadata 'starcoder." + key + "'");
    return *v;
  };
  c.n_ctx = need("context_length");
  c.n_embd = need("embedding_length");
  c.n_inner = need("feed_forward_length");
  c.n_layer = need("block_count");
  c.n_head = need("attention.head_count");
  c.n_kv_head = f.get_int("starcoder.attention.head_count_kv").value_or(1);
  const auto eps = f.get_float("starcoder.attention.layer_norm_epsilon");
  if (!eps)
    throw Error(ErrorKind::Format, f.path() + ": missing metadata 'starcoder.attention.layer_norm_epsilon'");
  if (!(*eps > 0 && *eps < 1)) {
    throw Error(ErrorKind::Config, f.path() + ": starcoder.attention.layer_norm_epsilon " +
                                       std::to_string(*eps) + " is outside (0, 1)");
  }
  c.layer_norm_epsilon = float(*eps);
  c.activation = Activation::GeluTanh;  // llama.cpp's ggml_gelu
  c.activation_name = "gelu_pytorch_tanh";
  c.position_encoding = PositionEncoding::Learned;
  c.norm = NormKind::Layer;  // the block (config.h): LayerNorm, plain MLP
  c.ffn = FfnKind::Plain;
  c.bos_token_id = f.get_int("tokenizer.ggml.bos_token_id").value_or(-1);
  c.eos_token_id = f.get_int("tokenizer.ggml.eos_token_id").value_or(-1);
}

// A starcoder file has no key for the activation (its readers take gelu_pytorch_tanh) nor for unscaled
// attention.
void check_gguf_form(const Config& c, const std::string& src) {
  if (c.activation != Activation::GeluTanh) {
    throw Error(ErrorKind::Unsupported, src + ": activation_function '" + c.activation_name +
                                            "' cannot be written as GGUF (a starcoder file has no key for "
                                            "the activation; its readers take gelu_pytorch_tanh)");
  }
  if (!c.scale_attn_weights) {
    throw Error(
        ErrorKind::Unsupported,
        src + ": scale_attn_weights=false cannot be written as GGUF (a starcoder file has no key for it)");
  }
}

// StarCoderModel.set_gguf_parameters (conversion/starcoder.py), its keys in its order. It writes 4 n_embd
// and one KV head whatever the config says; minigpt writes what the config says, which is the same for
// every StarCoder / SantaCoder (n_inner 4 n_embd, multi_query).
void write_gguf(const Config& c, const json&, const std::string& src, GgufKv& kv) {
  const std::string ga = "starcoder";
  put_gguf_u32(kv, ga, "context_length", c.n_ctx, src);
  put_gguf_u32(kv, ga, "embedding_length", c.n_embd, src);
  put_gguf_u32(kv, ga, "feed_forward_length", c.n_inner, src);
  put_gguf_u32(kv, ga, "block_count", c.n_layer, src);
  put_gguf_u32(kv, ga, "attention.head_count", c.n_head, src);
  put_gguf_u32(kv, ga, "attention.head_count_kv", c.kv_heads(), src);
  kv.emplace_back(ga + ".attention.layer_norm_epsilon", gguf_f32(c.layer_norm_epsilon));
  kv.emplace_back("general.file_type", gguf_u32(0));  // set to the preset's by the writer
}

}  // namespace

extern const Architecture kGptBigcode;
constinit const Architecture kGptBigcode = {
    .model_type = "gpt_bigcode",
    .hf_class = "GPTBigCodeForCausalLM",
    .display_name = "GPT-BigCode",
    .parse = parse,
    .to_json = to_json,
    .tensors = tensors,
    .gguf_arch = "starcoder",
    .parse_gguf = parse_gguf,
    .check_gguf_form = check_gguf_form,
    .write_gguf = write_gguf,
    .gguf_tensor_name = gguf_name,
};

}  // namespace minigpt::arch
