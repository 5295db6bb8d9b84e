// The general.* keys of a converted Hugging Face directory, as gguf-py's Metadata writes them (metadata.py):
// the model's name from its directory, its size label, generation_config.json's sampling settings.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

#include "convert/source.h"
#include "convert/util.h"
#include "formats/gguf_writer.h"
#include "io/io.h"
#include "io/json_parse.h"
#include "minigpt/error.h"

namespace minigpt::convert {

namespace fs = std::filesystem;
using json = nlohmann::json;

json read_json_file(const fs::path& p, size_t cap, const std::string& what) {
  const std::string text = read_regular_file(p, cap, what);
  try {
    return parse_json_bounded(true, text);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::Format, p.string() + ": not valid JSON: " + e.what());
  }
}

namespace {

// gguf-py's Metadata.id_to_title: "tiny-model" -> "Tiny Model" (words lower case, not a version or a number,
// are title-cased as Python's str.title does; ASCII only).
std::string id_to_title(const std::string& id) {
  std::string spaced = id;
  std::replace(spaced.begin(), spaced.end(), '-', ' ');
  std::vector<std::string> words;
  std::string w;
  for (char ch : spaced + " ") {
    if (std::isspace(static_cast<unsigned char>(ch))) {
      if (!w.empty()) words.push_back(w);
      w.clear();
    } else {
      w += ch;
    }
  }
  auto is_cased = [](char ch) { return std::isalpha(static_cast<unsigned char>(ch)) != 0; };
  std::string out;
  for (const std::string& word : words) {
    bool any_cased = false, all_lower = true;
    for (char ch : word) {
      if (is_cased(ch)) any_cased = true;
      if (std::isupper(static_cast<unsigned char>(ch))) all_lower = false;
    }
    bool version_or_number = std::isdigit(static_cast<unsigned char>(word[0])) != 0;
    if (!version_or_number && word.size() > 1 && word[0] == 'v') {  // v1, v1.2.3
      bool ok = std::isdigit(static_cast<unsigned char>(word[1])) != 0;
      bool prev_dot = false;
      for (size_t i = 1; i < word.size() && ok; ++i) {
        if (word[i] == '.') {
          ok = !prev_dot && i + 1 < word.size();
          prev_dot = true;
        } else {
          ok = std::isdigit(static_cast<unsigned char>(word[i])) != 0;
          prev_dot = false;
        }
      }
      version_or_number = ok;
    }
    std::string t = word;
    if (any_cased && all_lower && !version_or_number) {
      bool prev_cased = false;
      for (char& ch : t) {
        if (is_cased(ch)) {
          ch = char(prev_cased ? std::tolower(static_cast<unsigned char>(ch))
                               : std::toupper(static_cast<unsigned char>(ch)));
          prev_cased = true;
        } else {
          prev_cased = false;
        }
      }
    }
    out += (out.empty() ? "" : " ") + t;
  }
  return out;
}

// gguf-py's size_label / model_weight_count_rounded_notation (min_digits 2): 404072 -> "404K", 124M.
std::string size_label(int64_t n) {
  const double x = double(n);
  double scaled;
  const char* suffix;
  if (x > 1e12) {
    scaled = x * 1e-12, suffix = "T";
  } else if (x > 1e9) {
    scaled = x * 1e-9, suffix = "B";
  } else if (x > 1e6) {
    scaled = x * 1e-6, suffix = "M";
  } else {
    scaled = x * 1e-3, suffix = "K";
  }
  // len(str(round(scaled)).lstrip('0')): Python's round() is to nearest even, as nearbyint
  const std::string digits = std::to_string(int64_t(std::nearbyint(scaled)));
  const size_t nz = digits.find_first_not_of('0');
  const int n_digits = nz == std::string::npos ? 0 : int(digits.size() - nz);
  const int fix = std::max(2 - n_digits, 0);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f%s", fix, scaled, suffix);
  return buf;
}

// gguf-py's Metadata.load_generation_config and set_gguf_meta_model: generation_config.json's sampling
// settings as general.sampling.*, in its order and types (an integer key takes a JSON integer, a float key
// any number, sequence a non-empty string: gguf-py writes no empty one). Values are written as given, as
// the converter writes them (top_k -1 included); a type its writer cannot write (a string for top_k, where
// the converter stops with a Python traceback) is refused in one line, as is a file that is not JSON (which
// the converter would skip without a word).
void add_sampling_metadata(const fs::path& dir, Kv& kv) {
  const fs::path p = dir / "generation_config.json";
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(p, ec))) return;
  const std::string text = read_regular_file(p, kMaxConfigBytes, "generation config");
  json g;
  try {
    g = parse_json_bounded(true, text);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::Format, p.string() + ": not valid JSON: " + e.what());
  }
  if (!g.is_object()) throw Error(ErrorKind::Config, p.string() + ": not a JSON object");
  enum Kind { Str, Int, Flt };
  static const struct {
    const char* key;  // under general.sampling.
    const char* field;
    const char* alt;  // the field read when `field` is absent (penalty_repeat: repetition_penalty)
    Kind kind;
  } kKeys[] = {{"sequence", "sequence", nullptr, Str},
               {"top_k", "top_k", nullptr, Int},
               {"top_p", "top_p", nullptr, Flt},
               {"min_p", "min_p", nullptr, Flt},
               {"xtc_probability", "xtc_probability", nullptr, Flt},
               {"xtc_threshold", "xtc_threshold", nullptr, Flt},
               {"temp", "temperature", nullptr, Flt},
               {"penalty_last_n", "penalty_last_n", nullptr, Int},
               {"penalty_repeat", "penalty_repeat", "repetition_penalty", Flt},
               {"mirostat", "mirostat", nullptr, Int},
               {"mirostat_tau", "mirostat_tau", nullptr, Flt},
               {"mirostat_eta", "mirostat_eta", nullptr, Flt}};
  for (const auto& k : kKeys) {
    const char* field = k.field;
    if (!g.contains(field) && k.alt != nullptr) field = k.alt;
    if (!g.contains(field) || g[field].is_null()) continue;
    const json& v = g[field];
    const std::string key = std::string("general.sampling.") + k.key;
    const auto bad = [&](const char* want) {
      std::string got = v.dump(-1, ' ', false, json::error_handler_t::replace);
      if (got.size() > 80) got = got.substr(0, 77) + "...";
      throw Error(ErrorKind::Config, p.string() + ": field '" + field + "' must be " + want + ", got " + got);
    };
    if (k.kind == Str) {
      if (!v.is_string()) bad("a string");
      if (!v.get<std::string>().empty()) kv.emplace_back(key, gguf_string(v.get<std::string>()));
    } else if (k.kind == Int) {
      if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX ||
          (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT32_MAX)))
        bad("a 32-bit integer");
      kv.emplace_back(key, gguf_i32(int32_t(v.get<int64_t>())));
    } else {
      if (!v.is_number() || !std::isfinite(v.get<double>()) ||
          std::fabs(v.get<double>()) > double(std::numeric_limits<float>::max()))
        bad("a number in 32-bit float range");
      kv.emplace_back(key, gguf_f32(float(v.get<double>())));
    }
  }
}

}  // namespace

void add_general_kv(const fs::path& dir, const std::string& gguf_arch, int64_t n_params, Kv& kv) {
  fs::path named = fs::absolute(dir).lexically_normal();
  if (named.filename().empty()) named = named.parent_path();
  kv.emplace_back("general.architecture", gguf_string(gguf_arch));
  kv.emplace_back("general.type", gguf_string("model"));
  add_sampling_metadata(dir, kv);
  kv.emplace_back("general.name", gguf_string(id_to_title(named.filename().string())));
  kv.emplace_back("general.size_label", gguf_string(size_label(n_params)));
}

}  // namespace minigpt::convert
