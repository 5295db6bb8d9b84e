// Reading config.json fields with the errors every architecture's parser gives.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "minigpt/config.h"
#include "minigpt/error.h"

namespace minigpt::arch {

[[noreturn]] inline void config_fail(const std::string& source, const std::string& what) {
  throw Error(ErrorKind::Config, source + ": " + what);
}

inline bool has(const nlohmann::json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

inline int64_t get_int(const nlohmann::json& j, const char* key, const std::string& source, bool required,
                       int64_t fallback) {
  if (!has(j, key)) {
    if (required) config_fail(source, std::string("missing field '") + key + "'");
    return fallback;
  }
  const nlohmann::json& v = j[key];
  if (!v.is_number_integer()) {
    config_fail(source, std::string("field '") + key + "' must be an integer, got " + v.dump());
  }
  // Above 2^63 - 1, read as an int64 it would be negative (18446744073709551615 as -1: "no BOS token").
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) {
    config_fail(source,
                std::string("field '") + key + "' = " + v.dump() + " is out of range (above 2^63 - 1)");
  }
  return v.get<int64_t>();
}

// A token id that may also be a list of ids (transformers accepts `eos_token_id: [50256, 50257]` and stops at
// any of them): the ids in order, empty when the field is absent, null or []. Negative ids are dropped, as a
// single negative id means "none".
inline std::vector<int64_t> get_id_list(const nlohmann::json& j, const char* key, const std::string& source) {
  std::vector<int64_t> ids;
  if (!has(j, key)) return ids;
  const nlohmann::json& v = j[key];
  const auto one = [&](const nlohmann::json& e) {
    if (!e.is_number_integer()) {
      // at most 80 characters of the value: a list of 100,000 ids is not repeated in the message
      std::string got = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      if (got.size() > 80) got = got.substr(0, 77) + "...";
      config_fail(source,
                  std::string("field '") + key + "' must be an integer or a list of integers, got " + got);
    }
    if (e.is_number_unsigned() && e.get<uint64_t>() > uint64_t(INT64_MAX)) {
      config_fail(source,
                  std::string("field '") + key + "' = " + e.dump() + " is out of range (above 2^63 - 1)");
    }
    if (e.get<int64_t>() >= 0) ids.push_back(e.get<int64_t>());
  };
  if (v.is_array()) {
    for (const nlohmann::json& e : v) one(e);
  } else {
    one(v);
  }
  return ids;
}

// config.json's eos_token_id, an id or a list of them, into c.eos_token_id (the first, -1 for none) and
// c.eos_token_ids (all of them).
inline void read_eos(const nlohmann::json& j, const std::string& source, Config& c) {
  c.eos_token_ids = get_id_list(j, "eos_token_id", source);
  c.eos_token_id = c.eos_token_ids.empty() ? -1 : c.eos_token_ids.front();
}

// The inverse for to_json: an id, or the list when there are several.
inline void write_eos(const Config& c, nlohmann::json& j) {
  if (c.eos_token_ids.size() > 1) {
    j["eos_token_id"] = c.eos_token_ids;
  } else if (c.eos_token_id >= 0) {
    j["eos_token_id"] = c.eos_token_id;
  }
}

inline bool get_bool(const nlohmann::json& j, const char* key, const std::string& source, bool fallback) {
  if (!has(j, key)) return fallback;
  if (!j[key].is_boolean()) {
    config_fail(source, std::string("field '") + key + "' must be true or false, got " + j[key].dump());
  }
  return j[key].get<bool>();
}

inline std::string get_string(const nlohmann::json& j, const char* key, const std::string& source,
                              const std::string& fallback) {
  if (!has(j, key)) return fallback;
  if (!j[key].is_string())
    config_fail(source, std::string("field '") + key + "' must be a string, got " + j[key].dump());
  return j[key].get<std::string>();
}

// A positive number below `max` read as a double first: converting an out-of-range double (1e300) to
// float is undefined.
inline float get_positive_float(const nlohmann::json& j, const char* key, const std::string& source,
                                float fallback, double max, const char* max_text) {
  if (!has(j, key)) return fallback;
  if (!j[key].is_number()) config_fail(source, std::string("field '") + key + "' must be a number");
  const double v = j[key].get<double>();
  if (!(v > 0.0) || v > max) {
    config_fail(source, std::string(key) + " must be in (0, " + max_text + "], got " + j[key].dump());
  }
  return float(v);
}

// Sets c.activation and c.activation_name from a transformers activation name (ACT2FN's keys minigpt
// computes); `key` names the field in the error.
inline void set_activation(const std::string& name, const char* key, const std::string& source, Config& c) {
  c.activation_name = name;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") {
    c.activation = Activation::GeluTanh;
  } else if (name == "gelu") {
    c.activation = Activation::GeluErf;
  } else if (name == "relu") {
    c.activation = Activation::Relu;
  } else if (name == "silu" || name == "swish") {
    c.activation = Activation::Silu;
  } else {
    throw Error(ErrorKind::Unsupported,
                source + ": " + key + " '" + name +
                    "' is not supported (gelu_new, gelu_pytorch_tanh, gelu, relu, silu)");
  }
}

}  // namespace minigpt::arch
