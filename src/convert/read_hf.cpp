// A Hugging Face model directory as convert_hf_to_gguf.py reads it (conversion/base.py): config.json, the
// safetensors weights (one file or shards), the tokenizer files. What the model is (its tensors, its GGUF
// keys, what its GGUF form cannot express) comes from its architecture (src/arch/); nothing here names one.
#include <algorithm>
#include <cmath>
#include <map>

#include "arch/arch.h"
#include "convert/source.h"
#include "convert/util.h"
#include "formats/gguf_writer.h"
#include "formats/safetensors.h"
#include "io/io.h"
#include "minigpt/config.h"
#include "minigpt/error.h"
#include "minigpt/tensor.h"
#include "quant/quant.h"

namespace minigpt::convert {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The values of a safetensors tensor as float32, `conv1d` ones transposed from [in, out] to [out, in].
void read_hf_tensor(const SafeTensorsFile& f, const SafeTensor& t, bool transpose, float* dst) {
  DType d;
  if (!to_dtype(t.dtype, &d)) {
    throw Error(ErrorKind::Unsupported, f.path() + ": tensor '" + t.name + "' has dtype " +
                                            std::string(st_dtype_name(t.dtype)) +
                                            "; weights must be F32, F16 or BF16");
  }
  std::vector<uint8_t> raw(t.nbytes);
  f.read(t, raw.data());
  const size_t n = size_t(t.numel());
  if (!transpose) {
    convert_to_f32(dst, raw.data(), d, n);
  } else {
    std::vector<float> tmp(n);
    convert_to_f32(tmp.data(), raw.data(), d, n);
    const int64_t rows = t.shape[0], cols = t.shape[1];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = tmp[size_t(r * cols + c)];
  }
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(dst[i])) {
      throw Error(ErrorKind::Format, f.path() + ": tensor '" + t.name + "' holds " +
                                         (std::isnan(dst[i]) ? "NaN" : "Inf") + " (value " +
                                         std::to_string(i) + ")");
    }
  }
}

}  // namespace

Source read_hf(const fs::path& dir) {
  Source s;
  s.where = dir.string();
  const fs::path cfg_path = dir / "config.json";
  if (!fs::exists(cfg_path)) {
    throw Error(ErrorKind::Io, dir.string() +
                                   ": no config.json (a Hugging Face model directory holds config.json "
                                   "and model.safetensors)");
  }
  s.files.push_back(cfg_path);
  const Config c = load_config(cfg_path);
  const json j = read_json_file(cfg_path, kMaxConfigBytes, "config");
  const std::string src = cfg_path.string();
  const arch::Architecture* a = arch::find(c.arch);
  if (a == nullptr || a->write_gguf == nullptr) {
    throw Error(ErrorKind::Unsupported, src + ": model_type '" + c.arch +
                                            "': llama.cpp has no such architecture, so no GGUF form (minigpt "
                                            "writes GGUF for " +
                                            arch::gguf_writable_model_types() + ")");
  }
  // What the family's GGUF keys cannot express: refused before anything is read or written.
  if (a->check_gguf_form != nullptr) a->check_gguf_form(c, src);
  s.n_layer = c.n_layer;
  // The weight files: model.safetensors, else the shards of model.safetensors.index.json, checked as
  // Model::load checks them (a shard named "../x" or not a string was read, or an "internal error").
  if (!fs::exists(dir / "model.safetensors") && fs::exists(dir / "model.safetensors.index.json"))
    s.files.push_back(dir / "model.safetensors.index.json");
  const std::vector<std::shared_ptr<SafeTensorsFile>> weight_files = open_weight_files(dir);
  struct Found {
    const SafeTensorsFile* file;
    const SafeTensor* tensor;
  };
  std::map<std::string, Found> all;  // by HF name: the converter's order
  for (const auto& f : weight_files) {
    const fs::path p = f->path();
    s.files.push_back(p);
    for (const SafeTensor& t : f->tensors()) {
      if (!all.emplace(t.name, Found{f.get(), &t}).second)
        throw Error(ErrorKind::Format,
                    p.string() + ": tensor '" + t.name + "' also appears in another shard");
    }
    s.st_files.push_back(f);
  }

  struct Planned {
    const arch::TensorDesc* desc;
    std::string gguf;
  };
  const std::vector<arch::TensorDesc> descs = a->tensors(c);
  std::map<std::string, Planned> plan;  // HF name -> what it is
  for (const arch::TensorDesc& d : descs) {
    const std::string* hit = nullptr;
    for (const std::string& n : d.names) {
      if (all.count(n)) hit = &n;
    }
    if (hit == nullptr) {
      if (d.optional) continue;
      throw Error(ErrorKind::Shape, weight_files[0]->path() + ": missing tensor '" + d.names[0] +
                                        "' (config.json implies " + shape_str(d.shape) + ")");
    }
    const SafeTensor& t = *all.at(*hit).tensor;
    if (d.role != arch::Role::Ignored && t.shape != d.shape) {
      throw Error(ErrorKind::Shape, all.at(*hit).file->path() + ": tensor '" + *hit + "' has shape " +
                                        shape_str(t.shape) + " but config.json implies " +
                                        shape_str(d.shape));
    }
    plan[*hit] = {&d, a->gguf_tensor_name(d.role, d.layer)};
  }
  // Generated tensors first, as the converter writes them (generate_extra_tensors).
  if (a->gguf_extra_tensors != nullptr) {
    for (auto& [name, values] : a->gguf_extra_tensors(c)) {
      SourceTensor st;
      st.name = name;
      st.ne = {int64_t(values.size())};
      st.type = GgmlType::F32;
      st.stored_bytes = values.size() * sizeof(float);
      st.stored_type = "F32";
      st.f32 = [v = values](float* dst) { std::copy(v.begin(), v.end(), dst); };
      s.tensors.push_back(std::move(st));
    }
  }
  bool first_matrix = true;
  for (const auto& [name, found] : all) {
    auto it = plan.find(name);
    if (it == plan.end()) {
      throw Error(ErrorKind::Shape, found.file->path() + ": unexpected tensor '" + name +
                                        "' (not part of a " + a->display_name + " with this config.json)");
    }
    const arch::TensorDesc& d = *it->second.desc;
    if (d.role == arch::Role::Ignored) continue;  // buffers (causal masks): the converter drops them
    const SafeTensor& t = *found.tensor;
    SourceTensor st;
    st.name = it->second.gguf;
    const bool transpose = d.order == MatrixOrder::InOut && t.shape.size() == 2;
    // ne is innermost first: [out, in] (stored, or after the transposition) -> {in, out}.
    st.ne = transpose ? t.shape : std::vector<int64_t>(t.shape.rbegin(), t.shape.rend());
    st.type = GgmlType::F32;
    st.stored_bytes = t.nbytes;
    st.stored_type = std::string(st_dtype_name(t.dtype));
    const SafeTensorsFile* file = found.file;
    const SafeTensor* tensor = &t;
    st.f32 = [file, tensor, transpose](float* dst) { read_hf_tensor(*file, *tensor, transpose, dst); };
    if (d.qkv_heads > 0) {
      // A fused qkv the checkpoint stores head by head, [H][q, k, v][D] (the description's qkv_heads);
      // llama.cpp's converter (modify_tensors) and its readers hold q | k | v, [q, k, v][H][D].
      const int64_t H = d.qkv_heads, D = t.shape[0] / (3 * H);
      const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
      st.f32 = [file, tensor, H, D, cols](float* dst) {
        std::vector<float> hf(size_t(3 * H * D * cols));
        read_hf_tensor(*file, *tensor, false, hf.data());
        for (int64_t h = 0; h < H; ++h)
          for (int64_t part = 0; part < 3; ++part)
            std::copy_n(hf.data() + ((h * 3 + part) * D) * cols, D * cols, dst + ((part * H + h) * D) * cols);
      };
    }
    if (d.shift != 0.0f) {
      // Gemma's norms: the checkpoint's w, written as the 1 + w its RMSNorm multiplies by (Gemma3Model's
      // modify_tensors).
      st.f32 = [file, tensor, transpose, shift = d.shift, n = t.nbytes / st_dtype_size(t.dtype)](float* dst) {
        read_hf_tensor(*file, *tensor, transpose, dst);
        for (size_t i = 0; i < n; ++i) dst[i] += shift;
      };
    }
    const bool q = d.role == arch::Role::AttnQ || d.role == arch::Role::AttnQBias;
    const bool k = d.role == arch::Role::AttnK || d.role == arch::Role::AttnKBias;
    if (a->gguf_permutes_qk && (q || k)) {
      // LlamaModel.permute: within each head, row j D / 2 + i (j < 2, i < D / 2) goes to row 2i + j, so that
      // llama.cpp's rope on adjacent pairs rotates what transformers' rotate_half rotates.
      const int64_t heads = q ? c.n_head : c.kv_heads(), D = c.head_dim();
      const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
      st.f32 = [file, tensor, heads, D, cols](float* dst) {
        std::vector<float> hf(size_t(heads * D * cols));
        read_hf_tensor(*file, *tensor, false, hf.data());
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t j = 0; j < 2; ++j)
            for (int64_t i = 0; i < D / 2; ++i)
              std::copy_n(hf.data() + (h * D + j * D / 2 + i) * cols, cols, dst + (h * D + 2 * i + j) * cols);
      };
    }
    if (first_matrix && t.shape.size() >= 2) {
      first_matrix = false;
      if (t.dtype == StDtype::BF16) s.auto_type = GgmlType::BF16;
    }
    s.tensors.push_back(std::move(st));
  }

  // convert_hf_to_gguf.py's metadata, in its order (prepare_metadata, then set_vocab).
  int64_t total = 0;
  for (const SourceTensor& t : s.tensors) total += t.numel();
  auto& kv = s.metadata;
  add_general_kv(dir, a->gguf_arch, total, kv);
  // The family's keys, as its converter's set_gguf_parameters writes them.
  a->write_gguf(c, j, src, kv);
  kv.emplace_back("general.quantization_version", gguf_u32(2));
  add_tokenizer_kv(dir, j, c.n_vocab, s);
  return s;
}

}  // namespace minigpt::convert
