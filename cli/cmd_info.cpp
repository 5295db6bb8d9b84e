// minigpt info -m DIR: what a model directory holds (config.json and the weight files' headers only: no
// weight is read). minigpt info --system: what this build and this machine offer (CPU, kernels, BLAS,
// backends and their devices). Either or both; --json for a JSON object with "system" and/or "model".
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "command.h"
#include "common.h"
#include "cpu/cpu.h"
#include "minigpt/error.h"
#include "minigpt/generation_config.h"
#include "minigpt/model.h"
#include "minigpt/registry.h"
#include "minigpt/tokenizer.h"

namespace minigpt::cli {
namespace {

using nlohmann::json;

struct InfoOptions {
  std::string model_dir;
  std::string tokenizer;
  bool system = false;
  bool json = false;
};

const char* positions_name(PositionEncoding p) {
  switch (p) {
    case PositionEncoding::Learned:
      return "learned";
    case PositionEncoding::Sinusoidal:
      return "sinusoidal";
    case PositionEncoding::Rotary:
      return "rotary";
  }
  return "?";
}

std::string join(const std::vector<std::string>& v, const char* sep = " ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// --- the model --------------------------------------------------------------------------------

struct TokenizerSummary {
  bool present = false;
  int n_vocab = 0;
  bool char_level = false;  // a nanoGPT character model's (convert_nanogpt.py --meta)
  bool sentencepiece = false;
  std::optional<int32_t> eos;  // the first id that ends generation (generate's rule), if any
  std::string eos_text;        // the eos token as the vocabulary spells it ("<|im_end|>", "<eos>")
  std::shared_ptr<const Tokenizer> tokenizer;  // names the special tokens info prints
  bool chat_template = false;       // the model carries one (chat and serve's chat endpoint use it)
  std::string chat_template_from;   // where: ChatTemplate::from()
  std::string chat_template_error;  // why it does not load (chat refuses it with this)
  std::string error;                // why there is no tokenizer

  // `id` as the vocabulary spells it ("<|im_end|>"; for a line of text, a control character as \n or \xNN,
  // so that it stays on its line), or "" without a tokenizer or for an id past it.
  std::string name(int64_t id, bool escaped = true) const {
    if (!tokenizer || id < 0 || id >= tokenizer->n_vocab()) return "";
    if (!escaped) return tokenizer->token_symbol(int32_t(id));
    std::string out;
    for (const unsigned char ch : tokenizer->token_symbol(int32_t(id))) {
      if (ch == '\n') {
        out += "\\n";
      } else if (ch < 0x20 || ch == 0x7f) {
        char b[8];
        std::snprintf(b, sizeof b, "\\x%02x", ch);
        out += b;
      } else {
        out += char(ch);
      }
    }
    return out;
  }
};

// The ids that end generation, as generate() takes them: generation_config.json's eos_token_id, else
// config.json's, else the tokenizer's (its file's eos, or <|endoftext|>); ids past the vocabulary never come.
std::vector<int64_t> ending_ids(const Config& c, const GenerationDefaults& gd, const Tokenizer& tok) {
  std::vector<int64_t> ids = !gd.eos_token_ids.empty()  ? gd.eos_token_ids
                             : !c.eos_token_ids.empty() ? c.eos_token_ids
                                                        : std::vector<int64_t>{c.eos_token_id};
  std::erase_if(ids, [&](int64_t id) { return id < 0 || id >= c.n_vocab; });
  if (ids.empty() && tok.eos_id()) ids.push_back(*tok.eos_id());
  return ids;
}

TokenizerSummary tokenizer_summary(const std::string& tokenizer, const ModelSource& dir, const Config& c,
                                   const GenerationDefaults& gd) {
  TokenizerSummary t;
  try {
    auto tok = std::make_shared<const Tokenizer>(load_tokenizer(tokenizer, dir));
    t.tokenizer = tok;
    t.present = true;
    t.n_vocab = tok->n_vocab();
    t.char_level = tok->char_level();
    t.sentencepiece = tok->sentencepiece();
    // The model's eos, not the tokenizer's guess: a ChatML model's config names <|im_end|> where its
    // tokenizer.json alone would give <|endoftext|>.
    for (const int64_t id : ending_ids(c, gd, *tok)) {
      if (id < tok->n_vocab()) {
        t.eos = int32_t(id);
        t.eos_text = t.name(id, false);
        break;
      }
    }
    try {
      const auto tmpl = load_chat_template(dir, *tok);
      t.chat_template = tmpl.has_value();
      if (tmpl) t.chat_template_from = tmpl->from();
    } catch (const Error& e) {  // a malformed template: chat refuses it with this message
      t.chat_template = true;
      t.chat_template_error = e.what();
    }
  } catch (const Error& e) {
    t.error = e.what();
  }
  return t;
}

// 8 x the bytes of every weight as stored / the number of weights: 32 for F32, 8.5 for Q8_0.
double bits_per_weight(const ModelSummary& s) {
  double bytes = 0;
  for (const auto& [dtype, n] : s.stored_bytes) bytes += double(n);
  return s.n_params > 0 ? 8 * bytes / double(s.n_params) : 0.0;
}

// The model's layers grouped by what their attention sees and how they rotate (Gemma's local and global
// layers, SmolLM3's layers without positions): each kind's count and F32 KV bytes per token.
struct LayerKind {
  std::string name, what;
  int64_t count = 0;
  int64_t kv_bytes_per_token = 0;
};
std::vector<LayerKind> layer_kinds(const Config& c, const BlockDesc& b) {
  std::vector<LayerKind> kinds;
  for (const LayerDesc& l : b.layers) {
    std::string name = "global", what;
    if (l.window > 0) {
      name = "local";
      what = ", window " + std::to_string(l.window);
    }
    if (l.rope_table >= 0) {
      // The table's base: inverse frequency 1 is base^(-2 / rotary_dim).
      const std::vector<float>& inv = b.rope_tables[size_t(l.rope_table)];
      char r[64];
      std::snprintf(r, sizeof r, ", rotary base %.4g",
                    inv.size() > 1 ? std::pow(double(inv[1]), -double(l.rotary_dim) / 2.0) : 0.0);
      what += r;
    } else if (c.position_encoding == PositionEncoding::Rotary) {
      name = "no-rope";
      what += ", no rotary positions";
    }
    auto it = std::find_if(kinds.begin(), kinds.end(),
                           [&](const LayerKind& k) { return k.name == name && k.what == what; });
    if (it == kinds.end()) {
      kinds.push_back({name, what, 0, 0});
      it = kinds.end() - 1;
    }
    ++it->count;
    it->kv_bytes_per_token += 2 * l.n_kv_head * l.head_dim * int64_t(sizeof(float));
  }
  return kinds;
}

// Bytes one position of one sequence takes in the CPU backend's KV cache (F32 keys and values of every
// layer's KV heads; `bench` reports the backend's own, which may hold 16-bit values on CUDA).
int64_t kv_bytes_per_token(const Config& c) { return 2 * c.n_layer * c.kv_dim() * int64_t(sizeof(float)); }

json model_json(const std::string& dir, const ModelSummary& s, const TokenizerSummary& tok,
                const GenerationDefaults& gd) {
  const Config& c = s.config;
  json j;
  j["dir"] = dir;
  j["arch"] = c.arch;
  j["n_layer"] = c.n_layer;
  j["n_head"] = c.n_head;
  j["n_kv_head"] = c.kv_heads();
  j["kv_bytes_per_token"] = kv_bytes_per_token(c);
  json kinds = json::array();
  for (const LayerKind& k : layer_kinds(c, describe_block(c)))
    kinds.push_back({{"kind", k.name},
                     {"layers", k.count},
                     {"kv_bytes_per_token", k.kv_bytes_per_token},
                     {"what", k.what.size() > 2 ? k.what.substr(2) : k.what}});
  j["layer_kinds"] = kinds;
  j["n_embd"] = c.n_embd;
  j["n_inner"] = c.n_inner;
  j["n_ctx"] = c.n_ctx;
  j["n_vocab"] = c.n_vocab;
  j["activation"] = c.activation_name;
  j["positions"] = positions_name(c.position_encoding);
  if (c.position_encoding == PositionEncoding::Rotary) {
    j["rotary_dim"] = c.rotary_dim;
    j["rope_theta"] = c.rope_theta;
    j["rope_layout"] = c.rope_layout == RopeLayout::AdjacentPairs ? "adjacent" : "halves";
    const RopeScaling& r = c.rope_scaling;
    if (r.kind == RopeScalingKind::Linear) j["rope_scaling"] = {{"type", "linear"}, {"factor", r.factor}};
    if (r.kind == RopeScalingKind::Llama3) {
      j["rope_scaling"] = {{"type", "llama3"},
                           {"factor", r.factor},
                           {"low_freq_factor", r.low_freq_factor},
                           {"high_freq_factor", r.high_freq_factor},
                           {"original_max_position_embeddings", r.original_context}};
    }
    if (r.kind == RopeScalingKind::LongRope) {
      j["rope_scaling"] = {{"type", "longrope"},
                           {"short_factor", r.short_factor},
                           {"long_factor", r.long_factor},
                           {"attention_factor", r.attention_factor},
                           {"original_max_position_embeddings", r.original_context}};
    }
  }
  j["head_dim"] = c.head_dim();
  j["norm"] = c.norm == NormKind::Rms ? "rms" : "layer";
  j["mlp"] = c.ffn == FfnKind::Gated ? "gated" : "plain";
  j["qk_norm"] = c.qk_norm;
  j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
  j["residual"] = c.parallel_residual ? "parallel" : "sequential";
  j["layer_norm"] = c.pre_norm ? "pre" : "post";
  j["final_norm"] = c.output_norm;
  j["embedding_width"] = c.embd_io();
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["n_params"] = s.n_params;
  json bytes = json::object();
  for (const auto& [dtype, n] : s.stored_bytes) bytes[dtype] = n;
  j["stored_bytes"] = bytes;
  j["bits_per_weight"] = bits_per_weight(s);
  if (!s.file_type.empty()) j["file_type"] = s.file_type;
  if (s.llmc) {
    j["llmc"] = {{"version", s.llmc->version},
                 {"dtype", s.llmc->version == 5 ? "BF16" : "F32"},
                 {"n_vocab", s.llmc->n_vocab},
                 {"n_vocab_padded", s.llmc->n_vocab_padded}};
  }
  if (s.llama2c) {
    j["llama2c"] = {{"version", s.llama2c->version},
                    {"dtype", s.llama2c->version == 2 ? "Q8_0 groups" : "F32"},
                    {"shared_classifier", s.llama2c->shared_classifier}};
    if (s.llama2c->version == 2) j["llama2c"]["group_size"] = s.llama2c->group_size;
  }
  j["files"] = s.files;
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_id"] = c.eos_token_id;
  if (const std::string b = tok.name(c.bos_token_id, false); !b.empty()) j["bos_token"] = b;
  if (const std::string e = tok.name(c.eos_token_id, false); !e.empty()) j["eos_token"] = e;
  if (c.eos_token_ids.size() > 1) j["eos_token_ids"] = c.eos_token_ids;
  if (!gd.empty() || !gd.unusable.empty()) {
    json g = {{"source", gd.source}};
    if (gd.temperature) g["temperature"] = *gd.temperature;
    if (gd.top_k) g["top_k"] = *gd.top_k;
    if (gd.top_p) g["top_p"] = *gd.top_p;
    if (gd.min_p) g["min_p"] = *gd.min_p;
    if (gd.repetition_penalty) g["repetition_penalty"] = *gd.repetition_penalty;
    if (!gd.eos_token_ids.empty()) g["eos_token_ids"] = gd.eos_token_ids;
    json unusable = json::array();
    for (const auto& [name, message] : gd.unusable) unusable.push_back(message);
    if (!unusable.empty()) g["unusable"] = unusable;
    j["generation_defaults"] = g;
  }
  if (tok.present) {
    j["tokenizer"] = {{"n_vocab", tok.n_vocab},
                      {"kind", tok.char_level ? "character-level BPE" : "byte-level BPE"},
                      {"eos_id", tok.eos ? json(*tok.eos) : json(nullptr)},
                      {"eos_token", tok.eos ? json(tok.eos_text) : json(nullptr)},
                      {"kind", tok.char_level      ? "char-bpe"
                               : tok.sentencepiece ? "sentencepiece-bpe"
                                                   : "byte-level-bpe"},
                      {"chat_template", tok.chat_template},
                      {"chat_template_source",
                       tok.chat_template_from.empty() ? json(nullptr) : json(tok.chat_template_from)}};
    if (!tok.chat_template_error.empty()) j["tokenizer"]["chat_template_error"] = tok.chat_template_error;
  } else {
    j["tokenizer"] = nullptr;
    j["tokenizer_error"] = tok.error;
  }
  return j;
}

void print_model(const std::string& dir, const ModelSummary& s, const TokenizerSummary& tok,
                 const GenerationDefaults& gd) {
  const Config& c = s.config;
  std::printf("model:        %s\n", dir.c_str());
  std::printf("architecture: %s (%lld layers, %lld heads, n_embd %lld, n_inner %lld)\n", c.arch.c_str(),
              (long long)c.n_layer, (long long)c.n_head, (long long)c.n_embd, (long long)c.n_inner);
  const int64_t kv = c.kv_heads();
  std::printf("kv heads:     %lld (%s)\n", (long long)kv,
              kv == c.n_head ? "multi-head"
              : kv == 1      ? "multi-query"
                             : "grouped-query");
  std::printf("kv cache:     %lld bytes per token (2 x %lld layers x %lld x %lld dims x F32)\n",
              (long long)kv_bytes_per_token(c), (long long)c.n_layer, (long long)kv, (long long)c.head_dim());
  // The layers by kind (window, rotary base): what each kind's cache holds per token.
  const BlockDesc b = describe_block(c);
  for (const LayerKind& k : layer_kinds(c, b)) {
    std::printf("  %-11s %lld layer%s, %lld bytes per token%s\n", (k.name + ":").c_str(), (long long)k.count,
                k.count == 1 ? "" : "s", (long long)k.kv_bytes_per_token, k.what.c_str());
  }
  std::printf("context:      %lld tokens\n", (long long)c.n_ctx);
  std::printf("vocabulary:   %lld tokens\n", (long long)c.n_vocab);
  std::printf("activation:   %s\n", c.activation_name.c_str());
  std::printf("norm:         %s\n", c.norm == NormKind::Rms ? "RMSNorm" : "LayerNorm");
  std::printf("mlp:          %s\n",
              c.ffn == FfnKind::Gated ? "gated (down(act(gate) * up))" : "plain (down(act(up)))");
  if (c.qk_norm) std::printf("q/k norm:     RMSNorm of each query and key head before rotary\n");
  if (c.position_encoding == PositionEncoding::Rotary) {
    std::printf("positions:    rotary (%lld of %lld head dims, theta %g, %s)\n", (long long)c.rotary_dim,
                (long long)c.head_dim(), double(c.rope_theta),
                c.rope_layout == RopeLayout::AdjacentPairs ? "adjacent pairs" : "halves (rotate_half)");
    if (c.rope_scaling.kind == RopeScalingKind::Linear) {
      std::printf("rope scaling: linear, factor %g\n", double(c.rope_scaling.factor));
    } else if (c.rope_scaling.kind == RopeScalingKind::Llama3) {
      std::printf("rope scaling: llama3, factor %g, low/high freq factors %g/%g, original context %lld\n",
                  double(c.rope_scaling.factor), double(c.rope_scaling.low_freq_factor),
                  double(c.rope_scaling.high_freq_factor), (long long)c.rope_scaling.original_context);
    } else if (c.rope_scaling.kind == RopeScalingKind::LongRope) {
      std::printf(
          "rope scaling: longrope, short factors up to a context of %lld, long factors beyond; cos and sin "
          "times %g\n",
          (long long)c.rope_scaling.original_context, double(c.rope_scaling.attention_factor));
    }
  } else {
    std::printf("positions:    %s\n", positions_name(c.position_encoding));
  }
  if (c.sliding_window > 0)
    std::printf("attention:    sliding window of %lld positions\n", (long long)c.sliding_window);
  std::printf("residual:     %s%s\n", c.parallel_residual ? "parallel" : "sequential",
              b.any_post_norms() ? ", each half's output normed before it is added (Gemma)" : "");
  if (b.embed_scale > 0) std::printf("embeddings:   times %g\n", double(b.embed_scale));
  if (b.any_softcap() || b.logit_softcap > 0) {
    std::printf("soft-caps:    scores %g, logits %g (cap * tanh(x / cap); 0: none)\n",
                double(b.layers.front().softcap), double(b.logit_softcap));
  }
  if (!c.pre_norm)
    std::printf("layer norms:  after each residual add (post-norm)%s\n",
                c.output_norm ? "" : ", none after the last block");
  if (c.projects_io())
    std::printf("embeddings:   %lld wide, projected to n_embd and back (project_in / project_out)\n",
                (long long)c.embd_io());
  std::printf("lm head:      %s\n", c.tie_word_embeddings ? "tied to wte" : "separate");
  std::printf("parameters:   %lld (%.1fM)\n", (long long)s.n_params, double(s.n_params) / 1e6);
  for (const auto& [dtype, bytes] : s.stored_bytes) {
    // MiB, as quantize reports sizes: one unit for bytes in every command.
    std::printf("weights %-5s %zu bytes (%.1f MiB)\n", (dtype + ":").c_str(), bytes,
                double(bytes) / (1024.0 * 1024.0));
  }
  if (!s.file_type.empty()) std::printf("file type:    %s (general.file_type)\n", s.file_type.c_str());
  if (s.llmc) {
    std::printf(
        "source:       llm.c checkpoint, version %d (%s parameters), V %lld (wte padded to Vp %lld rows)\n",
        int(s.llmc->version), s.llmc->version == 5 ? "BF16" : "F32", (long long)s.llmc->n_vocab,
        (long long)s.llmc->n_vocab_padded);
  }
  if (s.llama2c) {
    const std::string kind =
        s.llama2c->version == 0 ? "legacy, F32"
        : s.llama2c->version == 1
            ? "F32"
            : "Q8_0 groups of " + std::to_string(s.llama2c->group_size) + ", dequantized to F32 at load";
    std::printf("source:       llama2.c checkpoint, version %d (%s), %s classifier\n",
                int(s.llama2c->version), kind.c_str(), s.llama2c->shared_classifier ? "shared" : "unshared");
  }
  std::printf("bits/weight:  %.2f (every tensor as stored: matrices, embeddings, norms, biases)\n",
              bits_per_weight(s));
  std::printf("files:        %s\n", join(s.files, ", ").c_str());
  // Each id with its token as the vocabulary spells it: "2 <|im_end|>".
  const auto named = [&](int64_t id) {
    const std::string n = tok.name(id);
    return std::to_string(id) + (n.empty() ? "" : " " + n);
  };
  std::string eos = named(c.eos_token_id);
  if (c.eos_token_ids.size() > 1) {
    eos.clear();
    for (const int64_t id : c.eos_token_ids) eos += (eos.empty() ? "[" : ", ") + named(id);
    eos += "]";
  }
  std::printf("bos / eos:    %s / %s\n", named(c.bos_token_id).c_str(), eos.c_str());
  if (!gd.empty() || !gd.unusable.empty()) {
    std::string what = gd.describe();
    if (!gd.eos_token_ids.empty()) {
      std::string ids;
      for (const int64_t id : gd.eos_token_ids) ids += (ids.empty() ? "" : ", ") + named(id);
      what += (what.empty() ? "" : ", ") + std::string("eos_token_id ") +
              (gd.eos_token_ids.size() > 1 ? "[" + ids + "]" : ids);
    }
    if (!what.empty()) std::printf("generation:   %s (%s)\n", what.c_str(), gd.source.c_str());
    for (const auto& [name, message] : gd.unusable)
      std::printf("generation:   %s unusable (generate refuses it unless a flag gives it): %s\n",
                  name.c_str(), message.c_str());
  }
  if (tok.present) {
    std::printf("tokenizer:    %s, %d tokens%s\n",
                tok.char_level      ? "character-level BPE"
                : tok.sentencepiece ? "SentencePiece BPE"
                                    : "byte-level BPE",
                tok.n_vocab,
                tok.eos ? (", eos " + tok.name(*tok.eos) + " = " + std::to_string(*tok.eos)).c_str() : "");
    if (!tok.chat_template_error.empty()) {
      std::printf("chat template: does not load (chat refuses it): %s\n", tok.chat_template_error.c_str());
    } else if (tok.chat_template) {
      std::printf("chat template: %s (chat and serve use it)\n", tok.chat_template_from.c_str());
    } else {
      std::printf("chat template: none (chat and serve's chat endpoint need --chat-template FILE)\n");
    }
  } else {
    std::printf("tokenizer:    none (%s)\n", tok.error.c_str());
  }
}

// --- the system -------------------------------------------------------------------------------

struct BackendStatus {
  const BackendInfo* info;
  bool available;
  std::string why;
  std::vector<std::string> devices;
};

std::vector<BackendStatus> backend_statuses() {
  std::vector<BackendStatus> v;
  for (const BackendInfo& b : backends()) {
    BackendStatus s{&b, false, {}, {}};
    s.available = b.available(&s.why);
    if (s.available) s.devices = b.devices();
    v.push_back(std::move(s));
  }
  return v;
}

#ifdef MINIGPT_WITH_CUDA
constexpr bool kCudaBuilt = true;
#else
constexpr bool kCudaBuilt = false;
#endif

json system_json(const CpuInfo& cpu, const std::vector<BackendStatus>& bs) {
  json j;
  j["version"] = kVersion;
  j["cuda_module_built"] = kCudaBuilt;
  j["cpu"] = {{"model", cpu.model},       {"threads", cpu.cores},
              {"features", cpu.features}, {"kernel_level", cpu.kernel_level},
              {"levels", cpu.levels},     {"blas", cpu.blas},
              {"gemm", cpu.gemm},         {"bf16_math", cpu.bf16_math}};
  json list = json::array();
  for (const auto& b : bs) {
    json e = {{"name", b.info->name}, {"description", b.info->description}, {"available", b.available}};
    if (!b.available) e["why"] = b.why;
    e["devices"] = b.devices;
    list.push_back(std::move(e));
  }
  j["backends"] = list;
  return j;
}

void print_system(const CpuInfo& cpu, const std::vector<BackendStatus>& bs) {
  std::printf("minigpt:      %s\n", kVersion);
  std::printf("build:        %s\n",
              kCudaBuilt ? "with the CUDA backend module (libminigpt-cuda.so)" : "without CUDA");
  std::printf("cpu:          %s, %d CPU%s this process may run on\n", cpu.model.c_str(), cpu.cores,
              cpu.cores == 1 ? "" : "s");
  std::printf("cpu features: %s\n", cpu.features.empty() ? "(none the kernels use)" : cpu.features.c_str());
  std::printf("kernels:      %s (this binary has and this CPU runs: %s)\n", cpu.kernel_level.c_str(),
              join(cpu.levels).c_str());
  std::printf("blas:         %s\n", cpu.blas.c_str());
  std::printf("gemm:         %s (prefill of F32/F16/BF16 weights; MINIGPT_SGEMM=minigpt|openblas chooses)\n",
              cpu.gemm.c_str());
  std::printf("bf16 math:    %s (BF16 weights multiplied in %s; --bf16-math f32|bf16 chooses)\n",
              cpu.bf16_math.c_str(), cpu.bf16_math == "bf16" ? "BF16 arithmetic" : "F32, widened");
  std::printf("backends:\n");
  for (const auto& b : bs) {
    std::printf("  %-6s %-12s %s\n", b.info->name.c_str(), b.available ? "available" : "unavailable",
                b.info->description.c_str());
    if (!b.available) std::printf("         %s\n", b.why.c_str());
    for (const auto& d : b.devices) std::printf("         device %s\n", d.c_str());
  }
}

int run_info(InfoOptions o) {
  // Without -m or --system: the shipped model, as every command that takes -m runs it.
  if (o.model_dir.empty() && !o.system) o.model_dir = resolve_model_dir(ModelOptions{}).string();
  json out = json::object();
  if (o.system) {
    const CpuInfo cpu = cpu_info();
    const auto bs = backend_statuses();
    if (o.json) {
      out["system"] = system_json(cpu, bs);
    } else {
      print_system(cpu, bs);
      if (!o.model_dir.empty()) std::printf("\n");
    }
  }
  if (!o.model_dir.empty()) {
    const ModelSource source = ModelSource::open(o.model_dir);  // classified, a GGUF parsed, once
    const ModelSummary s = Model::inspect(source);              // headers only: no weight is read
    const GenerationDefaults gd = read_generation_defaults(source);
    const TokenizerSummary tok = tokenizer_summary(o.tokenizer, source, s.config, gd);
    if (o.json) {
      out["model"] = model_json(o.model_dir, s, tok, gd);
    } else {
      print_model(o.model_dir, s, tok, gd);
    }
  }
  if (o.json) write_stdout(out.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
  return 0;
}

const bool registered_info = register_command(
    "info",
    "Show a model's config, size and context length (-m), or what this build and machine offer (--system)",
    [](CLI::App& app) {
      auto o = std::make_shared<InfoOptions>();
      app.add_option("-m,--model", o->model_dir,
                     std::string(kModelHelp) + "; with --system, only when given");
      add_tokenizer_option(app, o->tokenizer);
      app.add_flag("--system", o->system,
                   "Show this build and machine: CPU, kernels, BLAS, backends and devices");
      app.add_flag("--json", o->json, "Print one JSON object (\"system\" and/or \"model\")");
      return [o] { return run_info(*o); };
    });

}  // namespace
}  // namespace minigpt::cli
