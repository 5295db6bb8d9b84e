// The backends this build offers, by name. Each backend registers itself (src/backend/registry.cpp lists the
// registration functions of the backends compiled in): a name, a probe that says whether it can run here
// and why not, a factory, and its devices. The CLI picks and lists backends only through this.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "minigpt/backend.h"

namespace minigpt {

struct BackendOptions {
  int n_threads = 0;  // CPU workers (0 = all cores); for a GPU backend, the host threads it may use
  int device = 0;     // which device of the backend
  // The KV cache's dtype (--cache-type: F32, F16 or BF16); unset: the backend's default (F32 on the CPU,
  // F16 on CUDA).
  std::optional<DType> kv_dtype;
  // How BF16 weights are multiplied (--bf16-math); a backend that has one way refuses the other.
  Bf16Math bf16_math = Bf16Math::Auto;
};

struct BackendInfo {
  std::string name;         // "cpu", "cuda"
  std::string description;  // one line
  // Whether the backend can run on this machine; when not, `why` gets the reason in one line.
  std::function<bool(std::string* why)> available;
  std::function<std::shared_ptr<Backend>(const BackendOptions&)> create;
  // One line per device ("0: NVIDIA H100 80GB HBM3, 79.1 GiB, cc 9.0"); empty when unavailable.
  std::function<std::vector<std::string>()> devices;
};

// Every backend compiled in, CPU first.
const std::vector<BackendInfo>& backends();
// nullptr when no backend has this name.
const BackendInfo* find_backend(std::string_view name);
// The named backend; Error(Argument) naming the known ones for an unknown name, Error(Unsupported) with
// the probe's reason when it cannot run here.
std::shared_ptr<Backend> make_backend(std::string_view name, const BackendOptions& options = {});

}  // namespace minigpt
