// cpu_info() (src/cpu/cpu.h): what the CPU backend runs with on this machine.
#include <cblas.h>

#include <cstdlib>
#include <string>
#include <string_view>

#include "cpu/cpu.h"
#include "cpu/kernels.h"
#include "cpu/sysinfo.h"
#include "minigpt/error.h"

namespace minigpt {

namespace cpu {
// OpenBLAS 0.3.21's F32 GEMM on its AVX-512 kernels (Cooperlake) is as fast as fgemm or a little faster;
// on its AVX2 ones (Haswell, which OPENBLAS_CORETYPE=Haswell forces on an AVX-512 machine) fgemm is 1.7x
// faster (bench pp512, F32 124M, 2 threads, Zen 5: bench/results/2026-11-28-zen5-fgemm.md).
bool own_sgemm() {
  static const bool own = [] {
    if (const char* v = std::getenv("MINIGPT_SGEMM"); v != nullptr && *v != '\0') {
      const std::string_view s(v);
      if (s != "minigpt" && s != "openblas") {
        throw Error(ErrorKind::Argument, "MINIGPT_SGEMM='" + std::string(s) +
                                             "': minigpt or openblas (or unset: chosen by the CPU)");
      }
      if (s == "openblas") return false;
      if (!fgemm_available()) {
        throw Error(ErrorKind::Argument, "MINIGPT_SGEMM=minigpt: the kernel level " +
                                             std::string(kernel_level_name()) +
                                             " has no GEMM of its own (it needs AVX-512)");
      }
      return true;
    }
    if (!fgemm_available()) return false;
    const char* core = openblas_get_corename();
    const std::string_view name = core != nullptr ? core : "";
    for (const char* avx512 : {"SkylakeX", "Cooperlake", "SapphireRapids"}) {
      if (name == avx512) return false;
    }
    return true;
  }();
  return own;
}

// Whether BF16 arithmetic is the faster way to multiply BF16 weights here: with AMX (the amx level's
// tdpbf16ps), or on AMD's cores, where a zmm vdpbf16ps issues every cycle (64 flops, against 32 for one
// vfmadd231ps: Zen 4, 2 threads, bench/peak_flops 465 against 232 Gflop/s). Intel's cores with AVX-512 BF16
// issue it every other cycle and two F32 FMAs a cycle: 167 against 335 Gflop/s on an Emerald Rapids, where
// the F32 GEMM on widened weights prefills BF16 1.2x faster (bench/results/2026-11-29-xeon-prefill.md).
bool bf16_arithmetic_faster() {
  if (std::string_view(kernel_level_name()) == "amx") return true;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_is("amd") != 0;
#else
  return false;
#endif
}

// Where BF16 arithmetic is available and faster (above). It rounds the activations (2^-8 of sum |w x| per
// product; GPT-2 124M's logits move by ~1e-2), so prefill, decode and batched decode do not give the same
// logits as transformers' F32 product of the BF16 weights, which the rest of minigpt's unquantized paths do
// to ~1e-5.
bool bf16_math(std::optional<bool> want) {
  std::string asked = "bf16_math bf16";
  if (!want) {
    const char* v = std::getenv("MINIGPT_BF16_MATH");
    if (v == nullptr || *v == '\0') return bf16_available() && bf16_arithmetic_faster();
    if (std::string_view(v) != "f32" && std::string_view(v) != "bf16") {
      throw Error(ErrorKind::Argument,
                  "MINIGPT_BF16_MATH='" + std::string(v) +
                      "': f32 or bf16 (or unset: bf16 where the CPU has it and it is faster)");
    }
    want = std::string_view(v) == "bf16";
    asked = "MINIGPT_BF16_MATH=bf16";
  }
  if (*want && !bf16_available()) {
    throw Error(ErrorKind::Argument, asked + ": the kernel level " + std::string(kernel_level_name()) +
                                         " has no BF16 arithmetic (it needs AVX-512 BF16)");
  }
  return *want;
}
}  // namespace cpu

CpuInfo cpu_info(Bf16Math bf16_math) {
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
  c.gemm = cpu::own_sgemm() ? "minigpt's (" + c.kernel_level + ")" : "OpenBLAS's sgemm";
  c.bf16_math = cpu::bf16_math(cpu::bf16_choice(bf16_math)) ? "bf16" : "f32";
  return c;
}

}  // namespace minigpt
