// An architecture is data: the tensors its checkpoints hold (names and aliases as they appear in files,
// shapes in terms of the config, the role each plays) and the parser of its config.json. Loading,
// checking, random-weight models and, later, the GGUF name map all read this one description; the
// forward pass (session.cpp) reads only the Config and the roles.
//
// Adding an architecture: one file src/arch/<name>.cpp defining its Architecture, one line in the table
// of src/arch/arch.cpp, plus its tests and fixtures.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "minigpt/config.h"
#include "minigpt/tensor.h"

namespace minigpt {
class GgufFile;
}

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
  AttnOut,  // H D -> C
  AttnOutBias,
  FfnNorm,
  FfnNormBias,
  FfnUp,  // C -> F
  FfnUpBias,
  FfnDown,  // F -> C
  FfnDownBias,
  OutputNorm,
  OutputNormBias,
  Output,   // the LM head [V, E]; absent (or a copy of TokenEmbd) when tied
  ProjIn,   // E -> C after the embeddings, when the embedding width E differs from C (OPT-350m)
  ProjOut,  // C -> E before the head
  Ignored,  // buffers old checkpoints saved that are not weights (causal masks)
};
std::string_view role_name(Role r);
bool is_matrix(Role r);
bool is_norm_weight(Role r);  // initialised around 1 in random models

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
};

struct Architecture {
  const char* model_type;    // Hugging Face model_type, e.g. "gpt2"
  const char* hf_class;      // the transformers class, e.g. "GPT2LMHeadModel"
  const char* display_name;  // for messages, e.g. "GPT-2"
  // Fills `c` from a config.json object (c.arch is set already); errors name `source`.
  void (*parse)(const nlohmann::json& j, const std::string& source, Config& c);
  // The config.json transformers would write.
  nlohmann::json (*to_json)(const Config& c);
  // Every tensor of a model of this config, in file order.
  std::vector<TensorDesc> (*tensors)(const Config& c);
  // llama.cpp's name of the architecture (general.architecture, the prefix of its GGUF keys), e.g. "gpt2".
  const char* gguf_arch;
  // Fills `c` from a GGUF file's metadata (c.arch is set already; n_vocab and tie_word_embeddings come from
  // the tensors, set by the caller). nullptr: llama.cpp has no such architecture (OPT), so no GGUF either.
  void (*parse_gguf)(const GgufFile& f, Config& c);
};

// nullptr for an unknown model_type.
const Architecture* find(std::string_view model_type);
// The architecture of a GGUF general.architecture; nullptr when unknown.
const Architecture* find_gguf(std::string_view gguf_arch);
// "gpt2, ..." as GGUF names them, for messages.
std::string known_gguf_archs();
// "gpt2, ..." for messages.
std::string known_model_types();

// llama.cpp's GGUF name of a role ("token_embd.weight", "blk.3.attn_qkv.bias"); empty for Ignored.
std::string gguf_name(Role role, int64_t layer);

}  // namespace minigpt::arch
