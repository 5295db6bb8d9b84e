// minigpt's public API: what a program that embeds minigpt includes, and all it may rely on.
//
//   auto model = minigpt::Model::load("models/shakespeare-char");      // a HF directory, GGUF or llm.c file
//   auto tokenizer = minigpt::Tokenizer::load("models/shakespeare-char");
//   minigpt::Session session(model);                                   // the KV cache and scratch of one run
//   minigpt::GenerateOptions options;
//   options.sampling.temperature = 0;                                  // greedy
//   auto result = minigpt::generate(session, &tokenizer, tokenizer.encode("ROMEO:"), options);
//
// Every failure is a minigpt::Error (error.h) whose kind says whose mistake it is and whose message is one
// line naming the file, tensor or field. The headers below include only each other; everything under src/
// is private and may change.
#pragma once

#include "minigpt/attention.h"          // attention maps, as transformers' output_attentions
#include "minigpt/backend.h"            // Backend: where a model's weights live and its ops run
#include "minigpt/config.h"             // Config: a model's hyperparameters
#include "minigpt/error.h"              // Error, ErrorKind
#include "minigpt/generate.h"           // generate(), Generator, GenerateOptions
#include "minigpt/generation_config.h"  // a model's generation defaults (generation_config.json, GGUF)
#include "minigpt/ggml_type.h"          // GgmlType: GGUF's element and block types
#include "minigpt/model.h"              // Model::load, Model::inspect, LoadOptions
#include "minigpt/perplexity.h"         // perplexity over a token stream
#include "minigpt/registry.h"           // backends by name ("cpu", "cuda")
#include "minigpt/sampler.h"            // SamplingParams, Sampler
#include "minigpt/session.h"            // Session: one run's KV cache; eval() gives logits
#include "minigpt/speculative.h"        // speculative decoding: drafts verified in one step
#include "minigpt/tensor.h"             // DType, Tensor
#include "minigpt/tokenizer.h"          // Tokenizer::load, encode, decode, StreamDecoder
