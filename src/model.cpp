// Loading: find the files, check every tensor against the config, hand the weights to the backend.
#include "minigpt/model.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "minigpt/error.h"
#include "minigpt/io.h"
#include "minigpt/random_weights.h"

namespace minigpt {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// Opens the weight files of `dir`: model.safetensors, or the shards an index names.
std::vector<std::shared_ptr<SafeTensorsFile>> open_weight_files(const fs::path& dir) {
  const fs::path single = dir / "model.safetensors";
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(single)) return {SafeTensorsFile::open(single)};
  if (!fs::exists(index)) {
    std::string hint;
    if (fs::exists(dir / "pytorch_model.bin")) {
      hint = " (found pytorch_model.bin: only safetensors is read; convert it with safetensors' torch.save_file)";
    }
    throw Error(ErrorKind::Io,
                dir.string() + ": no model.safetensors or model.safetensors.index.json" + hint);
  }
  const std::string text = read_regular_file(index, kMaxConfigBytes, "shard index");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    throw Error(ErrorKind::Format, index.string() + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    throw Error(ErrorKind::Format, index.string() + ": missing object 'weight_map'");
  }
  std::set<std::string> shard_names;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it->is_string()) throw Error(ErrorKind::Format, index.string() + ": weight_map['" + it.key() + "'] is not a string");
    const std::string f = it->get<std::string>();
    // A shard is a file beside the index, never a path that climbs out of the model directory.
    if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." || f == "..") {
      throw Error(ErrorKind::Format, index.string() + ": weight_map['" + it.key() + "'] = '" + f + "' is not a plain file name");
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

// h.N.attn.bias (the causal mask) and h.N.attn.masked_bias of a layer N the model has: buffers old
// checkpoints saved, not weights.
bool is_legacy_buffer(const std::string& name, const std::string& prefix, int64_t n_layer) {
  for (int64_t l = 0; l < n_layer; ++l) {
    const std::string h = prefix + "h." + std::to_string(l) + ".attn.";
    if (name == h + "bias" || name == h + "masked_bias") return true;
  }
  return false;
}

}  // namespace

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

struct Model::HostTensor {
  DType dtype;
  std::vector<int64_t> shape;
  size_t nbytes;
  std::string file;                      // where it comes from, for messages
  std::function<void(void* dst)> read;   // copies its nbytes bytes to dst
};

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
      if ((h & (to == DType::F16 ? 0x7C00 : 0x7F80)) == (to == DType::F16 ? 0x7C00 : 0x7F80)) return int64_t(i0 + i);
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

std::shared_ptr<const Model> Model::load(const fs::path& dir, const LoadOptions& options) {
  if (!fs::exists(dir)) throw Error(ErrorKind::Io, "model directory '" + dir.string() + "' does not exist");
  if (!fs::is_directory(dir)) throw Error(ErrorKind::Io, "'" + dir.string() + "' is not a directory");
  const fs::path config_path = dir / "config.json";
  if (!fs::exists(config_path)) {
    throw Error(ErrorKind::Io, dir.string() + ": no config.json (a model directory holds config.json and model.safetensors)");
  }

  std::shared_ptr<Model> m(new Model());
  m->dir_ = dir;
  m->config_ = load_config(config_path);
  // The files stay open only while loading: every tensor is copied out, nothing refers to them afterwards.
  const auto files = open_weight_files(dir);
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
  // save_pretrained writes "transformer.wte.weight"; the hub's original gpt2 files write "wte.weight".
  const std::string prefix = all.count("transformer.wte.weight") ? "transformer." : "";
  m->assemble(all, prefix, options,
              files.size() == 1 ? files[0]->path() : (dir / "model.safetensors.index.json").string());
  return m;
}

std::shared_ptr<const Model> Model::random(const Config& config, const LoadOptions& options) {
  config.validate("random model config");
  std::shared_ptr<Model> m(new Model());
  m->config_ = config;
  std::map<std::string, HostTensor> all;
  for (const auto& [name, shape] : gpt2_tensor_shapes(config)) {
    size_t n = 1;
    for (int64_t d : shape) n *= size_t(d);
    auto read = [name = name, n](void* dst) { fill_counter_random(static_cast<float*>(dst), n, name); };  // clang 14 cannot capture a structured binding
    all.emplace(name, HostTensor{DType::F32, shape, n * sizeof(float), "<random>", read});
  }
  m->assemble(all, "", options, "<random>");
  return m;
}

void Model::assemble(const std::map<std::string, HostTensor>& all, const std::string& prefix, const LoadOptions& options,
                     const std::string& weights_where) {
  const Config& c = config_;
  if (options.weight_dtype && !is_float_weight_dtype(*options.weight_dtype)) {
    throw Error(ErrorKind::Argument, "weight dtype must be F32, F16 or BF16");
  }
  backend_ = options.backend ? options.backend : make_cpu_backend(options.n_threads);
  Backend& be = *backend_;
  const std::string config_name = dir_.empty() ? std::string("config") : (dir_ / "config.json").string();
  std::set<std::string> used;
  std::map<std::string, size_t> bytes_by_dtype;

  // Looks a tensor up and checks its dtype and shape against the config.
  auto find = [&](const std::string& bare, const std::vector<int64_t>& shape, bool with_prefix = true)
      -> const std::pair<const std::string, HostTensor>& {
    const std::string name = (with_prefix ? prefix : "") + bare;
    auto it = all.find(name);
    if (it == all.end()) {
      throw Error(ErrorKind::Shape, weights_where + ": missing tensor '" + name + "' (config.json implies shape " +
                                        shape_str(shape) + ")");
    }
    const HostTensor& t = it->second;
    const std::string where = t.file + ": tensor '" + name + "'";
    if (!is_float_weight_dtype(t.dtype)) {
      throw Error(ErrorKind::Shape, where + " has dtype " + std::string(dtype_name(t.dtype)) +
                                        "; weights must be F32, F16 or BF16");
    }
    if (t.shape != shape) {
      throw Error(ErrorKind::Shape, where + " has shape " + shape_str(t.shape) + " but config.json implies " +
                                        shape_str(shape));
    }
    if (used.insert(name).second) {
      n_params_ += int64_t(t.nbytes / dtype_size(t.dtype));
      bytes_by_dtype[std::string(dtype_name(t.dtype))] += t.nbytes;
    }
    return *it;
  };
  // A tensor read into host memory for the backend to take its copy from; freed when it goes out of scope.
  struct Staged {
    std::unique_ptr<uint8_t[]> bytes;
    Tensor view;
  };
  // Reads a tensor (as a [rows, cols] view) and refuses NaN/Inf, and values that `compute` (the dtype the
  // backend will hold it in) cannot represent.
  auto stage = [&](const std::pair<const std::string, HostTensor>& entry, DType compute) {
    const HostTensor& t = entry.second;
    Staged s;
    s.bytes = std::make_unique_for_overwrite<uint8_t[]>(std::max<size_t>(t.nbytes, 1));
    t.read(s.bytes.get());
    const size_t n = t.nbytes / dtype_size(t.dtype);
    const int64_t cols = t.shape.back(), rows = int64_t(n) / std::max<int64_t>(cols, 1);
    auto at = [&](int64_t i) {
      return std::to_string(i) + (t.shape.size() == 2 ? " (row " + std::to_string(i / cols) + ", column " +
                                                           std::to_string(i % cols) + ")"
                                                     : "");
    };
    if (const int64_t i = first_non_finite(s.bytes.get(), t.dtype, n); i >= 0) {
      throw Error(ErrorKind::Format, t.file + ": tensor '" + entry.first + "' holds " +
                                         fmt_value(element_f32(s.bytes.get(), t.dtype, size_t(i))) + " at element " +
                                         at(i) + ": a checkpoint with NaN or infinite weights cannot give finite logits");
    }
    if (const int64_t i = first_overflow(s.bytes.get(), t.dtype, n, compute); i >= 0) {
      throw Error(ErrorKind::Argument, t.file + ": tensor '" + entry.first + "' holds " +
                                           fmt_value(element_f32(s.bytes.get(), t.dtype, size_t(i))) + " at element " +
                                           at(i) + ", beyond " + std::string(dtype_name(compute)) +
                                           "'s range: it would become infinite (compute in F32 or BF16 instead)");
    }
    s.view = make_tensor(s.bytes.get(), t.dtype, Device::Host, rows, cols);
    return s;
  };
  auto vec = [&](const std::string& bare, int64_t n) {
    const Staged s = stage(find(bare, {n}), DType::F32);
    Tensor t = be.prepare_weight(s.view, owned_);
    bytes_per_token_ += size_t(n) * sizeof(float);
    return t;
  };
  // The compute dtype of a matrix: the requested one, else its stored one.
  auto matrix_dtype = [&](DType stored) { return options.weight_dtype ? *options.weight_dtype : stored; };
  auto linear = [&](const std::string& base, int64_t n_in, int64_t n_out) {
    auto& w_entry = find(base + ".weight", {n_in, n_out});
    const DType dtype = matrix_dtype(w_entry.second.dtype);
    const Staged w = stage(w_entry, dtype);
    const Staged b = stage(find(base + ".bias", {n_out}), DType::F32);
    Linear l;
    l.w = w.view;
    l.b = b.view;
    l.layout = WeightLayout::InOut;
    l.n_in = n_in;
    l.n_out = n_out;
    l = be.prepare_linear(l, dtype, owned_);
    bytes_per_token_ += size_t(n_in * n_out) * dtype_size(l.w.dtype) + size_t(n_out) * sizeof(float);
    return l;
  };

  const int64_t C = c.n_embd, V = c.n_vocab, S = c.n_ctx, F = c.n_inner;
  ModelWeights& w = weights_;
  // wte is an embedding and, when tied, the LM head [V, C] = [n_out, n_in]: prepared as a linear layer.
  Linear wte;
  {
    auto& entry = find("wte.weight", {V, C});
    const DType dtype = matrix_dtype(entry.second.dtype);
    const Staged s = stage(entry, dtype);
    if (c.tie_word_embeddings && all.count("lm_head.weight")) {
      // transformers ties the head to wte and ignores a saved lm_head.weight; a copy is harmless, anything
      // else means the file and config.json disagree about the model.
      const HostTensor& head = all.at("lm_head.weight");
      bool same = head.dtype == entry.second.dtype && head.shape == entry.second.shape;
      if (same) {
        const auto bytes = std::make_unique_for_overwrite<uint8_t[]>(std::max<size_t>(head.nbytes, 1));
        head.read(bytes.get());
        same = std::memcmp(bytes.get(), s.bytes.get(), head.nbytes) == 0;
      }
      if (!same) {
        throw Error(ErrorKind::Shape, head.file + ": tensor 'lm_head.weight' differs from '" + prefix +
                                          "wte.weight' but config.json ties them (tie_word_embeddings is true)");
      }
      used.insert("lm_head.weight");
    }
    wte.w = s.view;
    wte.layout = WeightLayout::OutIn;
    wte.n_in = C;
    wte.n_out = V;
    wte = be.prepare_linear(wte, dtype, owned_);
  }
  w.wte = wte.w;
  if (c.position_encoding == PositionEncoding::Learned) {
    w.wpe = be.prepare_weight(stage(find("wpe.weight", {S, C}), DType::F32).view, owned_);
  } else {
    if (all.count(prefix + "wpe.weight")) {
      throw Error(ErrorKind::Config, config_name + ": position_embedding_type is 'sinusoidal' but the weights have '" +
                                         prefix + "wpe.weight'");
    }
    std::vector<float> table = sinusoidal_positions(S, C);
    w.wpe = be.prepare_weight(make_tensor(table.data(), DType::F32, Device::Host, S, C), owned_);
  }
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    LayerWeights L;
    L.ln_1_w = vec(h + "ln_1.weight", C);
    L.ln_1_b = vec(h + "ln_1.bias", C);
    L.attn_qkv = linear(h + "attn.c_attn", C, 3 * C);
    L.attn_proj = linear(h + "attn.c_proj", C, C);
    L.ln_2_w = vec(h + "ln_2.weight", C);
    L.ln_2_b = vec(h + "ln_2.bias", C);
    L.mlp_fc = linear(h + "mlp.c_fc", C, F);
    L.mlp_proj = linear(h + "mlp.c_proj", F, C);
    w.layers.push_back(L);
  }
  w.ln_f_w = vec("ln_f.weight", C);
  w.ln_f_b = vec("ln_f.bias", C);
  if (c.tie_word_embeddings) {
    w.lm_head = wte;
  } else {
    if (!all.count("lm_head.weight")) {
      throw Error(ErrorKind::Shape, config_name + ": tie_word_embeddings is false but the weights have no 'lm_head.weight'");
    }
    auto& entry = find("lm_head.weight", {V, C}, /*with_prefix=*/false);
    const DType dtype = matrix_dtype(entry.second.dtype);
    const Staged s = stage(entry, dtype);
    Linear head;
    head.w = s.view;
    head.layout = WeightLayout::OutIn;
    head.n_in = C;
    head.n_out = V;
    w.lm_head = be.prepare_linear(head, dtype, owned_);
  }
  bytes_per_token_ += size_t(V * C) * dtype_size(w.lm_head.w.dtype);

  for (const auto& [name, t] : all) {
    if (used.count(name) || is_legacy_buffer(name, prefix, c.n_layer)) continue;
    throw Error(ErrorKind::Shape, t.file + ": unexpected tensor '" + name +
                                      "' (not part of a GPT-2 model with this config.json: n_layer = " +
                                      std::to_string(c.n_layer) + ")");
  }
  for (const auto& [dtype, bytes] : bytes_by_dtype) stored_bytes_.emplace_back(dtype, bytes);
}

}  // namespace minigpt
