#include "minigpt/model_source.h"

#include <cstring>
#include <fstream>
#include <string>

#include "formats/gguf.h"
#include "formats/llama2c.h"
#include "formats/llmc.h"
#include "minigpt/error.h"

namespace minigpt {

namespace fs = std::filesystem;

namespace {

// Why a regular file that starts with no model's magic number is no model, led by what it most likely is:
// a file of a Hugging Face model's directory (the directory is the model), a GGUF file by name whose bytes
// are not GGUF's, a PyTorch (zip) checkpoint. Then the formats read, and what the first bytes are not.
std::string not_a_model(const fs::path& path, const uint8_t* head) {
  const std::string ext = path.extension().string();
  const std::string name = path.filename().string();
  std::string what;
  if (ext == ".safetensors" || ext == ".json" || name == "tokenizer.model") {
    what = "one file of a Hugging Face model, whose directory (with config.json) is the model";
  } else if (ext == ".gguf") {
    what = "not a GGUF file (an incomplete download?)";
  } else if (std::memcmp(head, "PK\x03\x04", 4) == 0) {
    what =
        "a zip archive (a PyTorch checkpoint?), which minigpt does not read (nanoGPT's ckpt.pt converts with "
        "tools/convert_nanogpt.py)";
  } else {
    what = "not a model";
  }
  return what +
         "; minigpt reads a directory with config.json, a GGUF file, an llm.c or a llama2.c checkpoint: this "
         "file starts with neither \"GGUF\", llm.c's magic 20240326 nor llama2.c's \"ak42\", and is no "
         "llama2.c legacy checkpoint";
}

}  // namespace

ModelSource ModelSource::open(const fs::path& path) {
  ModelSource s;
  s.path_ = path;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  // What the path is comes first: a name mistyped is said as such, not as a directory or a format missing.
  if (st.type() == fs::file_type::not_found) {
    throw Error(ErrorKind::Io, path.string() + ": no such file or directory");
  }
  if (st.type() == fs::file_type::none) throw Error(ErrorKind::Io, path.string() + ": " + ec.message());
  if (st.type() == fs::file_type::directory) return s;  // its reader says what it lacks
  if (st.type() != fs::file_type::regular) {
    throw Error(ErrorKind::Io, path.string() +
                                   ": neither a regular file nor a directory (a model is a "
                                   "directory with config.json, or a GGUF, llm.c or llama2.c file)");
  }
  // The first 28 bytes: a magic number, or a llama2.c legacy header (seven int32, no magic).
  uint8_t head[28] = {};
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(head), sizeof head);
  const size_t n = size_t(in.gcount());
  const uint64_t size = uint64_t(fs::file_size(path, ec));
  if (n < 4) {
    // Too short for any magic: an empty or cut file (a failed download), not a directory.
    throw Error(ErrorKind::Io, "'" + path.string() + "' is " + std::to_string(size) +
                                   " bytes, too short for a GGUF file, an llm.c or a llama2.c checkpoint "
                                   "(truncated?)");
  }
  const uint32_t m =
      uint32_t(head[0]) | uint32_t(head[1]) << 8 | uint32_t(head[2]) << 16 | uint32_t(head[3]) << 24;
  const char* by_magic = is_llmc_magic(int32_t(m))           ? "llm.c's"
                         : std::memcmp(head, "GGUF", 4) == 0 ? "GGUF's"
                         : m == kLlama2cMagic                ? "llama2.c's (\"ak42\")"
                                                             : nullptr;
  // A legacy header is told by the size it implies; a file that also starts with a magic number and whose
  // first 28 bytes imply its exact size as a legacy header is refused rather than guessed at.
  uint64_t implied = 0;
  const bool legacy = probe_llama2c_legacy(head, n, size, &implied);
  if (by_magic != nullptr && legacy) {
    throw Error(ErrorKind::Format, "'" + path.string() + "' is ambiguous: it starts with " + by_magic +
                                       " magic number, and read as a llama2.c legacy checkpoint (no magic) "
                                       "its header implies exactly its " +
                                       std::to_string(size) + " bytes");
  }
  if (legacy || m == kLlama2cMagic) {
    s.format_ = ModelFormat::Llama2c;
    return s;
  }
  if (is_llmc_magic(int32_t(m))) {
    s.format_ = ModelFormat::Llmc;
    return s;
  }
  if (std::memcmp(head, "GGUF", 4) != 0) {
    const std::string as_legacy = implied == 0
                                      ? std::string()
                                      : "; read as a llama2.c legacy header it implies " +
                                            std::to_string(implied) + " bytes, but the file has " +
                                            std::to_string(size) + (size < implied ? " (truncated?)" : "");
    throw Error(ErrorKind::Io, path.string() + ": " + not_a_model(path, head) + as_legacy);
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
