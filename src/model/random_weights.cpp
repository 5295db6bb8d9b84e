#include "model/random_weights.h"

#include <cmath>
#include <fstream>
#include <optional>

#include "arch/arch.h"
#include "core/hash.h"
#include "formats/safetensors.h"
#include "minigpt/error.h"

namespace minigpt {

void fill_counter_random(float* dst, size_t n, std::string_view name, double mean, double std,
                         uint64_t first) {
  const double amp = std::sqrt(3.0) * std;
  const uint64_t seed = splitmix64(fnv1a64(name));
  for (size_t j = 0; j < n; ++j) {
    const uint64_t z = splitmix64(seed + first + j);
    const double u = (double(z >> 40) + 0.5) / 16777216.0;
    dst[j] = float((2.0 * u - 1.0) * amp + mean);
  }
}

std::vector<RandomTensor> random_tensors(const Config& c) {
  const arch::Architecture* a = arch::find(c.arch);
  if (a == nullptr) throw Error(ErrorKind::Argument, "random model: unknown architecture '" + c.arch + "'");
  std::vector<RandomTensor> out;
  for (const arch::TensorDesc& d : a->tensors(c)) {
    if (d.optional) continue;  // ignored buffers; the head of a tied model
    RandomTensor t;
    t.name = d.names[0];
    t.shape = d.shape;
    if (arch::is_norm_weight(d.role)) t.mean = 1.0 - double(d.shift), t.std = 0.1;
    out.push_back(std::move(t));
  }
  return out;
}

Config gpt2_preset(std::string_view name) {
  if (const std::optional<Config> c = arch::published_shape(name)) return *c;
  throw Error(ErrorKind::Argument,
              "unknown model shape '" + std::string(name) + "' (" + arch::published_shape_names() + ")");
}

bool is_published_shape(std::string_view name) { return arch::published_shape(name).has_value(); }

std::string published_shape_names() { return arch::published_shape_names(); }

void write_random_model(const std::filesystem::path& dir, const Config& c, DType dtype) {
  if (!is_float_weight_dtype(dtype))
    throw Error(ErrorKind::Argument, "random weights must be F32, F16 or BF16");
  std::filesystem::create_directories(dir);
  const auto tensors = random_tensors(c);
  std::vector<std::vector<uint8_t>> storage;
  storage.reserve(tensors.size());
  std::vector<SafeTensorWrite> writes;
  std::vector<float> tmp;
  for (const RandomTensor& t : tensors) {
    size_t n = 1;
    for (int64_t d : t.shape) n *= size_t(d);
    tmp.resize(n);
    fill_counter_random(tmp.data(), n, t.name, t.mean, t.std);
    std::vector<uint8_t> bytes(n * dtype_size(dtype));
    if (dtype == DType::F32) {
      std::memcpy(bytes.data(), tmp.data(), n * 4);
    } else {
      uint16_t* d = reinterpret_cast<uint16_t*>(bytes.data());
      for (size_t i = 0; i < n; ++i) d[i] = dtype == DType::F16 ? f32_to_f16(tmp[i]) : f32_to_bf16(tmp[i]);
    }
    storage.push_back(std::move(bytes));
    writes.push_back({t.name, to_st_dtype(dtype), t.shape, storage.back().data()});
  }
  write_safetensors(dir / "model.safetensors", writes, {{"format", "pt"}});
  std::ofstream(dir / "config.json") << config_to_json(c);
}

}  // namespace minigpt
