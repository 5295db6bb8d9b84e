// An architecture is data: the tensors its checkpoints hold (names and aliases as they appear in files,
// shapes in terms of the config, the role each plays) and every format it is read from and written to,
// both ways: its config.json (parse, write), its GGUF metadata (the keys llama.cpp reads, the keys its
// converter writes, what it cannot express), its tensors' GGUF names, its published shapes. Loading,
// checking, random-weight models, the GGUF loader and the converter (src/convert/) all read this one
// description and name no family; the forward pass (session.cpp) reads only the Config and the roles.
//
// Adding an architecture: one file src/arch/<name>.cpp defining its Architecture, one line in the table
// of src/arch/arch.cpp, plus its tests and fixtures. For GGUF (reading and converting) it fills gguf_arch,
// parse_gguf, check_gguf_form, write_gguf and gguf_tensor_name; nothing outside src/arch/ changes.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/gguf.h"
#include "minigpt/block.h"
#include "minigpt/config.h"
#include "minigpt/tensor.h"

namespace minigpt::arch {

// What a tensor is for; the loader puts each role in its place of ModelWeights.
enum class Role {
  TokenEmbd,  // [V, C]
  PosEmbd,    // [S, C] learned positions
  AttnNorm,   // [C] per layer, and its bias AttnNormBias
  AttnNormBias,
  AttnQkv,  // C -> (H + 2 Hkv) D: q | k | v side by side
  AttnQkvBias,
  // Separate projections (OPT's q_proj, k_proj, v_proj): stacked into AttnQkv at load.
  AttnQ,
  AttnQBias,
  AttnK,
  AttnKBias,
  AttnV,
  AttnVBias,
  // Per-head RMSNorm weights of the queries and keys ([D], shared by the heads: Qwen3's q_norm, k_norm).
  AttnQNorm,
  AttnKNorm,
  AttnOut,  // H D -> C
  AttnOutBias,
  FfnNorm,
  FfnNormBias,
  // Gemma's sandwich norms ([C] per layer, Config::post_norms): of the attention's and the MLP's outputs.
  AttnPostNorm,
  FfnPostNorm,
  FfnUp,  // C -> F (a gated MLP's: C -> 2F, gate | up, when FfnGate is not apart)
  FfnUpBias,
  // A gated MLP's gate (Llama's gate_proj, C -> F) stored apart: stacked before FfnUp's rows at load.
  FfnGate,
  FfnGateBias,
  FfnDown,  // F -> C
  FfnDownBias,
  OutputNorm,
  OutputNormBias,
  Output,   // the LM head [V, E]; absent (or a copy of TokenEmbd) when tied
  ProjIn,   // E -> C after the embeddings, when the embedding width E differs from C (OPT-350m)
  ProjOut,  // C -> E before the head
  // llama.cpp's rope_freqs ([rotary_dim / 2] divisors of the rotary frequencies, Llama 3's rope_scaling as
  // its converter writes it): read into Config::rope_freq_factors with the metadata, not a weight.
  RopeFreqs,
  // llama.cpp's rope_factors_long and rope_factors_short (Phi-3's LongRoPE factors, [rotary_dim / 2] each):
  // read into Config::rope_scaling with the metadata, not weights.
  RopeFactorsLong,
  RopeFactorsShort,
  Ignored,  // buffers old checkpoints saved that are not weights (causal masks)
};
std::string_view role_name(Role r);
bool is_norm_weight(Role r);  // initialised around 1 in random models
// A tensor a family's parse_gguf reads into the Config (RopeFreqs, the LongRoPE factors): no weight.
bool read_with_metadata(Role r);

struct TensorDesc {
  Role role;
  int64_t layer = -1;                      // -1: not per layer
  std::vector<std::string> names;          // as checkpoints spell it; names[0] is the canonical (bare) one
  std::vector<int64_t> shape;              // as stored
  MatrixOrder order = MatrixOrder::OutIn;  // of a matrix as stored
  bool optional = false;                   // may be absent (Ignored buffers, a tied head's copy)
  // A fused AttnQkv (OutIn) or its bias stored head by head, each head's q, k and v rows together
  // ([qkv_heads][3][D], GPT-NeoX's query_key_value): reordered to q | k | v at load. 0: already q | k | v.
  int64_t qkv_heads = 0;
  // Added to every element at load: Gemma's RMSNorm multiplies by (1 + w), stored as w in its checkpoints
  // (llama.cpp's converter writes 1 + w, so its GGUF files need none).
  float shift = 0.0f;
};

// GGUF metadata as written: key, value, in file order.
using GgufKv = std::vector<std::pair<std::string, GgufValue>>;

// A model size as its family published it (the hub's "gpt2-medium"): what a random model of that name has.
struct PublishedShape {
  const char* name;
  int64_t n_layer, n_head, n_embd, n_inner;
  int64_t n_vocab, n_ctx;
  int64_t bos_token_id, eos_token_id;
};

struct Architecture {
  const char* model_type;    // Hugging Face model_type
  const char* hf_class;      // the transformers class
  const char* display_name;  // for messages
  // Fills `c` from a config.json object (c.arch is set already); errors name `source`.
  void (*parse)(const nlohmann::json& j, const std::string& source, Config& c);
  // The config.json transformers would write.
  nlohmann::json (*to_json)(const Config& c);
  // Every tensor of a model of this config, in file order.
  std::vector<TensorDesc> (*tensors)(const Config& c);

  // ---- GGUF (llama.cpp's files); all null / empty when llama.cpp has no such architecture (OPT) ----
  // llama.cpp's name of the architecture (general.architecture, the prefix of its GGUF keys).
  const char* gguf_arch = "";
  // Fills `c` from a GGUF file's metadata (c.arch is set already; n_vocab and tie_word_embeddings come from
  // the tensors, set by the caller).
  void (*parse_gguf)(const GgufFile& f, Config& c) = nullptr;
  // Throws Error(Unsupported), naming `source` (config.json), when this config is a variant the family's
  // GGUF keys cannot express, so that the converter refuses it before writing anything.
  void (*check_gguf_form)(const Config& c, const std::string& source) = nullptr;
  // Appends the family's keys as convert_hf_to_gguf.py's set_gguf_parameters writes them, in its order
  // (general.file_type included where it writes one). `j` is config.json as read (a converter may read a
  // field the Config does not keep); errors name `source`.
  void (*write_gguf)(const Config& c, const nlohmann::json& j, const std::string& source,
                     GgufKv& kv) = nullptr;
  // The GGUF name of a tensor (HF -> GGUF through tensors()' roles; GGUF -> role the same map read back).
  std::string (*gguf_tensor_name)(Role role, int64_t layer) = nullptr;
  // The converter permutes the rows of q and k (and their biases) head by head so that rotary pairs are
  // adjacent (convert_hf_to_gguf.py's LlamaModel.permute): row 2i + j of a head becomes row j D / 2 + i.
  bool gguf_permutes_qk = false;
  // Tensors the converter generates rather than converts (Llama 3's rope_freqs.weight), as name and values,
  // written before the converted ones; null: none.
  std::vector<std::pair<std::string, std::vector<float>>> (*gguf_extra_tensors)(const Config& c) = nullptr;

  // ---- other formats and names ----
  // llm.c's checkpoints (train_gpt2.c's) hold a model of this family.
  bool llmc = false;
  // The published sizes, for random models by name; empty when none.
  std::span<const PublishedShape> shapes = {};

  bool has_gguf() const { return parse_gguf != nullptr; }
};

// The default architecture of a Config (minigpt::default_arch(), config.h): the table's first.
const Architecture& default_architecture();
// nullptr for an unknown model_type.
const Architecture* find(std::string_view model_type);
// The architecture of a GGUF general.architecture; nullptr when unknown.
const Architecture* find_gguf(std::string_view gguf_arch);
// The architecture llm.c's checkpoints hold.
const Architecture& llmc_architecture();
// "gpt2, ..." as GGUF names them, for messages.
std::string known_gguf_archs();
// The same as a phrase: "a, b and c".
std::string known_gguf_archs_phrase();
// The model_types the converter can write as GGUF (write_gguf set), as a phrase: "a, b and c".
std::string gguf_writable_model_types();
// "gpt2, ..." for messages.
std::string known_model_types();

// The config of a published shape (any architecture's), or nullopt for a name none published.
std::optional<Config> published_shape(std::string_view name);
// Every published shape's name, "a, b, c", for messages.
std::string published_shape_names();

// Reading a llama.cpp file's metadata as its RMSNorm families (llama, qwen, gemma, phi3, smollm3) share it:
// `ga.context_length`, `embedding_length`, `feed_forward_length`, `block_count`, `attention.head_count`
// (Error(Format) naming the key when one is missing) and `attention.head_count_kv` (head_count when absent).
void read_gguf_sizes(const GgufFile& f, const std::string& ga, Config& c);
// `ga.attention.layer_norm_rms_epsilon`: Error(Format) when missing, Error(Config) outside (0, 1).
float read_gguf_rms_eps(const GgufFile& f, const std::string& ga);

// A GGUF u32 key `prefix.key` appended to `kv`; Error(Config) naming `source` when `v` does not fit.
void put_gguf_u32(GgufKv& kv, const std::string& prefix, const std::string& key, int64_t v,
                  const std::string& source);

// llama.cpp's GGUF name of a role ("token_embd.weight", "blk.3.attn_qkv.bias"): gguf-py's TENSOR_NAMES,
// which every llama.cpp architecture shares (an Architecture's gguf_tensor_name is this one, or its own);
// empty for Ignored and for a role llama.cpp has no name for.
std::string gguf_name(Role role, int64_t layer);

}  // namespace minigpt::arch
