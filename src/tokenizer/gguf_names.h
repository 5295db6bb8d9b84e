// The names GGUF gives the tokenizers minigpt reads and writes (tokenizer.ggml.model, tokenizer.ggml.pre):
// names of tokenizer kinds, not of model families. llama.cpp names its byte-level BPE tokenizer after
// GPT-2 (LLAMA_VOCAB_TYPE_BPE, whatever the model: Pythia's and StarCoder's files name it so too), which is
// why that family's name appears here, outside src/arch/: kByteLevelBpe; and its SentencePiece BPE after
// Llama (LLAMA_VOCAB_TYPE_SPM): kSentencePiece.
#pragma once

namespace minigpt::gguf_tokenizer {

inline constexpr const char* kModelKey = "tokenizer.ggml.model";
inline constexpr const char* kPreKey = "tokenizer.ggml.pre";
// tokenizer.ggml.model of a byte-level BPE tokenizer (llama.cpp's vocab type BPE).
inline constexpr const char* kByteLevelBpe = "gpt2";
// tokenizer.ggml.model of a SentencePiece BPE tokenizer with scores (llama.cpp's vocab type SPM).
inline constexpr const char* kSentencePiece = "llama";
// tokenizer.ggml.pre of GPT-2's pre-tokenizer regex (llama.cpp's LLAMA_VOCAB_PRE_TYPE_GPT2).
inline constexpr const char* kGpt2Pre = "gpt-2";

}  // namespace minigpt::gguf_tokenizer
