// See minigpt/gguf_convert.h. The llama.cpp code each part follows is named where it is reproduced:
// convert_hf_to_gguf.py (conversion/base.py, conversion/gpt2.py, gguf-py's vocab.py and metadata.py) and
// src/llama-quant.cpp.
#include "minigpt/gguf_convert.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "arch/arch.h"
#include "cpu/sysinfo.h"
#include "formats/gguf_writer.h"
#include "formats/safetensors.h"
#include "io/io.h"
#include "io/json_parse.h"
#include "minigpt/config.h"
#include "minigpt/error.h"
#include "minigpt/generation_config.h"
#include "minigpt/tensor.h"
#include "minigpt/tokenizer.h"
#include "quant/quant.h"
#include "quant/quantize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace minigpt {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr GgufPresetInfo kPresets[] = {
    {"f32", 0, GgmlType::F32, "every tensor F32"},
    {"f16", 1, GgmlType::F16, "matrices F16; 1-D tensors and position_embd F32"},
    {"bf16", 32, GgmlType::BF16, "matrices BF16; 1-D tensors and position_embd F32"},
    {"q8_0", 7, GgmlType::Q8_0, "matrices Q8_0 (8.5 bits per weight)"},
    {"q4_0", 2, GgmlType::Q4_0, "matrices Q4_0 (4.5 bits per weight), token_embd Q6_K"},
    {"q4_k_s", 14, GgmlType::Q4_K, "Q4_K; attn_qkv of the first 4 layers and ffn_down of the first 1/8 Q5_K"},
    {"q4_k_m", 15, GgmlType::Q4_K, "Q4_K; attn_qkv and ffn_down Q6_K in the 'more bits' layers"},
    {"q5_k_m", 17, GgmlType::Q5_K, "Q5_K; attn_qkv and ffn_down Q6_K in the 'more bits' layers"},
    {"q6_k", 18, GgmlType::Q6_K, "every matrix Q6_K"},
    {"auto", 1024, GgmlType::F16, "the checkpoint's 16-bit type (F16 for an F32 checkpoint)"},
};

bool is_quantized(GgmlType t) { return t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16; }
const char* type_name(GgmlType t) { return ggml_type_info(uint32_t(t))->name; }
int64_t block_size(GgmlType t) { return ggml_type_info(uint32_t(t))->block_size; }

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

// "blk.N." -> N, else -1 (llama's sscanf(name, "blk.%d.")).
int block_of(const std::string& name) {
  int layer = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

// ---- llama-quantize's type choice (src/llama-quant.cpp), for GPT-2 and the presets minigpt offers ----

enum class Category {
  TokenEmbd,
  AttnQ,
  AttnV,
  AttnK,
  AttnQkv,
  AttnKvB,
  AttnOutput,
  FfnUp,
  FfnGate,
  FfnDown,
  Output,
  Other
};

// tensor_get_category
Category category_of(const std::string& name) {
  if (name == "output.weight") return Category::Output;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Category::TokenEmbd;
  if (contains(name, "attn_qkv.weight")) return Category::AttnQkv;
  if (contains(name, "attn_kv_b.weight")) return Category::AttnKvB;
  if (contains(name, "attn_v.weight")) return Category::AttnV;
  if (contains(name, "attn_k.weight")) return Category::AttnK;
  if (contains(name, "attn_q.weight")) return Category::AttnQ;
  if (contains(name, "attn_output.weight")) return Category::AttnOutput;
  if (contains(name, "ffn_up")) return Category::FfnUp;
  if (contains(name, "ffn_gate")) return Category::FfnGate;
  if (contains(name, "ffn_down")) return Category::FfnDown;
  return Category::Other;
}
bool is_attn_v(Category c) {
  return c == Category::AttnV || c == Category::AttnQkv || c == Category::AttnKvB;
}

// tensor_allows_quantization, the parts that can apply to a GPT-2 file.
bool allows_quantization(const TensorSpec& t, const TypeOverrides& ov) {
  if (t.ne.size() < 2) return false;
  const std::string& n = t.name;
  if (!ends_with(n, "weight")) return false;
  if (contains(n, "_norm.weight")) return false;
  if (ov.leave_output_tensor && n == "output.weight") return false;
  if (contains(n, "ffn_gate_inp.weight")) return false;
  if (n == "position_embd.weight" || n == "token_types.weight") return false;
  if (contains(n, ".position_embd") || contains(n, "attn_rel_b.weight")) return false;
  return true;
}

// use_more_bits: the first and last eighth of the layers and every third one between.
bool use_more_bits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

}  // namespace

const GgufPresetInfo& preset_info(GgufPreset p) { return kPresets[size_t(p)]; }

std::optional<GgufPreset> parse_preset(std::string_view name) {
  std::string lower(name);
  for (char& ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  for (size_t i = 0; i + 1 < std::size(kPresets); ++i) {
    if (lower == kPresets[i].name) return GgufPreset(i);
  }
  return std::nullopt;
}

std::string file_type_name(int64_t file_type) {
  // llama.h's LLAMA_FTYPE_* and llama-model-loader.cpp's names for them (the IQ types and others minigpt
  // does not read are left to "unknown").
  static const std::pair<int64_t, const char*> kNames[] = {{0, "all F32"},        {1, "F16"},
                                                           {2, "Q4_0"},           {3, "Q4_1"},
                                                           {7, "Q8_0"},           {8, "Q5_0"},
                                                           {9, "Q5_1"},           {10, "Q2_K - Medium"},
                                                           {11, "Q3_K - Small"},  {12, "Q3_K - Medium"},
                                                           {13, "Q3_K - Large"},  {14, "Q4_K - Small"},
                                                           {15, "Q4_K - Medium"}, {16, "Q5_K - Small"},
                                                           {17, "Q5_K - Medium"}, {18, "Q6_K"},
                                                           {21, "Q2_K - Small"},  {32, "BF16"}};
  for (const auto& [n, name] : kNames)
    if (n == file_type) return name;
  return "unknown (" + std::to_string(file_type) + ")";
}

std::string preset_names() {
  // In the order the README and --help list them.
  static const GgufPreset order[] = {GgufPreset::Q8_0,   GgufPreset::Q4_0,   GgufPreset::Q4_K_S,
                                     GgufPreset::Q4_K_M, GgufPreset::Q5_K_M, GgufPreset::Q6_K,
                                     GgufPreset::F16,    GgufPreset::BF16,   GgufPreset::F32};
  std::string s;
  for (GgufPreset p : order) s += (s.empty() ? "" : ", ") + std::string(preset_info(p).name);
  return s;
}

bool llama_tensor_less(const std::string& a, const std::string& b) {
  const int la = block_of(a), lb = block_of(b);
  if (la != lb) return la < lb;
  return a < b;
}

std::optional<GgmlType> parse_ggml_type(std::string_view name) {
  for (uint32_t i = 0; i < 64; ++i) {
    const GgmlTypeInfo* info = ggml_type_info(i);
    if (info == nullptr || std::strlen(info->name) != name.size()) continue;
    bool same = true;
    for (size_t k = 0; k < name.size() && same; ++k) {
      same = std::tolower(static_cast<unsigned char>(name[k])) ==
             std::tolower(static_cast<unsigned char>(info->name[k]));
    }
    if (same) return GgmlType(i);
  }
  return std::nullopt;
}

std::vector<TypeChoice> choose_types(GgufPreset p, const std::vector<TensorSpec>& tensors, int64_t n_layer,
                                     const TypeOverrides& ov) {
  const GgufPresetInfo& info = preset_info(p);
  const GgmlType default_type = info.default_type;
  // init_quantize_state_counters
  int n_attention_wv = 0;
  bool tied = true;
  for (const TensorSpec& t : tensors) {
    const Category c = category_of(t.name);
    if (is_attn_v(c)) ++n_attention_wv;
    if (c == Category::Output) tied = false;
  }
  const int n_ffn_down = int(n_layer);
  int i_attention_wv = 0, i_ffn_down = 0;

  // --tensor-type patterns, searched in each name as llama-quantize's std::regex_search does (PCRE2, which
  // reads the ECMAScript patterns people pass the same way).
  struct Pattern {
    std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)> code;
    GgmlType type;
  };
  std::vector<Pattern> patterns;
  for (const auto& [name, type] : ov.tensor_types) {
    int err = 0;
    PCRE2_SIZE at = 0;
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(name.data()), name.size(), 0, &err, &at, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw Error(ErrorKind::Argument, "--tensor-type '" + name + "': not a regular expression (" +
                                           reinterpret_cast<const char*>(msg) + " at offset " +
                                           std::to_string(at) + ")");
    }
    patterns.push_back({{code, &pcre2_code_free}, type});
  }
  auto found = [](const Pattern& p, const std::string& s) {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
        pcre2_match_data_create_from_pattern(p.code.get(), nullptr), &pcre2_match_data_free);
    if (!data) throw Error(ErrorKind::Io, "--tensor-type: out of memory");
    const int rc = pcre2_match(p.code.get(), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0,
                               data.get(), nullptr);
    if (rc >= 0) return true;
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    throw Error(ErrorKind::Argument,
                "--tensor-type: matching '" + s + "' failed: " + reinterpret_cast<const char*>(msg));
  };

  std::vector<TypeChoice> out;
  out.reserve(tensors.size());
  for (const TensorSpec& t : tensors) {
    if (!allows_quantization(t, ov)) {
      out.push_back({t.type, ""});
      continue;
    }
    // llama_tensor_get_type: the types named on the command line first, taken as they are.
    const Category c = category_of(t.name);
    if (ov.token_embedding_type && c == Category::TokenEmbd) {
      out.push_back({*ov.token_embedding_type, ""});
      continue;
    }
    if (ov.output_tensor_type && c == Category::Output) {
      out.push_back({*ov.output_tensor_type, ""});
      continue;
    }
    GgmlType type = default_type;
    if (!is_quantized(default_type)) {
      out.push_back({type, ""});
      continue;
    }
    // --tensor-type: the first pattern found in the name, instead of the preset's mixture
    bool manual = false;
    for (const Pattern& pattern : patterns) {
      if (found(pattern, t.name)) {
        type = pattern.type;
        manual = true;
        break;
      }
    }
    // llama_tensor_get_type_impl, counters included
    if (manual || ov.pure) {
      // a --tensor-type, or --pure (no mixture: the preset's type); the fallback below still applies
    } else if (c == Category::Output || (tied && c == Category::TokenEmbd)) {
      // The head (or the embeddings it is tied to): --output-tensor-type; else Q8_0 when its rows do not
      // fit the type's blocks, else Q6_K unless the preset is Q8_0.
      if (ov.output_tensor_type) {
        type = *ov.output_tensor_type;
      } else if (t.ne[0] % block_size(type) != 0) {
        type = GgmlType::Q8_0;
      } else if (type != GgmlType::Q8_0) {
        type = GgmlType::Q6_K;
      }
    } else if (c == Category::TokenEmbd) {
      // (only the IQ and ternary presets change untied embeddings)
    } else if (is_attn_v(c)) {
      // attn_qkv takes this branch before its own (which would give Q5_K to Q4_K_M): as llama-quantize.
      if ((p == GgufPreset::Q4_K_M || p == GgufPreset::Q5_K_M) &&
          use_more_bits(i_attention_wv, n_attention_wv)) {
        type = GgmlType::Q6_K;
      } else if (p == GgufPreset::Q4_K_S && i_attention_wv < 4) {
        type = GgmlType::Q5_K;
      }
      ++i_attention_wv;
    } else if (c == Category::FfnDown) {
      const int i_layer = i_ffn_down, n = n_ffn_down;
      if (p == GgufPreset::Q4_K_M) {
        if (use_more_bits(i_layer, n)) type = GgmlType::Q6_K;
      } else if (p == GgufPreset::Q5_K_M && use_more_bits(i_layer, n)) {
        type = GgmlType::Q6_K;
      } else if (p == GgufPreset::Q4_K_S && i_layer < n / 8) {
        type = GgmlType::Q5_K;
      }
      ++i_ffn_down;
    }
    // tensor_type_fallback: rows that are not whole blocks of the chosen type.
    std::string why;
    const int64_t ncols = t.ne[0];
    if (ncols % block_size(type) != 0) {
      GgmlType fallback = type;
      switch (type) {
        case GgmlType::Q4_K:
          fallback = GgmlType::Q5_0;
          break;
        case GgmlType::Q5_K:
          fallback = GgmlType::Q5_1;
          break;
        case GgmlType::Q6_K:
          fallback = GgmlType::Q8_0;
          break;
        default:
          break;  // a 32-value type: F16 below
      }
      if (ncols % block_size(fallback) != 0) fallback = GgmlType::F16;
      why = "rows of " + std::to_string(ncols) + " values are not a multiple of " +
            std::to_string(block_size(type)) + " (" + type_name(type) + "'s block): " + type_name(fallback) +
            " instead, as llama-quantize falls back";
      type = fallback;
    }
    out.push_back({type, why});
  }
  return out;
}

namespace {

// ---- the input ---------------------------------------------------------------------------------------

struct SourceTensor {
  std::string name;         // the GGUF name
  std::vector<int64_t> ne;  // innermost first
  GgmlType type;          // as llama-quantize would see it (an HF tensor: F32, as the converter's f32 output)
  uint64_t stored_bytes;  // in the input file
  std::string stored_type;            // for the log: "F32", "BF16", "Q8_0"
  std::function<void(uint8_t*)> raw;  // the tensor's bytes of `type` (GGUF inputs only)
  std::function<void(float*)> f32;    // the values as float32
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    return n;
  }
};

struct Source {
  std::string where;  // the input, for messages
  bool gguf = false;
  std::vector<std::pair<std::string, GgufValue>> metadata;  // in file order
  std::vector<SourceTensor> tensors;                        // in the converter's order
  int64_t n_layer = 0;
  std::vector<fs::path> files;  // every file the input reads
  GgmlType auto_type = GgmlType::F16;
  // Keeps the files open while the tensors are read.
  std::vector<std::shared_ptr<SafeTensorsFile>> st_files;
  std::shared_ptr<GgufFile> gguf_file;
};

// The value of `key` replaced in place; a new key appended, unless only_if_present.
void set_kv(std::vector<std::pair<std::string, GgufValue>>& kv, const std::string& key, GgufValue v,
            bool only_if_present = false) {
  for (auto& [k, old] : kv) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  if (!only_if_present) kv.emplace_back(key, std::move(v));
}

// gguf-py's Metadata.id_to_title: "gpt2-tiny" -> "Gpt2 Tiny" (words lower case, not a version or a number,
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

json read_json_file(const fs::path& p, size_t cap, const std::string& what) {
  const std::string text = read_regular_file(p, cap, what);
  try {
    return parse_json_bounded(true, text);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::Format, p.string() + ": not valid JSON: " + e.what());
  }
}

// convert_hf_to_gguf.py's does_token_look_special.
bool looks_special(const std::string& t) {
  if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
  auto starts = [&](std::string_view a) { return t.size() >= a.size() && t.compare(0, a.size(), a) == 0; };
  if (starts("<|") && ends_with(t, "|>")) return true;
  if (starts("<\xEF\xBD\x9C") && ends_with(t, "\xEF\xBD\x9C>")) return true;  // <｜ ... ｜>
  if (starts("<unused") && ends_with(t, ">")) return true;
  return false;
}

// The tokenizer keys convert_hf_to_gguf.py writes for a GPT-2 (_set_vocab_gpt2: get_vocab_base, then
// gguf-py's SpecialVocab with merges), from tokenizer.json or vocab.json + merges.txt, tokenizer_config.json
// and config.json.
void add_tokenizer(const fs::path& dir, const json& config, int64_t n_vocab, Source& s) {
  // minigpt must understand the tokenizer (GPT-2's byte-level BPE and pre-tokenizer): "gpt-2" below is
  // then the right tokenizer.ggml.pre.
  // A character-level tokenizer (a nanoGPT character model's) has no GGUF form: llama.cpp's "gpt2" model
  // is byte-level, and its converter refuses such a tokenizer too (an unknown pre-tokenizer).
  if (Tokenizer::load(dir).char_level()) {
    throw Error(ErrorKind::Unsupported,
                s.where +
                    ": the tokenizer is character-level, which GGUF (llama.cpp's byte-level \"gpt2\" "
                    "tokenizer) cannot hold; run the model directory as it is");
  }
  struct Added {
    int64_t id;
    std::string content;
    bool special;
  };
  // An added token's "special": true only when it says so (it may be left out or null).
  auto special_flag = [](const json& a) {
    return a.contains("special") && a["special"].is_boolean() && a["special"].get<bool>();
  };
  std::map<std::string, int64_t> vocab;
  std::vector<Added> added;       // what AutoTokenizer reports as added tokens
  std::vector<Added> json_added;  // tokenizer.json's added_tokens (SpecialVocab looks ids up in these)
  std::vector<std::string> merges;
  json tok;
  const fs::path tok_path = dir / "tokenizer.json";
  const bool have_tok = fs::exists(tok_path);
  json tc;
  const fs::path tc_path = dir / "tokenizer_config.json";
  if (fs::exists(tc_path)) {
    tc = read_json_file(tc_path, kMaxConfigBytes, "tokenizer config");
    s.files.push_back(tc_path);
  }
  if (have_tok) {
    tok = read_json_file(tok_path, kMaxTokenizerBytes, "tokenizer");
    s.files.push_back(tok_path);
    const json& model = tok.at("model");
    for (const auto& [k, v] : model.at("vocab").items()) vocab[k] = v.get<int64_t>();
    if (model.contains("merges") && model["merges"].is_array()) {
      for (const json& m : model["merges"]) {
        if (m.is_string()) {
          merges.push_back(m.get<std::string>());
        } else if (m.is_array() && m.size() == 2) {
          // transformers >= 4.45 pairs; spaces inside a part become U+0120 as gguf-py writes them
          std::string line;
          for (int part = 0; part < 2; ++part) {
            if (part) line += ' ';
            for (char ch : m[part].get<std::string>())
              line += ch == ' ' ? std::string("\xC4\xA0") : std::string(1, ch);
          }
          merges.push_back(line);
        }
      }
    }
    if (tok.contains("added_tokens") && tok["added_tokens"].is_array()) {
      for (const json& a : tok["added_tokens"]) {
        // tokenizer.json was read by Tokenizer::load above: ids and contents are checked; "special" may be
        // left out or null.
        json_added.push_back(
            {a.at("id").get<int64_t>(), a.at("content").get<std::string>(), special_flag(a)});
      }
    }
    added = json_added;
  } else {
    const fs::path vp = dir / "vocab.json";
    s.files.push_back(vp);
    const json v = read_json_file(vp, kMaxTokenizerBytes, "vocabulary");
    for (const auto& [k, id] : v.items()) vocab[k] = id.get<int64_t>();
    if (tc.contains("added_tokens_decoder") && tc["added_tokens_decoder"].is_object()) {
      // Checked as the rest of the input is: a malformed entry was an "internal error: stoll" (exit 3).
      for (const auto& [id, a] : tc["added_tokens_decoder"].items()) {
        const std::string at = tc_path.string() + ": added_tokens_decoder[" +
                               json(id).dump(-1, ' ', false, json::error_handler_t::replace) + "]";
        const bool decimal =
            !id.empty() && id.size() <= 9 && id.find_first_not_of("0123456789") == std::string::npos;
        if (!decimal) throw Error(ErrorKind::Format, at + ": the key is not a token id");
        if (!a.is_object() || !a.contains("content") || !a["content"].is_string())
          throw Error(ErrorKind::Format, at + ": no string \"content\"");
        if (a.contains("special") && !a["special"].is_boolean() && !a["special"].is_null())
          throw Error(ErrorKind::Format, at + ": \"special\" is not true or false");
        added.push_back({std::stoll(id), a["content"].get<std::string>(), special_flag(a)});
      }
    } else if (vocab.count("<|endoftext|>")) {
      added.push_back({vocab["<|endoftext|>"], "<|endoftext|>", true});
    }
  }
  if (merges.empty() && fs::exists(dir / "merges.txt")) {
    const fs::path mp = dir / "merges.txt";
    s.files.push_back(mp);
    const std::string text = read_regular_file(mp, kMaxTokenizerBytes, "merges file");
    size_t pos = 0;
    bool first = true;
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(pos, end - pos);
      pos = end + 1;
      const bool skip = first && !line.empty() && line.find_first_not_of(" \t\r") != std::string::npos &&
                        line[line.find_first_not_of(" \t\r")] == '#';
      first = false;
      if (skip) continue;
      // line.split(None, 3): exactly two whitespace-separated parts
      std::vector<std::string> parts;
      std::string cur;
      for (char ch : line + " ") {
        if (std::isspace(static_cast<unsigned char>(ch))) {
          if (!cur.empty()) parts.push_back(cur);
          cur.clear();
        } else {
          cur += ch;
        }
      }
      if (parts.size() == 2) merges.push_back(parts[0] + " " + parts[1]);
    }
  }

  // get_vocab_base
  std::map<int64_t, std::string> by_id;
  for (const auto& [t, id] : vocab) by_id[id] = t;
  for (const Added& a : added) by_id[a.id] = a.content;
  std::map<std::string, const Added*> added_by_content;
  for (const Added& a : added) added_by_content[a.content] = &a;
  if (!by_id.empty() && by_id.rbegin()->first >= n_vocab) {
    throw Error(ErrorKind::Format, s.where + ": the tokenizer has id " +
                                       std::to_string(by_id.rbegin()->first) +
                                       " but config.json's vocab_size is " + std::to_string(n_vocab));
  }
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  tokens.reserve(size_t(n_vocab));
  types.reserve(size_t(n_vocab));
  for (int64_t i = 0; i < n_vocab; ++i) {
    auto it = by_id.find(i);
    if (it == by_id.end()) {
      tokens.push_back("[PAD" + std::to_string(i) + "]");
      types.push_back(5);  // UNUSED
      continue;
    }
    tokens.push_back(it->second);
    auto a = added_by_content.find(it->second);
    if (a == added_by_content.end()) {
      types.push_back(1);  // NORMAL
    } else {
      types.push_back(a->second->special || looks_special(it->second) ? 3 : 4);  // CONTROL / USER_DEFINED
    }
  }
  auto& kv = s.metadata;
  kv.emplace_back("tokenizer.ggml.model", gguf_string("gpt2"));
  kv.emplace_back("tokenizer.ggml.pre", gguf_string("gpt-2"));
  kv.emplace_back("tokenizer.ggml.tokens", gguf_string_array(std::move(tokens)));
  kv.emplace_back("tokenizer.ggml.token_type", gguf_i32_array(types));

  // SpecialVocab: ids of bos/eos/unk/sep/pad/cls/mask and whether bos/eos/sep are added.
  static const char* kTypes[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
  std::vector<std::pair<std::string, int64_t>> ids;  // in the order they were found
  std::vector<std::pair<std::string, bool>> add;
  auto set_id = [&](const std::string& typ, const json& v) {
    if (!v.is_number_integer()) return;
    const int64_t id = v.get<int64_t>();
    if (id < 0)
      throw Error(ErrorKind::Format, s.where + ": invalid " + typ + " token id " + std::to_string(id));
    for (const auto& [t, _] : ids)
      if (t == typ) return;
    ids.emplace_back(typ, id);
  };
  auto set_add = [&](const std::string& typ, bool value, bool only_if_unset) {
    for (auto& [t, v] : add) {
      if (t == typ) {
        if (!only_if_unset) v = value;
        return;
      }
    }
    add.emplace_back(typ, value);
  };
  if (have_tok && tok.contains("post_processor") && tok["post_processor"].is_object()) {
    const json& pp = tok["post_processor"];
    std::vector<json> procs;
    if (pp.contains("processors") && pp["processors"].is_array()) {
      for (const json& p : pp["processors"]) procs.push_back(p);
    } else {
      procs.push_back(pp);
    }
    const std::string bos_tok = tc.is_object() && tc.contains("bos_token") && tc["bos_token"].is_string()
                                    ? tc["bos_token"].get<std::string>()
                                    : "";
    const std::string eos_tok = tc.is_object() && tc.contains("eos_token") && tc["eos_token"].is_string()
                                    ? tc["eos_token"].get<std::string>()
                                    : "";
    for (const json& p : procs) {
      const std::string type =
          p.is_object() && p.contains("type") && p["type"].is_string() ? p["type"].get<std::string>() : "";
      if (type == "ByteLevel") {
        set_add("bos", false, true);
        set_add("eos", false, true);
      } else if (type == "TemplateProcessing" && p.contains("single") && p["single"].is_array() &&
                 p["single"].size() > 1) {
        // the simple case of gguf-py's parsing: a leading BOS / trailing EOS special token
        const json& single = p["single"];
        if (single.front().contains("SpecialToken")) {
          set_add("bos",
                  single.front()["SpecialToken"].contains("id") &&
                      single.front()["SpecialToken"]["id"] == bos_tok,
                  false);
        }
        if (single.back().contains("SpecialToken")) {
          set_add(
              "eos",
              single.back()["SpecialToken"].contains("id") && single.back()["SpecialToken"]["id"] == eos_tok,
              false);
        }
      }
    }
  }
  if (tc.is_object()) {
    for (const char* typ : kTypes) {
      const std::string t = typ;
      if (tc.contains("add_" + t + "_token") && tc["add_" + t + "_token"].is_boolean()) {
        set_add(t, tc["add_" + t + "_token"].get<bool>(), true);
      }
      if (!tc.contains(t + "_token")) continue;
      const json& entry = tc[t + "_token"];
      std::string content;
      if (entry.is_string()) {
        content = entry.get<std::string>();
      } else if (entry.is_object() && entry.contains("content") && entry["content"].is_string()) {
        content = entry["content"].get<std::string>();
      } else {
        continue;
      }
      for (const Added& a : json_added) {
        if (a.content == content) {
          set_id(t, a.id);
          break;
        }
      }
    }
  }
  for (const char* typ : kTypes) {
    const std::string key = std::string(typ) + "_token_id";
    if (config.contains(key)) set_id(typ, config[key]);
  }
  // Always, even empty (a byte-level vocabulary without merges, as the shipped model's): llama.cpp refuses a
  // "gpt2" tokenizer without the key ("cannot find tokenizer merges in model file").
  kv.emplace_back("tokenizer.ggml.merges", gguf_string_array(std::move(merges)));
  static const std::map<std::string, std::string> kIdKeys = {
      {"bos", "tokenizer.ggml.bos_token_id"},     {"eos", "tokenizer.ggml.eos_token_id"},
      {"unk", "tokenizer.ggml.unknown_token_id"}, {"sep", "tokenizer.ggml.seperator_token_id"},
      {"pad", "tokenizer.ggml.padding_token_id"}, {"mask", "tokenizer.ggml.mask_token_id"}};
  for (const auto& [typ, id] : ids) {
    auto it = kIdKeys.find(typ);
    if (it == kIdKeys.end()) continue;  // cls: gguf-py has no key for it
    if (id > int64_t(UINT32_MAX))
      throw Error(ErrorKind::Format, s.where + ": " + typ + " token id out of range");
    kv.emplace_back(it->second, gguf_u32(uint32_t(id)));
  }
  for (const auto& [typ, value] : add) {
    if (typ == "bos" || typ == "eos" || typ == "sep")
      kv.emplace_back("tokenizer.ggml.add_" + typ + "_token", gguf_bool(value));
  }
  // gguf-py's SpecialVocab: tokenizer_config.json's chat_template, else chat_template.jinja (what
  // transformers
  // >= 4.43 saves), else chat_template.json's; a list of {name, template} gives the one named "default" as
  // tokenizer.chat_template and the others as tokenizer.chat_template.NAME (GGUFWriter.add_chat_template).
  json tmpl;
  if (tc.is_object() && tc.contains("chat_template")) {
    tmpl = tc["chat_template"];
  } else if (std::error_code ec; fs::is_regular_file(dir / "chat_template.jinja", ec)) {
    tmpl = read_regular_file(dir / "chat_template.jinja", kMaxConfigBytes, "chat template");
  } else if (fs::is_regular_file(dir / "chat_template.json", ec)) {
    const json j = read_json_file(dir / "chat_template.json", kMaxConfigBytes, "chat template");
    if (j.is_object() && j.contains("chat_template")) tmpl = j["chat_template"];
  }
  if (tmpl.is_string()) {
    kv.emplace_back("tokenizer.chat_template", gguf_string(tmpl.get<std::string>()));
  } else if (tmpl.is_array()) {
    std::vector<std::string> names;
    std::optional<std::string> def;
    for (const json& e : tmpl) {
      if (!e.is_object() || !e.contains("template") || !e["template"].is_string()) continue;
      std::string name = e.contains("name") && e["name"].is_string() ? e["name"].get<std::string>() : "";
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      if (name.empty()) continue;
      if (name == "default") {
        def = e["template"].get<std::string>();
      } else {
        kv.emplace_back("tokenizer.chat_template." + name, gguf_string(e["template"].get<std::string>()));
        names.push_back(name);
      }
    }
    if (!names.empty()) kv.emplace_back("tokenizer.chat_templates", gguf_string_array(std::move(names)));
    if (def) kv.emplace_back("tokenizer.chat_template", gguf_string(*def));
  }
}

// The values of a safetensors tensor as float32, `conv1d` ones transposed from [in, out] to [out, in].
void read_hf_tensor(const SafeTensorsFile& f, const SafeTensor& t, bool transpose, float* dst) {
  DType d;
  if (!to_dtype(t.dtype, &d)) {
    throw Error(ErrorKind::Unsupported, f.path() + ": tensor '" + t.name + "' has dtype " +
                                            std::string(st_dtype_name(t.dtype)) +
                                            "; weights must be F32, F16 or BF16");
  }
  std::vector<uint8_t> raw(t.nbytes);
  f.read(t, raw.data());
  const size_t n = size_t(t.numel());
  if (!transpose) {
    convert_to_f32(dst, raw.data(), d, n);
  } else {
    std::vector<float> tmp(n);
    convert_to_f32(tmp.data(), raw.data(), d, n);
    const int64_t rows = t.shape[0], cols = t.shape[1];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = tmp[size_t(r * cols + c)];
  }
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(dst[i])) {
      throw Error(ErrorKind::Format, f.path() + ": tensor '" + t.name + "' holds " +
                                         (std::isnan(dst[i]) ? "NaN" : "Inf") + " (value " +
                                         std::to_string(i) + ")");
    }
  }
}

// gguf-py's Metadata.load_generation_config and set_gguf_meta_model: generation_config.json's sampling
// settings as general.sampling.*, in its order and types (an integer key takes a JSON integer, a float key
// any number, sequence a non-empty string: gguf-py writes no empty one). Values are written as given, as
// the converter writes them (top_k -1 included); a type its writer cannot write (a string for top_k, where
// the converter stops with a Python traceback) is refused in one line, as is a file that is not JSON (which
// the converter would skip without a word).
void add_sampling_metadata(const fs::path& dir, std::vector<std::pair<std::string, GgufValue>>& kv) {
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

Source read_hf(const fs::path& dir) {
  Source s;
  s.where = dir.string();
  const fs::path cfg_path = dir / "config.json";
  if (!fs::exists(cfg_path)) {
    throw Error(ErrorKind::Io, dir.string() +
                                   ": no config.json (a Hugging Face model directory holds config.json "
                                   "and model.safetensors)");
  }
  s.files.push_back(cfg_path);
  const Config c = load_config(cfg_path);
  const json j = read_json_file(cfg_path, kMaxConfigBytes, "config");
  const std::string src = cfg_path.string();
  const arch::Architecture* a = arch::find(c.arch);
  if (a == nullptr || a->parse_gguf == nullptr) {
    throw Error(ErrorKind::Unsupported, src + ": model_type '" + c.arch +
                                            "': llama.cpp has no such architecture, so no GGUF form (minigpt "
                                            "writes GGUF for gpt2, gpt_neox and gpt_bigcode)");
  }
  const std::string ga = a->gguf_arch;
  if (c.arch == "gpt2") {
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
  } else if (c.arch == "gpt_neox") {
    // A gptneox file has no key for the activation: its readers (minigpt's, as transformers) take "gelu".
    if (c.activation != Activation::GeluErf) {
      throw Error(ErrorKind::Unsupported, src + ": hidden_act '" + c.activation_name +
                                              "' cannot be written as GGUF (a gptneox file has no key for "
                                              "the activation; its readers take gelu)");
    }
  } else if (c.arch == "gpt_bigcode") {
    if (c.activation != Activation::GeluTanh) {
      throw Error(ErrorKind::Unsupported, src + ": activation_function '" + c.activation_name +
                                              "' cannot be written as GGUF (a starcoder file has no key for "
                                              "the activation; its readers take gelu_pytorch_tanh)");
    }
    if (!c.scale_attn_weights) {
      throw Error(
          ErrorKind::Unsupported,
          src + ": scale_attn_weights=false cannot be written as GGUF (a starcoder file has no key for it)");
    }
  }
  s.n_layer = c.n_layer;
  // The weight files: model.safetensors, else the shards of model.safetensors.index.json, checked as
  // Model::load checks them (a shard named "../x" or not a string was read, or an "internal error").
  if (!fs::exists(dir / "model.safetensors") && fs::exists(dir / "model.safetensors.index.json"))
    s.files.push_back(dir / "model.safetensors.index.json");
  const std::vector<std::shared_ptr<SafeTensorsFile>> weight_files = open_weight_files(dir);
  struct Found {
    const SafeTensorsFile* file;
    const SafeTensor* tensor;
  };
  std::map<std::string, Found> all;  // by HF name: the converter's order
  for (const auto& f : weight_files) {
    const fs::path p = f->path();
    s.files.push_back(p);
    for (const SafeTensor& t : f->tensors()) {
      if (!all.emplace(t.name, Found{f.get(), &t}).second)
        throw Error(ErrorKind::Format,
                    p.string() + ": tensor '" + t.name + "' also appears in another shard");
    }
    s.st_files.push_back(f);
  }

  struct Planned {
    const arch::TensorDesc* desc;
    std::string gguf;
  };
  const std::vector<arch::TensorDesc> descs = a->tensors(c);
  std::map<std::string, Planned> plan;  // HF name -> what it is
  for (const arch::TensorDesc& d : descs) {
    const std::string* hit = nullptr;
    for (const std::string& n : d.names) {
      if (all.count(n)) hit = &n;
    }
    if (hit == nullptr) {
      if (d.optional) continue;
      throw Error(ErrorKind::Shape, weight_files[0]->path() + ": missing tensor '" + d.names[0] +
                                        "' (config.json implies " + shape_str(d.shape) + ")");
    }
    const SafeTensor& t = *all.at(*hit).tensor;
    if (d.role != arch::Role::Ignored && t.shape != d.shape) {
      throw Error(ErrorKind::Shape, all.at(*hit).file->path() + ": tensor '" + *hit + "' has shape " +
                                        shape_str(t.shape) + " but config.json implies " +
                                        shape_str(d.shape));
    }
    plan[*hit] = {&d, d.role == arch::Role::Output ? "output.weight" : arch::gguf_name(d.role, d.layer)};
  }
  bool first_matrix = true;
  for (const auto& [name, found] : all) {
    auto it = plan.find(name);
    if (it == plan.end()) {
      throw Error(ErrorKind::Shape, found.file->path() + ": unexpected tensor '" + name +
                                        "' (not part of a " + a->display_name + " with this config.json)");
    }
    const arch::TensorDesc& d = *it->second.desc;
    if (d.role == arch::Role::Ignored) continue;  // the converter drops .attn.bias / .attn.masked_bias
    const SafeTensor& t = *found.tensor;
    SourceTensor st;
    st.name = it->second.gguf;
    const bool transpose = d.order == MatrixOrder::InOut && t.shape.size() == 2;
    // ne is innermost first: [out, in] (stored, or after the transposition) -> {in, out}.
    st.ne = transpose ? t.shape : std::vector<int64_t>(t.shape.rbegin(), t.shape.rend());
    st.type = GgmlType::F32;
    st.stored_bytes = t.nbytes;
    st.stored_type = std::string(st_dtype_name(t.dtype));
    const SafeTensorsFile* file = found.file;
    const SafeTensor* tensor = &t;
    st.f32 = [file, tensor, transpose](float* dst) { read_hf_tensor(*file, *tensor, transpose, dst); };
    if (d.qkv_heads > 0) {
      // GPT-NeoX's query_key_value rows go head by head, [H][q, k, v][D]; the converter's (modify_tensors)
      // and every gptneox reader's are q | k | v, [q, k, v][H][D].
      const int64_t H = d.qkv_heads, D = t.shape[0] / (3 * H);
      const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
      st.f32 = [file, tensor, H, D, cols](float* dst) {
        std::vector<float> hf(size_t(3 * H * D * cols));
        read_hf_tensor(*file, *tensor, false, hf.data());
        for (int64_t h = 0; h < H; ++h)
          for (int64_t part = 0; part < 3; ++part)
            std::copy_n(hf.data() + ((h * 3 + part) * D) * cols, D * cols, dst + ((part * H + h) * D) * cols);
      };
    }
    if (first_matrix && t.shape.size() >= 2) {
      first_matrix = false;
      if (t.dtype == StDtype::BF16) s.auto_type = GgmlType::BF16;
    }
    s.tensors.push_back(std::move(st));
  }

  // convert_hf_to_gguf.py's metadata, in its order (prepare_metadata, then set_vocab).
  int64_t total = 0;
  for (const SourceTensor& t : s.tensors) total += t.numel();
  fs::path named = fs::absolute(dir).lexically_normal();
  if (named.filename().empty()) named = named.parent_path();
  auto& kv = s.metadata;
  kv.emplace_back("general.architecture", gguf_string(ga));
  kv.emplace_back("general.type", gguf_string("model"));
  add_sampling_metadata(dir, kv);
  kv.emplace_back("general.name", gguf_string(id_to_title(named.filename().string())));
  kv.emplace_back("general.size_label", gguf_string(size_label(total)));
  auto u32 = [&](const std::string& key, int64_t v) {
    if (v < 0 || v > int64_t(UINT32_MAX)) throw Error(ErrorKind::Config, src + ": " + key + " out of range");
    kv.emplace_back(ga + "." + key, gguf_u32(uint32_t(v)));
  };
  const GgufValue eps = gguf_f32(c.layer_norm_epsilon);
  // Each converter's set_gguf_parameters (conversion/gpt2.py, gptneox.py, starcoder.py), its keys in its
  // order.
  if (c.arch == "gpt2") {
    int64_t n_ctx =
        c.n_ctx;  // GPT2Model.set_gguf_parameters reads n_ctx (transformers also writes n_positions)
    if (j.contains("n_ctx") && j["n_ctx"].is_number_integer()) n_ctx = j["n_ctx"].get<int64_t>();
    u32("block_count", c.n_layer);
    u32("context_length", n_ctx);
    u32("embedding_length", c.n_embd);
    u32("feed_forward_length", c.n_inner);
    u32("attention.head_count", c.n_head);
    kv.emplace_back("gpt2.attention.layer_norm_epsilon", eps);
    kv.emplace_back("general.file_type", gguf_u32(0));  // set to the preset's by the caller
  } else if (c.arch == "gpt_neox") {
    u32("context_length", c.n_ctx);
    u32("embedding_length", c.n_embd);
    u32("block_count", c.n_layer);
    u32("feed_forward_length", c.n_inner);
    u32("rope.dimension_count", c.rotary_dim);
    u32("attention.head_count", c.n_head);
    kv.emplace_back("gptneox.use_parallel_residual", gguf_bool(c.parallel_residual));
    kv.emplace_back("gptneox.attention.layer_norm_epsilon", eps);
    // The converter writes no base and llama.cpp then takes 10000; any other base goes in llama.cpp's key
    // for it, which its gptneox loader and minigpt's read.
    if (c.rope_theta != 10000.0f) kv.emplace_back("gptneox.rope.freq_base", gguf_f32(c.rope_theta));
    // (no general.file_type: GPTNeoXModel writes none; quantize adds it at the end, as llama-quantize)
  } else {
    // StarCoderModel writes 4 n_embd and one KV head whatever the config says; minigpt writes what the
    // config says, which is the same for every StarCoder / SantaCoder (n_inner 4 n_embd, multi_query).
    u32("context_length", c.n_ctx);
    u32("embedding_length", c.n_embd);
    u32("feed_forward_length", c.n_inner);
    u32("block_count", c.n_layer);
    u32("attention.head_count", c.n_head);
    u32("attention.head_count_kv", c.kv_heads());
    kv.emplace_back("starcoder.attention.layer_norm_epsilon", eps);
    kv.emplace_back("general.file_type", gguf_u32(0));  // set to the preset's by the caller
  }
  kv.emplace_back("general.quantization_version", gguf_u32(2));
  add_tokenizer(dir, j, c.n_vocab, s);
  return s;
}

Source read_gguf_source(const fs::path& path) {
  Source s;
  s.where = path.string();
  s.gguf = true;
  s.files.push_back(path);
  s.gguf_file = GgufFile::open(path);
  const GgufFile& f = *s.gguf_file;
  const auto arch_name = f.get_string("general.architecture");
  if (!arch_name) throw Error(ErrorKind::Format, f.path() + ": no general.architecture in the metadata");
  if (*arch_name != "gpt2" && *arch_name != "gptneox" && *arch_name != "starcoder") {
    throw Error(ErrorKind::Unsupported, f.path() + ": GGUF architecture '" + *arch_name +
                                            "': minigpt quantizes gpt2, gptneox and starcoder files");
  }
  const auto n_layer = f.get_int(*arch_name + ".block_count");
  if (!n_layer)
    throw Error(ErrorKind::Format, f.path() + ": missing metadata '" + *arch_name + ".block_count'");
  s.n_layer = *n_layer;
  for (const std::string& key : f.keys()) s.metadata.emplace_back(key, *f.find_value(key));
  const GgufFile* file = s.gguf_file.get();
  for (const GgufTensor& t : f.tensors()) {
    SourceTensor st;
    st.name = t.name;
    st.ne = t.ne;
    st.type = t.type;
    st.stored_bytes = t.nbytes;
    st.stored_type = type_name(t.type);
    const GgufTensor* tensor = &t;
    st.raw = [file, tensor](uint8_t* dst) { file->read(*tensor, dst); };
    st.f32 = [file, tensor](float* dst) {
      std::vector<uint8_t> raw(size_t(tensor->nbytes));
      file->read(*tensor, raw.data());
      dequantize(tensor->type, raw.data(), dst, tensor->numel());
    };
    s.tensors.push_back(std::move(st));
  }
  return s;
}

// The output may not be one of the files being read, a directory, or in a directory that does not exist.
void check_output(const fs::path& out, const Source& s) {
  if (out.empty()) throw Error(ErrorKind::Argument, "the output path is empty");
  const fs::path parent = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  std::error_code ec;
  if (!fs::exists(parent, ec)) {
    throw Error(ErrorKind::Io, out.string() + ": the directory '" + parent.string() + "' does not exist");
  }
  if (!fs::is_directory(parent, ec)) {
    throw Error(ErrorKind::Io, out.string() + ": '" + parent.string() + "' is not a directory");
  }
  if (fs::is_directory(out, ec)) {
    throw Error(ErrorKind::Io, out.string() + ": is a directory (give the output file's name)");
  }
  if (!fs::exists(out, ec)) return;
  for (const fs::path& f : s.files) {
    if (fs::equivalent(out, f, ec)) {
      throw Error(ErrorKind::Argument, out.string() + ": is the input file '" + f.string() +
                                           "' (it is read while the output is written: write elsewhere)");
    }
  }
}

// Quantizes `rows` rows of `cols` values on up to `threads` threads (each row on its own: the bytes do not
// depend on the split).
void quantize_rows(GgmlType type, const float* src, uint8_t* dst, int64_t rows, int64_t cols, int threads) {
  const uint64_t row_bytes = quantized_size(type, cols);
  const int64_t n_threads = std::max<int64_t>(1, std::min<int64_t>(threads, rows * cols / 65536 + 1));
  if (n_threads <= 1) {
    quantize(type, src, dst, rows * cols);
    return;
  }
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(
      static_cast<size_t>(n_threads));  // rethrown here: on a thread, std::terminate
  for (int64_t t = 0; t < n_threads; ++t) {
    const int64_t r0 = rows * t / n_threads, r1 = rows * (t + 1) / n_threads;
    if (r1 > r0) {
      pool.emplace_back([=, &errors] {
        try {
          quantize(type, src + r0 * cols, dst + uint64_t(r0) * row_bytes, (r1 - r0) * cols);
        } catch (...) {
          errors[size_t(t)] = std::current_exception();
        }
      });
    }
  }
  for (auto& th : pool) th.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

GgufWriteSummary write_gguf(const fs::path& in, const fs::path& out, const GgufWriteOptions& o) {
  std::error_code ec;
  if (!fs::exists(in, ec)) throw Error(ErrorKind::Io, in.string() + ": no such file or directory");
  Source s;
  if (fs::is_directory(in, ec)) {
    s = read_hf(in);
  } else {
    if (o.converter) {
      throw Error(ErrorKind::Argument, in.string() +
                                           ": convert takes a Hugging Face model directory (config.json + "
                                           "model.safetensors); use quantize for a GGUF file");
    }
    if (!fs::is_regular_file(in, ec))
      throw Error(ErrorKind::Io, in.string() + ": not a regular file or a directory");
    s = read_gguf_source(in);
  }
  check_output(out, s);

  GgufPreset preset = o.preset;
  if (preset == GgufPreset::Auto) preset = s.auto_type == GgmlType::BF16 ? GgufPreset::BF16 : GgufPreset::F16;
  const GgufPresetInfo& info = preset_info(preset);
  if (o.converter && o.overrides.any()) {
    throw Error(ErrorKind::Argument, "convert takes no type overrides (quantize does)");
  }
  if (o.converter && is_quantized(info.default_type)) {
    throw Error(ErrorKind::Argument,
                std::string("convert writes f32, f16 or bf16, not ") + info.name + " (use quantize)");
  }

  // The order and types of the output's tensors.
  std::vector<size_t> order(s.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (!o.converter) {
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return llama_tensor_less(s.tensors[a].name, s.tensors[b].name);
    });
  }
  std::vector<TypeChoice> choices;
  if (o.converter) {
    // conversion/base.py prepare_tensors: 1-D tensors, norms, position_embd and anything not ending in
    // .weight stay F32; the rest take --outtype.
    for (size_t i : order) {
      const SourceTensor& t = s.tensors[i];
      const bool keep = t.ne.size() <= 1 || ends_with(t.name, "_norm.weight") ||
                        t.name == "position_embd.weight" || !ends_with(t.name, ".weight");
      choices.push_back({keep ? GgmlType::F32 : info.default_type, ""});
    }
  } else {
    std::vector<TensorSpec> specs;
    for (size_t i : order) specs.push_back({s.tensors[i].name, s.tensors[i].ne, s.tensors[i].type});
    choices = choose_types(preset, specs, s.n_layer, o.overrides);
  }
  GgufWriteSummary sum;
  sum.preset = preset;
  for (size_t k = 0; k < order.size(); ++k) {
    const SourceTensor& t = s.tensors[order[k]];
    const GgmlType to = choices[k].type;
    if (to == t.type) continue;
    if (is_quantized(t.type) && !o.allow_requantize) {
      throw Error(ErrorKind::Argument, s.where + ": tensor '" + t.name + "' is already " + type_name(t.type) +
                                           "; requantizing it to " + type_name(to) +
                                           " loses precision twice (--allow-requantize to do it anyway, as "
                                           "llama-quantize's flag)");
    }
    if (!can_dequantize(t.type)) {
      throw Error(ErrorKind::Unsupported, s.where + ": tensor '" + t.name + "' is " + type_name(t.type) +
                                              ", which minigpt cannot read back to requantize");
    }
    if (!can_quantize(to)) {
      throw Error(ErrorKind::Unsupported,
                  std::string("minigpt cannot write ") + type_name(to) + " (tensor '" + t.name + "')");
    }
    if (t.ne[0] % block_size(to) != 0) {
      // Only a type named by --token-embedding-type / --output-tensor-type gets here (the preset's own
      // choices fall back); llama-quantize goes on and corrupts its heap.
      throw Error(ErrorKind::Argument, s.where + ": tensor '" + t.name + "' has rows of " +
                                           std::to_string(t.ne[0]) + " values, not a multiple of " +
                                           std::to_string(block_size(to)) + " (" + type_name(to) +
                                           "'s block): it cannot be " + type_name(to));
    }
  }

  // Everything checked: the notes, then the tensors as they are written.
  for (size_t k = 0; k < order.size(); ++k) {
    if (choices[k].fallback.empty()) continue;
    ++sum.n_fallback;
    if (o.log) o.log(s.tensors[order[k]].name + ": " + choices[k].fallback);
  }

  GgufWriter w;
  std::vector<std::pair<std::string, GgufValue>> kv = s.metadata;
  if (s.gguf) {
    // llama-quantize: every key of the input, the quantization version and file type set, split keys gone.
    std::erase_if(kv, [](const auto& e) {
      return e.first == "split.no" || e.first == "split.count" || e.first == "split.tensors.count";
    });
  }
  if (o.converter) {
    // The converter's own keys in place (its gptneox files have no file type).
    set_kv(kv, "general.quantization_version", gguf_u32(2));
    set_kv(kv, "general.file_type", gguf_u32(info.file_type), /*only_if_present=*/true);
  } else {
    // llama-quantize (gguf_set_val_u32: the key removed, then appended): these two last, in this order.
    std::erase_if(kv, [](const auto& e) {
      return e.first == "general.quantization_version" || e.first == "general.file_type";
    });
    kv.emplace_back("general.quantization_version", gguf_u32(2));
    kv.emplace_back("general.file_type", gguf_u32(info.file_type));
  }
  for (auto& [key, v] : kv) w.set(key, std::move(v));

  const int threads = o.threads > 0 ? o.threads : cpu_count();
  const size_t n = order.size();
  for (size_t k = 0; k < n; ++k) {
    const SourceTensor* t = &s.tensors[order[k]];
    const GgmlType to = choices[k].type;
    sum.n_tensors += 1;
    sum.n_elements += t->numel();
    sum.bytes_in += t->stored_bytes;
    sum.bytes_out += quantized_size(to, t->numel());
    auto log = o.log;
    const std::string line = "[" + std::to_string(k + 1) + "/" + std::to_string(n) + "] " + t->name + " " +
                             shape_str(t->ne) + " " + t->stored_type + " -> " + type_name(to);
    w.add_tensor(t->name, to, t->ne, [t, to, threads, log, line](uint8_t* dst) {
      if (log) log(line);
      if (t->raw && to == t->type) {
        t->raw(dst);
        return;
      }
      std::vector<float> values(size_t(t->numel()));
      t->f32(values.data());
      const int64_t cols = t->ne[0];
      quantize_rows(to, values.data(), dst, t->numel() / cols, cols, threads);
    });
  }
  sum.file_bytes = w.write(out);
  return sum;
}

}  // namespace minigpt
