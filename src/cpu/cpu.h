// The CPU backend: OpenBLAS for batched matrix products, own kernels (chosen at run time for the CPU's
// instruction set, see src/cpu/kernels.h) for the rest, on a pool of `n_threads` workers.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "minigpt/backend.h"

namespace minigpt {

// n_threads 0 = the number of cores; kv_dtype: the KV caches' dtype, F32 (exact), F16 or BF16 (half the
// memory); bf16_math: how BF16 weights are multiplied (cpu::bf16_math decides Auto).
std::shared_ptr<Backend> make_cpu_backend(int n_threads = 0, DType kv_dtype = DType::F32,
                                          Bf16Math bf16_math = Bf16Math::Auto);

// What the CPU backend runs with on this machine, for `info --system` and benchmarks.
struct CpuInfo {
  std::string model;         // "AMD EPYC 7B13", from /proc/cpuinfo
  int cores = 0;             // hardware threads
  std::string features;      // the instruction-set features the kernels care about, e.g. "avx2 fma f16c"
  std::string kernel_level;  // the kernel level chosen (or forced by MINIGPT_CPU)
  std::vector<std::string> levels;  // the levels this binary has that this CPU runs
  std::string blas;                 // the BLAS library and its configuration
  std::string
      gemm;  // prefill's product of unquantized weights: "minigpt's (avx512bf16)" or "OpenBLAS's sgemm"
  std::string bf16_math;  // how BF16 weights are multiplied: "bf16" or "f32" (cpu::bf16_math)
};
namespace cpu {
// A Bf16Math as cpu::bf16_math (kernels.h) takes it: nullopt for Auto.
inline std::optional<bool> bf16_choice(Bf16Math m) {
  if (m == Bf16Math::Auto) return std::nullopt;
  return m == Bf16Math::Bf16;
}
}  // namespace cpu

// `bf16_math`: the choice whose outcome CpuInfo::bf16_math reports.
CpuInfo cpu_info(Bf16Math bf16_math = Bf16Math::Auto);

}  // namespace minigpt
