// config.json: the architecture's parser fills the Config (src/arch/), then the checks every model gets.
#include "minigpt/config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "arch/arch.h"
#include "arch/config_json.h"
#include "io/io.h"
#include "io/json_parse.h"
#include "minigpt/error.h"

namespace minigpt {
namespace {

using json = nlohmann::json;
using arch::config_fail;

// Generous caps, far above any model minigpt runs, so that sizes derived from them cannot overflow.
constexpr int64_t kMaxDim = int64_t(1) << 20;
constexpr int64_t kMaxVocab = int64_t(1) << 24;
constexpr int64_t kMaxLayers = 4096;

}  // namespace

void Config::validate(const std::string& source) const {
  if (arch::find(arch) == nullptr) {
    throw Error(ErrorKind::Unsupported, source + ": architecture '" + arch + "' is not supported (" +
                                            arch::known_model_types() + ")");
  }
  auto check_range = [&](const char* name, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) {
      config_fail(source, std::string("'") + name + "' = " + std::to_string(v) + " is out of range [" +
                              std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
  };
  check_range("n_layer", n_layer, 1, kMaxLayers);
  check_range("n_head", n_head, 1, kMaxDim);
  check_range("n_embd", n_embd, 1, kMaxDim);
  check_range("n_positions", n_ctx, 1, kMaxDim);
  check_range("vocab_size", n_vocab, 1, kMaxVocab);
  check_range("n_inner", n_inner, 1, 16 * kMaxDim);
  if (n_head_dim != 0) check_range("head_dim", n_head_dim, 1, kMaxDim);
  if (n_head_dim == 0 && n_embd % n_head != 0) {
    config_fail(source, "n_embd (" + std::to_string(n_embd) + ") is not divisible by n_head (" +
                            std::to_string(n_head) + ")");
  }
  if (n_kv_head != 0) {
    check_range("n_kv_head", n_kv_head, 1, n_head);
    if (n_head % n_kv_head != 0) {
      config_fail(source, "n_head (" + std::to_string(n_head) +
                              ") is not a multiple of the key/value heads (" + std::to_string(n_kv_head) +
                              ")");
    }
  }
  if (!(layer_norm_epsilon > 0.0f) || layer_norm_epsilon > 1.0f) {
    config_fail(source, "layer_norm_epsilon must be in (0, 1], got " + std::to_string(layer_norm_epsilon));
  }
  if (position_encoding == PositionEncoding::Sinusoidal && n_embd % 2 != 0) {
    config_fail(source, "sinusoidal positions need an even n_embd, got " + std::to_string(n_embd));
  }
  if (position_encoding == PositionEncoding::Rotary) {
    const int64_t D = head_dim();
    if (rotary_dim < 2 || rotary_dim > D || rotary_dim % 2 != 0) {
      config_fail(source, "the rotary dimensions per head (" + std::to_string(rotary_dim) +
                              ") must be even and in [2, head_dim = " + std::to_string(D) + "]");
    }
    if (!(rope_theta > 1.0f) || !std::isfinite(rope_theta)) {
      config_fail(source, "the rotary base (rope_theta) must be a finite number > 1, got " +
                              std::to_string(rope_theta));
    }
  }
  if (rope_scaling.kind != RopeScalingKind::None) {
    if (!(rope_scaling.factor >= 1.0f) || !std::isfinite(rope_scaling.factor)) {
      config_fail(source, "rope_scaling's factor must be a finite number >= 1, got " +
                              std::to_string(rope_scaling.factor));
    }
    if (rope_scaling.kind == RopeScalingKind::Llama3 &&
        (rope_scaling.original_context < 1 ||
         !(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor) ||
         !(rope_scaling.low_freq_factor > 0.0f) || !std::isfinite(rope_scaling.high_freq_factor))) {
      config_fail(source,
                  "rope_scaling llama3 needs original_max_position_embeddings >= 1 and 0 < low_freq_factor < "
                  "high_freq_factor");
    }
    if (rope_scaling.kind == RopeScalingKind::LongRope) {
      const RopeScaling& r = rope_scaling;
      const int64_t pairs = rotary_dim / 2;
      for (const auto& [key, list] :
           {std::pair<const char*, const std::vector<float>*>{"short_factor", &r.short_factor},
            {"long_factor", &r.long_factor}}) {
        if (int64_t(list->size()) != pairs) {
          config_fail(source, std::string("rope_scaling.") + key + " has " + std::to_string(list->size()) +
                                  " values for " + std::to_string(pairs) + " rotary pairs");
        }
        for (size_t i = 0; i < list->size(); ++i) {
          if (!((*list)[i] > 0.0f) || !std::isfinite((*list)[i])) {
            config_fail(source, std::string("rope_scaling.") + key + "[" + std::to_string(i) +
                                    "] = " + std::to_string((*list)[i]) + " is not a finite number > 0");
          }
        }
      }
      if (r.original_context < 1) {
        config_fail(source, "rope_scaling longrope needs original_max_position_embeddings >= 1, got " +
                                std::to_string(r.original_context));
      }
      if (!(r.attention_factor > 0.0f) || !std::isfinite(r.attention_factor)) {
        config_fail(source, "rope_scaling.attention_factor must be a finite number > 0, got " +
                                std::to_string(r.attention_factor));
      }
    }
  }
  check_range("sliding_window", sliding_window, 0, int64_t(1) << 40);
  if (!rope_freq_factors.empty()) {
    if (int64_t(rope_freq_factors.size()) != rotary_dim / 2)
      config_fail(source, "rope_freqs holds " + std::to_string(rope_freq_factors.size()) + " factors for " +
                              std::to_string(rotary_dim / 2) + " rotary pairs");
    for (float f : rope_freq_factors)
      if (!(f > 0.0f) || !std::isfinite(f)) config_fail(source, "rope_freqs holds a factor that is not > 0");
  }
  if (!layer_window.empty()) {
    if (int64_t(layer_window.size()) != n_layer) {
      config_fail(source, "the per-layer windows (layer_types) name " + std::to_string(layer_window.size()) +
                              " layers, not num_hidden_layers = " + std::to_string(n_layer));
    }
    for (int64_t w : layer_window) check_range("sliding_window", w, 0, int64_t(1) << 40);
  }
  if (!rope_layers.empty() && int64_t(rope_layers.size()) != n_layer) {
    config_fail(source, "no_rope_layers names " + std::to_string(rope_layers.size()) +
                            " layers, not num_hidden_layers = " + std::to_string(n_layer));
  }
  for (const auto& [name, v] :
       {std::pair<const char*, float>{"query_pre_attn_scalar (the score scale)", attn_scale},
        {"attn_logit_softcapping", attn_softcap},
        {"final_logit_softcapping", final_softcap},
        {"the embedding scale", embed_scale},
        {"rope_local_base_freq", rope_theta_local}}) {
    if (!(v >= 0.0f) || !std::isfinite(v)) {
      config_fail(source, std::string(name) + " must be a finite number >= 0, got " + std::to_string(v));
    }
  }
  if (rope_theta_local != 0.0f && !(rope_theta_local > 1.0f)) {
    config_fail(source, "rope_local_base_freq must be > 1, got " + std::to_string(rope_theta_local));
  }
  if (n_embd_io != 0) check_range("word_embed_proj_dim", n_embd_io, 1, kMaxDim);
  check_range("the position offset", pos_offset, 0, kMaxDim);
}

Config parse_config(const std::string& text, const std::string& source) {
  json j;
  try {
    j = parse_json_bounded(true, text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    config_fail(source, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) config_fail(source, "not a JSON object");

  if (!j.contains("model_type"))
    config_fail(source, "missing field 'model_type' (expected one of " + arch::known_model_types() + ")");
  const std::string model_type = arch::get_string(j, "model_type", source, "");
  const arch::Architecture* a = arch::find(model_type);
  if (a == nullptr) {
    throw Error(ErrorKind::Unsupported, source + ": model_type '" + model_type +
                                            "' is not supported; minigpt runs " + arch::known_model_types());
  }
  Config c;
  c.arch = a->model_type;
  a->parse(j, source, c);
  if (c.bos_token_id < -1) c.bos_token_id = -1;
  if (c.eos_token_id < -1) c.eos_token_id = -1;
  c.validate(source);
  return c;
}

Config load_config(const std::filesystem::path& path) {
  return parse_config(read_regular_file(path, kMaxConfigBytes, "config"), path.string());
}

std::string config_to_json(const Config& c) {
  const arch::Architecture* a = arch::find(c.arch);
  if (a == nullptr) throw Error(ErrorKind::Argument, "config_to_json: unknown architecture '" + c.arch + "'");
  return a->to_json(c).dump(2) + "\n";
}

}  // namespace minigpt
