// A GGUF file as llama-quantize reads it: every key and tensor as they are, of an architecture minigpt
// knows (src/arch/).
#include "arch/arch.h"
#include "convert/source.h"
#include "convert/util.h"
#include "minigpt/error.h"
#include "quant/quant.h"

namespace minigpt::convert {

namespace fs = std::filesystem;

Source read_gguf_source(const fs::path& path) {
  Source s;
  s.where = path.string();
  s.gguf = true;
  s.files.push_back(path);
  s.gguf_file = GgufFile::open(path);
  const GgufFile& f = *s.gguf_file;
  const auto arch_name = f.get_string("general.architecture");
  if (!arch_name) throw Error(ErrorKind::Format, f.path() + ": no general.architecture in the metadata");
  if (arch::find_gguf(*arch_name) == nullptr) {
    throw Error(ErrorKind::Unsupported, f.path() + ": GGUF architecture '" + *arch_name +
                                            "': minigpt quantizes " + arch::known_gguf_archs_phrase() +
                                            " files");
  }
  const auto n_layer = f.get_int(*arch_name + ".block_count");
  if (!n_layer)
    throw Error(ErrorKind::Format, f.path() + ": missing metadata '" + *arch_name + ".block_count'");
  s.n_layer = *n_layer;
  for (const std::string& key : f.keys()) s.metadata.emplace_back(key, *f.find_value(key));
  const GgufFile* file = s.gguf_file.get();
  for (const GgufTensor& t : f.tensors()) {
    SourceTensor st;
    st.name = t.name;
    st.ne = t.ne;
    st.type = t.type;
    st.stored_bytes = t.nbytes;
    st.stored_type = type_name(t.type);
    const GgufTensor* tensor = &t;
    st.raw = [file, tensor](uint8_t* dst) { file->read(*tensor, dst); };
    st.f32 = [file, tensor](float* dst) {
      std::vector<uint8_t> raw(size_t(tensor->nbytes));
      file->read(*tensor, raw.data());
      dequantize(tensor->type, raw.data(), dst, tensor->numel());
    };
    s.tensors.push_back(std::move(st));
  }
  return s;
}

}  // namespace minigpt::convert
