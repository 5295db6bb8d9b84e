#include "minigpt/random_weights.h"

#include <cmath>
#include <fstream>

#include "minigpt/error.h"
#include "minigpt/safetensors.h"

namespace minigpt {

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char b : s) h = (h ^ b) * 0x100000001B3ull;
  return h;
}

void fill_counter_random(float* dst, size_t n, std::string_view name, uint64_t first) {
  auto ends_with = [&](std::string_view s) { return name.size() >= s.size() && name.substr(name.size() - s.size()) == s; };
  const bool ln_weight = ends_with("ln_1.weight") || ends_with("ln_2.weight") || name == "ln_f.weight";
  const double mean = ln_weight ? 1.0 : 0.0;
  const double std = ln_weight ? 0.1 : 0.02;
  const double amp = std::sqrt(3.0) * std;
  const uint64_t seed = splitmix64(fnv1a64(name));
  for (size_t j = 0; j < n; ++j) {
    const uint64_t z = splitmix64(seed + first + j);
    const double u = (double(z >> 40) + 0.5) / 16777216.0;
    dst[j] = float((2.0 * u - 1.0) * amp + mean);
  }
}

std::vector<std::pair<std::string, std::vector<int64_t>>> gpt2_tensor_shapes(const Config& c) {
  const int64_t C = c.n_embd, F = c.n_inner;
  std::vector<std::pair<std::string, std::vector<int64_t>>> t;
  t.push_back({"wte.weight", {c.n_vocab, C}});
  if (c.position_encoding == PositionEncoding::Learned) t.push_back({"wpe.weight", {c.n_ctx, C}});
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    t.push_back({h + "ln_1.weight", {C}});
    t.push_back({h + "ln_1.bias", {C}});
    t.push_back({h + "attn.c_attn.weight", {C, 3 * C}});
    t.push_back({h + "attn.c_attn.bias", {3 * C}});
    t.push_back({h + "attn.c_proj.weight", {C, C}});
    t.push_back({h + "attn.c_proj.bias", {C}});
    t.push_back({h + "ln_2.weight", {C}});
    t.push_back({h + "ln_2.bias", {C}});
    t.push_back({h + "mlp.c_fc.weight", {C, F}});
    t.push_back({h + "mlp.c_fc.bias", {F}});
    t.push_back({h + "mlp.c_proj.weight", {F, C}});
    t.push_back({h + "mlp.c_proj.bias", {C}});
  }
  t.push_back({"ln_f.weight", {C}});
  t.push_back({"ln_f.bias", {C}});
  if (!c.tie_word_embeddings) t.push_back({"lm_head.weight", {c.n_vocab, C}});
  return t;
}

Config gpt2_preset(std::string_view name) {
  Config c;
  c.n_vocab = 50257;
  c.n_ctx = 1024;
  c.bos_token_id = c.eos_token_id = 50256;
  if (name == "gpt2") {
    c.n_layer = 12, c.n_head = 12, c.n_embd = 768;
  } else if (name == "gpt2-medium") {
    c.n_layer = 24, c.n_head = 16, c.n_embd = 1024;
  } else if (name == "gpt2-large") {
    c.n_layer = 36, c.n_head = 20, c.n_embd = 1280;
  } else if (name == "gpt2-xl") {
    c.n_layer = 48, c.n_head = 25, c.n_embd = 1600;
  } else if (name == "distilgpt2") {
    c.n_layer = 6, c.n_head = 12, c.n_embd = 768;
  } else {
    throw Error(ErrorKind::Argument, "unknown model shape '" + std::string(name) +
                                         "' (gpt2, gpt2-medium, gpt2-large, gpt2-xl, distilgpt2)");
  }
  c.n_inner = 4 * c.n_embd;
  return c;
}

void write_random_model(const std::filesystem::path& dir, const Config& c, DType dtype) {
  if (!is_float_weight_dtype(dtype)) throw Error(ErrorKind::Argument, "random weights must be F32, F16 or BF16");
  std::filesystem::create_directories(dir);
  const auto shapes = gpt2_tensor_shapes(c);
  std::vector<std::vector<uint8_t>> storage;
  std::vector<SafeTensorWrite> writes;
  std::vector<float> tmp;
  for (const auto& [name, shape] : shapes) {
    size_t n = 1;
    for (int64_t d : shape) n *= size_t(d);
    tmp.resize(n);
    fill_counter_random(tmp.data(), n, name);
    std::vector<uint8_t> bytes(n * dtype_size(dtype));
    if (dtype == DType::F32) {
      std::memcpy(bytes.data(), tmp.data(), n * 4);
    } else {
      uint16_t* d = reinterpret_cast<uint16_t*>(bytes.data());
      for (size_t i = 0; i < n; ++i) d[i] = dtype == DType::F16 ? f32_to_f16(tmp[i]) : f32_to_bf16(tmp[i]);
    }
    storage.push_back(std::move(bytes));
    writes.push_back({name, dtype, shape, storage.back().data()});
  }
  write_safetensors(dir / "model.safetensors", writes, {{"format", "pt"}});
  std::ofstream(dir / "config.json") << config_to_json(c);
}

}  // namespace minigpt
