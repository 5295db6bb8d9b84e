// llama2.c's checkpoints (src/formats/llama2c.h) as a model of the Llama family: the Config its header
// implies, as run.c computes it, and the role each of its tensors plays.
#pragma once

#include <string>

#include "arch/arch.h"
#include "formats/llama2c.h"
#include "minigpt/config.h"

namespace minigpt {

// The architecture llama2.c's checkpoints hold (Llama's); Error(Unsupported) when the table has none.
const arch::Architecture& llama2c_architecture();
// Llama as run.c computes it: RMSNorm with eps 1e-5, the SiLU-gated FFN (w2(silu(w1 x) * w3 x)), rotary
// positions on whole heads rotating adjacent pairs (2i, 2i + 1) at 10000^(-2i / head_size), no biases,
// the head tied to the embedding when the file says so; bos 1, and generation stops at 2 (</s>) and at 1
// (<s>), which run.c stops at: its training data delimits stories with BOS.
Config llama2c_config(const Llama2cHeader& h);
// The role of a tensor ("wq" -> AttnQ, "w1" -> FfnGate, "wcls" -> Output).
arch::Role llama2c_role(const Llama2cTensor& t);

}  // namespace minigpt
