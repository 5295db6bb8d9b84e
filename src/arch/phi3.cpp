// Phi-3 (transformers' Phi3ForCausalLM, model_type phi3; GGUF phi3): Llama's block (RMSNorm, a SiLU-gated
// MLP, rotate_half rotary positions, grouped-query attention) with the projections fused as its checkpoints
// store them (qkv_proj: q | k | v rows; gate_up_proj: gate | up rows), rotary positions on the leading
// partial_rotary_factor of each head (Phi-4-mini: 0.75), and LongRoPE: per-pair divisors of the rotary
// frequencies, short_factor for a context up to original_max_position_embeddings and long_factor beyond,
// cos and sin times an attention factor. minigpt picks the factors by the session's context, as llama.cpp
// does (transformers by the length of each forward call).
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "arch/arch.h"
#include "arch/config_json.h"
#include "formats/gguf_writer.h"

namespace minigpt::arch {
namespace {

using json = nlohmann::json;

constexpr const char* kGgufArch = "phi3";

TensorDesc t(Role role, int64_t layer, const std::string& bare, std::vector<int64_t> shape) {
  TensorDesc d;
  d.role = role;
  d.layer = layer;
  d.names = {"model." + bare, bare};  // Phi3ForCausalLM's names, and Phi3Model's
  d.shape = std::move(shape);
  return d;
}

// A LongRoPE factor list: numbers, kept as F32 (values outside F32's range become infinite, which
// Config::validate refuses by name).
std::vector<float> factor_list(const json& r, const char* key, const std::string& where,
                               const std::string& source) {
  if (!has(r, key)) config_fail(source, where + " (longrope) needs '" + key + "'");
  const json& v = r[key];
  if (!v.is_array()) config_fail(source, where + "." + key + " must be a list of numbers, got " + v.dump());
  std::vector<float> out;
  for (const json& e : v) {
    if (!e.is_number())
      config_fail(source, where + "." + key + " must be a list of numbers, got " + e.dump());
    const double d = e.get<double>();
    out.push_back(std::fabs(d) <= double(std::numeric_limits<float>::max())
                      ? float(d)
                      : std::numeric_limits<float>::infinity());
  }
  return out;
}

// rope_parameters (transformers 5) or rope_scaling (4; Phi3Config takes it first where both are there):
// rope_theta, partial_rotary_factor and the longrope fields, each from the dict, else config.json's top
// level.
void parse_rope(const json& j, const std::string& source, Config& c) {
  const char* where = has(j, "rope_scaling") ? "rope_scaling" : "rope_parameters";
  const json empty = json::object();
  const json& r = has(j, where) ? j[where] : empty;
  if (!r.is_object())
    config_fail(source, std::string("field '") + where + "' must be an object, got " + r.dump());
  const json& theta_at = has(r, "rope_theta") ? r : j;
  c.rope_theta = get_positive_float(theta_at, "rope_theta", source, 1e4f, 1e12, "1e12");
  // transformers: int(head_dim * partial_rotary_factor) in doubles; Config::validate wants it even, >= 2.
  const json& partial_at = has(r, "partial_rotary_factor") ? r : j;
  double partial = 1.0;
  if (has(partial_at, "partial_rotary_factor")) {
    get_positive_float(partial_at, "partial_rotary_factor", source, 1.0f, 1.0, "1");  // a number in (0, 1]
    partial = partial_at["partial_rotary_factor"].get<double>();
  }
  c.rotary_dim = int64_t(double(c.head_dim()) * partial);
  std::string type = get_string(r, "rope_type", source, get_string(r, "type", source, "default"));
  if (type == "su") type = "longrope";  // Phi3Config's older name
  c.rope_scaling = RopeScaling{};
  if (type == "default") return;
  if (type != "longrope") {
    throw Error(ErrorKind::Unsupported, source + ": " + where + ": rope_type '" + type +
                                            "' is not supported for phi3 (default, longrope)");
  }
  RopeScaling& s = c.rope_scaling;
  s.kind = RopeScalingKind::LongRope;
  s.short_factor = factor_list(r, "short_factor", where, source);
  s.long_factor = factor_list(r, "long_factor", where, source);
  // Phi3Config's own original_max_position_embeddings (4096 by default) replaces the dict's
  // (standardize_rope_params).
  s.original_context = get_int(j, "original_max_position_embeddings", source, false, 4096);
  if (s.original_context < 1) config_fail(source, "original_max_position_embeddings must be >= 1");
  // _compute_longrope_parameters: attention_factor as given, else from factor (as given, else the contexts'
  // ratio), in doubles.
  if (has(r, "attention_factor")) {
    s.attention_factor = get_positive_float(r, "attention_factor", source, 1.0f, 1e6, "1e6");
  } else {
    const double factor = has(r, "factor") ? double(get_positive_float(r, "factor", source, 1.0f, 1e6, "1e6"))
                                           : double(c.n_ctx) / double(s.original_context);
    s.attention_factor =
        factor <= 1.0 ? 1.0f
                      : float(std::sqrt(1.0 + std::log(factor) / std::log(double(s.original_context))));
  }
}

void parse(const json& j, const std::string& source, Config& c) {
  c.n_layer = get_int(j, "num_hidden_layers", source, true, 0);
  c.n_head = get_int(j, "num_attention_heads", source, true, 0);
  c.n_kv_head = get_int(j, "num_key_value_heads", source, false, c.n_head);
  c.n_embd = get_int(j, "hidden_size", source, true, 0);
  c.n_vocab = get_int(j, "vocab_size", source, true, 0);
  c.n_ctx = get_int(j, "max_position_embeddings", source, true, 0);
  c.n_inner = get_int(j, "intermediate_size", source, true, 0);
  c.n_head_dim = get_int(j, "head_dim", source, false, 0);  // Phi3Attention: getattr(config, "head_dim", ...)
  if (c.n_head_dim != 0 && c.n_head > 0 && c.n_head_dim * c.n_head == c.n_embd) c.n_head_dim = 0;
  if (c.n_head < 1 || c.n_embd < 1) return;  // Config::validate names the field
  c.layer_norm_epsilon = get_positive_float(j, "rms_norm_eps", source, 1e-5f, 1.0, "1");
  set_activation(get_string(j, "hidden_act", source, "silu"), "hidden_act", source, c);
  c.norm = NormKind::Rms;
  c.ffn = FfnKind::Gated;
  c.position_encoding = PositionEncoding::Rotary;
  c.rope_layout = RopeLayout::NeoxHalves;
  c.parallel_residual = false;
  c.attn_bias = false;
  c.mlp_bias = false;
  c.qk_norm = false;
  parse_rope(j, source, c);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", source, false);
  // transformers masks to the window where config.json sets one (Phi-3-mini-4k: 2047)
  c.sliding_window = get_int(j, "sliding_window", source, false, 0);
  if (c.sliding_window < 0) config_fail(source, "sliding_window must be >= 0");
  c.bos_token_id = get_int(j, "bos_token_id", source, false, -1);
  read_eos(j, source, c);
}

// partial_rotary_factor for rotary_dim of a head: the ratio, nudged where int(head_dim * ratio) would fall
// short by a rounding.
double partial_factor(const Config& c) {
  const double D = double(c.head_dim()), p = double(c.rotary_dim) / D;
  return int64_t(D * p) == c.rotary_dim ? p : (double(c.rotary_dim) + 0.5) / D;
}

json to_json(const Config& c) {
  json rope = {
      {"rope_type", "default"}, {"rope_theta", c.rope_theta}, {"partial_rotary_factor", partial_factor(c)}};
  const RopeScaling& s = c.rope_scaling;
  if (s.kind == RopeScalingKind::LongRope) {
    rope["rope_type"] = "longrope";
    rope["short_factor"] = s.short_factor;
    rope["long_factor"] = s.long_factor;
    rope["attention_factor"] = s.attention_factor;
    rope["original_max_position_embeddings"] = s.original_context;
  }
  json j = {
      {"model_type", "phi3"},
      {"architectures", {"Phi3ForCausalLM"}},
      {"num_hidden_layers", c.n_layer},
      {"num_attention_heads", c.n_head},
      {"num_key_value_heads", c.kv_heads()},
      {"hidden_size", c.n_embd},
      {"intermediate_size", c.n_inner},
      {"max_position_embeddings", c.n_ctx},
      {"original_max_position_embeddings",
       s.kind == RopeScalingKind::LongRope ? s.original_context : c.n_ctx},
      {"vocab_size", c.n_vocab},
      {"rms_norm_eps", c.layer_norm_epsilon},
      {"hidden_act", c.activation_name},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"sliding_window", c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr)},
      {"rope_parameters", rope},
  };
  if (c.n_head_dim > 0) j["head_dim"] = c.n_head_dim;
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  write_eos(c, j);
  return j;
}

std::vector<TensorDesc> tensors(const Config& c) {
  const int64_t C = c.n_embd, F = c.n_inner, V = c.n_vocab, Q = c.q_dim(), KV = c.kv_dim();
  std::vector<TensorDesc> out;
  out.push_back(t(Role::TokenEmbd, -1, "embed_tokens.weight", {V, C}));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "layers." + std::to_string(l) + ".";
    out.push_back(t(Role::AttnNorm, l, h + "input_layernorm.weight", {C}));
    out.push_back(t(Role::AttnQkv, l, h + "self_attn.qkv_proj.weight", {Q + 2 * KV, C}));  // q | k | v
    out.push_back(t(Role::AttnOut, l, h + "self_attn.o_proj.weight", {C, Q}));
    out.push_back(t(Role::FfnNorm, l, h + "post_attention_layernorm.weight", {C}));
    out.push_back(t(Role::FfnUp, l, h + "mlp.gate_up_proj.weight", {2 * F, C}));  // gate | up
    out.push_back(t(Role::FfnDown, l, h + "mlp.down_proj.weight", {C, F}));
  }
  out.push_back(t(Role::OutputNorm, -1, "norm.weight", {C}));
  if (c.rope_scaling.kind == RopeScalingKind::LongRope) {
    // Only in a GGUF file (parse_gguf reads them into rope_scaling); a checkpoint has them in config.json.
    for (Role r : {Role::RopeFactorsLong, Role::RopeFactorsShort}) {
      TensorDesc f;
      f.role = r;
      f.names = {gguf_name(r, -1)};
      f.shape = {c.rotary_dim / 2};
      f.optional = true;
      out.push_back(f);
    }
  }
  TensorDesc head;
  head.role = Role::Output;
  head.names = {"lm_head.weight"};
  head.shape = {V, C};
  head.optional = c.tie_word_embeddings;
  out.push_back(head);
  return out;
}

void check_gguf_form(const Config& c, const std::string& source) {
  if (c.activation != Activation::Silu) {
    throw Error(ErrorKind::Unsupported, source + ": hidden_act '" + c.activation_name +
                                            "' cannot be written as GGUF (llama.cpp's phi3 computes silu)");
  }
  if (c.q_dim() != c.n_embd) {
    throw Error(ErrorKind::Unsupported,
                source + ": head_dim " + std::to_string(c.head_dim()) + " x " + std::to_string(c.n_head) +
                    " heads != hidden_size " + std::to_string(c.n_embd) +
                    " cannot be written as GGUF (llama.cpp's phi3 has no key for it)");
  }
}

// Phi3MiniModel.set_gguf_parameters (conversion/phi.py), its keys in its order; the attention factor first
// (generate_extra_tensors writes it before the general keys, just after general.architecture).
void write_gguf(const Config& c, const json& j, const std::string& src, GgufKv& kv) {
  const std::string ga = kGgufArch;
  const RopeScaling& s = c.rope_scaling;
  if (s.kind == RopeScalingKind::LongRope) {
    auto at = kv.begin();
    while (at != kv.end() && at->first != "general.architecture") ++at;
    kv.insert(at == kv.end() ? at : at + 1,
              std::make_pair(ga + ".rope.scaling.attn_factor", gguf_f32(s.attention_factor)));
  }
  // The original context: the longrope's; else, as the converter reads it, rope_parameters' (or
  // rope_scaling's) value, else config.json's top-level one, else the context.
  int64_t original = c.n_ctx;
  if (s.kind == RopeScalingKind::LongRope) {
    original = s.original_context;
  } else {
    const char* key = has(j, "rope_parameters") ? "rope_parameters" : "rope_scaling";
    const json& at =
        has(j, key) && j[key].is_object() && has(j[key], "original_max_position_embeddings") ? j[key] : j;
    original = get_int(at, "original_max_position_embeddings", src, false, original);
  }
  put_gguf_u32(kv, ga, "context_length", c.n_ctx, src);
  put_gguf_u32(kv, ga, "rope.scaling.original_context_length", original, src);
  put_gguf_u32(kv, ga, "embedding_length", c.n_embd, src);
  put_gguf_u32(kv, ga, "feed_forward_length", c.n_inner, src);
  put_gguf_u32(kv, ga, "block_count", c.n_layer, src);
  put_gguf_u32(kv, ga, "attention.head_count", c.n_head, src);
  put_gguf_u32(kv, ga, "attention.head_count_kv", c.kv_heads(), src);
  kv.emplace_back(ga + ".attention.layer_norm_rms_epsilon", gguf_f32(c.layer_norm_epsilon));
  put_gguf_u32(kv, ga, "rope.dimension_count", c.rotary_dim, src);
  kv.emplace_back(ga + ".rope.freq_base", gguf_f32(c.rope_theta));
  kv.emplace_back("general.file_type", gguf_u32(0));  // set to the preset's by the writer
  put_gguf_u32(kv, ga, "attention.sliding_window", c.sliding_window, src);
}

// generate_extra_tensors: the LongRoPE factors as F32 tensors.
std::vector<std::pair<std::string, std::vector<float>>> gguf_extra_tensors(const Config& c) {
  if (c.rope_scaling.kind != RopeScalingKind::LongRope) return {};
  return {{gguf_name(Role::RopeFactorsLong, -1), c.rope_scaling.long_factor},
          {gguf_name(Role::RopeFactorsShort, -1), c.rope_scaling.short_factor}};
}

// llama.cpp's phi3 (src/models/phi3.cpp, llama-model.cpp): rope_factors_long where the context is longer
// than rope.scaling.original_context_length, rope_factors_short otherwise (either may be absent: no
// factors), cos and sin times rope.scaling.attn_factor; its sliding window is disabled at load.
void parse_gguf(const GgufFile& f, Config& c) {
  const std::string ga = kGgufArch;
  read_gguf_sizes(f, ga, c);
  const int64_t D = c.n_head > 0 ? c.n_embd / c.n_head : 0;
  c.rotary_dim = f.get_int(ga + ".rope.dimension_count").value_or(D);
  c.rope_theta = float(f.get_float(ga + ".rope.freq_base").value_or(10000.0));
  c.layer_norm_epsilon = read_gguf_rms_eps(f, ga);
  const std::string scaling = f.get_string(ga + ".rope.scaling.type").value_or("none");
  if (scaling != "none") {
    throw Error(ErrorKind::Unsupported, f.path() + ": " + ga + ".rope.scaling.type '" + scaling +
                                            "' is not supported for phi3 (its LongRoPE factors are tensors)");
  }
  const double attn_factor = f.get_float(ga + ".rope.scaling.attn_factor").value_or(1.0);
  const int64_t pairs = c.rotary_dim / 2;
  auto factors = [&](Role r) {
    std::vector<float> v;
    const std::string name = gguf_name(r, -1);
    if (const GgufTensor* t = f.find(name)) {
      if (t->type != GgmlType::F32 || t->numel() != pairs || pairs < 1) {
        throw Error(ErrorKind::Shape,
                    f.path() + ": " + name + " must be " + std::to_string(pairs) + " F32 factors");
      }
      v.resize(size_t(pairs));
      f.read(*t, v.data());
    }
    return v;
  };
  std::vector<float> long_f = factors(Role::RopeFactorsLong), short_f = factors(Role::RopeFactorsShort);
  c.rope_scaling = RopeScaling{};
  if (!long_f.empty() || !short_f.empty() || attn_factor != 1.0) {
    RopeScaling& s = c.rope_scaling;
    s.kind = RopeScalingKind::LongRope;
    s.long_factor = long_f.empty() ? std::vector<float>(size_t(std::max<int64_t>(pairs, 0)), 1.0f) : long_f;
    s.short_factor =
        short_f.empty() ? std::vector<float>(size_t(std::max<int64_t>(pairs, 0)), 1.0f) : short_f;
    s.attention_factor = float(attn_factor);
    s.original_context = f.get_int(ga + ".rope.scaling.original_context_length").value_or(c.n_ctx);
  }
  c.sliding_window = 0;  // llama.cpp: "Phi SWA is currently disabled"
  c.activation = Activation::Silu;
  c.activation_name = "silu";
  c.norm = NormKind::Rms;
  c.ffn = FfnKind::Gated;
  c.position_encoding = PositionEncoding::Rotary;
  c.rope_layout = RopeLayout::NeoxHalves;  // LLAMA_ROPE_TYPE_NEOX
  c.parallel_residual = false;
  c.attn_bias = false;
  c.mlp_bias = false;
  c.qk_norm = false;
  c.bos_token_id = f.get_int("tokenizer.ggml.bos_token_id").value_or(-1);
  c.eos_token_id = f.get_int("tokenizer.ggml.eos_token_id").value_or(-1);
}

}  // namespace

extern const Architecture kPhi3;
constinit const Architecture kPhi3 = {
    .model_type = "phi3",
    .hf_class = "Phi3ForCausalLM",
    .display_name = "Phi-3",
    .parse = parse,
    .to_json = to_json,
    .tensors = tensors,
    .gguf_arch = kGgufArch,
    .parse_gguf = parse_gguf,
    .check_gguf_form = check_gguf_form,
    .write_gguf = write_gguf,
    .gguf_tensor_name = gguf_name,
    .gguf_extra_tensors = gguf_extra_tensors,
};

}  // namespace minigpt::arch
