#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "minigpt/config.h"
#include "minigpt/error.h"
#include "minigpt/io.h"

namespace minigpt {
namespace {

using json = nlohmann::json;

// Generous caps, far above any GPT-2-family model, so that sizes derived from them cannot overflow.
constexpr int64_t kMaxDim = int64_t(1) << 20;
constexpr int64_t kMaxVocab = int64_t(1) << 24;
constexpr int64_t kMaxLayers = 4096;

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw Error(ErrorKind::Config, source + ": " + what);
}

int64_t get_int(const json& j, const char* key, const std::string& source, bool required, int64_t fallback) {
  if (!j.contains(key) || j[key].is_null()) {
    if (required) fail(source, std::string("missing field '") + key + "'");
    return fallback;
  }
  const json& v = j[key];
  if (!v.is_number_integer()) fail(source, std::string("field '") + key + "' must be an integer, got " + v.dump());
  return v.get<int64_t>();
}

bool get_bool(const json& j, const char* key, const std::string& source, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) fail(source, std::string("field '") + key + "' must be true or false, got " + j[key].dump());
  return j[key].get<bool>();
}

std::string get_string(const json& j, const char* key, const std::string& source, const std::string& fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_string()) fail(source, std::string("field '") + key + "' must be a string, got " + j[key].dump());
  return j[key].get<std::string>();
}

}  // namespace

void Config::validate(const std::string& source) const {
  auto check_range = [&](const char* name, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) {
      fail(source, std::string("'") + name + "' = " + std::to_string(v) + " is out of range [" + std::to_string(lo) +
                       ", " + std::to_string(hi) + "]");
    }
  };
  check_range("n_layer", n_layer, 1, kMaxLayers);
  check_range("n_head", n_head, 1, kMaxDim);
  check_range("n_embd", n_embd, 1, kMaxDim);
  check_range("n_positions", n_ctx, 1, kMaxDim);
  check_range("vocab_size", n_vocab, 1, kMaxVocab);
  check_range("n_inner", n_inner, 1, 16 * kMaxDim);
  if (n_embd % n_head != 0) {
    fail(source, "n_embd (" + std::to_string(n_embd) + ") is not divisible by n_head (" + std::to_string(n_head) + ")");
  }
  if (!(layer_norm_epsilon > 0.0f) || layer_norm_epsilon > 1.0f) {
    fail(source, "layer_norm_epsilon must be in (0, 1], got " + std::to_string(layer_norm_epsilon));
  }
  if (position_encoding == PositionEncoding::Sinusoidal && n_embd % 2 != 0) {
    fail(source, "sinusoidal positions need an even n_embd, got " + std::to_string(n_embd));
  }
}

Config parse_config(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    fail(source, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail(source, "not a JSON object");

  if (!j.contains("model_type")) fail(source, "missing field 'model_type' (expected \"gpt2\")");
  const std::string model_type = get_string(j, "model_type", source, "");
  if (model_type != "gpt2") {
    throw Error(ErrorKind::Unsupported,
                source + ": model_type '" + model_type + "' is not supported; minigpt runs GPT-2-family models (\"gpt2\")");
  }
  if (get_bool(j, "add_cross_attention", source, false)) {
    throw Error(ErrorKind::Unsupported, source + ": add_cross_attention=true (encoder-decoder GPT-2) is not supported");
  }

  Config c;
  c.n_layer = get_int(j, "n_layer", source, true, 0);
  c.n_head = get_int(j, "n_head", source, true, 0);
  c.n_embd = get_int(j, "n_embd", source, true, 0);
  c.n_vocab = get_int(j, "vocab_size", source, true, 0);
  if (j.contains("n_positions") && !j["n_positions"].is_null()) {
    c.n_ctx = get_int(j, "n_positions", source, true, 0);
  } else if (j.contains("n_ctx") && !j["n_ctx"].is_null()) {
    c.n_ctx = get_int(j, "n_ctx", source, true, 0);
  } else {
    fail(source, "missing field 'n_positions' (or 'n_ctx')");
  }
  c.n_inner = get_int(j, "n_inner", source, false, 4 * c.n_embd);

  if (j.contains("layer_norm_epsilon") && !j["layer_norm_epsilon"].is_null()) {
    if (!j["layer_norm_epsilon"].is_number()) fail(source, "field 'layer_norm_epsilon' must be a number");
    // Range-checked as a double first: converting an out-of-range double (1e300) to float is undefined.
    const double eps = j["layer_norm_epsilon"].get<double>();
    if (!(eps > 0.0) || eps > 1.0) fail(source, "layer_norm_epsilon must be in (0, 1], got " + j["layer_norm_epsilon"].dump());
    c.layer_norm_epsilon = float(eps);
  }

  c.activation_name = get_string(j, "activation_function", source, "gelu_new");
  if (c.activation_name == "gelu_new" || c.activation_name == "gelu_pytorch_tanh") {
    c.activation = Activation::GeluTanh;
  } else if (c.activation_name == "gelu") {
    c.activation = Activation::GeluErf;
  } else if (c.activation_name == "relu") {
    c.activation = Activation::Relu;
  } else {
    throw Error(ErrorKind::Unsupported, source + ": activation_function '" + c.activation_name +
                                            "' is not supported (gelu_new, gelu_pytorch_tanh, gelu, relu)");
  }

  c.scale_attn_weights = get_bool(j, "scale_attn_weights", source, true);
  c.scale_attn_by_inverse_layer_idx = get_bool(j, "scale_attn_by_inverse_layer_idx", source, false);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", source, true);

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
  c.eos_token_id = get_int(j, "eos_token_id", source, false, -1);
  if (c.bos_token_id < -1) c.bos_token_id = -1;
  if (c.eos_token_id < -1) c.eos_token_id = -1;

  c.validate(source);
  return c;
}

Config load_config(const std::filesystem::path& path) {
  return parse_config(read_regular_file(path, kMaxConfigBytes, "config"), path.string());
}

std::string config_to_json(const Config& c) {
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
  if (c.eos_token_id >= 0) j["eos_token_id"] = c.eos_token_id;
  return j.dump(2) + "\n";
}

}  // namespace minigpt
