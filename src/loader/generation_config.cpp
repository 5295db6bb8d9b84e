// generation_config.json and a GGUF file's general.sampling.* keys (include/minigpt/generation_config.h).
#include "minigpt/generation_config.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <system_error>

#include "arch/config_json.h"
#include "minigpt/error.h"
#include "minigpt/gguf.h"
#include "minigpt/io.h"
#include "minigpt/json_parse.h"

namespace minigpt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw Error(ErrorKind::Config, where + ": " + what);
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

// Range checks shared by both sources; `name(key)` says where a value came from in a message.
template <typename Name>
void check(const GenerationDefaults& d, const std::string& where, Name&& name) {
  const auto bad = [&](const char* key, double v, const char* want) {
    fail(where, name(key) + " = " + num(v) + " is out of range (" + want + ")");
  };
  if (d.temperature && !(std::isfinite(*d.temperature) && *d.temperature >= 0))
    bad("temperature", *d.temperature, ">= 0; 0: greedy");
  if (d.top_k && *d.top_k < 0) bad("top_k", double(*d.top_k), ">= 0; 0: off");
  if (d.top_p && !(*d.top_p >= 0 && *d.top_p <= 1)) bad("top_p", *d.top_p, "[0, 1]");
  if (d.min_p && !(*d.min_p >= 0 && *d.min_p <= 1)) bad("min_p", *d.min_p, "[0, 1]");
  if (d.repetition_penalty && !(std::isfinite(*d.repetition_penalty) && *d.repetition_penalty > 0))
    bad("repetition_penalty", *d.repetition_penalty, "> 0; 1: off");
}

// A top_p of 0 (or below the smallest normal float) keeps the top token, as transformers' top-p does
// (min_tokens_to_keep 1); SamplingParams takes a mass in (0, 1].
void normalize(GenerationDefaults& d) {
  if (d.top_p) *d.top_p = std::max(*d.top_p, std::numeric_limits<float>::min());
}

}  // namespace

std::string GenerationDefaults::describe() const {
  // A float's 6 significant digits: 0.7, not 0.699999988
  const auto num = [](float v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", double(v));
    return std::string(b);
  };
  std::string s;
  const auto add = [&](const char* name, const std::string& v) {
    s += (s.empty() ? "" : ", ") + std::string(name) + " " + v;
  };
  if (do_sample) add("do_sample", *do_sample ? "true" : "false");
  if (temperature) add("temperature", num(*temperature));
  if (top_k) add("top_k", std::to_string(*top_k));
  if (top_p) add("top_p", num(*top_p));
  if (min_p) add("min_p", num(*min_p));
  if (repetition_penalty) add("repetition_penalty", num(*repetition_penalty));
  if (max_new_tokens) add("max_new_tokens", std::to_string(*max_new_tokens));
  if (max_length) add("max_length", std::to_string(*max_length));
  return s;
}

GenerationDefaults parse_generation_config(const std::string& text, const std::string& source) {
  json j;
  try {
    j = parse_json_bounded(true, text);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::Format, source + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) fail(source, "not a JSON object");
  GenerationDefaults d;
  d.source = source;
  const auto number = [&](const char* key) -> std::optional<float> {
    if (!arch::has(j, key)) return std::nullopt;
    if (!j[key].is_number())
      fail(source, std::string("field '") + key + "' must be a number, got " + j[key].dump());
    const double v = j[key].get<double>();
    // Read as a double first: converting one beyond float's range (1e300) to float is undefined.
    if (std::isfinite(v) && std::fabs(v) > double(std::numeric_limits<float>::max()))
      fail(source, std::string("field '") + key + "' = " + j[key].dump() + " is out of range");
    return float(v);
  };
  d.temperature = number("temperature");
  if (arch::has(j, "top_k")) d.top_k = arch::get_int(j, "top_k", source, true, 0);
  d.top_p = number("top_p");
  d.min_p = number("min_p");
  // llama.cpp's converter: penalty_repeat, else repetition_penalty
  d.repetition_penalty =
      arch::has(j, "penalty_repeat") ? number("penalty_repeat") : number("repetition_penalty");
  d.eos_token_ids = arch::get_id_list(j, "eos_token_id", source);
  if (arch::has(j, "do_sample")) d.do_sample = arch::get_bool(j, "do_sample", source, true);
  for (const char* key : {"max_new_tokens", "max_length"}) {
    if (!arch::has(j, key)) continue;
    const int64_t v = arch::get_int(j, key, source, true, 0);
    if (v < 1)
      fail(source, std::string("field '") + key + "' = " + std::to_string(v) + " is out of range (>= 1)");
    (std::string_view(key) == "max_new_tokens" ? d.max_new_tokens : d.max_length) = v;
  }
  // transformers' logits processors and decoding modes that change greedy or sampled tokens, with the
  // values that leave them off (GenerationConfig's defaults)
  const auto off = [&](const char* key) {
    if (!arch::has(j, key)) return true;
    const std::string_view k(key);
    if (k.starts_with("forced_")) return false;  // any id, 0 included, is forced
    const json& v = j[key];
    if ((v.is_array() || v.is_object()) && v.empty()) return true;
    if (v.is_boolean()) return !v.get<bool>();
    if (v.is_number()) {
      const double x = v.get<double>();
      if (k == "num_beams" || k == "typical_p" || k == "guidance_scale") return x == 1;
      return x == 0;
    }
    return false;
  };
  for (const char* key : {"no_repeat_ngram_size",
                          "suppress_tokens",
                          "begin_suppress_tokens",
                          "bad_words_ids",
                          "min_length",
                          "min_new_tokens",
                          "forced_bos_token_id",
                          "forced_eos_token_id",
                          "sequence_bias",
                          "typical_p",
                          "epsilon_cutoff",
                          "eta_cutoff",
                          "num_beams",
                          "penalty_alpha",
                          "diversity_penalty",
                          "exponential_decay_length_penalty",
                          "stop_strings",
                          "guidance_scale",
                          "top_h",
                          "dola_layers"}) {
    if (!off(key)) d.not_applied.emplace_back(key);
  }
  check(d, source, [](const char* key) { return std::string("field '") + key + "'"; });
  normalize(d);
  return d;
}

GenerationDefaults read_generation_defaults(const fs::path& model) {
  std::error_code ec;
  if (fs::is_directory(model, ec)) {
    const fs::path p = model / "generation_config.json";
    if (!fs::exists(fs::symlink_status(p, ec))) return {};
    return parse_generation_config(read_regular_file(p, kMaxConfigBytes, "generation config"), p.string());
  }
  if (model.extension() != ".gguf") return {};
  const auto f = GgufFile::open(model);
  GenerationDefaults d;
  const std::string where = model.string();
  const auto flt = [&](const char* key) -> std::optional<float> {
    const std::string k = std::string("general.sampling.") + key;
    if (f->find_value(k) == nullptr) return std::nullopt;
    const auto v = f->get_float(k);
    if (!v) fail(where, k + " must be a number");
    if (std::isfinite(*v) && std::fabs(*v) > double(std::numeric_limits<float>::max()))
      fail(where, k + " = " + num(*v) + " is out of range");
    return float(*v);
  };
  d.temperature = flt("temp");
  if (f->find_value("general.sampling.top_k") != nullptr) {
    d.top_k = f->get_int("general.sampling.top_k");
    if (!d.top_k) fail(where, "general.sampling.top_k must be an integer");
  }
  d.top_p = flt("top_p");
  d.min_p = flt("min_p");
  d.repetition_penalty = flt("penalty_repeat");
  if (d.temperature || d.top_k || d.top_p || d.min_p || d.repetition_penalty) d.source = where;
  static const std::pair<const char*, const char*> kKeys[] = {{"temperature", "temp"},
                                                              {"top_k", "top_k"},
                                                              {"top_p", "top_p"},
                                                              {"min_p", "min_p"},
                                                              {"repetition_penalty", "penalty_repeat"}};
  check(d, where, [](const char* key) {
    for (const auto& [name, k] : kKeys)
      if (std::string(name) == key) return std::string("general.sampling.") + k;
    return std::string(key);
  });
  normalize(d);
  return d;
}

}  // namespace minigpt
