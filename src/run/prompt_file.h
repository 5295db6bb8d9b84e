// The file of `generate --prompt-cache FILE` (llama.cpp's flag): a prompt's tokens and their keys and values
// (Session::read_kv's layout), so that a long fixed prompt is evaluated once across runs. The file names the
// model that made it (an identity hash, and a description for messages): a file of another model, another
// KV-cache dtype, a truncated or a corrupt one is refused before anything of it reaches a session.
//
// Layout, little-endian:
//   "MGPTPCF1"            8 bytes: magic and version
//   dtype                 u32: the keys' and values' dtype (0 F32, 1 F16, 2 BF16)
//   reserved              u32: 0
//   identity              u64: PromptFileModel::identity
//   position_bytes        u64: bytes of one position's keys and values (every layer)
//   n_vocab               u64: the model's vocabulary (every token below it)
//   n_tokens              u64
//   name_bytes            u64: the model's description (at most kMaxNameBytes)
//   checksum              u64: of everything after the header (splitmix64 over 8-byte words, zero-padded)
//   name                  name_bytes bytes
//   tokens                n_tokens x i32
//   kv                    n_tokens x position_bytes bytes
// The file is exactly that long.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "io/io.h"
#include "minigpt/tensor.h"

namespace minigpt {

// What a prompt file must have been made by.
struct PromptFileModel {
  uint64_t identity = 0;
  std::string name;  // for messages: "shakespeare-char (gpt2, 4 layers, 128 wide, vocab 256)"
  DType dtype = DType::F32;
  uint64_t position_bytes = 0;
  int64_t n_vocab = 0;
};

struct PromptFileHeader {
  PromptFileModel model;
  int64_t n_tokens = 0;
  uint64_t checksum = 0;
  uint64_t name_offset = 0, tokens_offset = 0, kv_offset = 0;
};

inline constexpr uint64_t kPromptFileHeaderBytes = 64;
inline constexpr uint64_t kMaxNameBytes = 4096;

// The header, its fields and the file's size checked against each other. Error(Format) naming the source
// for a file that is not a prompt file, truncated or longer than its header says.
PromptFileHeader read_prompt_file_header(const ByteSource& src);
// Error(Argument) "SOURCE: made for MODEL (...), not for MODEL (...)" when the header is another model's (or
// its keys and values another dtype's).
void check_prompt_file_model(const PromptFileHeader& h, const PromptFileModel& want,
                             const std::string& source);
// The first n <= h.n_tokens tokens and their keys and values (n * position_bytes), after the checksum of the
// whole body and every token's range are checked (Error(Format) naming the source): a corrupt file gives
// nothing.
// Every token of the file, each checked against the vocabulary (Error(Format)); the checksum is
// read_prompt_file_body's.
std::vector<int32_t> read_prompt_file_tokens(const ByteSource& src, const PromptFileHeader& h);
struct PromptFileBody {
  std::vector<int32_t> tokens;
  std::vector<char> kv;
};
PromptFileBody read_prompt_file_body(const ByteSource& src, const PromptFileHeader& h, int64_t n);

// Writes the file whole or not at all (AtomicFile). kv: tokens.size() * model.position_bytes bytes.
void write_prompt_file(const std::filesystem::path& path, const PromptFileModel& model,
                       std::span<const int32_t> tokens, std::span<const char> kv);

}  // namespace minigpt
