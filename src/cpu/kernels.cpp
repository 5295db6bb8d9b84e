// The CPU kernels' dispatch (the best level this CPU runs, or MINIGPT_CPU's) and the plain reference
// versions. The kernels themselves are in kernels_impl.inc, compiled once per level (see kernels.h).
#include "cpu/kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "minigpt/error.h"
#include "minigpt/tensor.h"

#if defined(__x86_64__) || defined(__i386__)
#define MINIGPT_X86 1
#endif

// The levels this binary holds (CMakeLists.txt defines MINIGPT_KERNELS_<LEVEL> for those the compiler built).
namespace minigpt::cpu {
namespace generic {
extern const KernelTable table;
}
#ifdef MINIGPT_KERNELS_AVX2
namespace avx2 {
extern const KernelTable table;
}
#endif
#ifdef MINIGPT_KERNELS_AVX512
namespace avx512 {
extern const KernelTable table;
}
#endif
#ifdef MINIGPT_KERNELS_AVX512BF16
namespace avx512bf16 {
extern const KernelTable table;
}
#endif
#ifdef MINIGPT_KERNELS_AMX
namespace amx {
extern const KernelTable table;
}
#endif

namespace {

struct Feature {
  const char* name;
  bool present;
};

// The CPU features the levels need. __builtin_cpu_supports (libgcc's CPUID reading) also checks through
// XGETBV that the OS saves the AVX / AVX-512 registers, so a feature is only reported where it can be used.
struct Features {
  Feature f[9];
  bool has(std::string_view name) const {
    for (const Feature& x : f)
      if (x.name != nullptr && name == x.name) return x.present;
    return false;
  }
};

#ifdef MINIGPT_X86
// CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports does not know "f16c"). The OS's saving of
// the YMM state is covered by the avx2 test, which every level using F16C also requires.
bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && ((c >> 29) & 1u) != 0;
}

// AMX with BF16 that this process may use: CPUID leaf 7 EDX bits 22 (AMX-BF16) and 24 (AMX-TILE), the OS
// saving the tile state (XCR0 bits 17, 18), and on Linux the kernel's permission for this process to use
// the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, asked once here; without it the first tile instruction
// faults).
bool has_amx_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0 || ((d >> 22) & 1u) == 0 || ((d >> 24) & 1u) == 0)
    return false;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0 || ((c >> 27) & 1u) == 0) return false;  // OSXSAVE: xgetbv works
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 0x60000u) != 0x60000u) return false;
#ifdef __linux__
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
#endif
  return true;
}
#endif

const Features& features() {
  static const Features fs = [] {
    Features r{};
#ifdef MINIGPT_X86
    __builtin_cpu_init();
    r = {{{"avx2", __builtin_cpu_supports("avx2") != 0},
          {"fma", __builtin_cpu_supports("fma") != 0},
          {"f16c", has_f16c()},
          {"avx512f", __builtin_cpu_supports("avx512f") != 0},
          {"avx512bw", __builtin_cpu_supports("avx512bw") != 0},
          {"avx512vl", __builtin_cpu_supports("avx512vl") != 0},
          {"avx512bf16", __builtin_cpu_supports("avx512bf16") != 0},
          {"avx512vnni", __builtin_cpu_supports("avx512vnni") != 0},
          {"amx-bf16", has_amx_bf16()}}};
#endif
    return r;
  }();
  return fs;
}

struct Level {
  const char* name;
  const KernelTable* table;  // null: not built into this binary
  const char* needs[10];     // CPU features, null-terminated
};

// Lowest first.
const Level kLevels[] = {
    {"generic", &generic::table, {nullptr}},
#ifdef MINIGPT_KERNELS_AVX2
    {"avx2", &avx2::table, {"avx2", "fma", "f16c", nullptr}},
#else
    {"avx2", nullptr, {"avx2", "fma", "f16c", nullptr}},
#endif
#ifdef MINIGPT_KERNELS_AVX512
    {"avx512", &avx512::table, {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", nullptr}},
#else
    {"avx512", nullptr, {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", nullptr}},
#endif
#ifdef MINIGPT_KERNELS_AVX512BF16
    {"avx512bf16",
     &avx512bf16::table,
     {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512bf16", "avx512vnni"}},
#else
    {"avx512bf16",
     nullptr,
     {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512bf16", "avx512vnni"}},
#endif
#ifdef MINIGPT_KERNELS_AMX
    {"amx",
     &amx::table,
     {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512bf16", "avx512vnni", "amx-bf16"}},
#else
    {"amx",
     nullptr,
     {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512bf16", "avx512vnni", "amx-bf16"}},
#endif
};

// The first feature the level needs that this CPU lacks, or null.
const char* missing_feature(const Level& l) {
  for (const char* f : l.needs) {
    if (f == nullptr) break;
    if (!features().has(f)) return f;
  }
  return nullptr;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// what: how the level was asked for, for the message ("MINIGPT_CPU=avx512" or "kernel level avx512").
const KernelTable& level_table(std::string_view name, const std::string& what) {
  for (const Level& l : kLevels) {
    if (name != l.name) continue;
    if (l.table == nullptr) {
      throw Error(ErrorKind::Argument, what + ": this build has no " + l.name +
                                           " kernels (it has: " + joined(supported_levels()) + ")");
    }
    if (const char* f = missing_feature(l)) {
      throw Error(ErrorKind::Argument,
                  what + ": this CPU lacks " + f + " (it supports: " + joined(supported_levels()) + ")");
    }
    return *l.table;
  }
  throw Error(ErrorKind::Argument,
              what +
                  ": unknown kernel level (generic, avx2, avx512, avx512bf16 or amx; this CPU "
                  "supports: " +
                  joined(supported_levels()) + ")");
}

const KernelTable& choose() {
  if (const char* env = std::getenv("MINIGPT_CPU"); env != nullptr && *env != '\0') {
    return level_table(env, std::string("MINIGPT_CPU=") + env);
  }
  const KernelTable* best = &generic::table;
  for (const Level& l : kLevels)
    if (l.table != nullptr && missing_feature(l) == nullptr) best = l.table;
  return *best;
}

}  // namespace

const KernelTable& kernels() {
  static const KernelTable& t = choose();  // once, thread-safe; a bad MINIGPT_CPU throws on every call
  return t;
}

const char* kernel_level_name() { return kernels().name; }

std::vector<std::string> supported_levels() {
  std::vector<std::string> r;
  for (const Level& l : kLevels)
    if (l.table != nullptr && missing_feature(l) == nullptr) r.emplace_back(l.name);
  return r;
}

std::vector<std::string> all_levels() {
  std::vector<std::string> r;
  for (const Level& l : kLevels) r.emplace_back(l.name);
  return r;
}

std::string cpu_features() {
  std::string s;
  for (const Feature& f : features().f)
    if (f.name != nullptr && f.present) {
      if (!s.empty()) s += ' ';
      s += f.name;
    }
  return s;
}

const KernelTable& kernels_for(std::string_view level) {
  return level_table(level, "kernel level " + std::string(level));
}

// The public kernels: one indirect call through the chosen table.
void gemv_f32(float* y, const float* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate) {
  kernels().gemv_f32(y, w, ldw, x, n, k, accumulate);
}
void gemv_packed16(float* y, const uint16_t* w, int64_t kp, const float* x, int64_t r0, int64_t n, int64_t k,
                   bool accumulate, bool is_bf16) {
  kernels().gemv_packed16(y, w, kp, x, r0, n, k, accumulate, is_bf16);
}
void widen_packed_rows(float* dst, int64_t ld_dst, const uint16_t* w, int64_t kp, int64_t r0, int64_t rows,
                       int64_t k, bool is_bf16) {
  kernels().widen_packed_rows(dst, ld_dst, w, kp, r0, rows, k, is_bf16);
}
void widen_rows(float* dst, int64_t ld_dst, const uint16_t* src, int64_t ld_src, int64_t rows, int64_t cols,
                bool is_bf16) {
  kernels().widen_rows(dst, ld_dst, src, ld_src, rows, cols, is_bf16);
}
void narrow_rows(uint16_t* dst, int64_t ld_dst, const float* src, int64_t ld_src, int64_t rows, int64_t cols,
                 bool is_bf16) {
  kernels().narrow_rows(dst, ld_dst, src, ld_src, rows, cols, is_bf16);
}
void attention_block(float* o, int64_t ldo, const float* q, int64_t ldq, int64_t nq, int64_t p0,
                     const float* kt, const float* v, int64_t S, int64_t D, float scale) {
  kernels().attention_block(o, ldo, q, ldq, nq, p0, kt, v, S, D, scale);
}
bool attention_row16(float* o, const float* q, int64_t n, const uint16_t* kt, const uint16_t* v, int64_t S,
                     int64_t D, float scale, bool is_bf16) {
  return kernels().attention_row16(o, q, n, kt, v, S, D, scale, is_bf16);
}
void attention_prefill(float* o, int64_t ldo, const float* q, int64_t ldq, int64_t nq, int64_t p0,
                       const float* kt, const float* v, int64_t S, int64_t D, float scale) {
  kernels().attention_prefill(o, ldo, q, ldq, nq, p0, kt, v, S, D, scale);
}
bool attention_decode_available() { return kernels().attention_decode != nullptr; }
bool attention_decode(float* o, int64_t ldo, float* m, float* l, const float* q, int64_t ldq, int64_t G,
                      int64_t n, const void* kt, const void* v, int64_t S, int64_t D, float scale,
                      KvKind kind) {
  return kernels().attention_decode(o, ldo, m, l, q, ldq, G, n, kt, v, S, D, scale, kind);
}
void gelu_tanh(float* x, int64_t n) { kernels().gelu_tanh(x, n); }
void silu(float* x, int64_t n) { kernels().silu(x, n); }
void gemv_packed16_rows(float* y, int64_t ldy, const uint16_t* w, int64_t kp, const float* x, int64_t ldx,
                        int64_t nx, int64_t r0, int64_t n, int64_t k, bool accumulate, bool is_bf16) {
  kernels().gemv_packed16_rows(y, ldy, w, kp, x, ldx, nx, r0, n, k, accumulate, is_bf16);
}
void gemv_f32_rows(float* y, int64_t ldy, const float* w, int64_t ldw, const float* x, int64_t ldx,
                   int64_t nx, int64_t n, int64_t k, bool accumulate) {
  kernels().gemv_f32_rows(y, ldy, w, ldw, x, ldx, nx, n, k, accumulate);
}

void quantize_acts(const float* x, int64_t k, int8_t* q, float* d, int16_t* s, int64_t block) {
  kernels().quantize_acts(x, k, q, d, s, block);
}
void quantize_acts16(const float* x, int64_t k, int16_t* q, float* d) {
  kernels().quantize_acts16(x, k, q, d);
}
void gemv_quant(QKind kind, float* y, int64_t ldy, const uint8_t* w, int64_t r0, const QAct* x, int64_t nx,
                int64_t n, int64_t k, bool accumulate) {
  kernels().gemv_quant(kind, y, ldy, w, r0, x, nx, n, k, accumulate, quant_prefetch_bytes());
}

// The distance, measured (minigpt bench, random GPT-2 124M, tg128, 2 threads, interleaved rounds):
// - AMD EPYC Zen 3 (AVX2): Q8_0 166-178 tok/s at 2048 bytes against 147-162 without; Q4_K_M
//   224-276 against 183-233; 1024 about as good as 2048, 4096 worse. bench_gemv, one thread from DRAM:
//   Q8_0 19.3 GB/s against 15.3.
// - Intel Xeon with AVX-512 VNNI (the GPU host, bench/results/2026-11-27-xeon-quant-prefetch.md;
//   two threads pinned to two cores; against the same kernels without prefetch), two rounds: at its native
//   level (avx512bf16) Q8_0 95 / 104 tok/s without, 139 / 131 at 2048, 196 / 136 at 4096; Q4_K_M 130 / 126,
//   218 / 161, 290 / 202; at the avx2 level Q8_0 135 / 152 at 2048, 181 / 127 at 4096. Intel's server cores
//   keep fewer lines in flight per stream on their own, so there the kernels prefetch further ahead.
int64_t quant_prefetch_bytes() {
  static const int64_t bytes = [] {
#ifdef MINIGPT_X86
    unsigned a = 0, b = 0, c = 0, d = 0;
    // CPUID leaf 0: the vendor string in EBX, EDX, ECX ("GenuineIntel").
    if (__get_cpuid(0, &a, &b, &c, &d) != 0 && b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu)
      return int64_t(4096);
#endif
    return int64_t(2048);
  }();
  return bytes;
}

bool fgemm_available() { return kernels().fgemm != nullptr; }
void fgemm_pack_x(float* xp, const float* x, int64_t ldx, int64_t nt, int64_t k, int64_t t0, int64_t t1) {
  if (kernels().fgemm_pack_x != nullptr) {
    kernels().fgemm_pack_x(xp, x, ldx, nt, k, t0, t1);
    return;
  }
  // the layout, for tests at the levels without fgemm
  for (int64_t b = t0; b < t1; b += 32) {
    float* blk = xp + b * k;
    const int64_t n = std::min<int64_t>(32, nt - b);
    // 32 x 32 squares: read 32 rows of 32, write 32 columns of 32 (the writes stay within 4 KB)
    for (int64_t j0 = 0; j0 < k; j0 += 32) {
      const int64_t j1 = std::min(k, j0 + 32);
      for (int64_t t = 0; t < n; ++t) {
        const float* xt = x + (b + t) * ldx;
        for (int64_t j = j0; j < j1; ++j) blk[j * 32 + t] = xt[j];
      }
      for (int64_t t = n; t < 32; ++t) {
        for (int64_t j = j0; j < j1; ++j) blk[j * 32 + t] = 0.0f;
      }
    }
  }
}
void fgemm(float* y, int64_t ldy, const float* w, int64_t ldw, int64_t rows, const float* xp, int64_t nt,
           int64_t k) {
  kernels().fgemm(y, ldy, w, ldw, rows, xp, nt, k);
}
bool q8gemm_available() { return kernels().q8gemm != nullptr; }
void q8gemm_pack_x(uint8_t* xp, const float* x, int64_t ldx, int64_t nt, int64_t k, int64_t t0, int64_t t1) {
  kernels().q8gemm_pack_x(xp, x, ldx, nt, k, t0, t1);
}
void q8gemm_pack_w(uint8_t* panel, const uint8_t* w, int64_t r0, int64_t rows, int64_t k) {
  kernels().q8gemm_pack_w(panel, w, r0, rows, k);
}

void q8gemm(float* y, int64_t ldy, const uint8_t* panel, const uint8_t* xp, int64_t nt, int64_t rows,
            int64_t k, bool accumulate) {
  kernels().q8gemm(y, ldy, panel, xp, nt, rows, k, accumulate);
}
bool bf16_available() { return kernels().bgemm != nullptr; }
void to_bf16_rows(uint16_t* xb, int64_t ldxb, const float* x, int64_t ldx, int64_t nt, int64_t k) {
  kernels().to_bf16_rows(xb, ldxb, x, ldx, nt, k);
}
void gemv_bf16_rows(float* y, int64_t ldy, const uint16_t* w, int64_t kp, const uint16_t* xb, int64_t ldxb,
                    int64_t nx, int64_t r0, int64_t n, int64_t k, bool accumulate) {
  kernels().gemv_bf16_rows(y, ldy, w, kp, xb, ldxb, nx, r0, n, k, accumulate);
}
void bgemm_pack_x(uint16_t* xp, const float* x, int64_t ldx, int64_t nt, int64_t k, int64_t t0, int64_t t1) {
  kernels().bgemm_pack_x(xp, x, ldx, nt, k, t0, t1);
}
void bgemm(float* y, int64_t ldy, const uint16_t* w, int64_t kp, int64_t r0, int64_t rows, const uint16_t* xp,
           int64_t nt, int64_t k) {
  kernels().bgemm(y, ldy, w, kp, r0, rows, xp, nt, k);
}
bool qgemm_available() { return kernels().qgemm != nullptr; }
bool qgemm_takes(QKind kind) {
  return kernels().qgemm != nullptr && ((kernels().qgemm_kinds >> int(kind)) & 1u);
}
void qgemm(QKind kind, float* y, int64_t ldy, const uint8_t* panel, const uint8_t* xu, int64_t ldxu,
           const float* xd, const float* xo, int64_t ldxd, int64_t nt, int64_t rows, int64_t k) {
  kernels().qgemm(kind, y, ldy, panel, xu, ldxu, xd, xo, ldxd, nt, rows, k);
}

namespace {
float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}
// The six-bit scale and min of sub-block j of a Q4_K / Q5_K block's 12 scale bytes (ggml's get_scale_min_k4).
void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}
}  // namespace

namespace {
void read_quant_block(uint8_t* blk, const uint8_t* w, int64_t n, int64_t j, int64_t nb, int64_t bytes,
                      QuantLayout layout);
}  // namespace

namespace {
// One 32-column piece of row r into its panel block at dst: the values (4 columns per 4 bytes, row r's at 4 r
// of each 64), then for Q6_K (two_halves) dw, -128 sum(q) of columns 0..15, dw2, -128 sum(q) of 16..31; for
// the other kinds dw, -128 sum(q), and ow.
inline void panel_piece(uint8_t* dst, int64_t r, const int8_t* v, float dw, float dw2, float ow,
                        bool two_halves) {
  for (int g = 0; g < 8; ++g) std::memcpy(dst + 64 * g + 4 * r, v + 4 * g, 4);
#if defined(__SSE2__)
  // The sums of the two halves: SSE2's psadbw (x86-64's baseline) on the values offset to unsigned bytes, as
  // the compiler left the loop below scalar.
  const __m128i bias = _mm_set1_epi8(char(0x80)), zero = _mm_setzero_si128();
  const __m128i lo =
      _mm_sad_epu8(_mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v)), bias), zero);
  const __m128i hi =
      _mm_sad_epu8(_mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + 16)), bias), zero);
  const int32_t sum = _mm_cvtsi128_si32(lo) + _mm_extract_epi16(lo, 4) - 128 * 16;
  const int32_t sum2 = _mm_cvtsi128_si32(hi) + _mm_extract_epi16(hi, 4) - 128 * 16;
#else
  int32_t sum = 0, sum2 = 0;
  for (int i = 0; i < 16; ++i) {
    sum += v[i];
    sum2 += v[i + 16];
  }
#endif
  const auto put = [&](int64_t at, auto x) { std::memcpy(dst + at + 4 * r, &x, 4); };
  put(512, dw);
  if (two_halves) {
    put(576, int32_t(-128 * sum));
    put(640, dw2);
    put(704, int32_t(-128 * sum2));
  } else {
    put(576, int32_t(-128 * (sum + sum2)));
    put(768, ow);
  }
}
}  // namespace

namespace {
// The bit of the fifth-bit plane's byte b that holds row r's value b + 16 h (cpu::QuantLayout::Planes).
inline int plane_bit(int64_t r, int h) { return int(4 * (r % 2) + 2 * h + r / 2); }
// qgemm_pack of a Planes kind (HighBit: Q5_0, Q5_1; Min: Q5_1, Q4_1), read in place: q = the nibble and the
// fifth bit, less 16 for Q5_0 (dw = d, ow = 0); Q5_1, Q4_1 keep q (0..31, 0..15) with dw = d, ow = m.
template <bool HighBit, bool Min>
void pack_planes(uint8_t* panel, const uint8_t* w, int64_t r0, int64_t rows, int64_t nb, int64_t bytes) {
  const int64_t qh_at = Min ? 16 : 8, qs_at = qh_at + (HighBit ? 16 : 0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = r0 + r, rr = n % 4;
    const uint8_t* group = w + (n / 4) * 4 * nb * bytes;
    for (int64_t j = 0; j < nb; ++j) {
      const uint8_t* unit = group + j * 4 * bytes;
      const uint8_t* qs = unit + qs_at + 16 * rr;
      const uint8_t* plane = unit + qh_at;
      const int bl = plane_bit(rr, 0), bh = plane_bit(rr, 1);
      int8_t v[32];
      for (int i = 0; i < 16; ++i) {
        v[i] = int8_t((qs[i] & 0xF) | (HighBit ? ((plane[i] >> bl) & 1) << 4 : 0));
        v[i + 16] = int8_t((qs[i] >> 4) | (HighBit ? ((plane[i] >> bh) & 1) << 4 : 0));
        if (HighBit && !Min) v[i] = int8_t(v[i] - 16), v[i + 16] = int8_t(v[i + 16] - 16);
      }
      panel_piece(panel + j * kQgemmBlockBytes, r, v, half_at(unit + 2 * rr), 0,
                  Min ? half_at(unit + 8 + 2 * rr) : 0.0f, false);
    }
  }
}
}  // namespace

// Row by row, each file block read once and its 32-column pieces decoded with the kind fixed: packing runs 8
// times slower when the kind is tested and Q4_K's block gathered again for every piece (bench_gemv's int8
// GEMM times the packing with the product).
void qgemm_pack(uint8_t* panel, QKind kind, const uint8_t* w, int64_t r0, int64_t rows, int64_t k) {
  // Every byte a tile reads is written below for 16 rows; fewer leave rows of zeros.
  if (rows < kQgemmRows) std::memset(panel, 0, size_t(qgemm_panel_bytes(k)));
  if (kind == QKind::Q8_0)  // its activations are 16-bit (acts_int16): no level's qgemm_kinds
    throw Error(ErrorKind::Argument, "qgemm_pack: Q8_0 does not run through the int8 GEMM");
  if (kind == QKind::Q5_0 || kind == QKind::Q5_1 || kind == QKind::Q4_1) {
    const int64_t bytes = kind == QKind::Q5_0 ? 22 : kind == QKind::Q5_1 ? 24 : 20;
    switch (kind) {
      case QKind::Q5_0:
        return pack_planes<true, false>(panel, w, r0, rows, k / 32, bytes);
      case QKind::Q5_1:
        return pack_planes<true, true>(panel, w, r0, rows, k / 32, bytes);
      default:
        return pack_planes<false, true>(panel, w, r0, rows, k / 32, bytes);
    }
  }
  if (kind == QKind::Q4_0) {
    // SplitScales: per block of a 4-row group, the 4 F16 scales, then the 4 rows' values
    const int64_t bytes = 18, nb = k / 32;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t n = r0 + r, rr = n % 4;
      const uint8_t* group = w + (n / 4) * 4 * nb * bytes;
      for (int64_t j = 0; j < nb; ++j) {
        const uint8_t* blk = group + j * 4 * bytes;
        int8_t v[32];
        const uint8_t* qs = blk + 8 + 16 * rr;
        for (int i = 0; i < 16; ++i) {
          v[i] = int8_t((qs[i] & 0xF) - 8);
          v[i + 16] = int8_t((qs[i] >> 4) - 8);
        }
        panel_piece(panel + j * kQgemmBlockBytes, r, v, half_at(blk + 2 * rr), 0, 0, false);
      }
    }
    return;
  }
  const int64_t nb = k / 256;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = r0 + r;
    for (int64_t j = 0; j < nb; ++j) {
      uint8_t* dst = panel + j * 8 * kQgemmBlockBytes;
      int8_t v[32];
      if (kind == QKind::Q6_K) {
        const uint8_t* b = w + QuantInterleave::block_index(n, j, nb) * 210;
        const float d = half_at(b + 208);
        for (int64_t s = 0; s < 8; ++s) {
          const int64_t h = s / 4, g = s % 4;  // half of 128 values, 32-value group in it
          const uint8_t* ql = b + 64 * h + 32 * (g & 1);
          const uint8_t* qh = b + 128 + 32 * h;
          const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * h);
          const int shift = g < 2 ? 0 : 4;
          for (int l = 0; l < 32; ++l)
            v[l] = int8_t((((ql[l] >> shift) & 0xF) | (((qh[l] >> (2 * g)) & 3) << 4)) - 32);
          panel_piece(dst + s * kQgemmBlockBytes, r, v, d * float(sc[2 * g]), d * float(sc[2 * g + 1]), 0,
                      true);
        }
        continue;
      }
      // Q4_K (gathered from its group's 576 bytes) or Q5_K (in place)
      const bool q5 = kind == QKind::Q5_K;
      uint8_t gathered[144];
      const uint8_t* b;
      if (q5) {
        b = w + QuantInterleave::block_index(n, j, nb) * 176;
      } else {
        read_quant_block(gathered, w, n, j, nb, 144, QuantLayout::Q4KPacked);
        b = gathered;
      }
      const float d = half_at(b), dmin = half_at(b + 2);
      const uint8_t* qs0 = b + (q5 ? 48 : 16);
      for (int64_t s = 0; s < 8; ++s) {
        const uint8_t* qs = qs0 + 32 * (s / 2);
        const int shift = s % 2 == 0 ? 0 : 4;
        if (q5) {
          for (int l = 0; l < 32; ++l)
            v[l] = int8_t(((qs[l] >> shift) & 0xF) | (((b[16 + l] >> s) & 1) << 4));
        } else {
          for (int l = 0; l < 32; ++l) v[l] = int8_t((qs[l] >> shift) & 0xF);
        }
        int sc, m;
        scale_min_k4(int(s), b + 4, &sc, &m);
        panel_piece(dst + s * kQgemmBlockBytes, r, v, d * float(sc), 0, -dmin * float(m), false);
      }
    }
  }
}

namespace {
// Where the bytes of block j of row n lie in a QuantInterleave matrix of the Blocks or SplitScales layout:
// `scale` for the split layout's 2 scale bytes (else unused), `values` for the rest of the block (the whole
// block when not split).
struct QuantPlace {
  int64_t scale, values;
};
QuantPlace quant_place(int64_t n, int64_t j, int64_t nb, int64_t bytes, bool split) {
  const int64_t i = QuantInterleave::block_index(n, j, nb);
  if (!split) return {0, i * bytes};
  const int64_t group = (i / 4) * 4 * bytes, r = n % 4;
  return {group + 2 * r, group + 8 + r * (bytes - 2)};
}

// The Q4KPacked layout: row r's Q4_K block `blk` (144 bytes) into, or out of, the 576 bytes of its group's
// blocks j at `unit`.
void q4k_pack(uint8_t* unit, int64_t r, const uint8_t* blk) {
  std::memcpy(unit + 2 * r, blk, 2);
  std::memcpy(unit + 8 + 2 * r, blk + 2, 2);
  for (int u = 0; u < 3; ++u) std::memcpy(unit + 16 + 16 * u + 4 * r, blk + 4 + 4 * u, 4);
  for (int run = 0; run < 16; ++run) std::memcpy(unit + 64 + 32 * run + 8 * r, blk + 16 + 8 * run, 8);
}
void q4k_unpack(uint8_t* blk, const uint8_t* unit, int64_t r) {
  std::memcpy(blk, unit + 2 * r, 2);
  std::memcpy(blk + 2, unit + 8 + 2 * r, 2);
  for (int u = 0; u < 3; ++u) std::memcpy(blk + 4 + 4 * u, unit + 16 + 16 * u + 4 * r, 4);
  for (int run = 0; run < 16; ++run) std::memcpy(blk + 16 + 8 * run, unit + 64 + 32 * run + 8 * r, 8);
}

// The Planes layout (Q5_0: 22 bytes, Q5_1: 24, Q4_1: 20, told apart by their size): where each field of a
// block lies in the file's block and in its group's 4 blocks (row r's at the plane's offset + its width r).
struct PlaneFields {
  bool m, qh;  // whether the kind has a min (Q5_1, Q4_1) and fifth bits (Q5_0, Q5_1)
  explicit PlaneFields(int64_t bytes) : m(bytes != 22), qh(bytes != 20) {}
  int64_t file_qh() const { return m ? 4 : 2; }
  int64_t file_qs() const { return 2 + (m ? 2 : 0) + (qh ? 4 : 0); }
  int64_t unit_qh() const { return m ? 16 : 8; }
  int64_t unit_qs() const { return unit_qh() + (qh ? 16 : 0); }
};
void planes_pack(uint8_t* unit, int64_t r, const uint8_t* blk, int64_t bytes) {
  const PlaneFields f(bytes);
  std::memcpy(unit + 2 * r, blk, 2);
  if (f.m) std::memcpy(unit + 8 + 2 * r, blk + 2, 2);
  if (f.qh) {  // qh: 32 bits little-endian, bit i for value i; the plane is zero before the first row
    const uint8_t* q = blk + f.file_qh();
    const uint32_t qh = uint32_t(q[0]) | uint32_t(q[1]) << 8 | uint32_t(q[2]) << 16 | uint32_t(q[3]) << 24;
    for (int b = 0; b < 16; ++b)
      for (int h = 0; h < 2; ++h)
        unit[f.unit_qh() + b] |= uint8_t(((qh >> (b + 16 * h)) & 1u) << plane_bit(r, h));
  }
  std::memcpy(unit + f.unit_qs() + 16 * r, blk + f.file_qs(), 16);
}
void planes_unpack(uint8_t* blk, const uint8_t* unit, int64_t r, int64_t bytes) {
  const PlaneFields f(bytes);
  std::memcpy(blk, unit + 2 * r, 2);
  if (f.m) std::memcpy(blk + 2, unit + 8 + 2 * r, 2);
  if (f.qh) {
    uint32_t qh = 0;
    for (int b = 0; b < 16; ++b)
      for (int h = 0; h < 2; ++h)
        qh |= uint32_t((unit[f.unit_qh() + b] >> plane_bit(r, h)) & 1) << (b + 16 * h);
    for (int i = 0; i < 4; ++i) blk[f.file_qh() + i] = uint8_t(qh >> (8 * i));
  }
  std::memcpy(blk + f.file_qs(), unit + f.unit_qs() + 16 * r, 16);
}

// Block j of row n of a QuantInterleave matrix, as the file holds it, into blk (`bytes`).
void read_quant_block(uint8_t* blk, const uint8_t* w, int64_t n, int64_t j, int64_t nb, int64_t bytes,
                      QuantLayout layout) {
  if (layout == QuantLayout::Q4KPacked) {
    q4k_unpack(blk, w + ((n / 4) * nb + j) * 4 * bytes, n % 4);
    return;
  }
  if (layout == QuantLayout::Planes) {
    planes_unpack(blk, w + ((n / 4) * nb + j) * 4 * bytes, n % 4, bytes);
    return;
  }
  const bool split = layout == QuantLayout::SplitScales;
  const QuantPlace p = quant_place(n, j, nb, bytes, split);
  if (split) {
    std::memcpy(blk, w + p.scale, 2);
    std::memcpy(blk + 2, w + p.values, size_t(bytes - 2));
  } else {
    std::memcpy(blk, w + p.values, size_t(bytes));
  }
}
}  // namespace

void interleave_quant_rows(uint8_t* dst, const uint8_t* src, int64_t n, int64_t nb, int64_t bytes,
                           QuantLayout layout) {
  const int64_t np = QuantInterleave::padded_rows(n);
  std::memset(dst, 0, size_t(np * nb * bytes));
  const bool split = layout == QuantLayout::SplitScales;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < nb; ++j) {
      const uint8_t* b = src + (r * nb + j) * bytes;
      if (layout == QuantLayout::Q4KPacked) {
        q4k_pack(dst + ((r / 4) * nb + j) * 4 * bytes, r % 4, b);
        continue;
      }
      if (layout == QuantLayout::Planes) {
        planes_pack(dst + ((r / 4) * nb + j) * 4 * bytes, r % 4, b, bytes);
        continue;
      }
      const QuantPlace p = quant_place(r, j, nb, bytes, split);
      if (split) {
        std::memcpy(dst + p.scale, b, 2);
        std::memcpy(dst + p.values, b + 2, size_t(bytes - 2));
      } else {
        std::memcpy(dst + p.values, b, size_t(bytes));
      }
    }
  }
}

void gather_quant_row(uint8_t* dst, const uint8_t* w, int64_t n, int64_t nb, int64_t bytes,
                      QuantLayout layout) {
  for (int64_t j = 0; j < nb; ++j) read_quant_block(dst + j * bytes, w, n, j, nb, bytes, layout);
}

namespace reference {
namespace {
template <typename Load>
void gemv(float* y, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate, Load load) {
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t j = 0; j < k; ++j) s += double(load(i * ldw + j)) * double(x[j]);
    y[i] = float(accumulate ? double(y[i]) + s : s);
  }
}
}  // namespace
void gemv_bf16(float* y, const uint16_t* w, int64_t ldw, const float* x, int64_t n, int64_t k,
               bool accumulate) {
  gemv(y, ldw, x, n, k, accumulate, [&](int64_t i) { return bf16_to_f32(w[i]); });
}
void gemv_f16(float* y, const uint16_t* w, int64_t ldw, const float* x, int64_t n, int64_t k,
              bool accumulate) {
  gemv(y, ldw, x, n, k, accumulate, [&](int64_t i) { return f16_to_f32(w[i]); });
}
void gemv_f32(float* y, const float* w, int64_t ldw, const float* x, int64_t n, int64_t k, bool accumulate) {
  gemv(y, ldw, x, n, k, accumulate, [&](int64_t i) { return w[i]; });
}
void gelu_tanh(float* x, int64_t n) {
  const float c = std::sqrt(2.0f / float(M_PI));
  for (int64_t i = 0; i < n; ++i)
    x[i] = 0.5f * x[i] * (1.0f + std::tanh(c * (x[i] + 0.044715f * x[i] * x[i] * x[i])));
}
void silu(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = float(double(x[i]) / (1.0 + std::exp(-double(x[i]))));
}
}  // namespace reference

}  // namespace minigpt::cpu
