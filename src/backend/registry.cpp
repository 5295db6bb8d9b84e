// The backends this build offers (include/minigpt/registry.h). Each backend has a registration function
// here that describes it; backends() calls them in order, once. No static initialiser of another
// translation unit registers anything: minigpt_lib is a static library, and the linker would drop an
// object file that nothing references, its registration with it.
#include "minigpt/registry.h"

#include <cstdio>

#include "cpu/cpu.h"
#include "cuda/cuda.h"
#include "minigpt/error.h"

namespace minigpt {
namespace {

BackendInfo cpu_backend_info() {
  BackendInfo b;
  b.name = "cpu";
  b.description = "CPU (OpenBLAS + own kernels)";
  b.available = [](std::string*) { return true; };
  b.create = [](const BackendOptions& o) {
    // One device, 0: "--device 1" without "--backend cuda" ran on the CPU without a word.
    if (o.device != 0) {
      throw Error(ErrorKind::Argument,
                  "device " + std::to_string(o.device) +
                      ": the cpu backend has one device, 0 (a GPU needs the cuda backend)");
    }
    return make_cpu_backend(o.n_threads, o.kv_dtype.value_or(DType::F32), o.bf16_math);
  };
  b.devices = [] {
    const CpuInfo c = cpu_info();
    return std::vector<std::string>{"0: " + c.model + ", " + std::to_string(c.cores) + " threads, kernels " +
                                    c.kernel_level};
  };
  return b;
}

// "0: NVIDIA H100 80GB HBM3, 79.1 GiB, cc 9.0, 3352 GB/s peak"
std::string describe(const CudaDeviceInfo& d) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%d: %s, %.1f GiB, cc %d.%d, %.0f GB/s peak", d.index, d.name.c_str(),
                double(d.memory_bytes) / double(size_t(1) << 30), d.cc_major, d.cc_minor,
                d.peak_bandwidth_gb_s);
  return buf;
}

BackendInfo cuda_backend_info() {
  BackendInfo b;
  b.name = "cuda";
  b.description = "NVIDIA GPU (cuBLAS + own kernels), in the module libminigpt-cuda.so";
  b.available = [](std::string* why) { return cuda_available(why); };
  b.create = [](const BackendOptions& o) {
    // Its products of BF16 weights keep F32 activations (split into two BF16 halves): one way only.
    if (o.bf16_math == Bf16Math::Bf16) {
      throw Error(ErrorKind::Argument,
                  "bf16_math bf16: the cuda backend multiplies BF16 weights with F32 activations only (f32)");
    }
    CudaOptions c;
    c.device = o.device;
    if (o.kv_dtype) c.kv_dtype = *o.kv_dtype;
    return make_cuda_backend(c);
  };
  b.devices = [] {
    std::vector<std::string> lines;
    if (!cuda_available()) return lines;
    for (const CudaDeviceInfo& d : cuda_devices()) lines.push_back(describe(d));
    return lines;
  };
  return b;
}

// The registration functions of the backends compiled in, in the order they are listed (CPU first).
// "cuda" is always compiled in: its probe and factory load the CUDA module, or say why they cannot (a
// build without CUDA included).
using Registration = BackendInfo (*)();
constexpr Registration kRegistrations[] = {
    cpu_backend_info,
    cuda_backend_info,
};

std::string known_names() {
  std::string s;
  for (const BackendInfo& b : backends()) s += (s.empty() ? "" : ", ") + b.name;
  return s;
}

}  // namespace

const std::vector<BackendInfo>& backends() {
  static const std::vector<BackendInfo> list = [] {
    std::vector<BackendInfo> v;
    for (Registration r : kRegistrations) v.push_back(r());
    return v;
  }();
  return list;
}

const BackendInfo* find_backend(std::string_view name) {
  for (const BackendInfo& b : backends()) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

std::shared_ptr<Backend> make_backend(std::string_view name, const BackendOptions& options) {
  const BackendInfo* b = find_backend(name);
  if (b == nullptr) {
    throw Error(ErrorKind::Argument,
                "unknown backend '" + std::string(name) + "' (this build has: " + known_names() + ")");
  }
  std::string why;
  if (!b->available(&why)) {
    throw Error(ErrorKind::Unsupported, why.empty() ? "backend '" + b->name + "' cannot run here" : why);
  }
  return b->create(options);
}

}  // namespace minigpt
