// The Gemma families' config.json, tensors and GGUF keys (gemma_family.h); each family's file gives its
// Variant.
#include "arch/gemma_family.h"

#include <cmath>

#include "arch/config_json.h"
#include "formats/gguf_writer.h"

namespace minigpt::arch::gemma_family {
namespace {

using json = nlohmann::json;

TensorDesc t(Role role, int64_t layer, const std::string& bare, std::vector<int64_t> shape, float shift = 0) {
  TensorDesc d;
  d.role = role;
  d.layer = layer;
  d.names = {"model." + bare, bare};  // <Family>ForCausalLM's names, and <Family>Model's
  d.shape = std::move(shape);
  d.shift = shift;
  return d;
}

// One rope_parameters entry (transformers 5) or rope_scaling (4): its theta where it has one, and its
// scaling (default or linear: what Gemma's published configs use).
void parse_rope_entry(const json& r, const std::string& source, const std::string& where, float& theta,
                      RopeScaling* scaling) {
  if (!r.is_object()) config_fail(source, "field '" + where + "' must be an object, got " + r.dump());
  if (has(r, "rope_theta")) theta = get_positive_float(r, "rope_theta", source, 1e4f, 1e12, "1e12");
  const std::string type = get_string(r, "rope_type", source, get_string(r, "type", source, "default"));
  if (type == "default") return;
  if (type == "linear" && scaling != nullptr) {
    scaling->kind = RopeScalingKind::Linear;
    scaling->factor = get_positive_float(r, "factor", source, 1.0f, 1e6, "1e6");
    return;
  }
  throw Error(ErrorKind::Unsupported, source + ": " + where + ": rope_type '" + type +
                                          "' is not supported here (default" +
                                          (scaling != nullptr ? ", linear)" : " for the local layers)"));
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
  c.n_head_dim = get_int(j, "head_dim", source, false, v.head_dim_default);
  if (c.n_head_dim < 1) config_fail(source, "head_dim must be >= 1, got " + std::to_string(c.n_head_dim));
  c.layer_norm_epsilon = get_positive_float(j, "rms_norm_eps", source, 1e-6f, 1.0, "1");
  // transformers' Gemma reads hidden_activation (hidden_act is the older name it falls back to).
  const char* act_key = has(j, "hidden_activation") ? "hidden_activation" : "hidden_act";
  set_activation(get_string(j, act_key, source, "gelu_pytorch_tanh"), act_key, source, c);
  c.norm = NormKind::Rms;
  c.norm_shift = 1.0f;
  c.post_norms = true;
  c.ffn = FfnKind::Gated;
  c.position_encoding = PositionEncoding::Rotary;
  c.rope_layout = RopeLayout::NeoxHalves;
  c.rotary_dim = c.n_head_dim;
  c.attn_bias = get_bool(j, "attention_bias", source, false);
  c.mlp_bias = false;
  c.qk_norm = v.qk_norm;
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", source, true);
  c.embed_scale = c.n_embd > 0 ? float(std::sqrt(double(c.n_embd))) : 0.0f;
  const float qpas = get_positive_float(j, "query_pre_attn_scalar", source, float(c.n_head_dim), 1e9, "1e9");
  c.attn_scale = float(std::pow(double(qpas), -0.5));
  if (get_bool(j, "use_bidirectional_attention", source, false)) {
    throw Error(ErrorKind::Unsupported,
                source + ": use_bidirectional_attention=true (an embedding model) is not supported");
  }
  if (v.softcaps) {
    c.attn_softcap = has(j, "attn_logit_softcapping")
                         ? get_positive_float(j, "attn_logit_softcapping", source, 0, 1e6, "1e6")
                         : 0.0f;
    c.final_softcap = has(j, "final_logit_softcapping")
                          ? get_positive_float(j, "final_logit_softcapping", source, 0, 1e6, "1e6")
                          : 0.0f;
  } else {
    if (has(j, "attn_logit_softcapping")) {
      throw Error(ErrorKind::Unsupported,
                  source + ": attn_logit_softcapping is not part of " + v.display_name);
    }
    c.final_softcap = has(j, "final_logit_softcapping")
                          ? get_positive_float(j, "final_logit_softcapping", source, 0, 1e6, "1e6")
                          : 0.0f;
  }

  // The local (sliding) and global layers: layer_types, else every window_pattern-th layer global.
  c.sliding_window = get_int(j, "sliding_window", source, false, 4096);
  if (c.sliding_window < 1) config_fail(source, "sliding_window must be >= 1");
  if (c.n_layer < 1 || c.n_layer > 4096) {  // before the per-layer lists are made (validate() says the same)
    config_fail(source, "'n_layer' = " + std::to_string(c.n_layer) + " is out of range [1, 4096]");
  }
  std::vector<bool> local(size_t(c.n_layer));
  if (has(j, "layer_types")) {
    const json& lt = j["layer_types"];
    if (!lt.is_array() || int64_t(lt.size()) != c.n_layer) {
      config_fail(source, "layer_types must be a list of num_hidden_layers = " + std::to_string(c.n_layer) +
                              " entries, got " + std::to_string(lt.is_array() ? lt.size() : 0));
    }
    for (size_t l = 0; l < lt.size(); ++l) {
      const std::string kind = lt[l].is_string() ? lt[l].get<std::string>() : lt[l].dump();
      if (kind != "sliding_attention" && kind != "full_attention") {
        config_fail(source, "layer_types[" + std::to_string(l) + "] is '" + kind +
                                "' (sliding_attention or full_attention)");
      }
      local[l] = kind == "sliding_attention";
    }
  } else {
    const int64_t n = get_int(j, "sliding_window_pattern", source, false, v.window_pattern);
    if (n < 1) config_fail(source, "sliding_window_pattern must be >= 1");
    for (int64_t l = 0; l < c.n_layer; ++l) local[size_t(l)] = n > 1 && l % n < n - 1;
  }
  c.layer_window.clear();
  for (bool is_local : local) c.layer_window.push_back(is_local ? c.sliding_window : 0);

  // Rotary: the global layers' base and scaling; the local layers' own base (Gemma 3).
  float theta = 1e4f, theta_local = v.local_theta ? 1e4f : 0.0f;
  if (has(j, "rope_theta")) theta = get_positive_float(j, "rope_theta", source, 1e4f, 1e12, "1e12");
  if (v.local_theta && has(j, "rope_local_base_freq"))
    theta_local = get_positive_float(j, "rope_local_base_freq", source, 1e4f, 1e12, "1e12");
  if (has(j, "rope_parameters")) {
    const json& r = j["rope_parameters"];
    if (r.is_object() && (r.contains("full_attention") || r.contains("sliding_attention"))) {
      if (has(r, "full_attention"))
        parse_rope_entry(r["full_attention"], source, "rope_parameters.full_attention", theta,
                         &c.rope_scaling);
      if (has(r, "sliding_attention")) {
        float tl = theta_local > 0 ? theta_local : theta;
        parse_rope_entry(r["sliding_attention"], source, "rope_parameters.sliding_attention", tl, nullptr);
        theta_local = tl;
      }
    } else {
      parse_rope_entry(r, source, "rope_parameters", theta, &c.rope_scaling);
    }
  }
  if (has(j, "rope_scaling"))
    parse_rope_entry(j["rope_scaling"], source, "rope_scaling", theta, &c.rope_scaling);
  c.rope_theta = theta;
  c.rope_theta_local = v.local_theta && theta_local != theta ? theta_local : 0.0f;
  if (v.local_theta && c.rope_scaling.kind != RopeScalingKind::None && c.rope_theta_local == 0.0f)
    c.rope_theta_local = theta;  // the local layers keep the unscaled frequencies
  c.bos_token_id = get_int(j, "bos_token_id", source, false, -1);
  read_eos(j, source, c);
}

json to_json(const Variant& v, const Config& c) {
  json layer_types = json::array();
  for (int64_t l = 0; l < c.n_layer; ++l)
    layer_types.push_back(c.window_of(l) > 0 ? "sliding_attention" : "full_attention");
  json full = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
  if (c.rope_scaling.kind == RopeScalingKind::Linear) {
    full["rope_type"] = "linear";
    full["factor"] = c.rope_scaling.factor;
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
      {"hidden_activation", c.activation_name},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"attention_bias", c.attn_bias},
      {"query_pre_attn_scalar", double(1.0 / (double(c.attn_scale) * double(c.attn_scale)))},
      {"sliding_window", c.sliding_window},
      {"layer_types", layer_types},
      {"rope_theta", c.rope_theta},
  };
  if (v.local_theta) {
    j["rope_local_base_freq"] = c.rope_theta_local > 0 ? c.rope_theta_local : c.rope_theta;
    j["rope_parameters"] = {
        {"full_attention", full},
        {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", j["rope_local_base_freq"]}}}};
  } else {
    j["rope_parameters"] = full;
  }
  if (v.softcaps) j["attn_logit_softcapping"] = c.attn_softcap > 0 ? json(c.attn_softcap) : json(nullptr);
  j["final_logit_softcapping"] = c.final_softcap > 0 ? json(c.final_softcap) : json(nullptr);
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  write_eos(c, j);
  return j;
}

std::vector<TensorDesc> tensors(const Variant&, const Config& c) {
  const int64_t C = c.n_embd, F = c.n_inner, V = c.n_vocab, D = c.head_dim(), Q = c.q_dim(), KV = c.kv_dim();
  const float s = c.norm_shift;
  std::vector<TensorDesc> out;
  out.push_back(t(Role::TokenEmbd, -1, "embed_tokens.weight", {V, C}));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "layers." + std::to_string(l) + ".";
    out.push_back(t(Role::AttnNorm, l, h + "input_layernorm.weight", {C}, s));
    out.push_back(t(Role::AttnQ, l, h + "self_attn.q_proj.weight", {Q, C}));
    if (c.attn_bias) out.push_back(t(Role::AttnQBias, l, h + "self_attn.q_proj.bias", {Q}));
    out.push_back(t(Role::AttnK, l, h + "self_attn.k_proj.weight", {KV, C}));
    if (c.attn_bias) out.push_back(t(Role::AttnKBias, l, h + "self_attn.k_proj.bias", {KV}));
    out.push_back(t(Role::AttnV, l, h + "self_attn.v_proj.weight", {KV, C}));
    if (c.attn_bias) out.push_back(t(Role::AttnVBias, l, h + "self_attn.v_proj.bias", {KV}));
    if (c.qk_norm) {
      out.push_back(t(Role::AttnQNorm, l, h + "self_attn.q_norm.weight", {D}, s));
      out.push_back(t(Role::AttnKNorm, l, h + "self_attn.k_norm.weight", {D}, s));
    }
    out.push_back(t(Role::AttnOut, l, h + "self_attn.o_proj.weight", {C, Q}));
    if (c.attn_bias) out.push_back(t(Role::AttnOutBias, l, h + "self_attn.o_proj.bias", {C}));
    out.push_back(t(Role::AttnPostNorm, l, h + "post_attention_layernorm.weight", {C}, s));
    out.push_back(t(Role::FfnNorm, l, h + "pre_feedforward_layernorm.weight", {C}, s));
    out.push_back(t(Role::FfnPostNorm, l, h + "post_feedforward_layernorm.weight", {C}, s));
    out.push_back(t(Role::FfnGate, l, h + "mlp.gate_proj.weight", {F, C}));
    out.push_back(t(Role::FfnUp, l, h + "mlp.up_proj.weight", {F, C}));
    out.push_back(t(Role::FfnDown, l, h + "mlp.down_proj.weight", {C, F}));
  }
  out.push_back(t(Role::OutputNorm, -1, "norm.weight", {C}, s));
  TensorDesc head;
  head.role = Role::Output;
  head.names = {"lm_head.weight"};
  head.shape = {V, C};
  head.optional = c.tie_word_embeddings;
  out.push_back(head);
  return out;
}

void check_gguf_form(const Variant& v, const Config& c, const std::string& source) {
  if (c.activation != Activation::GeluTanh) {
    throw Error(ErrorKind::Unsupported, source + ": hidden_activation '" + c.activation_name +
                                            "' cannot be written as GGUF (llama.cpp's " + v.gguf_arch +
                                            " computes gelu with tanh)");
  }
  if (c.attn_bias) {
    throw Error(ErrorKind::Unsupported,
                source + ": attention_bias of a " + v.display_name +
                    " model cannot be written as GGUF (llama.cpp has no such tensors)");
  }
  // llama.cpp takes the score scale from the head width (query_pre_attn_scalar is not in its files).
  if (std::fabs(c.attn_scale * std::sqrt(float(c.head_dim())) - 1.0f) > 1e-6f) {
    throw Error(ErrorKind::Unsupported,
                source +
                    ": query_pre_attn_scalar != head_dim cannot be written as GGUF (llama.cpp scales the "
                    "scores by 1 / sqrt(head_dim))");
  }
}

// Gemma2Model / Gemma3Model.set_gguf_parameters (conversion/gemma.py), their keys in their order.
void write_gguf(const Variant& v, const Config& c, const json&, const std::string& src, GgufKv& kv) {
  const std::string ga = v.gguf_arch;
  put_gguf_u32(kv, ga, "context_length", c.n_ctx, src);
  put_gguf_u32(kv, ga, "embedding_length", c.n_embd, src);
  put_gguf_u32(kv, ga, "block_count", c.n_layer, src);
  put_gguf_u32(kv, ga, "feed_forward_length", c.n_inner, src);
  put_gguf_u32(kv, ga, "attention.head_count", c.n_head, src);
  put_gguf_u32(kv, ga, "attention.head_count_kv", c.kv_heads(), src);
  kv.emplace_back(ga + ".attention.layer_norm_rms_epsilon", gguf_f32(c.layer_norm_epsilon));
  put_gguf_u32(kv, ga, "attention.key_length", c.head_dim(), src);
  put_gguf_u32(kv, ga, "attention.value_length", c.head_dim(), src);
  kv.emplace_back(ga + ".rope.freq_base", gguf_f32(c.rope_theta));
  if (c.rope_scaling.kind == RopeScalingKind::Linear) {
    kv.emplace_back(ga + ".rope.scaling.type", gguf_string("linear"));
    kv.emplace_back(ga + ".rope.scaling.factor", gguf_f32(c.rope_scaling.factor));
  }
  if (c.attn_softcap > 0) kv.emplace_back(ga + ".attn_logit_softcapping", gguf_f32(c.attn_softcap));
  if (c.final_softcap > 0) kv.emplace_back(ga + ".final_logit_softcapping", gguf_f32(c.final_softcap));
  put_gguf_u32(kv, ga, "attention.sliding_window", c.sliding_window, src);
  // The local/global pattern as an array of the layers' kinds (llama.cpp's load_swa_pattern reads it).
  GgufValue pattern;
  pattern.type = GgufType::ARRAY;
  pattern.elem = GgufType::BOOL;
  for (int64_t l = 0; l < c.n_layer; ++l) pattern.ints.push_back(c.window_of(l) > 0 ? 1 : 0);
  kv.emplace_back(ga + ".attention.sliding_window_pattern", pattern);
  if (c.rope_theta_local > 0) kv.emplace_back(ga + ".rope.freq_base_swa", gguf_f32(c.rope_theta_local));
  kv.emplace_back("general.file_type", gguf_u32(0));  // set to the preset's by the writer
}

void parse_gguf(const Variant& v, const GgufFile& f, Config& c) {
  const std::string ga = v.gguf_arch;
  read_gguf_sizes(f, ga, c);
  const int64_t k = f.get_int(ga + ".attention.key_length").value_or(v.head_dim_default);
  const int64_t vl = f.get_int(ga + ".attention.value_length").value_or(k);
  if (vl != k) {
    throw Error(ErrorKind::Unsupported, f.path() + ": " + ga + ".attention.key_length " + std::to_string(k) +
                                            " != value_length " + std::to_string(vl) + " is not supported");
  }
  if (k < 1 || k > (int64_t(1) << 20)) {
    throw Error(ErrorKind::Config,
                f.path() + ": " + ga + ".attention.key_length " + std::to_string(k) + " is out of range");
  }
  c.n_head_dim = k;
  c.rotary_dim = k;
  c.layer_norm_epsilon = read_gguf_rms_eps(f, ga);
  c.rope_theta = float(f.get_float(ga + ".rope.freq_base").value_or(10000.0));
  const std::string scaling = f.get_string(ga + ".rope.scaling.type").value_or("none");
  if (scaling == "linear") {
    c.rope_scaling.kind = RopeScalingKind::Linear;
    c.rope_scaling.factor = float(f.get_float(ga + ".rope.scaling.factor").value_or(1.0));
    if (c.rope_scaling.factor == 1.0f) c.rope_scaling = RopeScaling{};
  } else if (scaling != "none") {
    throw Error(ErrorKind::Unsupported, f.path() + ": " + ga + ".rope.scaling.type '" + scaling +
                                            "' is not supported (none, linear)");
  }
  // The local layers: llama.cpp's load_swa_pattern (an array of per-layer flags, or every n-th layer
  // global, n from the key or the family's default), only where the file has a window.
  c.sliding_window = f.get_int(ga + ".attention.sliding_window").value_or(v.gguf_window_default);
  if (c.sliding_window < 0) {
    throw Error(ErrorKind::Config, f.path() + ": " + ga + ".attention.sliding_window is negative");
  }
  c.layer_window.assign(size_t(std::clamp<int64_t>(c.n_layer, 0, 4096)), 0);
  if (c.sliding_window > 0) {
    const std::string pkey = ga + ".attention.sliding_window_pattern";
    const GgufValue* p = f.find_value(pkey);
    if (p != nullptr && p->type == GgufType::ARRAY) {
      if (gguf_array_kind(p->elem) != GgufArrayKind::ints)
        throw Error(ErrorKind::Config, f.path() + ": " + pkey + " is an array of " +
                                           std::string(gguf_type_name(p->elem)) + ", not of bools");
      if (int64_t(p->ints.size()) != c.n_layer) {
        throw Error(ErrorKind::Config, f.path() + ": " + pkey + " has " + std::to_string(p->ints.size()) +
                                           " entries for " + std::to_string(c.n_layer) + " layers");
      }
      for (size_t l = 0; l < p->ints.size(); ++l) c.layer_window[l] = p->ints[l] != 0 ? c.sliding_window : 0;
    } else {
      const int64_t n = f.get_int(pkey).value_or(v.window_pattern);
      if (n < 0) throw Error(ErrorKind::Config, f.path() + ": " + pkey + " is negative");
      for (size_t l = 0; l < c.layer_window.size(); ++l)
        c.layer_window[l] = n == 0 || int64_t(l) % n < n - 1 ? c.sliding_window : 0;
    }
    // llama.cpp's local layers rotate with freq_base_swa (10000 when absent) and no scaling.
    if (v.local_theta) c.rope_theta_local = float(f.get_float(ga + ".rope.freq_base_swa").value_or(10000.0));
  }
  c.final_softcap =
      float(f.get_float(ga + ".final_logit_softcapping").value_or(v.gguf_final_softcap_default));
  c.attn_softcap =
      v.softcaps ? float(f.get_float(ga + ".attn_logit_softcapping").value_or(v.gguf_attn_softcap_default))
                 : 0.0f;
  if (!(c.final_softcap >= 0) || !(c.attn_softcap >= 0)) {
    throw Error(ErrorKind::Config, f.path() + ": a soft-cap (" + ga + ".*_logit_softcapping) is negative");
  }
  // llama.cpp's score scale: 1 / sqrt(head_dim), but 1 / sqrt(n_embd / n_head) for the 27B (62 layers in
  // Gemma 3, 46 in Gemma 2) as Google's reference code has it.
  const bool big = c.n_layer == (v.local_theta ? 62 : 46);
  c.attn_scale = float(1.0 / std::sqrt(big && c.n_head > 0 ? double(c.n_embd / c.n_head) : double(k)));
  c.activation = Activation::GeluTanh;  // llama.cpp's LLM_FFN_GELU: ggml_gelu, the tanh form
  c.activation_name = "gelu_pytorch_tanh";
  c.norm = NormKind::Rms;
  c.norm_shift = 0.0f;  // the converter wrote 1 + w
  c.post_norms = true;
  c.ffn = FfnKind::Gated;
  c.position_encoding = PositionEncoding::Rotary;
  c.rope_layout = RopeLayout::NeoxHalves;  // llama.cpp's LLAMA_ROPE_TYPE_NEOX for Gemma
  c.parallel_residual = false;
  c.attn_bias = false;
  c.mlp_bias = false;
  c.qk_norm = v.qk_norm;
  c.embed_scale = float(std::sqrt(double(c.n_embd)));
  c.bos_token_id = f.get_int("tokenizer.ggml.bos_token_id").value_or(-1);
  c.eos_token_id = f.get_int("tokenizer.ggml.eos_token_id").value_or(-1);
}

}  // namespace minigpt::arch::gemma_family
