// The CPU backend: OpenBLAS for batched matrix products, own kernels (chosen at run time for the CPU's
// instruction set, see src/cpu/kernels.h) for the rest, on a pool of `n_threads` workers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "minigpt/backend.h"

namespace minigpt {

// n_threads 0 = the number of cores; kv_dtype: the KV caches' dtype, F32 (exact), F16 or BF16 (half the
// memory).
std::shared_ptr<Backend> make_cpu_backend(int n_threads = 0, DType kv_dtype = DType::F32);

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
CpuInfo cpu_info();

}  // namespace minigpt
