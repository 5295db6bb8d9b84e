// The Llama-shaped families' config.json and tensors (llama_family.h); each family's file gives its Variant.
#include "arch/llama_family.h"

#include <cmath>

#include "arch/config_json.h"
#include "formats/gguf_writer.h"

namespace minigpt::arch::llama_family {
namespace {

using json = nlohmann::json;

// rope_scaling (transformers 4) or rope_parameters (transformers 5): rope_type default, linear or llama3.
void parse_rope(const json& j, const std::string& source, Config& c, double theta_default) {
  double theta = theta_default;
  if (has(j, "rope_theta")) theta = get_positive_float(j, "rope_theta", source, 1e4f, 1e12, "1e12");
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!has(j, key)) continue;
    const json& r = j[key];
    if (!r.is_object())
      config_fail(source, std::string("field '") + key + "' must be an object, got " + r.dump());
    if (has(r, "rope_theta")) theta = get_positive_float(r, "rope_theta", source, 1e4f, 1e12, "1e12");
    const std::string type = get_string(r, "rope_type", source, get_string(r, "type", source, "default"));
    if (has(r, "partial_rotary_factor") &&
        get_positive_float(r, "partial_rotary_factor", source, 1.0f, 1.0, "1") != 1.0f) {
      throw Error(ErrorKind::Unsupported, source + ": " + key + ": partial_rotary_factor is not supported");
    }
    RopeScaling& s = c.rope_scaling;
    if (type == "default") {
      s = RopeScaling{};
    } else if (type == "linear") {
      s.kind = RopeScalingKind::Linear;
      s.factor = get_positive_float(r, "factor", source, 1.0f, 1e6, "1e6");
    } else if (type == "llama3") {
      s.kind = RopeScalingKind::Llama3;
      s.factor = get_positive_float(r, "factor", source, 8.0f, 1e6, "1e6");
      s.low_freq_factor = get_positive_float(r, "low_freq_factor", source, 1.0f, 1e6, "1e6");
      s.high_freq_factor = get_positive_float(r, "high_freq_factor", source, 4.0f, 1e6, "1e6");
      s.original_context = get_int(r, "original_max_position_embeddings", source, false, c.n_ctx);
    } else {
      throw Error(ErrorKind::Unsupported,
                  source + ": rope_type '" + type + "' is not supported (default, linear and llama3)");
    }
  }
  c.rope_theta = float(theta);
}

TensorDesc t(Role role, int64_t layer, const std::string& bare, std::vector<int64_t> shape) {
  TensorDesc d;
  d.role = role;
  d.layer = layer;
  d.names = {"model." + bare, bare};  // <Family>ForCausalLM's names, and <Family>Model's
  d.shape = std::move(shape);
  return d;
}

}  // namespace

void parse(const Variant& v, const json& j, const std::string& source, Config& c) {
  c.n_layer = get_int(j, "num_hidden_layers", source, true, 0);
  c.n_head = get_int(j, "num_attention_heads", source, true, 0);
  c.n_kv_head = get_int(j, "num_key_value_heads", source, false, c.n_head);
  c.n_embd = get_int(j, "hidden_size", source, true, 0);
  c.n_vocab = get_int(j, "vocab_size", source, true, 0);
  c.n_ctx = get_int(j, "max_position_embeddings", source, true, 0);
  c.n_inner = get_int(j, "intermediate_size", source, true, 0);
  c.n_head_dim = get_int(j, "head_dim", source, false, 0);
  if (c.n_head_dim != 0 && c.n_head > 0 && c.n_head_dim * c.n_head == c.n_embd) c.n_head_dim = 0;
  c.layer_norm_epsilon = get_positive_float(j, "rms_norm_eps", source, 1e-6f, 1.0, "1");
  set_activation(get_string(j, "hidden_act", source, "silu"), "hidden_act", source, c);
  // The block (config.h): RMSNorm without biases, the gated MLP, rotate_half rotary on whole heads.
  c.norm = NormKind::Rms;
  c.ffn = FfnKind::Gated;
  c.position_encoding = PositionEncoding::Rotary;
  c.rope_layout = RopeLayout::NeoxHalves;
  c.parallel_residual = false;
  parse_rope(j, source, c, v.theta_default);
  c.rotary_dim = c.n_head > 0 ? (c.n_head_dim > 0 ? c.n_head_dim : c.n_embd / c.n_head) : 0;
  c.attn_bias = v.qkv_bias_fixed || get_bool(j, "attention_bias", source, false);
  c.mlp_bias = get_bool(j, "mlp_bias", source, false);
  c.qk_norm = v.qk_norm;
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", source, v.tied_default);
  if (v.reads_window) {
    c.sliding_window = get_int(j, "sliding_window", source, false, 0);
    if (c.sliding_window < 0) config_fail(source, "sliding_window must be >= 0");
  } else if (get_bool(j, "use_sliding_window", source, false)) {
    throw Error(ErrorKind::Unsupported,
                source + ": use_sliding_window=true is not supported for " + v.model_type);
  }
  if (has(j, "layer_types") && j["layer_types"].is_array()) {
    for (const json& l : j["layer_types"]) {
      if (l.is_string() && l.get<std::string>() != "full_attention" && !v.reads_window) {
        throw Error(ErrorKind::Unsupported, source + ": layer_types '" + l.get<std::string>() +
                                                "' is not supported (full_attention only)");
      }
    }
  }
  if (v.nope_layers) {
    c.rope_layers.clear();
    if (c.n_layer < 1 || c.n_layer > 4096) {  // before the per-layer list is made (validate() says the same)
      config_fail(source, "'n_layer' = " + std::to_string(c.n_layer) + " is out of range [1, 4096]");
    }
    if (has(j, "no_rope_layers")) {
      const json& nl = j["no_rope_layers"];
      if (!nl.is_array() || int64_t(nl.size()) != c.n_layer) {
        config_fail(source, "no_rope_layers must be a list of num_hidden_layers = " +
                                std::to_string(c.n_layer) + " entries of 0 or 1");
      }
      for (const json& e : nl) {
        if (!e.is_number_integer() || (e.get<int64_t>() != 0 && e.get<int64_t>() != 1))
          config_fail(source, "no_rope_layers must hold 0 or 1, got " + e.dump());
        c.rope_layers.push_back(uint8_t(e.get<int64_t>()));
      }
    } else {
      const int64_t n = get_int(j, "no_rope_layer_interval", source, false, 4);
      if (n < 1) config_fail(source, "no_rope_layer_interval must be >= 1");
      for (int64_t l = 0; l < c.n_layer; ++l) c.rope_layers.push_back(uint8_t((l + 1) % n != 0));
    }
  }
  c.bos_token_id = get_int(j, "bos_token_id", source, false, -1);
  read_eos(j, source, c);
}

json to_json(const Variant& v, const Config& c) {
  json rope = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
  if (c.rope_scaling.kind == RopeScalingKind::Linear) {
    rope["rope_type"] = "linear";
    rope["factor"] = c.rope_scaling.factor;
  } else if (c.rope_scaling.kind == RopeScalingKind::Llama3) {
    rope["rope_type"] = "llama3";
    rope["factor"] = c.rope_scaling.factor;
    rope["low_freq_factor"] = c.rope_scaling.low_freq_factor;
    rope["high_freq_factor"] = c.rope_scaling.high_freq_factor;
    rope["original_max_position_embeddings"] = c.rope_scaling.original_context;
  }
  json j = {
      {"model_type", v.model_type},
      {"architectures", {v.hf_class}},
      {"num_hidden_layers", c.n_layer},
      {"num_attention_heads", c.n_head},
      {"num_key_value_heads", c.kv_heads()},
      {"hidden_size", c.n_embd},
      {"head_dim", c.head_dim()},
      {"intermediate_size", c.n_inner},
      {"max_position_embeddings", c.n_ctx},
      {"vocab_size", c.n_vocab},
      {"rms_norm_eps", c.layer_norm_epsilon},
      {"hidden_act", c.activation_name},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"rope_theta", c.rope_theta},
      {"rope_parameters", rope},
  };
  if (!v.qkv_bias_fixed) j["attention_bias"] = c.attn_bias;
  if (!v.qkv_bias_fixed) j["mlp_bias"] = c.mlp_bias;
  if (v.reads_window) j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
  if (v.nope_layers) j["no_rope_layers"] = c.rope_layers;
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  write_eos(c, j);
  return j;
}

std::vector<TensorDesc> tensors(const Variant& v, const Config& c) {
  const int64_t C = c.n_embd, F = c.n_inner, V = c.n_vocab, D = c.head_dim(), Q = c.q_dim(), KV = c.kv_dim();
  const bool qkv_bias = c.attn_bias, o_bias = c.attn_bias && !v.qkv_bias_fixed, mlp_bias = c.mlp_bias;
  std::vector<TensorDesc> out;
  out.push_back(t(Role::TokenEmbd, -1, "embed_tokens.weight", {V, C}));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "layers." + std::to_string(l) + ".";
    out.push_back(t(Role::AttnNorm, l, h + "input_layernorm.weight", {C}));
    out.push_back(t(Role::AttnQ, l, h + "self_attn.q_proj.weight", {Q, C}));
    if (qkv_bias) out.push_back(t(Role::AttnQBias, l, h + "self_attn.q_proj.bias", {Q}));
    out.push_back(t(Role::AttnK, l, h + "self_attn.k_proj.weight", {KV, C}));
    if (qkv_bias) out.push_back(t(Role::AttnKBias, l, h + "self_attn.k_proj.bias", {KV}));
    out.push_back(t(Role::AttnV, l, h + "self_attn.v_proj.weight", {KV, C}));
    if (qkv_bias) out.push_back(t(Role::AttnVBias, l, h + "self_attn.v_proj.bias", {KV}));
    if (c.qk_norm) {
      out.push_back(t(Role::AttnQNorm, l, h + "self_attn.q_norm.weight", {D}));
      out.push_back(t(Role::AttnKNorm, l, h + "self_attn.k_norm.weight", {D}));
    }
    out.push_back(t(Role::AttnOut, l, h + "self_attn.o_proj.weight", {C, Q}));
    if (o_bias) out.push_back(t(Role::AttnOutBias, l, h + "self_attn.o_proj.bias", {C}));
    out.push_back(t(Role::FfnNorm, l, h + "post_attention_layernorm.weight", {C}));
    out.push_back(t(Role::FfnGate, l, h + "mlp.gate_proj.weight", {F, C}));
    if (mlp_bias) out.push_back(t(Role::FfnGateBias, l, h + "mlp.gate_proj.bias", {F}));
    out.push_back(t(Role::FfnUp, l, h + "mlp.up_proj.weight", {F, C}));
    if (mlp_bias) out.push_back(t(Role::FfnUpBias, l, h + "mlp.up_proj.bias", {F}));
    out.push_back(t(Role::FfnDown, l, h + "mlp.down_proj.weight", {C, F}));
    if (mlp_bias) out.push_back(t(Role::FfnDownBias, l, h + "mlp.down_proj.bias", {C}));
    // The rotary frequencies older transformers saved as a buffer.
    TensorDesc inv = t(Role::Ignored, l, h + "self_attn.rotary_emb.inv_freq", {});
    inv.optional = true;
    out.push_back(inv);
  }
  out.push_back(t(Role::OutputNorm, -1, "norm.weight", {C}));
  if (!c.rope_freq_factors.empty()) {  // only a GGUF file's (Config::rope_freq_factors)
    TensorDesc f = t(Role::RopeFreqs, -1, "rope_freqs.weight", {c.rotary_dim / 2});
    f.optional = true;
    out.push_back(f);
  }
  TensorDesc head;
  head.role = Role::Output;
  head.names = {"lm_head.weight"};
  head.shape = {V, C};
  head.optional = c.tie_word_embeddings;
  out.push_back(head);
  return out;
}

void check_gguf_form(const Variant& v, const Config& c, const std::string& source) {
  if (v.nope_layers) {
    for (int64_t l = 0; l < c.n_layer; ++l) {
      if (c.rope_layers.empty() || c.rope_layers[size_t(l)] != uint8_t((l + 1) % 4 != 0)) {
        throw Error(ErrorKind::Unsupported, source +
                                                ": no_rope_layers other than every 4th layer cannot be "
                                                "written as GGUF (llama.cpp's smollm3 fixes that pattern)");
      }
    }
  }
  if (c.activation != Activation::Silu) {
    throw Error(ErrorKind::Unsupported, source + ": hidden_act '" + c.activation_name +
                                            "' cannot be written as GGUF (llama.cpp's " + v.model_type +
                                            " computes silu)");
  }
  // llama.cpp's llama reads every bias; its qwen2 the q, k and v biases only, its qwen3 none.
  const bool llama = !v.qkv_bias_fixed && !v.qk_norm;
  if (!llama && (c.mlp_bias || (c.attn_bias && !v.qkv_bias_fixed))) {
    throw Error(ErrorKind::Unsupported, source + ": attention_bias / mlp_bias of a " + v.model_type +
                                            " model cannot be written as GGUF (llama.cpp's " + v.model_type +
                                            " has no such tensors)");
  }
}

// TextModel.set_gguf_parameters and LlamaModel's (conversion/base.py, llama.py), their keys in their order.
void write_gguf(const Variant&, const char* gguf_arch, const Config& c, const json& j, const std::string& src,
                GgufKv& kv) {
  const std::string ga = gguf_arch;
  put_gguf_u32(kv, ga, "block_count", c.n_layer, src);
  put_gguf_u32(kv, ga, "context_length", c.n_ctx, src);
  put_gguf_u32(kv, ga, "embedding_length", c.n_embd, src);
  put_gguf_u32(kv, ga, "feed_forward_length", c.n_inner, src);
  put_gguf_u32(kv, ga, "attention.head_count", c.n_head, src);
  put_gguf_u32(kv, ga, "attention.head_count_kv", c.kv_heads(), src);
  if (c.rope_scaling.kind == RopeScalingKind::Linear) {
    kv.emplace_back(ga + ".rope.scaling.type", gguf_string("linear"));
    kv.emplace_back(ga + ".rope.scaling.factor", gguf_f32(c.rope_scaling.factor));
  }
  kv.emplace_back(ga + ".rope.freq_base", gguf_f32(c.rope_theta));
  kv.emplace_back(ga + ".attention.layer_norm_rms_epsilon", gguf_f32(c.layer_norm_epsilon));
  if (has(j, "head_dim") || c.n_head_dim > 0) {
    put_gguf_u32(kv, ga, "attention.key_length", c.head_dim(), src);
    put_gguf_u32(kv, ga, "attention.value_length", c.head_dim(), src);
  }
  kv.emplace_back("general.file_type", gguf_u32(0));  // set to the preset's by the writer
  if (ga == "llama" || ga == "smollm3") {
    put_gguf_u32(kv, ga, "vocab_size", c.n_vocab, src);
    put_gguf_u32(kv, ga, "rope.dimension_count", c.rotary_dim, src);
  }
}

std::vector<std::pair<std::string, std::vector<float>>> gguf_extra_tensors(const Config& c) {
  if (c.rope_scaling.kind != RopeScalingKind::Llama3) return {};
  // freqs in F32 (torch), the rest in Python's doubles; the factors stored as F32.
  const RopeScaling& r = c.rope_scaling;
  const double old_len = double(r.original_context), low = old_len / r.low_freq_factor,
               high = old_len / r.high_freq_factor;
  std::vector<float> factors;
  for (int64_t i = 0; i < c.rotary_dim / 2; ++i) {
    const float freq = 1.0f / std::pow(c.rope_theta, float(2 * i) / float(c.rotary_dim));
    const double wavelen = 2 * M_PI / double(freq);
    if (wavelen < high) {
      factors.push_back(1.0f);
    } else if (wavelen > low) {
      factors.push_back(r.factor);
    } else {
      const double smooth =
          (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      factors.push_back(float(1.0 / ((1.0 - smooth) / r.factor + smooth)));
    }
  }
  return {{"rope_freqs.weight", factors}};
}

void parse_gguf(const Variant& v, const char* gguf_arch, const GgufFile& f, Config& c) {
  const std::string ga = gguf_arch;
  read_gguf_sizes(f, ga, c);
  if (const auto k = f.get_int(ga + ".attention.key_length")) {
    const auto vl = f.get_int(ga + ".attention.value_length").value_or(*k);
    if (vl != *k) {
      throw Error(ErrorKind::Unsupported, f.path() + ": key_length " + std::to_string(*k) +
                                              " != value_length " + std::to_string(vl) + " is not supported");
    }
    if (c.n_head > 0 && *k * c.n_head != c.n_embd) c.n_head_dim = *k;
  }
  const int64_t D = c.n_head_dim > 0 ? c.n_head_dim : (c.n_head > 0 ? c.n_embd / c.n_head : 0);
  c.rotary_dim = f.get_int(ga + ".rope.dimension_count").value_or(D);
  if (c.rotary_dim != D) {
    throw Error(ErrorKind::Unsupported, f.path() + ": " + ga + ".rope.dimension_count " +
                                            std::to_string(c.rotary_dim) + " != head dim " +
                                            std::to_string(D) + " (partial rotary) is not supported");
  }
  c.rope_theta = float(f.get_float(ga + ".rope.freq_base").value_or(10000.0));
  c.layer_norm_epsilon = read_gguf_rms_eps(f, ga);
  const std::string scaling = f.get_string(ga + ".rope.scaling.type").value_or("none");
  if (scaling == "linear") {
    c.rope_scaling.kind = RopeScalingKind::Linear;
    c.rope_scaling.factor = float(f.get_float(ga + ".rope.scaling.factor").value_or(1.0));
    if (c.rope_scaling.factor == 1.0f) c.rope_scaling = RopeScaling{};
  } else if (scaling != "none") {
    throw Error(ErrorKind::Unsupported, f.path() + ": " + ga + ".rope.scaling.type '" + scaling +
                                            "' is not supported (none, linear)");
  }
  if (const GgufTensor* t = f.find("rope_freqs.weight")) {
    if (t->type != GgmlType::F32 || t->numel() != c.rotary_dim / 2) {
      throw Error(ErrorKind::Shape, f.path() + ": rope_freqs.weight must be " +
                                        std::to_string(c.rotary_dim / 2) + " F32 factors");
    }
    c.rope_freq_factors.resize(size_t(t->numel()));
    f.read(*t, c.rope_freq_factors.data());
  }
  c.activation = Activation::Silu;  // llama.cpp's graph: silu(gate) * up
  c.activation_name = "silu";
  // The block (config.h); llama.cpp's converter permutes a llama file's q and k rows so that rotary pairs
  // are adjacent (LlamaModel.permute); its qwen2 and qwen3 files keep transformers' halves.
  c.norm = NormKind::Rms;
  c.ffn = FfnKind::Gated;
  c.position_encoding = PositionEncoding::Rotary;
  c.rope_layout = gguf_permuted(v) ? RopeLayout::AdjacentPairs : RopeLayout::NeoxHalves;
  if (v.nope_layers) {  // llama.cpp's smollm3: every 4th layer without positions (n_no_rope_layer_step)
    c.rope_layers.clear();
    for (int64_t l = 0; l < c.n_layer && l < 4096; ++l) c.rope_layers.push_back(uint8_t((l + 1) % 4 != 0));
  }
  c.parallel_residual = false;
  c.attn_bias = f.find("blk.0.attn_q.bias") != nullptr;
  c.mlp_bias = f.find("blk.0.ffn_up.bias") != nullptr;
  c.qk_norm = v.qk_norm;
  c.bos_token_id = f.get_int("tokenizer.ggml.bos_token_id").value_or(-1);
  c.eos_token_id = f.get_int("tokenizer.ggml.eos_token_id").value_or(-1);
}

}  // namespace minigpt::arch::llama_family
