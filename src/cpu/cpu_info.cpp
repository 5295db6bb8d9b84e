// cpu_info() (include/minigpt/cpu.h): what the CPU backend runs with on this machine.
#include <cblas.h>

#include "cpu/kernels.h"
#include "minigpt/cpu.h"
#include "minigpt/sysinfo.h"

namespace minigpt {

CpuInfo cpu_info() {
  CpuInfo c;
  c.model = cpu_model_name();
  c.cores = cpu_count();
  c.features = cpu::cpu_features();
  c.kernel_level = cpu::kernel_level_name();  // throws Error(Argument) for a bad MINIGPT_CPU
  c.levels = cpu::supported_levels();
  const char* blas = openblas_get_config();
  c.blas = blas != nullptr ? blas : "OpenBLAS";
  while (!c.blas.empty() && c.blas.back() == ' ') c.blas.pop_back();
  return c;
}

}  // namespace minigpt
