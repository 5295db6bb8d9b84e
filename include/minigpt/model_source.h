// A model path, opened and classified once: a directory (a Hugging Face model, or a tokenizer alone), a GGUF
// file, an llm.c or a llama2.c checkpoint, told apart by what the path is and by a file's first bytes, never
// by its name. The model (Model::load), its tokenizer (Tokenizer::load), its generation defaults and its chat
// template all read this one object, so a GGUF file's metadata is parsed once for all of them.
#pragma once

#include <filesystem>
#include <memory>

namespace minigpt {

class GgufFile;  // src/formats/gguf.h: the parsed metadata and tensor table

enum class ModelFormat {
  Directory,  // anything that is not a regular file: what it lacks is said by the reader that needs it
  Gguf,       // starts with "GGUF"
  Llmc,       // starts with one of llm.c's magic numbers
  Llama2c,    // starts with llama2.c's "ak42", or is a legacy llama2.c checkpoint (told by its size)
};

class ModelSource {
 public:
  // Classifies `path` and, for a GGUF file, parses its header. Throws Error(Io) for a regular file that is
  // neither (too short to tell: with its size and "truncated?"), Error(Format) for a malformed GGUF header.
  static ModelSource open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  ModelFormat format() const { return format_; }
  // The GGUF file, parsed once (format() == Gguf; Error(Argument) otherwise). Its tensors are read on demand
  // while a holder of the pointer keeps it open.
  const GgufFile& gguf() const;
  std::shared_ptr<GgufFile> gguf_file() const;

 private:
  std::filesystem::path path_;
  ModelFormat format_ = ModelFormat::Directory;
  std::shared_ptr<GgufFile> gguf_;
};

}  // namespace minigpt
