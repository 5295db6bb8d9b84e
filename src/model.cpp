// Loading: find the files, check every tensor against the config, hand the weights to the backend.
#include "minigpt/model.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "minigpt/error.h"
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
  std::ifstream in(index, std::ios::binary);
  if (!in) throw Error(ErrorKind::Io, index.string() + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
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

bool is_legacy_buffer(const std::string& name) {
  // h.N.attn.bias (the causal mask) and h.N.attn.masked_bias: buffers old checkpoints saved; not weights.
  auto ends_with = [&](const char* s) {
    const size_t n = std::strlen(s);
    return name.size() >= n && name.compare(name.size() - n, n, s) == 0;
  };
  return ends_with(".attn.bias") || ends_with(".attn.masked_bias");
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
  const uint8_t* data;
  DType dtype;
  std::vector<int64_t> shape;
  size_t nbytes;
  std::string file;  // where it came from, for messages
};

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
  m->files_ = open_weight_files(dir);
  std::map<std::string, HostTensor> all;
  for (const auto& f : m->files_) {
    for (const auto& t : f->tensors()) {
      if (!all.emplace(t.name, HostTensor{t.data, t.dtype, t.shape, t.nbytes, f->path()}).second) {
        throw Error(ErrorKind::Format, f->path() + ": tensor '" + t.name + "' also appears in another shard");
      }
    }
  }
  // save_pretrained writes "transformer.wte.weight"; the hub's original gpt2 files write "wte.weight".
  const std::string prefix = all.count("transformer.wte.weight") ? "transformer." : "";
  m->assemble(all, prefix, options);
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
    m->random_storage_.emplace_back(n);
    fill_counter_random(m->random_storage_.back().data(), n, name);
    all.emplace(name, HostTensor{reinterpret_cast<const uint8_t*>(m->random_storage_.back().data()), DType::F32, shape,
                                 n * sizeof(float), "<random>"});
  }
  m->assemble(all, "", options);
  return m;
}

void Model::assemble(const std::map<std::string, HostTensor>& all, const std::string& prefix, const LoadOptions& options) {
  const Config& c = config_;
  if (options.weight_dtype && !is_float_weight_dtype(*options.weight_dtype)) {
    throw Error(ErrorKind::Argument, "weight dtype must be F32, F16 or BF16");
  }
  backend_ = options.backend ? options.backend : make_cpu_backend(options.n_threads);
  Backend& be = *backend_;
  const std::string config_name = dir_.empty() ? std::string("config") : (dir_ / "config.json").string();
  std::set<std::string> used;
  std::map<std::string, size_t> bytes_by_dtype;

  // Looks a tensor up and checks its dtype and shape against the config: a host view [rows, cols].
  auto find = [&](const std::string& bare, std::vector<int64_t> shape, bool with_prefix = true) -> Tensor {
    const std::string name = (with_prefix ? prefix : "") + bare;
    auto it = all.find(name);
    if (it == all.end()) {
      const std::string where = files_.size() == 1 ? files_[0]->path() : (dir_ / "model.safetensors.index.json").string();
      throw Error(ErrorKind::Shape, where + ": missing tensor '" + name + "' (config.json implies shape " +
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
    const int64_t rows = shape.size() == 2 ? shape[0] : 1;
    return make_tensor(const_cast<uint8_t*>(t.data), t.dtype, Device::Host, rows, shape.back());
  };
  auto vec = [&](const std::string& bare, int64_t n) {
    Tensor t = be.prepare_weight(find(bare, {n}), owned_);
    bytes_per_token_ += size_t(n) * sizeof(float);
    return t;
  };
  // The compute dtype of a matrix: the requested one, else its stored one.
  auto matrix_dtype = [&](const Tensor& host) { return options.weight_dtype ? *options.weight_dtype : host.dtype; };
  auto linear = [&](const std::string& base, int64_t n_in, int64_t n_out) {
    Linear l;
    l.w = find(base + ".weight", {n_in, n_out});
    l.b = find(base + ".bias", {n_out});
    l.layout = WeightLayout::InOut;
    l.n_in = n_in;
    l.n_out = n_out;
    l = be.prepare_linear(l, matrix_dtype(l.w), owned_);
    bytes_per_token_ += size_t(n_in * n_out) * dtype_size(l.w.dtype) + size_t(n_out) * sizeof(float);
    return l;
  };

  const int64_t C = c.n_embd, V = c.n_vocab, S = c.n_ctx, F = c.n_inner;
  ModelWeights& w = weights_;
  // wte is an embedding and, when tied, the LM head [V, C] = [n_out, n_in]: prepared as a linear layer.
  Linear wte;
  wte.w = find("wte.weight", {V, C});
  wte.layout = WeightLayout::OutIn;
  wte.n_in = C;
  wte.n_out = V;
  wte = be.prepare_linear(wte, matrix_dtype(wte.w), owned_);
  w.wte = wte.w;
  if (c.position_encoding == PositionEncoding::Learned) {
    w.wpe = be.prepare_weight(find("wpe.weight", {S, C}), owned_);
  } else {
    if (all.count(prefix + "wpe.weight")) {
      throw Error(ErrorKind::Config, config_name + ": position_embedding_type is 'sinusoidal' but the weights have '" +
                                         prefix + "wpe.weight'");
    }
    sinusoid_ = sinusoidal_positions(S, C);
    w.wpe = be.prepare_weight(make_tensor(sinusoid_.data(), DType::F32, Device::Host, S, C), owned_);
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
    if (all.count("lm_head.weight")) used.insert("lm_head.weight");  // a saved copy of wte; transformers ties it too
  } else {
    if (!all.count("lm_head.weight")) {
      throw Error(ErrorKind::Shape, config_name + ": tie_word_embeddings is false but the weights have no 'lm_head.weight'");
    }
    Linear head;
    head.w = find("lm_head.weight", {V, C}, /*with_prefix=*/false);
    head.layout = WeightLayout::OutIn;
    head.n_in = C;
    head.n_out = V;
    w.lm_head = be.prepare_linear(head, matrix_dtype(head.w), owned_);
  }
  bytes_per_token_ += size_t(V * C) * dtype_size(w.lm_head.w.dtype);

  for (const auto& [name, t] : all) {
    if (used.count(name) || is_legacy_buffer(name)) continue;
    throw Error(ErrorKind::Shape, t.file + ": unexpected tensor '" + name +
                                      "' (not part of a GPT-2 model with this config.json: n_layer = " +
                                      std::to_string(c.n_layer) + ")");
  }
  for (const auto& [dtype, bytes] : bytes_by_dtype) stored_bytes_.emplace_back(dtype, bytes);
}

}  // namespace minigpt
