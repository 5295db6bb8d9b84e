// GPT-2 (transformers' GPT2LMHeadModel): learned (or, minigpt's own option, sinusoidal) positions, a fused
// Conv1D c_attn ([C, 3C], stored in -> out), sequential pre-norm blocks, GELU MLP, tied LM head.
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
    throw Error(ErrorKind::Unsupported,
                source + ": add_cross_attention=true (encoder-decoder GPT-2) is not supported");
  }
  c.n_layer = get_int(j, "n_layer", source, true, 0);
  c.n_head = get_int(j, "n_head", source, true, 0);
  c.n_kv_head = c.n_head;
  c.n_embd = get_int(j, "n_embd", source, true, 0);
  c.n_vocab = get_int(j, "vocab_size", source, true, 0);
  if (has(j, "n_positions")) {
    c.n_ctx = get_int(j, "n_positions", source, true, 0);
  } else if (has(j, "n_ctx")) {
    c.n_ctx = get_int(j, "n_ctx", source, true, 0);
  } else {
    config_fail(source, "missing field 'n_positions' (or 'n_ctx')");
  }
  c.n_inner = get_int(j, "n_inner", source, false, 4 * c.n_embd);
  c.layer_norm_epsilon = get_positive_float(j, "layer_norm_epsilon", source, 1e-5f, 1.0, "1");

  set_activation(get_string(j, "activation_function", source, "gelu_new"), "activation_function", source, c);
  c.scale_attn_weights = get_bool(j, "scale_attn_weights", source, true);
  c.scale_attn_by_inverse_layer_idx = get_bool(j, "scale_attn_by_inverse_layer_idx", source, false);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", source, true);
  c.norm = NormKind::Layer;  // the block (config.h): LayerNorm, plain MLP
  c.ffn = FfnKind::Plain;

  // Not a transformers field: minigpt's own, for models with the original Transformer's fixed positions.
  const std::string pos = get_string(j, "position_embedding_type", source, "learned");
  if (pos == "learned" || pos == "absolute") {
    c.position_encoding = PositionEncoding::Learned;
  } else if (pos == "sinusoidal") {
    c.position_encoding = PositionEncoding::Sinusoidal;
  } else {
    throw Error(ErrorKind::Unsupported,
                source + ": position_embedding_type '" + pos + "' is not supported (learned, sinusoidal)");
  }
  c.bos_token_id = get_int(j, "bos_token_id", source, false, -1);
  read_eos(j, source, c);
}

json to_json(const Config& c) {
  json j = {
      {"model_type", "gpt2"},
      {"architectures", {"GPT2LMHeadModel"}},
      {"n_layer", c.n_layer},
      {"n_head", c.n_head},
      {"n_embd", c.n_embd},
      {"n_positions", c.n_ctx},
      {"n_ctx", c.n_ctx},
      {"vocab_size", c.n_vocab},
      {"n_inner", c.n_inner == 4 * c.n_embd ? json(nullptr) : json(c.n_inner)},
      {"layer_norm_epsilon", c.layer_norm_epsilon},
      {"activation_function", c.activation_name},
      {"scale_attn_weights", c.scale_attn_weights},
      {"scale_attn_by_inverse_layer_idx", c.scale_attn_by_inverse_layer_idx},
      {"tie_word_embeddings", c.tie_word_embeddings},
  };
  if (c.position_encoding == PositionEncoding::Sinusoidal) j["position_embedding_type"] = "sinusoidal";
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  write_eos(c, j);
  return j;
}

// save_pretrained writes "transformer.wte.weight"; the hub's original gpt2 files write "wte.weight". The
// LM head is "lm_head.weight" in both.
TensorDesc t(Role role, int64_t layer, const std::string& bare, std::vector<int64_t> shape,
             MatrixOrder order = MatrixOrder::OutIn) {
  TensorDesc d;
  d.role = role;
  d.layer = layer;
  d.names = {bare, "transformer." + bare};
  d.shape = std::move(shape);
  d.order = order;
  return d;
}

std::vector<TensorDesc> tensors(const Config& c) {
  const int64_t C = c.n_embd, F = c.n_inner, V = c.n_vocab;
  const int64_t qkv = c.n_head * c.head_dim() + 2 * c.kv_dim();
  constexpr MatrixOrder conv1d = MatrixOrder::InOut;  // transformers' Conv1D keeps W as [in, out]
  std::vector<TensorDesc> v;
  v.push_back(t(Role::TokenEmbd, -1, "wte.weight", {V, C}));
  if (c.position_encoding == PositionEncoding::Learned)
    v.push_back(t(Role::PosEmbd, -1, "wpe.weight", {c.n_ctx, C}));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    v.push_back(t(Role::AttnNorm, l, h + "ln_1.weight", {C}));
    v.push_back(t(Role::AttnNormBias, l, h + "ln_1.bias", {C}));
    v.push_back(t(Role::AttnQkv, l, h + "attn.c_attn.weight", {C, qkv}, conv1d));
    v.push_back(t(Role::AttnQkvBias, l, h + "attn.c_attn.bias", {qkv}));
    v.push_back(t(Role::AttnOut, l, h + "attn.c_proj.weight", {C, C}, conv1d));
    v.push_back(t(Role::AttnOutBias, l, h + "attn.c_proj.bias", {C}));
    v.push_back(t(Role::FfnNorm, l, h + "ln_2.weight", {C}));
    v.push_back(t(Role::FfnNormBias, l, h + "ln_2.bias", {C}));
    v.push_back(t(Role::FfnUp, l, h + "mlp.c_fc.weight", {C, F}, conv1d));
    v.push_back(t(Role::FfnUpBias, l, h + "mlp.c_fc.bias", {F}));
    v.push_back(t(Role::FfnDown, l, h + "mlp.c_proj.weight", {F, C}, conv1d));
    v.push_back(t(Role::FfnDownBias, l, h + "mlp.c_proj.bias", {C}));
    // The causal mask and the masked-fill value older transformers saved as buffers.
    for (const char* buffer : {"attn.bias", "attn.masked_bias"}) {
      TensorDesc d = t(Role::Ignored, l, h + buffer, {});
      d.optional = true;
      v.push_back(d);
    }
  }
  v.push_back(t(Role::OutputNorm, -1, "ln_f.weight", {C}));
  v.push_back(t(Role::OutputNormBias, -1, "ln_f.bias", {C}));
  TensorDesc head;
  head.role = Role::Output;
  head.names = {"lm_head.weight"};
  head.shape = {V, C};
  head.optional = c.tie_word_embeddings;  // transformers saves a copy of wte, or not
  v.push_back(head);
  return v;
}

// The keys llama.cpp's convert_hf_to_gguf.py writes for GPT-2 (GPT2Model.set_gguf_parameters).
void parse_gguf(const GgufFile& f, Config& c) {
  auto need = [&](const std::string& key) {
    const auto v = f.get_int("gpt2." + key);
    if (!v) throw Error(ErrorKind::Format, f.path() + ": missing metadata 'gpt2." + key + "'");
    return *v;
  };
  c.n_ctx = need("context_length");
  c.n_embd = need("embedding_length");
  c.n_inner = need("feed_forward_length");
  c.n_layer = need("block_count");
  c.n_head = need("attention.head_count");
  c.n_kv_head = c.n_head;
  const auto eps = f.get_float("gpt2.attention.layer_norm_epsilon");
  if (!eps)
    throw Error(ErrorKind::Format, f.path() + ": missing metadata 'gpt2.attention.layer_norm_epsilon'");
  if (!(*eps > 0 && *eps < 1)) {
    throw Error(ErrorKind::Config, f.path() + ": gpt2.attention.layer_norm_epsilon " + std::to_string(*eps) +
                                       " is outside (0, 1)");
  }
  c.layer_norm_epsilon = float(*eps);
  // llama.cpp computes GPT-2's GELU with the tanh approximation (gelu_new), as GPT-2 was trained.
  c.activation = Activation::GeluTanh;
  c.activation_name = "gelu_new";
  c.position_encoding = PositionEncoding::Learned;
  c.norm = NormKind::Layer;  // the block (config.h): LayerNorm, plain MLP
  c.ffn = FfnKind::Plain;
  c.bos_token_id = f.get_int("tokenizer.ggml.bos_token_id").value_or(-1);
  c.eos_token_id = f.get_int("tokenizer.ggml.eos_token_id").value_or(-1);
}

// What a gpt2 GGUF cannot say: llama.cpp's gpt2 has learned positions, computes gelu_new and has no key for
// the attention's scaling options.
void check_gguf_form(const Config& c, const std::string& src) {
  if (c.position_encoding != PositionEncoding::Learned) {
    throw Error(
        ErrorKind::Unsupported,
        src + ": sinusoidal positions cannot be written as GGUF (llama.cpp's gpt2 has learned positions)");
  }
  if (c.activation != Activation::GeluTanh) {
    throw Error(ErrorKind::Unsupported,
                src + ": activation_function '" + c.activation_name +
                    "' cannot be written as GGUF (llama.cpp's gpt2 computes gelu_new)");
  }
  if (c.scale_attn_by_inverse_layer_idx || !c.scale_attn_weights) {
    throw Error(ErrorKind::Unsupported,
                src +
                    ": scale_attn_by_inverse_layer_idx / scale_attn_weights=false "
                    "cannot be written as GGUF (llama.cpp's gpt2 has no key for them)");
  }
}

// GPT2Model.set_gguf_parameters (convert_hf_to_gguf.py, conversion/gpt2.py), its keys in its order.
void write_gguf(const Config& c, const json& j, const std::string& src, GgufKv& kv) {
  const std::string ga = "gpt2";
  // It reads n_ctx (transformers also writes n_positions).
  int64_t n_ctx = c.n_ctx;
  if (j.contains("n_ctx") && j["n_ctx"].is_number_integer()) n_ctx = j["n_ctx"].get<int64_t>();
  put_gguf_u32(kv, ga, "block_count", c.n_layer, src);
  put_gguf_u32(kv, ga, "context_length", n_ctx, src);
  put_gguf_u32(kv, ga, "embedding_length", c.n_embd, src);
  put_gguf_u32(kv, ga, "feed_forward_length", c.n_inner, src);
  put_gguf_u32(kv, ga, "attention.head_count", c.n_head, src);
  kv.emplace_back(ga + ".attention.layer_norm_epsilon", gguf_f32(c.layer_norm_epsilon));
  kv.emplace_back("general.file_type", gguf_u32(0));  // set to the preset's by the writer
}

// The hub's GPT-2 sizes (and distilgpt2's): random models of these shapes for benchmarks.
constexpr PublishedShape kShapes[] = {
    {"gpt2", 12, 12, 768, 4 * 768, 50257, 1024, 50256, 50256},
    {"gpt2-medium", 24, 16, 1024, 4 * 1024, 50257, 1024, 50256, 50256},
    {"gpt2-large", 36, 20, 1280, 4 * 1280, 50257, 1024, 50256, 50256},
    {"gpt2-xl", 48, 25, 1600, 4 * 1600, 50257, 1024, 50256, 50256},
    {"distilgpt2", 6, 12, 768, 4 * 768, 50257, 1024, 50256, 50256},
};

}  // namespace

extern const Architecture kGpt2;
constinit const Architecture kGpt2 = {
    .model_type = "gpt2",
    .hf_class = "GPT2LMHeadModel",
    .display_name = "GPT-2",
    .parse = parse,
    .to_json = to_json,
    .tensors = tensors,
    .gguf_arch = "gpt2",
    .parse_gguf = parse_gguf,
    .check_gguf_form = check_gguf_form,
    .write_gguf = write_gguf,
    .gguf_tensor_name = gguf_name,
    .llmc = true,  // train_gpt2.c's
    .shapes = kShapes,
};

}  // namespace minigpt::arch
