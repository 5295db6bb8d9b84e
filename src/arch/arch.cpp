// The table of architectures, and what is common to all of them.
#include "arch/arch.h"

#include <array>

#include "formats/gguf_writer.h"
#include "minigpt/error.h"

namespace minigpt {

const char* default_arch() { return arch::default_architecture().model_type; }

}  // namespace minigpt

namespace minigpt::arch {

extern const Architecture kGpt2;
extern const Architecture kGptNeox;
extern const Architecture kOpt;
extern const Architecture kGptBigcode;
extern const Architecture kLlama;
extern const Architecture kMistral;
extern const Architecture kQwen2;
extern const Architecture kQwen3;
extern const Architecture kGemma3;
extern const Architecture kGemma2;
extern const Architecture kSmolLM3;
extern const Architecture kPhi3;

namespace {
// Every architecture minigpt knows. Adding one: its file in src/arch/ and a line here.
const std::array<const Architecture*, 12> kArchitectures = {&kGpt2,   &kGptNeox, &kOpt,     &kGptBigcode,
                                                            &kLlama,  &kMistral, &kQwen2,   &kQwen3,
                                                            &kGemma3, &kGemma2,  &kSmolLM3, &kPhi3};
}  // namespace

const Architecture& default_architecture() { return *kArchitectures.front(); }

const Architecture* find_gguf(std::string_view gguf_arch) {
  for (const Architecture* a : kArchitectures)
    if (a->has_gguf() && gguf_arch == a->gguf_arch) return a;
  return nullptr;
}

const Architecture& llmc_architecture() {
  for (const Architecture* a : kArchitectures)
    if (a->llmc) return *a;
  throw Error(ErrorKind::Unsupported, "llm.c files: no architecture of this build holds them");
}

namespace {
// "a, b and c"
std::string phrase(const std::vector<std::string>& words) {
  std::string s;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) s += i + 1 == words.size() ? " and " : ", ";
    s += words[i];
  }
  return s;
}
}  // namespace

std::string known_gguf_archs() {
  std::string s;
  for (const Architecture* a : kArchitectures)
    if (a->has_gguf()) s += (s.empty() ? "" : ", ") + std::string(a->gguf_arch);
  return s;
}

std::string known_gguf_archs_phrase() {
  std::vector<std::string> names;
  for (const Architecture* a : kArchitectures)
    if (a->has_gguf()) names.emplace_back(a->gguf_arch);
  return phrase(names);
}

std::string gguf_writable_model_types() {
  std::vector<std::string> names;
  for (const Architecture* a : kArchitectures)
    if (a->write_gguf != nullptr) names.emplace_back(a->model_type);
  return phrase(names);
}

const Architecture* find(std::string_view model_type) {
  for (const Architecture* a : kArchitectures) {
    if (model_type == a->model_type) return a;
  }
  return nullptr;
}

std::string known_model_types() {
  std::string s;
  for (const Architecture* a : kArchitectures)
    s += (s.empty() ? "\"" : ", \"") + std::string(a->model_type) + "\"";
  return s;
}

std::optional<Config> published_shape(std::string_view name) {
  for (const Architecture* a : kArchitectures) {
    for (const PublishedShape& p : a->shapes) {
      if (name != p.name) continue;
      Config c;
      c.arch = a->model_type;
      c.n_layer = p.n_layer, c.n_head = p.n_head, c.n_embd = p.n_embd, c.n_inner = p.n_inner;
      c.n_vocab = p.n_vocab, c.n_ctx = p.n_ctx;
      c.bos_token_id = p.bos_token_id, c.eos_token_id = p.eos_token_id;
      return c;
    }
  }
  return std::nullopt;
}

std::string published_shape_names() {
  std::string s;
  for (const Architecture* a : kArchitectures)
    for (const PublishedShape& p : a->shapes) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

void put_gguf_u32(GgufKv& kv, const std::string& prefix, const std::string& key, int64_t v,
                  const std::string& source) {
  if (v < 0 || v > int64_t(UINT32_MAX)) throw Error(ErrorKind::Config, source + ": " + key + " out of range");
  kv.emplace_back(prefix + "." + key, gguf_u32(uint32_t(v)));
}

void read_gguf_sizes(const GgufFile& f, const std::string& ga, Config& c) {
  auto need = [&](const std::string& key) {
    const auto x = f.get_int(ga + "." + key);
    if (!x) throw Error(ErrorKind::Format, f.path() + ": missing metadata '" + ga + "." + key + "'");
    return *x;
  };
  c.n_ctx = need("context_length");
  c.n_embd = need("embedding_length");
  c.n_inner = need("feed_forward_length");
  c.n_layer = need("block_count");
  c.n_head = need("attention.head_count");
  c.n_kv_head = f.get_int(ga + ".attention.head_count_kv").value_or(c.n_head);
}

float read_gguf_rms_eps(const GgufFile& f, const std::string& ga) {
  const auto eps = f.get_float(ga + ".attention.layer_norm_rms_epsilon");
  if (!eps) {
    throw Error(ErrorKind::Format,
                f.path() + ": missing metadata '" + ga + ".attention.layer_norm_rms_epsilon'");
  }
  if (!(*eps > 0 && *eps < 1)) {
    throw Error(ErrorKind::Config, f.path() + ": " + ga + ".attention.layer_norm_rms_epsilon " +
                                       std::to_string(*eps) + " is outside (0, 1)");
  }
  return float(*eps);
}

std::string_view role_name(Role r) {
  switch (r) {
    case Role::TokenEmbd:
      return "token_embd";
    case Role::PosEmbd:
      return "position_embd";
    case Role::AttnNorm:
      return "attn_norm";
    case Role::AttnNormBias:
      return "attn_norm_bias";
    case Role::AttnQkv:
      return "attn_qkv";
    case Role::AttnQkvBias:
      return "attn_qkv_bias";
    case Role::AttnOut:
      return "attn_output";
    case Role::AttnOutBias:
      return "attn_output_bias";
    case Role::FfnNorm:
      return "ffn_norm";
    case Role::FfnNormBias:
      return "ffn_norm_bias";
    case Role::AttnPostNorm:
      return "post_attention_norm";
    case Role::FfnPostNorm:
      return "post_ffw_norm";
    case Role::FfnUp:
      return "ffn_up";
    case Role::FfnUpBias:
      return "ffn_up_bias";
    case Role::FfnDown:
      return "ffn_down";
    case Role::FfnDownBias:
      return "ffn_down_bias";
    case Role::OutputNorm:
      return "output_norm";
    case Role::OutputNormBias:
      return "output_norm_bias";
    case Role::Output:
      return "output";
    case Role::AttnQ:
      return "attn_q";
    case Role::AttnQBias:
      return "attn_q_bias";
    case Role::AttnK:
      return "attn_k";
    case Role::AttnKBias:
      return "attn_k_bias";
    case Role::AttnV:
      return "attn_v";
    case Role::AttnVBias:
      return "attn_v_bias";
    case Role::AttnQNorm:
      return "attn_q_norm";
    case Role::AttnKNorm:
      return "attn_k_norm";
    case Role::FfnGate:
      return "ffn_gate";
    case Role::FfnGateBias:
      return "ffn_gate_bias";
    case Role::RopeFreqs:
      return "rope_freqs";
    case Role::RopeFactorsLong:
      return "rope_factors_long";
    case Role::RopeFactorsShort:
      return "rope_factors_short";
    case Role::ProjIn:
      return "project_in";
    case Role::ProjOut:
      return "project_out";
    case Role::Ignored:
      return "ignored";
  }
  return "?";
}

bool is_norm_weight(Role r) {
  return r == Role::AttnNorm || r == Role::FfnNorm || r == Role::OutputNorm || r == Role::AttnQNorm ||
         r == Role::AttnKNorm || r == Role::AttnPostNorm || r == Role::FfnPostNorm;
}

bool read_with_metadata(Role r) {
  return r == Role::RopeFreqs || r == Role::RopeFactorsLong || r == Role::RopeFactorsShort;
}

std::string gguf_name(Role role, int64_t layer) {
  // llama.cpp's names (gguf-py's constants.py, MODEL_TENSOR): weights end in .weight, biases in .bias.
  const std::string blk = "blk." + std::to_string(layer) + ".";
  switch (role) {
    case Role::TokenEmbd:
      return "token_embd.weight";
    case Role::PosEmbd:
      return "position_embd.weight";
    case Role::AttnNorm:
      return blk + "attn_norm.weight";
    case Role::AttnNormBias:
      return blk + "attn_norm.bias";
    case Role::AttnQkv:
      return blk + "attn_qkv.weight";
    case Role::AttnQkvBias:
      return blk + "attn_qkv.bias";
    case Role::AttnOut:
      return blk + "attn_output.weight";
    case Role::AttnOutBias:
      return blk + "attn_output.bias";
    case Role::FfnNorm:
      return blk + "ffn_norm.weight";
    case Role::FfnNormBias:
      return blk + "ffn_norm.bias";
    case Role::AttnPostNorm:
      return blk + "post_attention_norm.weight";
    case Role::FfnPostNorm:
      return blk + "post_ffw_norm.weight";
    case Role::FfnUp:
      return blk + "ffn_up.weight";
    case Role::FfnUpBias:
      return blk + "ffn_up.bias";
    case Role::FfnDown:
      return blk + "ffn_down.weight";
    case Role::FfnDownBias:
      return blk + "ffn_down.bias";
    case Role::OutputNorm:
      return "output_norm.weight";
    case Role::OutputNormBias:
      return "output_norm.bias";
    case Role::Output:
      return "output.weight";
    case Role::AttnQ:
      return blk + "attn_q.weight";
    case Role::AttnQBias:
      return blk + "attn_q.bias";
    case Role::AttnK:
      return blk + "attn_k.weight";
    case Role::AttnKBias:
      return blk + "attn_k.bias";
    case Role::AttnV:
      return blk + "attn_v.weight";
    case Role::AttnVBias:
      return blk + "attn_v.bias";
    case Role::AttnQNorm:
      return blk + "attn_q_norm.weight";
    case Role::AttnKNorm:
      return blk + "attn_k_norm.weight";
    case Role::FfnGate:
      return blk + "ffn_gate.weight";
    case Role::FfnGateBias:
      return blk + "ffn_gate.bias";
    case Role::RopeFreqs:
      return "rope_freqs.weight";
    case Role::RopeFactorsLong:
      return "rope_factors_long.weight";
    case Role::RopeFactorsShort:
      return "rope_factors_short.weight";
    case Role::ProjIn:
    case Role::ProjOut:
    case Role::Ignored:
      return "";
  }
  return "";
}

}  // namespace minigpt::arch
