// llm.c's checkpoints (src/formats/llmc.h) as a model of the GPT-2 family: the Config their header implies,
// as train_gpt2.c computes it, and the role and GGUF name of each of their arrays.
#pragma once

#include <string>

#include "arch/arch.h"
#include "formats/llmc.h"
#include "minigpt/config.h"

namespace minigpt {

// GPT-2 as llm.c computes it: gelu tanh, layer norm eps 1e-5, learned positions, n_inner 4C, the head tied to
// wte, n_vocab = V (never the padded Vp).
Config llmc_config(const LlmcHeader& h);
// The role of an array ("qkvw" -> AttnQkv, "lnfb" -> OutputNormBias).
arch::Role llmc_role(const LlmcTensor& t);
// llama.cpp's name for one slice ("blk.0.attn_qkv.weight"): minigpt loads an llm.c file as a GGUF one.
std::string llmc_gguf_name(const LlmcTensor& t);

}  // namespace minigpt
