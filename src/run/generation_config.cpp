// generation_config.json and a GGUF file's general.sampling.* keys (include/minigpt/generation_config.h).
#include "minigpt/generation_config.h"

#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <system_error>

#include "arch/config_json.h"
#include "formats/gguf.h"
#include "io/io.h"
#include "io/json_parse.h"
#include "minigpt/error.h"

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

// A JSON value for a message, at most 80 characters of it.
std::string short_json(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// The sampling settings (the names apply() asks `given` about) and where each is read: the
// generation_config.json field and the GGUF key under general.sampling.
struct Setting {
  const char* name;
  const char* gguf;
  const char* field;  // in generation_config.json
  bool integer;
};
constexpr Setting kSettings[] = {{"temperature", "temp", "temperature", false},
                                 {"top_k", "top_k", "top_k", true},
                                 {"top_p", "top_p", "top_p", false},
                                 {"min_p", "min_p", "min_p", false},
                                 {"repetition_penalty", "penalty_repeat", "repetition_penalty", false},
                                 // llama.cpp's repeat-last-n: GGUF only (below)
                                 {"repeat_last_n", "penalty_last_n", "penalty_last_n", true}};

// A value sampling cannot take, or one of another type, is set aside with its message (unusable): it is an
// error only where it would be used, i.e. unless a flag or a request field gives that setting, as
// transformers fails only on a value it uses. A top_k below 0 is off, as llama.cpp reads it (its
// converter writes -1 as given).
void settle(GenerationDefaults& d, const std::string& where, const std::string& (*label)(const Setting&)) {
  const auto bad = [&](const Setting& s, double v, const char* want) {
    d.unusable.emplace_back(s.name,
                            where + ": " + label(s) + " = " + num(v) + " is out of range (" + want + ")");
  };
  if (d.temperature && !(std::isfinite(*d.temperature) && *d.temperature >= 0)) {
    bad(kSettings[0], *d.temperature, ">= 0; 0: greedy");
    d.temperature.reset();
  }
  if (d.top_k && *d.top_k < 0) d.top_k = 0;
  if (d.top_p && !(*d.top_p >= 0 && *d.top_p <= 1)) {
    bad(kSettings[2], *d.top_p, "[0, 1]");
    d.top_p.reset();
  }
  if (d.min_p && !(*d.min_p >= 0 && *d.min_p <= 1)) {
    bad(kSettings[3], *d.min_p, "[0, 1]");
    d.min_p.reset();
  }
  if (d.repetition_penalty && !(std::isfinite(*d.repetition_penalty) && *d.repetition_penalty > 0)) {
    bad(kSettings[4], *d.repetition_penalty, "> 0; 1: off");
    d.repetition_penalty.reset();
  }
  if (d.repeat_last_n && *d.repeat_last_n < -1) {
    bad(kSettings[5], double(*d.repeat_last_n), ">= -1; -1: the whole sequence, 0: off");
    d.repeat_last_n.reset();
  }
  // A top_p of 0 (or below the smallest normal float) keeps the top token, as transformers' top-p does
  // (min_tokens_to_keep 1); SamplingParams takes a mass in (0, 1].
  if (d.top_p) *d.top_p = std::max(*d.top_p, std::numeric_limits<float>::min());
}

const std::string& json_label(const Setting& s) {
  static std::string labels[std::size(kSettings)];
  const size_t i = size_t(&s - kSettings);
  if (labels[i].empty()) labels[i] = std::string("field '") + s.field + "'";
  return labels[i];
}
const std::string& gguf_label(const Setting& s) {
  static std::string labels[std::size(kSettings)];
  const size_t i = size_t(&s - kSettings);
  if (labels[i].empty()) labels[i] = std::string("general.sampling.") + s.gguf;
  return labels[i];
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
  if (repeat_last_n) add("penalty_last_n", std::to_string(*repeat_last_n));
  if (presence_penalty) add("presence_penalty", num(*presence_penalty));
  if (frequency_penalty) add("frequency_penalty", num(*frequency_penalty));
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
  // A field of another type than the setting takes is unusable (an error where it is used).
  const auto unusable = [&](const char* name, const char* key, const char* want) {
    d.unusable.emplace_back(name,
                            source + ": field '" + key + "' must be " + want + ", got " + short_json(j[key]));
  };
  const auto number = [&](const char* name, const char* key) -> std::optional<float> {
    if (!arch::has(j, key)) return std::nullopt;
    // Read as a double first: converting one beyond float's range (1e300) to float is undefined.
    if (!j[key].is_number() || std::fabs(j[key].get<double>()) > double(std::numeric_limits<float>::max())) {
      unusable(name, key, "a number in a 32-bit float's range");
      return std::nullopt;
    }
    return float(j[key].get<double>());
  };
  const auto integer = [&](const char* name, const char* key) -> std::optional<int64_t> {
    if (!arch::has(j, key)) return std::nullopt;
    if (j[key].is_number_integer() && !(j[key].is_number_unsigned() && j[key].get<uint64_t>() > INT64_MAX)) {
      return j[key].get<int64_t>();
    }
    unusable(name, key, "an integer");
    return std::nullopt;
  };
  d.temperature = number("temperature", "temperature");
  d.top_k = integer("top_k", "top_k");
  // penalty_last_n is not read here: transformers does not know it (its repetition penalty covers the whole
  // sequence); llama.cpp's converter copies it into a GGUF file, where it is read, as llama.cpp reads it.
  d.top_p = number("top_p", "top_p");
  d.min_p = number("min_p", "min_p");
  // llama.cpp's converter: penalty_repeat, else repetition_penalty
  d.repetition_penalty = arch::has(j, "penalty_repeat") ? number("repetition_penalty", "penalty_repeat")
                                                        : number("repetition_penalty", "repetition_penalty");
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
                          "dola_layers",
                          "watermarking_config"}) {
    if (!off(key)) d.not_applied.emplace_back(key);
  }
  settle(d, source, json_label);
  return d;
}

GenerationDefaults read_generation_defaults(const fs::path& model) {
  return read_generation_defaults(ModelSource::open(model));
}

GenerationDefaults read_generation_defaults(const ModelSource& source) {
  const fs::path& model = source.path();
  std::error_code ec;
  if (source.format() == ModelFormat::Directory) {
    const fs::path p = model / "generation_config.json";
    if (!fs::is_directory(model, ec) || !fs::exists(fs::symlink_status(p, ec))) return {};
    return parse_generation_config(read_regular_file(p, kMaxConfigBytes, "generation config"), p.string());
  }
  if (source.format() != ModelFormat::Gguf) return {};  // an llm.c checkpoint carries none
  const GgufFile* f = &source.gguf();
  GenerationDefaults d;
  const std::string where = model.string();
  // Any number type (llama.cpp reads these keys through their text, so an F32 top_k of 40 is 40 there).
  const auto value = [&](const Setting& st) -> std::optional<double> {
    const std::string k = std::string("general.sampling.") + st.gguf;
    if (f->find_value(k) == nullptr) return std::nullopt;
    const auto v = f->get_float(k);
    if (!v || std::fabs(*v) > double(std::numeric_limits<float>::max()) ||
        (st.integer && (*v != std::floor(*v) || std::fabs(*v) > 1e9))) {
      d.unusable.emplace_back(st.name,
                              where + ": " + k + " must be " + (st.integer ? "an integer" : "a number"));
      return std::nullopt;
    }
    return *v;
  };
  if (const auto v = value(kSettings[0])) d.temperature = float(*v);
  if (const auto v = value(kSettings[1])) d.top_k = int64_t(*v);
  if (const auto v = value(kSettings[2])) d.top_p = float(*v);
  if (const auto v = value(kSettings[3])) d.min_p = float(*v);
  if (const auto v = value(kSettings[4])) d.repetition_penalty = float(*v);
  if (const auto v = value(kSettings[5])) d.repeat_last_n = int64_t(*v);
  settle(d, where, gguf_label);
  if (!d.empty() || !d.unusable.empty()) d.source = where;
  return d;
}

}  // namespace minigpt
