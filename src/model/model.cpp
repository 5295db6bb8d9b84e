// Loading: find the files, match every tensor to its architecture's description (src/arch/) and check it
// against the config, hand the weights to the backend.
#include "minigpt/model.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "arch/arch.h"
#include "arch/llama2c.h"
#include "arch/llmc.h"
#include "formats/gguf.h"
#include "formats/llama2c.h"
#include "formats/safetensors.h"
#include "io/io.h"
#include "io/json_parse.h"
#include "minigpt/error.h"
#include "minigpt/registry.h"
#include "model/random_weights.h"
#include "quant/quant.h"

namespace minigpt {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

}  // namespace

std::vector<std::shared_ptr<SafeTensorsFile>> open_weight_files(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  using json = nlohmann::json;
  const fs::path single = dir / "model.safetensors";
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(single)) return {SafeTensorsFile::open(single)};
  if (!fs::exists(index)) {
    std::string hint;
    if (fs::exists(dir / "pytorch_model.bin")) {
      hint =
          " (found pytorch_model.bin: only safetensors is read; convert it with safetensors' "
          "torch.save_file)";
    }
    throw Error(ErrorKind::Io,
                dir.string() + ": no model.safetensors or model.safetensors.index.json" + hint);
  }
  const std::string text = read_regular_file(index, kMaxConfigBytes, "shard index");
  json j;
  try {
    j = parse_json_bounded(true, text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    throw Error(ErrorKind::Format, index.string() + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    throw Error(ErrorKind::Format, index.string() + ": missing object 'weight_map'");
  }
  std::set<std::string> shard_names;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it->is_string())
      throw Error(ErrorKind::Format, index.string() + ": weight_map['" + it.key() + "'] is not a string");
    const std::string f = it->get<std::string>();
    // A shard is a file beside the index, never a path that climbs out of the model directory.
    if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." ||
        f == "..") {
      throw Error(ErrorKind::Format,
                  index.string() + ": weight_map['" + it.key() + "'] = '" + f + "' is not a plain file name");
    }
    shard_names.insert(f);
  }
  if (shard_names.empty()) throw Error(ErrorKind::Format, index.string() + ": weight_map is empty");
  std::vector<std::shared_ptr<SafeTensorsFile>> files;
  for (const auto& f : shard_names) files.push_back(SafeTensorsFile::open(dir / f));
  // Every tensor the index names must be in the shard it names.
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    const std::string f = it->get<std::string>();
    const size_t k = size_t(std::distance(shard_names.begin(), shard_names.find(f)));
    if (files[k]->find(it.key()) == nullptr) {
      throw Error(ErrorKind::Format, index.string() + ": tensor '" + it.key() + "' is not in " + f);
    }
  }
  return files;
}

std::vector<float> sinusoidal_positions(int64_t n_pos, int64_t d) {
  std::vector<float> pe(size_t(n_pos * d));
  for (int64_t p = 0; p < n_pos; ++p) {
    for (int64_t i = 0; i < d / 2; ++i) {
      const double angle = double(p) / std::pow(10000.0, double(2 * i) / double(d));
      pe[size_t(p * d + 2 * i)] = float(std::sin(angle));
      pe[size_t(p * d + 2 * i + 1)] = float(std::cos(angle));
    }
  }
  return pe;
}

namespace {
struct HostTensor {
  StDtype dtype;  // as the file declares it (F32 for a quantized GGUF tensor: what `read` gives)
  std::vector<int64_t> shape;
  size_t nbytes;
  std::string file;                     // where it comes from, for messages
  std::function<void(void* dst)> read;  // copies its nbytes bytes to dst
  // A GGUF tensor of a block type: `read` dequantizes it, read_raw copies its qbytes bytes of blocks.
  GgmlType quant = GgmlType::F32;
  size_t qbytes = 0;
  std::function<void(void* dst)> read_raw = {};
  bool quantized() const { return qbytes != 0; }
};
}  // namespace

namespace {

// Index of the first element of `p` (n elements of a float dtype) that is NaN or infinite, or -1.
int64_t first_non_finite(const void* p, DType dtype, size_t n) {
  if (dtype == DType::F32) {
    const auto* u = static_cast<const uint32_t*>(p);
    for (size_t i = 0; i < n; ++i) {
      if ((u[i] & 0x7F800000u) == 0x7F800000u) return int64_t(i);
    }
  } else {  // F16: exponent 0x7C00; BF16: 0x7F80
    const uint16_t mask = dtype == DType::F16 ? 0x7C00 : 0x7F80;
    const auto* u = static_cast<const uint16_t*>(p);
    for (size_t i = 0; i < n; ++i) {
      if ((u[i] & mask) == mask) return int64_t(i);
    }
  }
  return -1;
}

float element_f32(const void* p, DType dtype, size_t i) {
  float v;
  convert_to_f32(&v, static_cast<const uint8_t*>(p) + i * dtype_size(dtype), dtype, 1);
  return v;
}

// Index of the first element that a conversion to `to` (F16 or BF16) would turn infinite, or -1.
int64_t first_overflow(const void* p, DType dtype, size_t n, DType to) {
  if (dtype == to || to == DType::F32 || (dtype == DType::F16 && to == DType::BF16)) return -1;
  const char* c = static_cast<const char*>(p);
  float row[1024];
  for (size_t i0 = 0; i0 < n; i0 += 1024) {
    const size_t m = std::min<size_t>(1024, n - i0);
    convert_to_f32(row, c + i0 * dtype_size(dtype), dtype, m);
    for (size_t i = 0; i < m; ++i) {
      const uint16_t h = to == DType::F16 ? f32_to_f16(row[i]) : f32_to_bf16(row[i]);
      if ((h & (to == DType::F16 ? 0x7C00 : 0x7F80)) == (to == DType::F16 ? 0x7C00 : 0x7F80))
        return int64_t(i0 + i);
    }
  }
  return -1;
}

std::string fmt_value(float v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", double(v));
  return b;
}

}  // namespace

namespace {

using arch::Role;
using arch::TensorDesc;

// A tensor of the checkpoint matched to its description.
struct Match {
  const TensorDesc* desc;
  const std::string* name;  // as the file spells it
  const HostTensor* tensor;
};

// Every tensor of the checkpoint matched to the architecture's description and checked against the
// config (names, dtypes, shapes; nothing missing, nothing left over), without reading a weight.
struct Plan {
  std::vector<TensorDesc> descs;
  std::vector<Match> matches;        // in description order; absent optional tensors are left out
  const Match* tied_copy = nullptr;  // a tied head's saved copy of the token embeddings
  int64_t n_params = 0;
  std::map<std::string, size_t> bytes_by_dtype;

  const Match* find(Role role, int64_t layer) const {
    for (const Match& m : matches) {
      if (m.desc->role == role && m.desc->layer == layer) return &m;
    }
    return nullptr;
  }
};

// gguf: the tensors are named as llama.cpp names them, and every matrix is stored [n_out, n_in] (its
// converter transposes GPT-2's Conv1D weights).
Plan make_plan(const Config& c, const std::map<std::string, HostTensor>& all,
               const std::string& weights_where, const std::string& config_name, bool gguf = false,
               const char* implied_by = nullptr) {
  const arch::Architecture* a = arch::find(c.arch);
  if (a == nullptr)
    throw Error(ErrorKind::Unsupported, config_name + ": architecture '" + c.arch + "' is not supported");
  Plan plan;
  // What the shapes come from: config.json, GGUF metadata, or a checkpoint's own header (implied_by).
  const std::string implied = implied_by ? implied_by : gguf ? "the metadata implies" : "config.json implies";
  plan.descs = a->tensors(c);
  if (gguf) {
    std::vector<TensorDesc> named;
    for (TensorDesc d : plan.descs) {
      if (d.role == Role::Ignored) continue;
      d.names = {a->gguf_tensor_name(d.role, d.layer)};
      d.qkv_heads = 0;  // llama.cpp's converter writes a fused qkv as q | k | v
      if (d.order == MatrixOrder::InOut) {
        std::reverse(d.shape.begin(), d.shape.end());
        d.order = MatrixOrder::OutIn;
      }
      named.push_back(std::move(d));
    }
    plan.descs = std::move(named);
  }
  // Which spelling the checkpoint uses (bare or "transformer."-prefixed names): that of its token
  // embeddings, so that a missing tensor is named as this checkpoint would name it.
  size_t variant = 0;
  for (const TensorDesc& d : plan.descs) {
    if (d.role != Role::TokenEmbd) continue;
    for (size_t i = 0; i < d.names.size(); ++i) {
      if (all.count(d.names[i])) {
        variant = i;
        break;
      }
    }
  }
  std::set<std::string> used;
  plan.matches.reserve(plan.descs.size());
  for (const TensorDesc& d : plan.descs) {
    const std::pair<const std::string, HostTensor>* found = nullptr;
    for (const std::string& n : d.names) {
      auto it = all.find(n);
      if (it == all.end()) continue;
      if (found != nullptr) {
        throw Error(ErrorKind::Format, it->second.file + ": tensors '" + found->first + "' and '" + n +
                                           "' are both the " + std::string(arch::role_name(d.role)) +
                                           " weight; a checkpoint holds one of them");
      }
      found = &*it;
    }
    if (found == nullptr) {
      if (d.optional) continue;
      if (d.role == Role::Output) {
        throw Error(
            ErrorKind::Shape,
            config_name + ": tie_word_embeddings is false but the weights have no '" + d.names[0] + "'");
      }
      throw Error(ErrorKind::Shape, weights_where + ": missing tensor '" +
                                        d.names[std::min(variant, d.names.size() - 1)] + "' (" + implied +
                                        " shape " + shape_str(d.shape) + ")");
    }
    used.insert(found->first);
    if (d.role == Role::Ignored || arch::read_with_metadata(d.role)) continue;  // read by parse_gguf
    const HostTensor& t = found->second;
    const std::string where = t.file + ": tensor '" + found->first + "'";
    DType compute;
    if (!to_dtype(t.dtype, &compute)) {
      throw Error(ErrorKind::Shape, where + " has dtype " + std::string(st_dtype_name(t.dtype)) +
                                        "; weights must be F32, F16 or BF16");
    }
    if (t.shape != d.shape) {
      throw Error(ErrorKind::Shape,
                  where + " has shape " + shape_str(t.shape) + " but " + implied + " " + shape_str(d.shape));
    }
    plan.matches.push_back({&d, &found->first, &t});
    if (d.role == Role::Output && c.tie_word_embeddings) {
      plan.tied_copy =
          &plan.matches.back();  // checked against the embeddings when read, not a weight of its own
      continue;
    }
    plan.n_params += int64_t(t.nbytes / st_dtype_size(t.dtype));
    if (t.quantized()) {
      plan.bytes_by_dtype[ggml_type_info(uint32_t(t.quant))->name] += t.qbytes;
    } else {
      plan.bytes_by_dtype[std::string(st_dtype_name(t.dtype))] += t.nbytes;
    }
  }
  for (const auto& [name, t] : all) {
    if (used.count(name)) continue;
    if (c.position_encoding != PositionEncoding::Learned) {
      // Learned positions where config.json says otherwise: say so rather than "unexpected".
      Config learned = c;
      learned.position_encoding = PositionEncoding::Learned;
      for (const TensorDesc& d : a->tensors(learned)) {
        if (d.role == Role::PosEmbd && std::find(d.names.begin(), d.names.end(), name) != d.names.end()) {
          throw Error(
              ErrorKind::Config,
              config_name + ": position_embedding_type is 'sinusoidal' but the weights have '" + name + "'");
        }
      }
    }
    throw Error(ErrorKind::Shape,
                t.file + ": unexpected tensor '" + name + "' (not part of a " + a->display_name +
                    " model with this config.json: n_layer = " + std::to_string(c.n_layer) + ")");
  }
  return plan;
}

// The tensors of `dir`'s weight files by name, each readable on demand while `files` stay open.
std::map<std::string, HostTensor> index_tensors(const std::vector<std::shared_ptr<SafeTensorsFile>>& files) {
  std::map<std::string, HostTensor> all;
  for (const auto& f : files) {
    for (const auto& t : f->tensors()) {
      const SafeTensorsFile* file = f.get();
      const SafeTensor* tensor = &t;
      auto read = [file, tensor](void* dst) { file->read(*tensor, dst); };
      if (!all.emplace(t.name, HostTensor{t.dtype, t.shape, t.nbytes, f->path(), read}).second) {
        throw Error(ErrorKind::Format, f->path() + ": tensor '" + t.name + "' also appears in another shard");
      }
    }
  }
  return all;
}

// A GGUF file: its config from the metadata (the architecture's parse_gguf), its tensors by their GGUF
// names, readable while `file` stays open.
struct GgufModel {
  std::shared_ptr<GgufFile> file;
  Config config;
  std::map<std::string, HostTensor> tensors;
};

GgufModel open_gguf(const ModelSource& source) {
  GgufModel g;
  g.file = source.gguf_file();
  const GgufFile& f = *g.file;
  const auto name = f.get_string("general.architecture");
  if (!name) throw Error(ErrorKind::Format, f.path() + ": no general.architecture in the metadata");
  const arch::Architecture* a = arch::find_gguf(*name);
  if (a == nullptr) {
    throw Error(ErrorKind::Unsupported, f.path() + ": GGUF architecture '" + *name + "' is not supported (" +
                                            arch::known_gguf_archs() + ")");
  }
  Config& c = g.config;
  c.arch = a->model_type;
  a->parse_gguf(f, c);
  const GgufTensor* emb = f.find("token_embd.weight");
  if (emb == nullptr || emb->ne.size() != 2) {
    throw Error(ErrorKind::Shape, f.path() + ": no 2-D tensor 'token_embd.weight' (the token embeddings)");
  }
  c.n_vocab = emb->ne[1];
  // llama.cpp takes the vocabulary from the token list and refuses embeddings of another size (its converter
  // pads the list to the model's rows): a list far shorter decoded most ids to no text, without a word.
  if (const GgufValue* tokens = f.find_value("tokenizer.ggml.tokens");
      tokens != nullptr && tokens->type == GgufType::ARRAY && int64_t(tokens->size()) != c.n_vocab) {
    throw Error(ErrorKind::Shape, f.path() + ": tokenizer.ggml.tokens has " + std::to_string(tokens->size()) +
                                      " tokens, token_embd.weight " + std::to_string(c.n_vocab) +
                                      " rows (a GGUF has one token per row)");
  }
  // llama.cpp's converter leaves the head out when it is tied to the embeddings.
  c.tie_word_embeddings = f.find("output.weight") == nullptr;
  c.validate(f.path());
  for (const GgufTensor& t : f.tensors()) {
    const GgufFile* file = g.file.get();
    const GgufTensor* tensor = &t;
    StDtype st = StDtype::F32;
    if (t.type == GgmlType::F16) st = StDtype::F16;
    if (t.type == GgmlType::BF16) st = StDtype::BF16;
    if (t.type == GgmlType::F32 || t.type == GgmlType::F16 || t.type == GgmlType::BF16) {
      g.tensors.emplace(t.name, HostTensor{st, t.shape(), size_t(t.nbytes), f.path(),
                                           [file, tensor](void* dst) { file->read(*tensor, dst); }});
      continue;
    }
    if (!can_dequantize(t.type)) {
      throw Error(
          ErrorKind::Unsupported,
          f.path() + ": tensor '" + t.name + "' is " + ggml_type_info(uint32_t(t.type))->name +
              ", which minigpt does not read (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, "
              "Q4_K, Q5_K, Q6_K)");
    }
    // A matrix is kept in its blocks where the backend holds the type (read_raw); read() dequantizes to F32
    // (vectors, --dtype, a backend without the type).
    HostTensor h{StDtype::F32, t.shape(), size_t(t.numel()) * sizeof(float), f.path(),
                 [file, tensor](void* dst) {
                   std::vector<uint8_t> raw(size_t(tensor->nbytes));
                   file->read(*tensor, raw.data());
                   dequantize(tensor->type, raw.data(), static_cast<float*>(dst), tensor->numel());
                 }};
    h.quant = t.type;
    h.qbytes = size_t(t.nbytes);
    h.read_raw = [file, tensor](void* dst) { file->read(*tensor, dst); };
    g.tensors.emplace(t.name, std::move(h));
  }
  return g;
}

// An llm.c checkpoint: its config from the header, its tensors (one layer's slice of each stacked array,
// wte's first V rows) under the GGUF names, readable while `file` stays open. Its matrices are [out, in] as
// GGUF's, so it takes a GGUF file's plan.
struct LlmcModel {
  std::shared_ptr<LlmcFile> file;
  Config config;
  std::map<std::string, HostTensor> tensors;
};

LlmcModel open_llmc(const fs::path& path) {
  LlmcModel g;
  g.file = LlmcFile::open(path);
  g.config = llmc_config(g.file->header());
  g.config.validate(g.file->path());
  for (const LlmcTensor& t : g.file->tensors()) {
    const LlmcFile* file = g.file.get();
    const LlmcTensor* tensor = &t;
    // Messages also name the array as llm.c does: "x.bin (llm.c's qkvw, layer 0): tensor 'blk.0...'".
    const std::string where = g.file->path() + " (llm.c's " + t.name +
                              (t.layer >= 0 ? ", layer " + std::to_string(t.layer) : std::string()) + ")";
    g.tensors.emplace(llmc_gguf_name(t), HostTensor{g.file->dtype(), t.shape, size_t(t.nbytes), where,
                                                    [file, tensor](void* dst) { file->read(*tensor, dst); }});
  }
  return g;
}

// A llama2.c checkpoint: its config from the header, each tensor under the name its role has in the Llama
// family's description (so it takes a directory's plan), readable while `file` stays open; version 2's
// quantized matrices are dequantized to F32 as they are read.
struct Llama2cModel {
  std::shared_ptr<Llama2cFile> file;
  Config config;
  std::map<std::string, HostTensor> tensors;
};

Llama2cModel open_llama2c(const fs::path& path) {
  Llama2cModel g;
  g.file = Llama2cFile::open(path);
  g.config = llama2c_config(g.file->header());
  g.config.validate(g.file->path());
  const std::vector<arch::TensorDesc> descs = llama2c_architecture().tensors(g.config);
  for (const Llama2cTensor& t : g.file->tensors()) {
    const arch::Role role = llama2c_role(t);
    auto d = std::find_if(descs.begin(), descs.end(),
                          [&](const arch::TensorDesc& x) { return x.role == role && x.layer == t.layer; });
    if (d == descs.end()) {
      throw Error(ErrorKind::Format,
                  g.file->path() + ": llama2.c's " + t.name + " has no place in the model");
    }
    const Llama2cFile* file = g.file.get();
    const Llama2cTensor* tensor = &t;
    // Messages also name the array as llama2.c does: "x.bin (llama2.c's wq, layer 0): tensor 'layers.0...'".
    const std::string where = g.file->path() + " (llama2.c's " + t.name +
                              (t.layer >= 0 ? ", layer " + std::to_string(t.layer) : std::string()) + ")";
    g.tensors.emplace(d->names[0], HostTensor{StDtype::F32, t.shape, size_t(t.numel()) * sizeof(float), where,
                                              [file, tensor](void* dst) {
                                                file->read(*tensor, static_cast<float*>(dst));
                                              }});
  }
  return g;
}

void check_model_dir(const fs::path& dir) {
  // ModelSource::open says what a path is; this is the directory it found, unless it went away since.
  if (!fs::is_directory(dir)) throw Error(ErrorKind::Io, dir.string() + ": no such directory");
  if (!fs::exists(dir / "config.json")) {
    // A folder of GGUF files (a download of several quantizations): the model is one of them.
    std::vector<std::string> ggufs;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".gguf" && e.is_regular_file(ec)) ggufs.push_back(e.path().string());
    std::sort(ggufs.begin(), ggufs.end());
    if (!ggufs.empty()) {
      throw Error(ErrorKind::Io, dir.string() + ": no config.json, but " + std::to_string(ggufs.size()) +
                                     " GGUF file" + (ggufs.size() == 1 ? "" : "s") +
                                     (ggufs.size() == 1 ? ": load it (" : ": load one of them (e.g. ") +
                                     ggufs[0] + ")");
    }
    throw Error(
        ErrorKind::Io,
        dir.string() + ": no config.json (a model directory holds config.json and model.safetensors)");
  }
}

std::string weights_where(const fs::path& dir, const std::vector<std::shared_ptr<SafeTensorsFile>>& files) {
  return files.size() == 1 ? files[0]->path() : (dir / "model.safetensors.index.json").string();
}

}  // namespace

// Reads each planned tensor once into a short-lived host buffer, checks it and hands it to the backend,
// which keeps its own copy: nothing of the files (or of Model::random's values) stays referenced, and the
// peak memory is the model plus its largest tensor.
struct ModelBuilder {
  Model& m;
  const LoadOptions& options;
  Backend& be;

  // A tensor read into host memory for the backend to take its copy from; freed when it goes out of scope.
  struct Staged {
    std::unique_ptr<uint8_t[]> bytes;
    Tensor view;
  };

  // Reads a tensor (as a [rows, cols] view) and refuses NaN/Inf, and values that `compute` (the dtype the
  // backend will hold it in) cannot represent.
  // The float type of a planned tensor (the plan refused any other).
  static DType stored(const HostTensor& t) {
    DType d = DType::F32;
    to_dtype(t.dtype, &d);
    return d;
  }

  static Staged stage(const Match& match, DType compute) {
    const HostTensor& t = *match.tensor;
    const DType dtype = stored(t);
    const std::string& name = *match.name;
    Staged s;
    s.bytes = std::make_unique_for_overwrite<uint8_t[]>(std::max<size_t>(t.nbytes, 1));
    t.read(s.bytes.get());
    const size_t n = t.nbytes / dtype_size(dtype);
    const int64_t cols = t.shape.back(), rows = int64_t(n) / std::max<int64_t>(cols, 1);
    auto at = [&](int64_t i) {
      return std::to_string(i) + (t.shape.size() == 2 ? " (row " + std::to_string(i / cols) + ", column " +
                                                            std::to_string(i % cols) + ")"
                                                      : "");
    };
    if (const int64_t i = first_non_finite(s.bytes.get(), dtype, n); i >= 0) {
      throw Error(ErrorKind::Format,
                  t.file + ": tensor '" + name + "' holds " +
                      fmt_value(element_f32(s.bytes.get(), dtype, size_t(i))) + " at element " + at(i) +
                      ": a checkpoint with NaN or infinite weights cannot give finite logits");
    }
    if (const int64_t i = first_overflow(s.bytes.get(), dtype, n, compute); i >= 0) {
      throw Error(ErrorKind::Argument,
                  t.file + ": tensor '" + name + "' holds " +
                      fmt_value(element_f32(s.bytes.get(), dtype, size_t(i))) + " at element " + at(i) +
                      ", beyond " + std::string(dtype_name(compute)) +
                      "'s range: it would become infinite (compute in F32 or BF16 instead)");
    }
    s.view = make_tensor(s.bytes.get(), dtype, Device::Host, rows, cols);
    return s;
  }

  Tensor vec(const Match& match) {
    const Staged s = stage(match, DType::F32);
    if (const float shift = match.desc->shift; shift != 0.0f) {
      // Gemma's (1 + w), folded in once (TensorDesc::shift), in F32 as its RMSNorm computes it.
      std::vector<float> f(size_t(s.view.numel()));
      for (int64_t r = 0; r < s.view.rows; ++r) {
        for (int64_t i = 0; i < s.view.cols; ++i) {
          f[size_t(r * s.view.cols + i)] =
              element_f32(s.bytes.get(), s.view.dtype, size_t(r * s.view.stride + i)) + shift;
        }
      }
      m.bytes_per_token_ += f.size() * sizeof(float);
      return be.prepare_weight(make_tensor(f.data(), DType::F32, Device::Host, s.view.rows, s.view.cols),
                               m.owned_);
    }
    Tensor t = be.prepare_weight(s.view, m.owned_);
    m.bytes_per_token_ += size_t(s.view.numel()) * sizeof(float);
    return t;
  }

  // The compute dtype of a matrix: the requested one, else its stored one.
  DType matrix_dtype(DType stored) const { return options.weight_dtype ? *options.weight_dtype : stored; }

  // The format a quantized tensor is held in: its own, unless --dtype asks for a float type or the backend
  // does not hold it (then it is dequantized to F32 as it is read).
  std::optional<WeightFormat> kept_quantized(const HostTensor& t) const {
    if (!t.quantized() || options.weight_dtype) return std::nullopt;
    const WeightFormat f = WeightFormat::quantized(t.quant);
    if (!be.holds(f)) return std::nullopt;
    return f;
  }

  // A quantized matrix's blocks, read into host memory and checked: every value finite (dequantized a
  // row at a time).
  static Staged stage_blocks(const Match& match, const WeightFormat& f, int64_t rows, int64_t cols) {
    const HostTensor& t = *match.tensor;
    Staged s;
    s.bytes = std::make_unique_for_overwrite<uint8_t[]>(std::max<size_t>(t.qbytes, 1));
    t.read_raw(s.bytes.get());
    const size_t rb = f.row_bytes(cols);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize(f.quant, s.bytes.get() + size_t(r) * rb, row.data(), cols);
      if (const int64_t i = first_non_finite(row.data(), DType::F32, size_t(cols)); i >= 0) {
        throw Error(ErrorKind::Format,
                    t.file + ": tensor '" + *match.name + "' holds " + fmt_value(row[size_t(i)]) +
                        " at row " + std::to_string(r) + ", column " + std::to_string(i) +
                        ": a checkpoint with NaN or infinite weights cannot give finite logits");
      }
    }
    s.view = Tensor{s.bytes.get(), DType::F32, Device::Host, rows, cols, cols};
    return s;
  }

  // A matrix and its bias (if the plan has one) as a linear layer n_in -> n_out. `staged` is the matrix
  // when the caller has read it already.
  Linear linear(const Match& w, const Match* bias, const Staged* staged = nullptr) {
    const TensorDesc& d = *w.desc;
    if (const auto q = kept_quantized(*w.tensor); q && staged == nullptr) {
      // GGUF blocks: [n_out, n_in] rows, as every GGUF matrix is stored (the plan made the order OutIn).
      Staged own = stage_blocks(w, *q, d.shape[0], d.shape[1]);
      Staged b;
      if (bias != nullptr) b = stage(*bias, DType::F32);
      return prepare(std::move(own), bias ? &b : nullptr, MatrixOrder::OutIn, *q, d.shape[1], d.shape[0]);
    }
    const bool in_out = d.order == MatrixOrder::InOut;
    const DType dtype = matrix_dtype(stored(*w.tensor));
    Staged own;
    if (staged == nullptr) {
      own = stage(w, dtype);
      staged = &own;
    }
    Staged b;
    if (bias != nullptr) b = stage(*bias, DType::F32);
    HostLinear h;
    h.w = staged->view;
    h.order = d.order;
    h.n_in = in_out ? d.shape[0] : d.shape[1];
    h.n_out = in_out ? d.shape[1] : d.shape[0];
    if (bias != nullptr) h.b = b.view;
    return finish(h, WeightFormat::plain(dtype));
  }

  // Hands a staged matrix ([n_out rows] when OutIn; GGUF blocks when `format` is quantized) to the backend.
  Linear prepare(Staged w, Staged* bias, MatrixOrder order, const WeightFormat& format, int64_t n_in,
                 int64_t n_out) {
    HostLinear h;
    h.w = w.view;
    h.order = order;
    h.n_in = n_in;
    h.n_out = n_out;
    if (format.is_quantized()) h.stored = format;
    if (bias != nullptr) h.b = bias->view;
    return finish(h, format);
  }

  Linear finish(const HostLinear& h, const WeightFormat& format) {
    Linear l = be.prepare_linear(h, format, m.owned_);
    m.bytes_per_token_ +=
        l.format.row_bytes(h.n_in) * size_t(h.n_out) + (h.b.empty() ? 0 : size_t(h.n_out) * sizeof(float));
    return l;
  }

  // The rows of an OutIn matrix (or the elements of a bias: rows of 1) stored head by head, [heads][3][D]
  // (q, k, v of head 0, then of head 1, ...), reordered to q | k | v: the layout every backend op reads.
  static void unshuffle_qkv(Staged& s, size_t row_bytes, int64_t heads, int64_t D) {
    const int64_t rows = 3 * heads * D;
    auto out = std::make_unique_for_overwrite<uint8_t[]>(size_t(rows) * row_bytes);
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t part = 0; part < 3; ++part) {
        const uint8_t* src = s.bytes.get() + size_t((h * 3 + part) * D) * row_bytes;
        uint8_t* dst = out.get() + size_t((part * heads + h) * D) * row_bytes;
        std::memcpy(dst, src, size_t(D) * row_bytes);
      }
    }
    s.view.data = out.get();
    s.bytes = std::move(out);
  }

  // The fused query/key/value projection of layer l: AttnQkv as stored, or reordered from per-head groups,
  // or q_proj, k_proj and v_proj (OutIn) stacked (or, in blocks of different types, left apart in `apart`).
  Linear qkv_of(const Plan& plan, int64_t l, const std::string& config_name, std::vector<Linear>* apart) {
    const Config& c = m.config_;
    const Match* fused = plan.find(Role::AttnQkv, l);
    const Match* fused_b = plan.find(Role::AttnQkvBias, l);
    if (fused != nullptr && fused->desc->qkv_heads == 0) return linear(*fused, fused_b);
    const int64_t C = c.n_embd, D = c.head_dim();
    if (fused != nullptr) {
      const int64_t heads = fused->desc->qkv_heads;
      const int64_t n_out = 3 * heads * D;
      Staged w, b;
      if (const auto q = kept_quantized(*fused->tensor)) {
        w = stage_blocks(*fused, *q, n_out, C);
        unshuffle_qkv(w, q->row_bytes(C), heads, D);
        if (fused_b != nullptr) {
          b = stage(*fused_b, DType::F32);
          unshuffle_qkv(b, dtype_size(b.view.dtype), heads, D);
        }
        return prepare(std::move(w), fused_b ? &b : nullptr, MatrixOrder::OutIn, *q, C, n_out);
      }
      const DType dtype = matrix_dtype(stored(*fused->tensor));
      w = stage(*fused, dtype);  // in its stored dtype: the backend converts
      unshuffle_qkv(w, size_t(C) * dtype_size(w.view.dtype), heads, D);
      if (fused_b != nullptr) {
        b = stage(*fused_b, DType::F32);
        unshuffle_qkv(b, dtype_size(b.view.dtype), heads, D);
      }
      return prepare(std::move(w), fused_b ? &b : nullptr, MatrixOrder::OutIn, WeightFormat::plain(dtype), C,
                     n_out);
    }
    // Separate projections: q, k and v stacked as rows (each [out, C]), their biases side by side.
    const Role parts[3] = {Role::AttnQ, Role::AttnK, Role::AttnV};
    const Role biases[3] = {Role::AttnQBias, Role::AttnKBias, Role::AttnVBias};
    return stacked(plan, l, parts, biases, "q, k and v projections", config_name, apart);
  }

  // The matrices of `parts` (OutIn, one n_in) stacked as rows in that order into one linear layer, their
  // biases side by side (a missing one among present ones is zero): separate q, k and v projections, a
  // gated MLP's gate and up. Quantized blocks stay blocks where the backend holds their type (a row of
  // blocks is a row of the matrix).
  Linear stacked(const Plan& plan, int64_t l, std::span<const Role> parts, std::span<const Role> biases,
                 const std::string& what, const std::string& config_name, std::vector<Linear>* apart) {
    std::vector<const Match*> mw(parts.size());
    for (size_t i = 0; i < parts.size(); ++i) {
      mw[i] = plan.find(parts[i], l);
      if (mw[i] == nullptr) {
        throw Error(ErrorKind::Shape, config_name + ": the " + std::string(arch::role_name(parts[i])) +
                                          " weight of layer " + std::to_string(l) + " is missing");
      }
      const HostTensor &ti = *mw[i]->tensor, &t0 = *mw[0]->tensor;
      if (mw[i]->desc->order != MatrixOrder::OutIn || stored(ti) != stored(t0)) {
        const auto type = [](const HostTensor& t) {
          return t.quantized() ? std::string(ggml_type_info(uint32_t(t.quant))->name)
                               : std::string(st_dtype_name(t.dtype));
        };
        throw Error(ErrorKind::Shape, ti.file + ": tensor '" + *mw[i]->name + "' has type " + type(ti) +
                                          " but '" + *mw[0]->name + "' has " + type(t0) + "; a layer's " +
                                          what + " must share one type");
      }
    }
    const int64_t C = mw[0]->desc->shape[1];
    int64_t n_out = 0;
    for (const Match* m : mw) n_out += m->desc->shape[0];
    std::vector<const Match*> mb(biases.size());
    bool any_bias = false;
    for (size_t i = 0; i < biases.size(); ++i) {
      mb[i] = plan.find(biases[i], l);
      any_bias = any_bias || mb[i] != nullptr;
    }
    // Blocks of different types (llama-quantize's Q4_K_M gives some attn_v Q6_K beside Q4_K q and k) stay
    // apart, each in its own type, where the backend holds every one; else they are widened to F32 together.
    bool one_type = true, all_held = true;
    for (const Match* m : mw) {
      one_type = one_type && m->tensor->quant == mw[0]->tensor->quant;
      all_held = all_held && kept_quantized(*m->tensor).has_value();
    }
    if (!one_type && all_held) {
      for (size_t i = 0; i < mw.size(); ++i) {
        apart->push_back(linear(*mw[i], mb[i]));
        if (any_bias && mb[i] == nullptr) {  // a missing bias among present ones is zero
          std::vector<float> zero(size_t(mw[i]->desc->shape[0]), 0.0f);
          apart->back().b = be.prepare_weight(
              make_tensor(zero.data(), DType::F32, Device::Host, 1, int64_t(zero.size())), m.owned_);
          m.bytes_per_token_ += zero.size() * sizeof(float);
        }
      }
      return Linear{};
    }
    Staged w;
    WeightFormat format;
    if (const auto q = one_type ? kept_quantized(*mw[0]->tensor) : std::nullopt) {
      format = *q;
      const size_t row = q->row_bytes(C);
      w.bytes = std::make_unique_for_overwrite<uint8_t[]>(size_t(n_out) * row);
      size_t at = 0;
      for (const Match* m : mw) {
        const Staged p = stage_blocks(*m, *q, m->desc->shape[0], C);
        const size_t n = size_t(m->desc->shape[0]) * row;
        std::memcpy(w.bytes.get() + at, p.bytes.get(), n);
        at += n;
      }
      w.view = Tensor{w.bytes.get(), DType::F32, Device::Host, n_out, C, C};
    } else {
      const DType dtype = matrix_dtype(stored(*mw[0]->tensor));
      const DType held = stored(*mw[0]->tensor);  // what stage() gives; the backend converts to `dtype`
      format = WeightFormat::plain(dtype);
      const size_t row = size_t(C) * dtype_size(held);
      w.bytes = std::make_unique_for_overwrite<uint8_t[]>(size_t(n_out) * row);
      size_t at = 0;
      for (const Match* m : mw) {
        const Staged p = stage(*m, dtype);
        const size_t n = size_t(m->desc->shape[0]) * row;
        std::memcpy(w.bytes.get() + at, p.bytes.get(), n);
        at += n;
      }
      w.view = make_tensor(w.bytes.get(), held, Device::Host, n_out, C);
    }
    Staged b;
    if (any_bias) {
      // Widened to F32 here (each may have its own dtype).
      b.bytes = std::make_unique<uint8_t[]>(size_t(n_out) * sizeof(float));
      auto* out = reinterpret_cast<float*>(b.bytes.get());
      int64_t off = 0;
      for (size_t i = 0; i < mw.size(); ++i) {
        if (mb[i] != nullptr) {
          const Staged p = stage(*mb[i], DType::F32);
          for (int64_t j = 0; j < mw[i]->desc->shape[0]; ++j)
            out[off + j] = element_f32(p.bytes.get(), p.view.dtype, size_t(j));
        }
        off += mw[i]->desc->shape[0];
      }
      b.view = make_tensor(b.bytes.get(), DType::F32, Device::Host, 1, n_out);
    }
    return prepare(std::move(w), any_bias ? &b : nullptr, MatrixOrder::OutIn, format, C, n_out);
  }

  void build(const Plan& plan, const std::string& config_name) {
    const Config& c = m.config_;
    ModelWeights& w = m.weights_;
    auto need = [&](Role role, int64_t layer) -> const Match& {
      const Match* match = plan.find(role, layer);
      if (match == nullptr) {  // the description lists every tensor the roles below need
        throw Error(ErrorKind::Shape,
                    config_name + ": the " + std::string(arch::role_name(role)) + " weight" +
                        (layer >= 0 ? " of layer " + std::to_string(layer) : std::string()) + " is missing");
      }
      return *match;
    };
    auto vec_of = [&](Role role, int64_t layer) { return vec(need(role, layer)); };
    // A norm's bias, which RMSNorm families have none of: empty when the description has none.
    auto bias_of = [&](Role role, int64_t layer) {
      const Match* match = plan.find(role, layer);
      return match != nullptr ? vec(*match) : Tensor{};
    };
    auto linear_of = [&](Role role, Role bias, int64_t layer) {
      return linear(need(role, layer), plan.find(bias, layer));
    };

    // The token embeddings are a linear layer C -> V ([V, C] = [n_out, n_in]): they double as the tied head.
    {
      const Match& e = need(Role::TokenEmbd, -1);
      Staged s;
      if (plan.tied_copy != nullptr) {
        s = stage(e, matrix_dtype(stored(*e.tensor)));
        // transformers ties the head to the embeddings and ignores a saved copy; a copy is harmless,
        // anything else means the file and config.json disagree about the model.
        const HostTensor& head = *plan.tied_copy->tensor;
        bool same = head.dtype == e.tensor->dtype && head.shape == e.tensor->shape;
        if (same) {
          const auto bytes = std::make_unique_for_overwrite<uint8_t[]>(std::max<size_t>(head.nbytes, 1));
          head.read(bytes.get());
          same = std::memcmp(bytes.get(), s.bytes.get(), head.nbytes) == 0;
        }
        if (!same) {
          throw Error(ErrorKind::Shape, head.file + ": tensor '" + *plan.tied_copy->name +
                                            "' differs from '" + *e.name +
                                            "' but config.json ties them (tie_word_embeddings is true)");
        }
      }
      const size_t before = m.bytes_per_token_;
      w.token_embd = linear(e, nullptr, plan.tied_copy != nullptr ? &s : nullptr);
      m.bytes_per_token_ = before;  // a step reads T rows of it; counted below if it is the head
    }
    const int64_t S = c.n_ctx, C = c.n_embd;
    if (c.projects_io()) {
      w.proj_in = linear(need(Role::ProjIn, -1), nullptr);
      w.proj_out = linear(need(Role::ProjOut, -1), nullptr);
    }
    switch (c.position_encoding) {
      case PositionEncoding::Learned: {
        // The rows positions 0 .. S-1 use (OPT's table starts with pos_offset unused rows).
        const Staged table = stage(need(Role::PosEmbd, -1), DType::F32);
        w.pos_embd = be.prepare_weight(table.view.row_slice(c.pos_offset, S), m.owned_);
        break;
      }
      case PositionEncoding::Sinusoidal: {
        std::vector<float> table = sinusoidal_positions(S, C);
        w.pos_embd = be.prepare_weight(make_tensor(table.data(), DType::F32, Device::Host, S, C), m.owned_);
        break;
      }
      case PositionEncoding::Rotary:
        break;  // applied to q and k with the layers' frequency tables (below)
    }
    // The rotary frequencies each layer rotates by (BlockDesc::rope_tables), computed once here.
    for (const std::vector<float>& inv : m.block_.rope_tables) {
      std::vector<float> copy = inv;  // prepare_weight takes a host tensor it may not own
      w.rope_tables.push_back(be.prepare_weight(
          make_tensor(copy.data(), DType::F32, Device::Host, 1, int64_t(copy.size())), m.owned_));
    }
    for (int64_t l = 0; l < c.n_layer; ++l) {
      LayerWeights L;
      L.attn_norm_w = vec_of(Role::AttnNorm, l);
      L.attn_norm_b = bias_of(Role::AttnNormBias, l);
      L.attn_qkv = qkv_of(plan, l, config_name, &L.attn_qkv_parts);
      if (c.qk_norm) {
        L.attn_q_norm = vec_of(Role::AttnQNorm, l);
        L.attn_k_norm = vec_of(Role::AttnKNorm, l);
      }
      L.attn_out = linear_of(Role::AttnOut, Role::AttnOutBias, l);
      L.ffn_norm_w = vec_of(Role::FfnNorm, l);
      L.ffn_norm_b = bias_of(Role::FfnNormBias, l);
      if (m.block_.layers[size_t(l)].post_norms) {
        L.attn_post_norm_w = vec_of(Role::AttnPostNorm, l);
        L.ffn_post_norm_w = vec_of(Role::FfnPostNorm, l);
      }
      if (plan.find(Role::FfnGate, l) != nullptr) {
        // gate_proj and up_proj apart: stacked gate | up, the fused layout of a gated MLP (config.h).
        const Role parts[2] = {Role::FfnGate, Role::FfnUp};
        const Role biases[2] = {Role::FfnGateBias, Role::FfnUpBias};
        L.ffn_up = stacked(plan, l, parts, biases, "gate and up projections", config_name, &L.ffn_up_parts);
      } else {
        L.ffn_up = linear_of(Role::FfnUp, Role::FfnUpBias, l);
      }
      L.ffn_down = linear_of(Role::FfnDown, Role::FfnDownBias, l);
      w.layers.push_back(L);
    }
    if (c.output_norm) {
      w.out_norm_w = vec_of(Role::OutputNorm, -1);
      w.out_norm_b = bias_of(Role::OutputNormBias, -1);
    }
    if (c.tie_word_embeddings) {
      w.output = w.token_embd;
      m.bytes_per_token_ += w.output.format.row_bytes(c.embd_io()) * size_t(c.n_vocab);
    } else {
      w.output = linear(need(Role::Output, -1), nullptr);
    }
  }

  static void run(Model& m, const std::map<std::string, HostTensor>& all, const LoadOptions& options,
                  const std::string& weights_where, bool gguf = false, const char* implied_by = nullptr) {
    if (options.weight_dtype && !is_float_weight_dtype(*options.weight_dtype)) {
      throw Error(ErrorKind::Argument, "weight dtype must be F32, F16 or BF16");
    }
    const std::string config_name = gguf || implied_by ? m.dir_.string()
                                    : m.dir_.empty()   ? std::string("config")
                                                       : (m.dir_ / "config.json").string();
    const Plan plan = make_plan(m.config_, all, weights_where, config_name, gguf, implied_by);
    m.block_ = describe_block(m.config_);
    m.backend_ = options.backend ? options.backend
                                 : make_backend("cpu", BackendOptions{options.n_threads, 0, std::nullopt});
    ModelBuilder b{m, options, *m.backend_};
    b.build(plan, config_name);
    m.n_params_ = plan.n_params;
    for (const auto& [dtype, bytes] : plan.bytes_by_dtype) m.stored_bytes_.emplace_back(dtype, bytes);
  }
};

std::shared_ptr<const Model> Model::load(const fs::path& dir, const LoadOptions& options) {
  return load(ModelSource::open(dir), options);
}

std::shared_ptr<const Model> Model::load(const ModelSource& source, const LoadOptions& options) {
  const fs::path& dir = source.path();
  if (source.format() == ModelFormat::Llama2c) {
    std::shared_ptr<Model> m(new Model());
    m->dir_ = dir;
    Llama2cModel g = open_llama2c(dir);
    m->config_ = g.config;
    ModelBuilder::run(*m, g.tensors, options, g.file->path(), false, "the header implies");
    return m;
  }
  if (source.format() == ModelFormat::Llmc) {
    std::shared_ptr<Model> m(new Model());
    m->dir_ = dir;
    LlmcModel g = open_llmc(dir);
    m->config_ = g.config;
    ModelBuilder::run(*m, g.tensors, options, g.file->path(), true);
    return m;
  }
  if (source.format() == ModelFormat::Gguf) {
    std::shared_ptr<Model> m(new Model());
    m->dir_ = dir;
    GgufModel g = open_gguf(source);
    m->config_ = g.config;
    ModelBuilder::run(*m, g.tensors, options, g.file->path(), true);
    return m;
  }
  check_model_dir(dir);
  std::shared_ptr<Model> m(new Model());
  m->dir_ = dir;
  m->config_ = load_config(dir / "config.json");
  // The files stay open only while loading: every tensor is copied out, nothing refers to them afterwards.
  const auto files = open_weight_files(dir);
  ModelBuilder::run(*m, index_tensors(files), options, weights_where(dir, files));
  return m;
}

size_t Model::weight_bytes() const {
  size_t n = 0;
  for (const auto& b : owned_) n += b->bytes();
  return n;
}

ModelSummary Model::inspect(const fs::path& dir) { return inspect(ModelSource::open(dir)); }

ModelSummary Model::inspect(const ModelSource& source) {
  const fs::path& dir = source.path();
  if (source.format() == ModelFormat::Llama2c) {
    ModelSummary s;
    Llama2cModel g = open_llama2c(dir);
    s.config = g.config;
    const Plan plan =
        make_plan(s.config, g.tensors, g.file->path(), g.file->path(), false, "the header implies");
    s.n_params = plan.n_params;
    for (const auto& [dtype, bytes] : plan.bytes_by_dtype) s.stored_bytes.emplace_back(dtype, bytes);
    s.files.push_back(g.file->path());
    const Llama2cHeader& h = g.file->header();
    s.llama2c = Llama2cSummary{h.version, h.group_size, h.shared_classifier};
    return s;
  }
  if (source.format() == ModelFormat::Llmc) {
    ModelSummary s;
    LlmcModel g = open_llmc(dir);
    s.config = g.config;
    const Plan plan = make_plan(s.config, g.tensors, g.file->path(), g.file->path(), true);
    s.n_params = plan.n_params;
    for (const auto& [dtype, bytes] : plan.bytes_by_dtype) s.stored_bytes.emplace_back(dtype, bytes);
    s.files.push_back(g.file->path());
    const LlmcHeader& h = g.file->header();
    s.llmc = LlmcSummary{h.version, h.n_vocab, h.n_vocab_padded};
    return s;
  }
  if (source.format() == ModelFormat::Gguf) {
    ModelSummary s;
    GgufModel g = open_gguf(source);
    s.config = g.config;
    const Plan plan = make_plan(s.config, g.tensors, g.file->path(), g.file->path(), true);
    s.n_params = plan.n_params;
    for (const auto& [dtype, bytes] : plan.bytes_by_dtype) s.stored_bytes.emplace_back(dtype, bytes);
    s.files.push_back(g.file->path());
    if (const auto ft = g.file->get_int("general.file_type")) s.file_type = file_type_name(*ft);
    return s;
  }
  check_model_dir(dir);
  ModelSummary s;
  s.config = load_config(dir / "config.json");
  const auto files = open_weight_files(dir);
  const Plan plan =
      make_plan(s.config, index_tensors(files), weights_where(dir, files), (dir / "config.json").string());
  s.n_params = plan.n_params;
  for (const auto& [dtype, bytes] : plan.bytes_by_dtype) s.stored_bytes.emplace_back(dtype, bytes);
  for (const auto& f : files) s.files.push_back(f->path());
  return s;
}

std::shared_ptr<const Model> Model::random(const Config& config, const LoadOptions& options) {
  config.validate("random model config");
  // Refused before any allocation when the weights cannot fit in memory (a config of 2^20-wide layers ended
  // in "out of memory" with no word of why): their bytes in the dtype the backend will hold, against the
  // machine's physical memory.
  double params = 0;
  const auto tensors = random_tensors(config);
  for (const RandomTensor& t : tensors) {
    double n = 1;
    for (int64_t d : t.shape) n *= double(d);
    params += n;
  }
  const double bytes = params * double(dtype_size(options.weight_dtype.value_or(DType::F32)));
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const double memory = pages > 0 && page > 0 ? double(pages) * double(page) : 0.0;
  if (memory > 0 && bytes > memory) {
    char b[200];
    std::snprintf(
        b, sizeof b,
        "random model config: its %.3g parameters take %.3g GB as %s, more than this machine's %.3g "
        "GB of memory",
        params, bytes / 1e9, std::string(dtype_name(options.weight_dtype.value_or(DType::F32))).c_str(),
        memory / 1e9);
    throw Error(ErrorKind::Argument, b);
  }
  std::shared_ptr<Model> m(new Model());
  m->config_ = config;
  std::map<std::string, HostTensor> all;
  for (const RandomTensor& t : tensors) {
    size_t n = 1;
    for (int64_t d : t.shape) n *= size_t(d);
    auto read = [t, n](void* dst) {
      fill_counter_random(static_cast<float*>(dst), n, t.name, t.mean, t.std);
    };
    all.emplace(t.name, HostTensor{StDtype::F32, t.shape, n * sizeof(float), "<random>", read});
  }
  ModelBuilder::run(*m, all, options, "<random>");
  return m;
}

}  // namespace minigpt
