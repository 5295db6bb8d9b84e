// The types of the output's tensors: llama-quantize's presets and its choice of each tensor's type
// (llama_tensor_get_type in src/llama-quant.cpp), the names of ggml types and llama.cpp's tensor order.
// Everything here reads GGUF tensor names only (no architecture).
#include <cctype>
#include <cstdio>
#include <cstring>
#include <memory>

#include "convert/gguf_convert.h"
#include "convert/util.h"
#include "minigpt/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace minigpt {

using convert::block_size;
using convert::contains;
using convert::ends_with;
using convert::is_quantized;
using convert::type_name;

namespace {

constexpr GgufPresetInfo kPresets[] = {
    {"f32", 0, GgmlType::F32, "every tensor F32"},
    {"f16", 1, GgmlType::F16, "matrices F16; 1-D tensors and position_embd F32"},
    {"bf16", 32, GgmlType::BF16, "matrices BF16; 1-D tensors and position_embd F32"},
    {"q8_0", 7, GgmlType::Q8_0, "matrices Q8_0 (8.5 bits per weight)"},
    {"q4_0", 2, GgmlType::Q4_0, "matrices Q4_0 (4.5 bits per weight), token_embd Q6_K"},
    {"q4_1", 3, GgmlType::Q4_1, "matrices Q4_1 (5 bits per weight), the head Q6_K"},
    {"q5_0", 8, GgmlType::Q5_0, "matrices Q5_0 (5.5 bits per weight), the head Q6_K"},
    {"q5_1", 9, GgmlType::Q5_1, "matrices Q5_1 (6 bits per weight), the head Q6_K"},
    {"q2_k", 10, GgmlType::Q2_K,
     "Q2_K; attn_v Q3_K (Q4_K with 4+ query heads per KV head), ffn_down and attn_output Q3_K"},
    {"q3_k_s", 11, GgmlType::Q3_K, "every matrix Q3_K, the head Q6_K"},
    {"q3_k_m", 12, GgmlType::Q3_K,
     "Q3_K; attn_v Q5_K in the first 2 layers else Q4_K, attn_output Q4_K, ffn_down Q5_K in the first 1/16 "
     "else Q4_K"},
    {"q3_k_l", 13, GgmlType::Q3_K, "Q3_K; attn_v, attn_output and ffn_down Q5_K"},
    {"q4_k_s", 14, GgmlType::Q4_K, "Q4_K; attn_qkv of the first 4 layers and ffn_down of the first 1/8 Q5_K"},
    {"q4_k_m", 15, GgmlType::Q4_K, "Q4_K; attn_qkv and ffn_down Q6_K in the 'more bits' layers"},
    {"q5_k_s", 16, GgmlType::Q5_K, "every matrix Q5_K, the head Q6_K"},
    {"q5_k_m", 17, GgmlType::Q5_K, "Q5_K; attn_qkv and ffn_down Q6_K in the 'more bits' layers"},
    {"q6_k", 18, GgmlType::Q6_K, "every matrix Q6_K"},
    {"auto", 1024, GgmlType::F16, "the checkpoint's 16-bit type (F16 for an F32 checkpoint)"},
};

// "blk.N." -> N, else -1 (llama's sscanf(name, "blk.%d.")).
int block_of(const std::string& name) {
  int layer = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

// ---- llama-quantize's type choice (src/llama-quant.cpp), for the presets minigpt offers ----

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

// tensor_allows_quantization, the parts that can apply to the files minigpt writes.
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

std::string preset_names() {
  // In the order the README and --help list them.
  static const GgufPreset order[] = {
      GgufPreset::Q8_0,   GgufPreset::Q4_0,   GgufPreset::Q4_1,   GgufPreset::Q5_0,   GgufPreset::Q5_1,
      GgufPreset::Q2_K,   GgufPreset::Q3_K_S, GgufPreset::Q3_K_M, GgufPreset::Q3_K_L, GgufPreset::Q4_K_S,
      GgufPreset::Q4_K_M, GgufPreset::Q5_K_S, GgufPreset::Q5_K_M, GgufPreset::Q6_K,   GgufPreset::F16,
      GgufPreset::BF16,   GgufPreset::F32};
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

std::vector<TypeChoice> choose_types(GgufPreset p, const std::vector<TensorSpec>& tensors,
                                     const QuantModel& model, const TypeOverrides& ov) {
  const int64_t n_layer = model.n_layer;
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
      throw Error(ErrorKind::Argument, "tensor_types '" + name + "': not a regular expression (" +
                                           reinterpret_cast<const char*>(msg) + " at offset " +
                                           std::to_string(at) + ")");
    }
    patterns.push_back({{code, &pcre2_code_free}, type});
  }
  auto found = [](const Pattern& p, const std::string& s) {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
        pcre2_match_data_create_from_pattern(p.code.get(), nullptr), &pcre2_match_data_free);
    if (!data) throw Error(ErrorKind::Io, "tensor_types: out of memory");
    const int rc = pcre2_match(p.code.get(), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0,
                               data.get(), nullptr);
    if (rc >= 0) return true;
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    throw Error(ErrorKind::Argument,
                "tensor_types: matching '" + s + "' failed: " + reinterpret_cast<const char*>(msg));
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
      if (p == GgufPreset::Q2_K) {
        type = model.n_gqa >= 4 ? GgmlType::Q4_K : GgmlType::Q3_K;
      } else if (p == GgufPreset::Q3_K_M) {
        type = i_attention_wv < 2 ? GgmlType::Q5_K : GgmlType::Q4_K;
      } else if (p == GgufPreset::Q3_K_L) {
        type = GgmlType::Q5_K;
      } else if ((p == GgufPreset::Q4_K_M || p == GgufPreset::Q5_K_M) &&
                 use_more_bits(i_attention_wv, n_attention_wv)) {
        type = GgmlType::Q6_K;
      } else if (p == GgufPreset::Q4_K_S && i_attention_wv < 4) {
        type = GgmlType::Q5_K;
      }
      // A 70B Llama shares each attn_v among 8 query heads: a few more bits cost little there.
      if (model.is_70b && (type == GgmlType::Q3_K || type == GgmlType::Q4_K)) type = GgmlType::Q5_K;
      ++i_attention_wv;
    } else if (c == Category::FfnDown) {
      const int i_layer = i_ffn_down, n = n_ffn_down;
      if (p == GgufPreset::Q2_K) {
        type = GgmlType::Q3_K;
      } else if (p == GgufPreset::Q3_K_M) {
        type = i_layer < n / 16 ? GgmlType::Q5_K : GgmlType::Q4_K;
      } else if (p == GgufPreset::Q3_K_L) {
        type = GgmlType::Q5_K;
      } else if (p == GgufPreset::Q4_K_M) {
        if (use_more_bits(i_layer, n)) type = GgmlType::Q6_K;
      } else if (p == GgufPreset::Q5_K_M && use_more_bits(i_layer, n)) {
        type = GgmlType::Q6_K;
      } else if (p == GgufPreset::Q4_K_S && i_layer < n / 8) {
        type = GgmlType::Q5_K;
      }
      ++i_ffn_down;
    } else if (c == Category::AttnOutput) {
      if (p == GgufPreset::Q2_K) {
        type = GgmlType::Q3_K;
      } else if (p == GgufPreset::Q3_K_M) {
        type = GgmlType::Q4_K;
      } else if (p == GgufPreset::Q3_K_L) {
        type = GgmlType::Q5_K;
      }
    }
    // tensor_type_fallback: rows that are not whole blocks of the chosen type.
    std::string why;
    const int64_t ncols = t.ne[0];
    if (ncols % block_size(type) != 0) {
      GgmlType fallback = type;
      switch (type) {
        case GgmlType::Q2_K:
        case GgmlType::Q3_K:
          fallback = GgmlType::Q4_0;
          break;
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

}  // namespace minigpt
