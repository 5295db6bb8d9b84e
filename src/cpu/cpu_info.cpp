// cpu_info() (include/minigpt/cpu.h): what the CPU backend runs with on this machine.
#include <cblas.h>

#include <cstdlib>
#include <string>

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
  // With DYNAMIC_ARCH the configuration names the kernels chosen at load time: from the CPU, or from
  // OPENBLAS_CORETYPE, which some machines set (a Zen 5 with it at Haswell prefills F32 1.6x slower than on
  // the Cooperlake kernels OpenBLAS 0.3.21 picks itself), so say so.
  if (const char* forced = std::getenv("OPENBLAS_CORETYPE"); forced != nullptr)
    c.blas += std::string(" (OPENBLAS_CORETYPE=") + forced + ")";
  return c;
}

}  // namespace minigpt
