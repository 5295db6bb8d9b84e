// Models with random weights in the exact Hugging Face layout, for tests and benchmarks of shapes whose
// trained weights are not at hand. The values come from a counter-based generator (src/core/hash.h) that
// tools/reference/make_reference.py implements too, so transformers' logits for the same weights can be
// committed without committing the weights:
//   seed = splitmix64(fnv1a64(bare name)); z = splitmix64(seed + j) for element j (row-major);
//   u = ((z >> 40) + 0.5) / 2^24; value = float((2u - 1) * sqrt(3) * std + mean), in double, in this order;
//   (mean, std) = (1, 0.1) for norm weights (GPT-2: ln_1.weight, ln_2.weight, ln_f.weight), else (0, 0.02).
// Which tensors a model has, and their bare names, come from its architecture's description (src/arch/).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "minigpt/config.h"
#include "minigpt/tensor.h"

namespace minigpt {

// Values [first, first + n) of the tensor named `bare_name`, of this mean and standard deviation.
void fill_counter_random(float* dst, size_t n, std::string_view bare_name, double mean, double std,
                         uint64_t first = 0);

// Every tensor of a model of this config as its architecture describes it: its bare name, its shape in
// Hugging Face's stored layout, and the mean and standard deviation of its random values.
struct RandomTensor {
  std::string name;
  std::vector<int64_t> shape;
  double mean = 0.0;
  double std = 0.02;
};
std::vector<RandomTensor> random_tensors(const Config& c);

// A published shape by name (the hub's model ids: each architecture's list, src/arch/); Error(Argument)
// naming them for another name.
Config gpt2_preset(std::string_view name);
bool is_published_shape(std::string_view name);
std::string published_shape_names();  // "a, b, c"

// Writes config.json + model.safetensors (bare names) with counter-random weights stored as `dtype`.
void write_random_model(const std::filesystem::path& dir, const Config& c, DType dtype = DType::F32);

}  // namespace minigpt
