#include "minigpt/model_source.h"

#include <cstring>
#include <fstream>
#include <string>

#include "formats/gguf.h"
#include "formats/llmc_magic.h"
#include "minigpt/error.h"

namespace minigpt {

namespace fs = std::filesystem;

ModelSource ModelSource::open(const fs::path& path) {
  ModelSource s;
  s.path_ = path;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return s;  // a directory, or nothing: its reader says which
  uint8_t magic[4] = {};
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(magic), 4);
  if (!in) {
    // Too short for any magic: an empty or cut file (a failed download), not a directory.
    throw Error(ErrorKind::Io, "'" + path.string() + "' is " + std::to_string(fs::file_size(path, ec)) +
                                   " bytes, too short for a GGUF file or an llm.c checkpoint (truncated?)");
  }
  const int32_t m = int32_t(uint32_t(magic[0]) | uint32_t(magic[1]) << 8 | uint32_t(magic[2]) << 16 |
                            uint32_t(magic[3]) << 24);
  if (is_llmc_magic(m)) {
    s.format_ = ModelFormat::Llmc;
    return s;
  }
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    throw Error(ErrorKind::Io,
                "'" + path.string() +
                    "' is not a directory (a model is a directory with config.json, a GGUF file "
                    "or an llm.c checkpoint; this file starts with neither \"GGUF\" nor llm.c's "
                    "magic 20240326)");
  }
  s.format_ = ModelFormat::Gguf;
  s.gguf_ = GgufFile::open(path);
  return s;
}

const GgufFile& ModelSource::gguf() const {
  if (!gguf_) throw Error(ErrorKind::Argument, path_.string() + ": not a GGUF file");
  return *gguf_;
}

std::shared_ptr<GgufFile> ModelSource::gguf_file() const {
  if (!gguf_) throw Error(ErrorKind::Argument, path_.string() + ": not a GGUF file");
  return gguf_;
}

}  // namespace minigpt
