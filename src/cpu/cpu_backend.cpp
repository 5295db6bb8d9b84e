// The CPU backend: OpenBLAS for matrix products, plain loops (vectorised by the compiler) for the rest,
// spread over a persistent thread pool.
#include <cblas.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <span>
#include <thread>

#include "cpu/cpu.h"
#include "cpu/host_memory.h"
#include "cpu/kernels.h"
#include "cpu/sysinfo.h"
#include "cpu/thread_pool.h"
#include "minigpt/backend.h"
#include "minigpt/error.h"
#include "quant/quant.h"

namespace minigpt {
namespace {

// dst [cols, rows] = src^T, src a host matrix of any float type, in 64 x 64 tiles (a row-by-row transpose
// of a 768 x 3072 matrix misses the cache on every write).
void transpose_to_f32(float* dst, const Tensor& src) {
  constexpr int64_t kTile = 64;
  std::vector<float> row(static_cast<size_t>(kTile));
  for (int64_t r0 = 0; r0 < src.rows; r0 += kTile) {
    for (int64_t c0 = 0; c0 < src.cols; c0 += kTile) {
      const int64_t nc = std::min(kTile, src.cols - c0);
      for (int64_t r = r0; r < std::min(src.rows, r0 + kTile); ++r) {
        const char* p =
            static_cast<const char*>(src.data) + size_t(r * src.stride + c0) * dtype_size(src.dtype);
        convert_to_f32(row.data(), p, src.dtype, size_t(nc));
        for (int64_t c = 0; c < nc; ++c) dst[(c0 + c) * src.rows + r] = row[size_t(c)];
      }
    }
  }
}

// How the CPU backend holds a linear layer's matrix (Linear::layout).
enum CpuLayout : uint32_t {
  kOutInF32 = 1,  // F32 [n_out, n_in] (GPT-2's Conv1D [n_in, n_out] transposed at load)
  kPacked16 = 2,  // F16/BF16 in cpu::Packed16 (kernels.h): rows = n_out, cols = n_in, stride = padded n_in
  kQuant = 3,     // GGUF blocks in cpu::QuantInterleave order: rows = n_out, cols = n_in
};

// The kernel kind of a quantized type, or false for the types that are widened to F32 rows instead.
bool quant_kind(GgmlType t, cpu::QKind* kind) {
  switch (t) {
    case GgmlType::Q8_0:
      *kind = cpu::QKind::Q8_0;
      return true;
    case GgmlType::Q4_0:
      *kind = cpu::QKind::Q4_0;
      return true;
    case GgmlType::Q4_K:
      *kind = cpu::QKind::Q4_K;
      return true;
    case GgmlType::Q5_K:
      *kind = cpu::QKind::Q5_K;
      return true;
    case GgmlType::Q6_K:
      *kind = cpu::QKind::Q6_K;
      return true;
    case GgmlType::Q5_0:
      *kind = cpu::QKind::Q5_0;
      return true;
    case GgmlType::Q5_1:
      *kind = cpu::QKind::Q5_1;
      return true;
    case GgmlType::Q4_1:
      *kind = cpu::QKind::Q4_1;
      return true;
    default:
      return false;
  }
}

// The layout a quantized type is held in for its kernels (cpu::interleave_quant_rows).
cpu::QuantLayout layout_of(GgmlType t) {
  cpu::QKind kind;
  return quant_kind(t, &kind) ? cpu::quant_layout(kind) : cpu::QuantLayout::Blocks;
}

// Rows of activations quantized for the integer kernels (cpu::QAct), in one buffer that grows as needed:
// each thread that runs a product has its own (the session's thread; the pool's threads only read it).
class QuantActs {
 public:
  // Quantizes the rows of x as a kind's kernels take them (cpu::acts_int16, cpu::act_block_size; k a
  // multiple of the block).
  void quantize(const Tensor& x, cpu::QKind kind) {
    const int64_t k = x.cols, n = x.rows, block = cpu::act_block_size(kind);
    const bool wide = cpu::acts_int16(kind);
    // Per row: the values (int8 or int16), the scales, the sums of 16 (int8 only), rounded up to 64 bytes so
    // that every row's values start 64-byte aligned.
    const size_t q_bytes = size_t(k) * (wide ? 2 : 1);
    const size_t per_row = (q_bytes + size_t(k / 32) * 4 + (wide ? 0 : size_t(k / 16) * 2) + 63) / 64 * 64;
    const size_t need = per_row * size_t(n) + 64;
    if (bytes_.size() < need) bytes_.resize(need);
    rows_.resize(size_t(n));
    auto base = reinterpret_cast<uintptr_t>(bytes_.data());
    uint8_t* p = bytes_.data() + ((64 - base % 64) % 64);
    for (int64_t t = 0; t < n; ++t, p += per_row) {
      const float* xt = x.ptr<float>() + t * x.stride;
      float* d = reinterpret_cast<float*>(p + q_bytes);
      if (wide) {
        int16_t* q16 = reinterpret_cast<int16_t*>(p);
        cpu::quantize_acts16(xt, k, q16, d);
        rows_[size_t(t)] = {nullptr, d, nullptr, q16};
      } else {
        int8_t* q = reinterpret_cast<int8_t*>(p);
        int16_t* s = reinterpret_cast<int16_t*>(p + q_bytes + size_t(k / 32) * 4);
        cpu::quantize_acts(xt, k, q, d, s, block);
        rows_[size_t(t)] = {q, d, s, nullptr};
      }
    }
  }
  const cpu::QAct* rows() const { return rows_.data(); }

 private:
  std::vector<uint8_t> bytes_;
  std::vector<cpu::QAct> rows_;
};

// The KV cache: for each layer and sequence, K transposed [Hkv, D, Sp] (a block of keys' scores is then one
// FMA per head dimension over contiguous keys) and V [Hkv, Sp, D]: a decode step reads each head's K and V
// as long contiguous streams instead of pieces a whole row apart. Sp pads the context: with S a multiple
// of 1024 (GPT-2's 1024 positions), the rows of a head's K would lie a multiple of 4 KB apart, all in the
// same L1 set, and a block of keys across the head dimensions would not stay in L1; 16 more rows (64
// bytes) put consecutive rows in consecutive sets.
// Keys and values in F32, or F16 / BF16 (--cache-type: half the memory and half the bytes a decode step
// reads from it, widened to F32 per head for the attention kernels).
// A layer with a sliding window W (Gemma's local layers) keeps only a ring of R = W + max_step - 1 positions
// (KvCacheSpec::max_step: the most tokens one step stores), where the full context would take more: position
// p lives in slot p % R, and again in slot p % R + R, so that any R consecutive positions (a step's queries'
// windows together) are R consecutive slots from slot(first). Gemma 3 270M at 32768 positions holds full
// caches for its 3 global layers only.
class CpuKvCache final : public KvCache {
 public:
  CpuKvCache(const KvCacheSpec& spec, DType dtype) : KvCache(spec, dtype), elem_(dtype_size(dtype)) {
    size_t offset = 0;
    for (int64_t l = 0; l < spec.n_layer; ++l) {
      const int64_t W = spec.window_of(l);
      int64_t ring = W > 0 && spec.max_step > 0 ? W + spec.max_step - 1 : 0;
      if (ring > 0 && 2 * ring >= spec.n_ctx) ring = 0;  // no smaller than the whole context
      const int64_t slots = ring > 0 ? 2 * ring : spec.n_ctx;
      Layer L;
      L.ring = ring;
      L.stride = (slots + 15) / 16 * 16 + 16;
      L.per_seq = spec.n_kv_head * spec.head_dim * L.stride;
      L.offset = offset;
      offset += size_t(spec.n_seq * 2 * L.per_seq) * elem_;
      layers_.push_back(L);
    }
    buf_ = std::make_unique<cpu::HostBuffer>(std::max<size_t>(offset, 1));
  }
  size_t bytes() const override { return buf_->bytes(); }
  int64_t ring_capacity(int64_t layer) const override { return layers_[size_t(layer)].ring; }
  // Elements between consecutive keys' rows of K ([Hkv, D, S]) and between heads of V ([Hkv, S, D]): the
  // layer's slots, padded.
  int64_t stride(int64_t layer) const { return layers_[size_t(layer)].stride; }
  // The slot of position p in the layer (p itself without a ring).
  int64_t slot(int64_t layer, int64_t p) const {
    const int64_t r = layers_[size_t(layer)].ring;
    return r > 0 ? p % r : p;
  }
  size_t elem() const { return elem_; }
  // K [Hkv, D, S] and V [Hkv, S, D] of a layer and sequence, in elements of dtype() (T: float or uint16_t).
  template <typename T = float>
  T* k(int64_t layer, int64_t seq) const {
    return reinterpret_cast<T*>(base(layer, seq));
  }
  template <typename T = float>
  T* v(int64_t layer, int64_t seq) const {
    return reinterpret_cast<T*>(base(layer, seq) + size_t(layers_[size_t(layer)].per_seq) * elem_);
  }
  // Bytes of K and V of one layer and sequence.
  size_t seq_bytes(int64_t layer) const { return size_t(2 * layers_[size_t(layer)].per_seq) * elem_; }

 private:
  struct Layer {
    int64_t ring = 0, stride = 0, per_seq = 0;
    size_t offset = 0;
  };
  char* base(int64_t layer, int64_t seq) const {
    const Layer& L = layers_[size_t(layer)];
    return static_cast<char*>(buf_->data()) + L.offset + size_t(seq * 2 * L.per_seq) * elem_;
  }
  size_t elem_;
  std::vector<Layer> layers_;
  std::unique_ptr<cpu::HostBuffer> buf_;
};

class CpuBackend final : public Backend {
 public:
  // OpenBLAS runs single-threaded inside our threads: a batch GEMM is split by output columns over the
  // pool, so OpenBLAS's own threads never exist to compete with ours for the cores (nor spin after a call).
  CpuBackend(int n_threads, DType kv_dtype, bool bf16_math)
      : pool_(n_threads), kv_dtype_(kv_dtype), bf16_math_(bf16_math) {
    openblas_set_num_threads(1);
  }

  std::string name() const override { return "cpu"; }
  bool bf16_arithmetic() const override { return bf16_math_; }
  Device device() const override { return Device::Host; }
  int n_threads() const override { return pool_.size(); }

  std::unique_ptr<Buffer> alloc(size_t bytes) override { return std::make_unique<cpu::HostBuffer>(bytes); }

  Tensor prepare_weight(const Tensor& host, std::vector<std::unique_ptr<Buffer>>& keep) override {
    // Always a copy: `host` is only valid during the call. 16-bit weights are widened once here: the F32
    // OpenBLAS path is the reference CPU path.
    auto buf = weights_.alloc(size_t(host.numel()) * sizeof(float));
    float* dst = static_cast<float*>(buf->data());
    for (int64_t r = 0; r < host.rows; ++r) {
      const char* src =
          static_cast<const char*>(host.data) + size_t(r * host.stride) * dtype_size(host.dtype);
      convert_to_f32(dst + r * host.cols, src, host.dtype, size_t(host.cols));
    }
    Tensor t = make_tensor(dst, DType::F32, Device::Host, host.rows, host.cols);
    keep.push_back(std::move(buf));
    return t;
  }

  Linear prepare_linear(const HostLinear& host, const WeightFormat& format,
                        std::vector<std::unique_ptr<Buffer>>& keep) override {
    const DType dtype = format.dtype;
    if (format.is_quantized()) return prepare_quantized(host, format, keep);
    if (host.stored.is_quantized()) {
      throw Error(ErrorKind::Argument, "cpu backend: a " + host.stored.name() +
                                           " matrix is held as it is stored, not converted to " +
                                           format.name());
    }
    if (!is_float_weight_dtype(dtype)) {
      throw Error(ErrorKind::Unsupported,
                  "cpu backend: weights held as " + std::string(dtype_name(dtype)) + " are not supported");
    }
    Linear l;
    l.format = WeightFormat::plain(dtype);
    l.n_in = host.n_in;
    l.n_out = host.n_out;
    if (!host.b.empty()) l.b = prepare_weight(host.b, keep);
    const bool in_out = host.order == MatrixOrder::InOut;
    if (dtype == DType::F32) {
      // An F32 matrix is held [n_out, n_in] in our own buffer (in 2 MB pages, see cpu::WeightArena: a
      // decode step streams every matrix, and 4 KB pages cost a TLB miss per 4 KB; measured: F32 decode ~10%
      // slower in 4 KB pages). GPT-2's Conv1D [n_in, n_out] is transposed: the multi-row GEMV of batched
      // decode keeps a 4-row block of W in L1 for every sequence, which [n_in, n_out] would make a scatter
      // of y updates (measured, bench -b 8, 124M, 2 threads: 1.1x faster this way; -b 1 and prefill equal).
      l.layout = kOutInF32;
      const size_t bytes = size_t(host.w.numel()) * sizeof(float);
      if (in_out) {
        auto buf = weights_.alloc(bytes);
        transpose_to_f32(static_cast<float*>(buf->data()), host.w);
        l.w = make_tensor(buf->data(), DType::F32, Device::Host, host.n_out, host.n_in);
        keep.push_back(std::move(buf));
      } else if (host.w.dtype == DType::F32 && host.w.stride == host.w.cols) {
        auto buf = weights_.alloc(bytes);
        std::memcpy(buf->data(), host.w.data, bytes);
        l.w = host.w;
        l.w.data = buf->data();
        keep.push_back(std::move(buf));
      } else {
        l.w = prepare_weight(host.w, keep);
      }
      return l;
    }
    // 16-bit matrices are kept Packed16 (see kernels.h), transposing GPT-2's Conv1D [n_in, n_out] on the way.
    using cpu::Packed16;
    const int64_t N = host.n_out, K = host.n_in, Kp = Packed16::padded_cols(K);
    auto buf =
        weights_.alloc(size_t(Packed16::padded_rows(N) * Kp) * sizeof(uint16_t));  // zero-filled: the padding
    uint16_t* dst = static_cast<uint16_t*>(buf->data());
    std::vector<float> row(size_t(host.w.cols));
    for (int64_t r = 0; r < host.w.rows; ++r) {
      const char* src =
          static_cast<const char*>(host.w.data) + size_t(r * host.w.stride) * dtype_size(host.w.dtype);
      convert_to_f32(row.data(), src, host.w.dtype, row.size());
      for (int64_t c = 0; c < host.w.cols; ++c) {
        const uint16_t v = dtype == DType::BF16 ? f32_to_bf16(row[size_t(c)]) : f32_to_f16(row[size_t(c)]);
        // element (n, k) of the [n_out, n_in] matrix
        dst[in_out ? Packed16::offset(c, r, Kp) : Packed16::offset(r, c, Kp)] = v;
      }
    }
    l.w = Tensor{dst, dtype, Device::Host, N, K, Kp};
    l.layout = kPacked16;
    keep.push_back(std::move(buf));
    return l;
  }

  bool holds(const WeightFormat& format) const override {
    return !format.is_quantized() || can_dequantize(format.quant);
  }

  // A quantized matrix is held as the file holds it (GGUF blocks, [n_out, n_in]); products read the blocks
  // (integer kernels for the types with a cpu::QKind; the others widened to F32 a few rows at a time).
  Linear prepare_quantized(const HostLinear& host, const WeightFormat& format,
                           std::vector<std::unique_ptr<Buffer>>& keep) {
    if (!holds(format)) {
      throw Error(ErrorKind::Unsupported,
                  "cpu backend: weights held as " + format.name() + " are not supported");
    }
    if (!(host.stored == format) || host.order != MatrixOrder::OutIn || host.n_in % format.block != 0 ||
        host.w.rows != host.n_out || host.w.cols != host.n_in) {
      throw Error(ErrorKind::Argument, "cpu backend: a " + format.name() + " matrix must come as " +
                                           format.name() + " blocks in [n_out, n_in] rows (got " +
                                           host.stored.name() + ")");
    }
    Linear l;
    l.format = format;
    l.n_in = host.n_in;
    l.n_out = host.n_out;
    if (!host.b.empty()) l.b = prepare_weight(host.b, keep);
    const int64_t nb = host.n_in / format.block;
    auto buf =
        weights_.alloc(size_t(cpu::QuantInterleave::padded_rows(host.n_out) * nb * format.block_bytes));
    cpu::interleave_quant_rows(static_cast<uint8_t*>(buf->data()), static_cast<const uint8_t*>(host.w.data),
                               host.n_out, nb, format.block_bytes, layout_of(format.quant));
    l.w = Tensor{buf->data(), DType::F32, Device::Host, host.n_out, host.n_in, host.n_in};
    l.layout = kQuant;
    keep.push_back(std::move(buf));
    return l;
  }

  std::unique_ptr<KvCache> make_kv_cache(const KvCacheSpec& spec) override {
    if (spec.n_layer < 1 || spec.n_kv_head < 1 || spec.head_dim < 1 || spec.n_ctx < 1 || spec.n_seq < 1) {
      throw Error(ErrorKind::Argument,
                  "cpu backend: a KV cache needs at least one layer, head, dimension, position and sequence");
    }
    return std::make_unique<CpuKvCache>(spec, kv_dtype_);
  }

  void to_host(float* dst, const Tensor& src) override {
    for (int64_t r = 0; r < src.rows; ++r) {
      std::memcpy(dst + r * src.cols, src.ptr<float>() + r * src.stride, size_t(src.cols) * sizeof(float));
    }
  }

  void embed(Tensor out, const Step& step, const Linear& table, const Tensor& wpe) override {
    const int64_t C = out.cols;
    for (const SeqRun& run : step.runs) {
      for (int64_t t = run.first; t < run.first + run.n; ++t) {
        float* o = out.ptr<float>() + t * out.stride;
        const int32_t id = step.tokens[t];
        if (table.layout == kPacked16) {
          cpu::widen_packed_rows(o, C, table.w.ptr<uint16_t>(), table.w.stride, id, 1, C,
                                 table.w.dtype == DType::BF16);
        } else if (table.layout == kQuant) {
          widen(o, table, id, 1);
        } else {  // the embeddings are [V, C]: OutIn
          std::memcpy(o, table.w.ptr<float>() + int64_t(id) * table.w.stride, size_t(C) * sizeof(float));
        }
        if (wpe.empty()) continue;
        const float* p = wpe.ptr<float>() + (run.pos0 + t - run.first) * wpe.stride;
        for (int64_t i = 0; i < C; ++i) o[i] += p[i];
      }
    }
  }

  void add_positions(Tensor out, const Step& step, const Tensor& wpe) override {
    if (wpe.cols != out.cols) throw Error(ErrorKind::Argument, "cpu add_positions: shapes disagree");
    for (const SeqRun& run : step.runs) {
      if (run.pos0 + run.n > wpe.rows) {
        throw Error(ErrorKind::Argument, "cpu add_positions: positions past the end of the table");
      }
      for (int64_t t = run.first; t < run.first + run.n; ++t) {
        float* o = out.ptr<float>() + t * out.stride;
        const float* p = wpe.ptr<float>() + (run.pos0 + t - run.first) * wpe.stride;
        for (int64_t i = 0; i < out.cols; ++i) o[i] += p[i];
      }
    }
  }

  using Backend::rope;
  void rope(Tensor x, const Step& step, int64_t n_heads, int64_t D, int64_t rotary_dim, float theta,
            RopeLayout layout) override {
    check_rope(x, n_heads, D, rotary_dim);
    // transformers: inv_freq = 1 / theta ** (arange(0, rotary_dim, 2) / rotary_dim), angle = position *
    // inv_freq, each rounded to F32; cos and sin of the F32 angle.
    const int64_t half = rotary_dim / 2;
    std::vector<float> inv(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
      inv[size_t(i)] = 1.0f / std::pow(theta, float(2 * i) / float(rotary_dim));
    }
    rotate(x, step, n_heads, D, rotary_dim, inv.data(), layout, 1.0f);
  }

  void rope_freqs(Tensor x, const Step& step, int64_t n_heads, int64_t D, int64_t rotary_dim,
                  const Tensor& inv_freq, RopeLayout layout, float mscale) override {
    check_rope(x, n_heads, D, rotary_dim);
    if (inv_freq.numel() != rotary_dim / 2 || inv_freq.dtype != DType::F32) {
      throw Error(ErrorKind::Argument, "cpu rope_freqs: " + std::to_string(inv_freq.numel()) +
                                           " frequencies for " + std::to_string(rotary_dim) +
                                           " rotary dimensions");
    }
    if (!(mscale > 0.0f) || !std::isfinite(mscale)) {
      throw Error(ErrorKind::Argument, "cpu rope_freqs: the cos/sin scale " + std::to_string(mscale) +
                                           " is not a finite number > 0");
    }
    rotate(x, step, n_heads, D, rotary_dim, inv_freq.ptr<float>(), layout, mscale);
  }

  static void check_rope(const Tensor& x, int64_t n_heads, int64_t D, int64_t rotary_dim) {
    if (rotary_dim < 2 || rotary_dim % 2 != 0 || rotary_dim > D || x.cols != n_heads * D) {
      throw Error(ErrorKind::Argument, "cpu rope: " + std::to_string(rotary_dim) + " rotary dimensions of " +
                                           std::to_string(n_heads) + " heads of " + std::to_string(D) +
                                           " over " + std::to_string(x.cols) + " columns");
    }
  }

  // Rotates pair i of each head by position * inv[i], cos and sin times mscale.
  void rotate(Tensor x, const Step& step, int64_t n_heads, int64_t D, int64_t rotary_dim, const float* inv,
              RopeLayout layout, float mscale) {
    const int64_t half = rotary_dim / 2;
    // The step's token t sits at position pos[t].
    std::vector<int64_t> pos(static_cast<size_t>(step.n_tokens));
    int64_t end = 0;
    for (const SeqRun& run : step.runs) {
      for (int64_t t = 0; t < run.n; ++t) pos[size_t(run.first + t)] = run.pos0 + t;
      end = std::max(end, run.pos0 + run.n);
    }
    // cos and sin of each position's angles, kept while the frequencies stay the same: every layer rotates q
    // and k at the same positions (computed per call, sincos takes 1.3% of a SmolLM2-shape prefill). One
    // table per calling thread: sessions on several threads share the backend.
    // A few tables are kept, one per set of frequencies and scale: Gemma 3's local and global layers
    // alternate two.
    struct Table {
      std::vector<float> inv;
      float mscale;
      std::vector<float> cos_sin;
    };
    thread_local std::vector<Table> tables;
    auto found = std::find_if(tables.begin(), tables.end(), [&](const Table& e) {
      return e.mscale == mscale && e.inv.size() == size_t(half) &&
             std::equal(e.inv.begin(), e.inv.end(), inv);
    });
    if (found == tables.end()) {
      if (tables.size() >= 4) tables.erase(tables.begin());
      tables.push_back(Table{std::vector<float>(inv, inv + half), mscale, {}});
      found = tables.end() - 1;
    }
    std::vector<float>& table = found->cos_sin;  // the caller's, named by reference in the lambda
    // transformers: cos = emb.cos() * attention_scaling, in F32.
    for (int64_t p = int64_t(table.size()) / (2 * half); p < end; ++p) {
      for (int64_t i = 0; i < half; ++i) {
        const float angle = float(p) * inv[size_t(i)];
        table.push_back(float(std::cos(double(angle))) * mscale);
      }
      for (int64_t i = 0; i < half; ++i) {
        const float angle = float(p) * inv[size_t(i)];
        table.push_back(float(std::sin(double(angle))) * mscale);
      }
    }
    const float* cos_sin = table.data();
    auto tokens = [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const float* cs = cos_sin + pos[size_t(t)] * 2 * half;  // cos, then sin, of each pair's angle
        if (layout == RopeLayout::AdjacentPairs) {
          for (int64_t h = 0; h < n_heads; ++h) {
            float* v = x.ptr<float>() + t * x.stride + h * D;
            for (int64_t i = 0; i < half; ++i) {
              const float a = v[2 * i], b = v[2 * i + 1], c = cs[i], s = cs[half + i];
              v[2 * i] = a * c - b * s;
              v[2 * i + 1] = b * c + a * s;
            }
          }
          continue;
        }
        for (int64_t h = 0; h < n_heads; ++h) {
          float* v = x.ptr<float>() + t * x.stride + h * D;
          for (int64_t i = 0; i < half; ++i) {
            const float a = v[i], b = v[i + half], c = cs[i], s = cs[half + i];
            v[i] = a * c - b * s;
            v[i + half] = b * c + a * s;
          }
        }
      }
    };
    if (step.n_tokens < 16) {
      tokens(0, step.n_tokens);
    } else {
      pool_.parallel_for(step.n_tokens, tokens);
    }
  }

  void norm(Tensor out, const Tensor& in, const Tensor& w, const Tensor& b, NormKind kind,
            float eps) override {
    const int64_t C = in.cols;
    if (out.rows != in.rows || out.cols != C || w.numel() != C || (!b.empty() && b.numel() != C)) {
      throw Error(ErrorKind::Argument, "cpu norm: shapes disagree");
    }
    const float* wp = w.ptr<float>();
    const float* bp = b.empty() ? nullptr : b.ptr<float>();
    auto layer = [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* x = in.ptr<float>() + r * in.stride;
        float* y = out.ptr<float>() + r * out.stride;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t i = 0; i < C; ++i) sum += x[i];
        const float mean = sum / float(C);
        float var = 0.0f;
#pragma omp simd reduction(+ : var)
        for (int64_t i = 0; i < C; ++i) var += (x[i] - mean) * (x[i] - mean);
        const float rstd = 1.0f / std::sqrt(var / float(C) + eps);
        if (bp) {
          for (int64_t i = 0; i < C; ++i) y[i] = (x[i] - mean) * rstd * wp[i] + bp[i];
        } else {
          for (int64_t i = 0; i < C; ++i) y[i] = (x[i] - mean) * rstd * wp[i];
        }
      }
    };
    // transformers' LlamaRMSNorm in F32: variance = mean(x^2); x * rsqrt(variance + eps); then * w.
    auto rms = [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* x = in.ptr<float>() + r * in.stride;
        float* y = out.ptr<float>() + r * out.stride;
        float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
        for (int64_t i = 0; i < C; ++i) sq += x[i] * x[i];
        const float rstd = 1.0f / std::sqrt(sq / float(C) + eps);
        if (bp) {
          for (int64_t i = 0; i < C; ++i) y[i] = x[i] * rstd * wp[i] + bp[i];
        } else {
          for (int64_t i = 0; i < C; ++i) y[i] = x[i] * rstd * wp[i];
        }
      }
    };
    auto rows = [&](int64_t r0, int64_t r1) { kind == NormKind::Rms ? rms(r0, r1) : layer(r0, r1); };
    if (in.rows < 8) {
      rows(0, in.rows);
    } else {
      pool_.parallel_for(in.rows, rows);
    }
  }

  void linear(Tensor out, const Tensor& in, const Linear& lin, bool accumulate) override {
    linear_impl(out, in, lin, accumulate, nullptr);
  }

  void linear_parts(Tensor out, const Tensor& in, std::span<const Linear> parts) override {
    if (!gemv_quant_parts(out, in, parts)) Backend::linear_parts(out, in, parts);
  }

  // A batch applies the activation to each thread's own columns right after its GEMM, while they are still
  // in cache (one pass over the [T, n_out] output fewer, and one dispatch fewer).
  void linear_act(Tensor out, const Tensor& in, const Linear& lin, Activation act) override {
    if (!linear_impl(out, in, lin, false, &act)) activation(out, act);
  }

  // Returns whether `act` (if any) was applied.
  bool linear_impl(Tensor out, const Tensor& in, const Linear& lin, bool accumulate, const Activation* act) {
    const int64_t T = in.rows;
    const int64_t N = lin.n_out;
    const int64_t K = lin.n_in;
    // Each thread first writes the bias into its own columns (init_out), so that one product with beta = 1
    // adds to it (and, when accumulating, to the residual already in `out`).
    if (lin.layout == kQuant) {
      if (T <= kGemvMaxRowsQuant) {
        gemv_quant(out, in, lin, accumulate);
        return false;
      }
      cpu::QKind kind;
      if (quant_kind(lin.format.quant, &kind) && cpu::qgemm_takes(kind)) {
        gemm_int8(out, in, lin, accumulate, act, kind);
        return true;
      }
      if (lin.format.quant == GgmlType::Q8_0 && cpu::q8gemm_available()) {
        gemm_q8(out, in, lin, accumulate, act);
        return true;
      }
      gemm_widened(out, in, lin, accumulate, act);
      return true;
    }
    if (lin.layout == kPacked16) {
      if (T <= kGemvMaxRows16) {
        gemv16(out, in, lin, accumulate);
        return false;
      }
      if (lin.w.dtype == DType::BF16 && bf16_math_) {
        gemm_bf16(out, in, lin, accumulate, act);
        return true;
      }
      gemm_widened(out, in, lin, accumulate, act);
      return true;
    }
    if (T <= kGemvMaxRowsF32) {
      // Decode (one or a few sequences): our GEMV kernels on our threads (OpenBLAS's sgemv would wake its own
      // threads for every small product), every weight read once for all T rows.
      pool_.parallel_guided(N, 4, kMinGemvPiece, [&](int64_t n0, int64_t n1) {
        init_out(out, lin, accumulate, n0, n1);
        if (T == 1) {
          cpu::gemv_f32(out.ptr<float>() + n0, lin.w.ptr<float>() + n0 * lin.w.stride, lin.w.stride,
                        in.ptr<float>(), n1 - n0, K, true);
        } else {
          cpu::gemv_f32_rows(out.ptr<float>() + n0, out.stride, lin.w.ptr<float>() + n0 * lin.w.stride,
                             lin.w.stride, in.ptr<float>(), in.stride, T, n1 - n0, K, true);
        }
      });
      return false;
    }
    if (cpu::own_sgemm()) {
      gemm_own(out, in, lin, accumulate, act);
      return true;
    }
    pool_.run([&](int ith, int nth) {
      const auto [n0, n1] = split(N, ith, nth, 16);
      if (n0 >= n1) return;
      init_out(out, lin, accumulate, n0, n1);
      // columns [n0, n1) of the product: rows [n0, n1) of W [N, K]
      const float* w = lin.w.ptr<float>() + n0 * lin.w.stride;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(T), int(n1 - n0), int(K), 1.0f,
                  in.ptr<float>(), int(in.stride), w, int(lin.w.stride), 1.0f, out.ptr<float>() + n0,
                  int(out.stride));
      if (act) apply_act(out, n0, n1, *act);
    });
    return true;
  }

  void activation(Tensor x, Activation act) override {
    pool_.parallel_for(x.rows,
                       [&](int64_t r0, int64_t r1) { apply_act(x.row_slice(r0, r1 - r0), 0, x.cols, act); });
  }

  // x[r][c0, c1) = act(x[r][c0, c1)) for every row of x.
  static void apply_act(const Tensor& x, int64_t c0, int64_t c1, Activation act) {
    const int64_t F = c1 - c0;
    for (int64_t r = 0; r < x.rows; ++r) {
      float* v = x.ptr<float>() + r * x.stride + c0;
      switch (act) {
        case Activation::GeluTanh:
          cpu::gelu_tanh(v, F);
          break;
        case Activation::GeluErf:
          for (int64_t i = 0; i < F; ++i) v[i] = 0.5f * v[i] * (1.0f + std::erf(v[i] * float(M_SQRT1_2)));
          break;
        case Activation::Relu:
          for (int64_t i = 0; i < F; ++i) v[i] = v[i] > 0.0f ? v[i] : 0.0f;
          break;
        case Activation::Silu:
          cpu::silu(v, F);
          break;
      }
    }
  }

  // Per row: out = gate (unless out is the gate itself), act(out) in place, then out *= up.
  void gated_act(Tensor out, const Tensor& gate_up, Activation act) override {
    const int64_t F = out.cols;
    if (gate_up.cols != 2 * F || gate_up.rows != out.rows) {
      throw Error(ErrorKind::Argument, "cpu gated_act: out [" + std::to_string(out.rows) + ", " +
                                           std::to_string(F) + "] from gate | up [" +
                                           std::to_string(gate_up.rows) + ", " +
                                           std::to_string(gate_up.cols) + "]");
    }
    auto rows = [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* g = gate_up.ptr<float>() + r * gate_up.stride;
        const float* u = g + F;
        float* o = out.ptr<float>() + r * out.stride;
        if (o != g) std::memcpy(o, g, size_t(F) * sizeof(float));
        apply_act(out.row_slice(r, 1), 0, F, act);
        for (int64_t i = 0; i < F; ++i) o[i] *= u[i];
      }
    };
    if (out.rows < 2) {
      rows(0, out.rows);
    } else {
      pool_.parallel_for(out.rows, rows);
    }
  }

  bool supports(BackendOp) const override { return true; }

  void scale(Tensor x, float s) override {
    for (int64_t r = 0; r < x.rows; ++r) {
      float* p = x.ptr<float>() + r * x.stride;
      for (int64_t i = 0; i < x.cols; ++i) p[i] *= s;
    }
  }

  void softcap(Tensor x, float cap) override {
    const float inv = 1.0f / cap;
    pool_.parallel_for(x.rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        float* p = x.ptr<float>() + r * x.stride;
        for (int64_t i = 0; i < x.cols; ++i) p[i] = cap * std::tanh(p[i] * inv);
      }
    });
  }

  void add(Tensor out, const Tensor& in) override {
    if (out.rows != in.rows || out.cols != in.cols)
      throw Error(ErrorKind::Argument, "cpu add: shapes disagree");
    for (int64_t r = 0; r < out.rows; ++r) {
      float* o = out.ptr<float>() + r * out.stride;
      const float* p = in.ptr<float>() + r * in.stride;
      for (int64_t i = 0; i < out.cols; ++i) o[i] += p[i];
    }
  }

  // Soft-capped attention, one task per token and query head, in F32 whatever the cache holds: scores
  // cap * tanh(scale * q.k / cap), then the softmax and the weighted values. Gemma 2 alone needs it; it
  // runs the plain loops rather than the tiled kernels.
  void attention_softcap(Tensor out, const Tensor& q, KvCache& cache_base, int64_t layer, const Step& step,
                         int64_t n_head, float scale, float cap) override {
    auto& cache = static_cast<CpuKvCache&>(cache_base);
    const int64_t Hkv = cache.spec().n_kv_head, D = cache.spec().head_dim, S = cache.stride(layer);
    const int64_t W = cache.spec().window_of(layer);
    if (n_head % Hkv != 0 || q.cols != n_head * D) {
      throw Error(ErrorKind::Argument, "cpu attention: " + std::to_string(n_head) + " query heads of " +
                                           std::to_string(D) + " over " + std::to_string(Hkv) + " KV heads");
    }
    const int64_t group = n_head / Hkv;
    const DType dt = cache.dtype();
    const size_t e = cache.elem();
    const float inv_cap = 1.0f / cap;
    pool_.parallel_for(step.n_tokens * n_head, [&](int64_t i0, int64_t i1) {
      thread_local std::vector<float> scores, kv;
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t t = i / n_head, h = i % n_head, kvh = h / group;
        const SeqRun* run = nullptr;
        for (const SeqRun& r : step.runs)
          if (t >= r.first && t < r.first + r.n) run = &r;
        const int64_t p = run->pos0 + t - run->first, j0 = W > 0 ? std::max<int64_t>(0, p - W + 1) : 0;
        const int64_t n_keys = p + 1 - j0,
                      s0 = cache.slot(layer, j0);  // the keys' slots: s0 .. s0 + n_keys - 1
        const float* qq = q.ptr<float>() + t * q.stride + h * D;
        scores.assign(size_t(n_keys), 0.0f);
        kv.resize(size_t(std::max(n_keys, D)));
        const char* kt = cache.k<char>(layer, run->seq);
        for (int64_t d = 0; d < D; ++d) {  // K [Hkv, D, S]: one head dimension over the keys
          convert_to_f32(kv.data(), kt + size_t((kvh * D + d) * S + s0) * e, dt, size_t(n_keys));
          for (int64_t j = 0; j < n_keys; ++j) scores[size_t(j)] += qq[d] * kv[size_t(j)];
        }
        float mx = -INFINITY;
        for (float& sc : scores) {
          sc = cap * std::tanh(sc * scale * inv_cap);
          mx = std::max(mx, sc);
        }
        float sum = 0.0f;
        for (float& sc : scores) sum += (sc = std::exp(sc - mx));
        float* o = out.ptr<float>() + t * out.stride + h * D;
        std::fill(o, o + D, 0.0f);
        const char* vv = cache.v<char>(layer, run->seq);
        for (int64_t j = 0; j < n_keys; ++j) {  // V [Hkv, S, D]: one key's values
          convert_to_f32(kv.data(), vv + size_t((kvh * S + s0 + j) * D) * e, dt, size_t(D));
          const float wj = scores[size_t(j)] / sum;
          for (int64_t d = 0; d < D; ++d) o[d] += wj * kv[size_t(d)];
        }
      }
    });
  }

  void store_kv(KvCache& cache_base, int64_t layer, const Tensor& k, const Tensor& v,
                const Step& step) override {
    auto& cache = static_cast<CpuKvCache&>(cache_base);
    const int64_t Hkv = cache.spec().n_kv_head, D = cache.spec().head_dim, S = cache.stride(layer);
    const int64_t R = cache.ring_capacity(layer);
    // n tokens' keys and values (rows of ks and vs) into consecutive slots from `slot` of head h.
    auto store = [&](int64_t seq, int64_t h, int64_t slot, const float* ks, const float* vs, int64_t n) {
      if (cache.dtype() != DType::F32) {
        const bool bf16 = cache.dtype() == DType::BF16;
        uint16_t* kc = cache.k<uint16_t>(layer, seq) + h * D * S + slot;
        uint16_t* vc = cache.v<uint16_t>(layer, seq) + (h * S + slot) * D;
        // K: blocks of 16 tokens transposed in F32, then each head dimension's 16 values rounded at once;
        // a decode step's one token is rounded as one row and then scattered (a row of 1 value per head
        // dimension costs narrow_rows a masked tail each).
        if (n == 1) {
          thread_local std::vector<uint16_t> k1;
          k1.resize(size_t(D));
          cpu::narrow_rows(k1.data(), D, ks, D, 1, D, bf16);
          for (int64_t d = 0; d < D; ++d) kc[d * S] = k1[size_t(d)];
        } else {
          thread_local std::vector<float> kt;
          kt.resize(size_t(D) * 16);
          for (int64_t r0 = 0; r0 < n; r0 += 16) {
            const int64_t m = std::min<int64_t>(16, n - r0);
            for (int64_t d = 0; d < D; ++d) {
              for (int64_t r = 0; r < m; ++r) kt[size_t(d * 16 + r)] = ks[(r0 + r) * k.stride + d];
            }
            cpu::narrow_rows(kc + r0, S, kt.data(), 16, D, m, bf16);
          }
        }
        cpu::narrow_rows(vc, D, vs, v.stride, n, D, bf16);
        return;
      }
      float* kc = cache.k(layer, seq) + h * D * S + slot;
      float* vc = cache.v(layer, seq) + (h * S + slot) * D;
      // K transposed in blocks of 16 rows: the block's D x 16 source floats stay in L1 while each of the D
      // destination rows gets 16 contiguous ones.
      for (int64_t r0 = 0; r0 < n; r0 += 16) {
        const int64_t r1 = std::min(n, r0 + 16);
        for (int64_t d = 0; d < D; ++d) {
          for (int64_t r = r0; r < r1; ++r) kc[d * S + r] = ks[r * k.stride + d];
        }
      }
      for (int64_t r = 0; r < n; ++r) std::memcpy(vc + r * D, vs + r * v.stride, size_t(D) * sizeof(float));
    };
    // Task i: run i / Hkv, KV head i % Hkv. In a ring, the run's tokens in pieces of consecutive slots, each
    // stored at its slot and at its mirror R slots on.
    auto tasks = [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const SeqRun& run = step.runs[size_t(i / Hkv)];
        const int64_t h = i % Hkv;
        const float* ks = k.ptr<float>() + run.first * k.stride + h * D;
        const float* vs = v.ptr<float>() + run.first * v.stride + h * D;
        for (int64_t t0 = 0; t0 < run.n;) {
          const int64_t slot = cache.slot(layer, run.pos0 + t0);
          const int64_t n = R > 0 ? std::min(run.n - t0, R - slot) : run.n - t0;
          store(run.seq, h, slot, ks + t0 * k.stride, vs + t0 * v.stride, n);
          if (R > 0) store(run.seq, h, slot + R, ks + t0 * k.stride, vs + t0 * v.stride, n);
          t0 += n;
        }
      }
    };
    const int64_t n_tasks = int64_t(step.runs.size()) * Hkv;
    if (step.n_tokens < 16) {
      tasks(0, n_tasks);  // decode steps: a few hundred floats per sequence, not worth waking the threads
    } else {
      pool_.parallel_for(n_tasks, tasks);
    }
  }

  bool copies_kv() const override { return true; }
  void copy_kv(KvCache& cache_base, int64_t from, int64_t to, int64_t n) override {
    auto& cache = static_cast<CpuKvCache&>(cache_base);
    const KvCacheSpec& sp = cache.spec();
    if (from < 0 || from >= sp.n_seq || to < 0 || to >= sp.n_seq || n < 0 || n > sp.n_ctx) {
      throw Error(ErrorKind::Argument, "cpu copy_kv: sequences " + std::to_string(from) + " -> " +
                                           std::to_string(to) + ", " + std::to_string(n) +
                                           " positions, of a cache of " + std::to_string(sp.n_seq) + " x " +
                                           std::to_string(sp.n_ctx));
    }
    if (from == to || n == 0) return;
    const int64_t Hkv = sp.n_kv_head, D = sp.head_dim;
    const size_t e = cache.elem();
    for (int64_t layer = 0; layer < sp.n_layer; ++layer) {
      const int64_t S = cache.stride(layer);
      if (cache.ring_capacity(layer) > 0) {  // a ring: all of it (the session checks that it holds the n)
        std::memcpy(cache.k<char>(layer, to), cache.k<char>(layer, from), cache.seq_bytes(layer));
        continue;
      }
      // K [Hkv, D, S]: the first n of each of the Hkv * D rows; V [Hkv, S, D]: the first n rows of each head.
      const char* ks = cache.k<char>(layer, from);
      char* kd = cache.k<char>(layer, to);
      for (int64_t r = 0; r < Hkv * D; ++r) std::memcpy(kd + r * S * e, ks + r * S * e, size_t(n) * e);
      const char* vs = cache.v<char>(layer, from);
      char* vd = cache.v<char>(layer, to);
      for (int64_t h = 0; h < Hkv; ++h)
        std::memcpy(vd + h * S * D * e, vs + h * S * D * e, size_t(n * D) * e);
    }
  }

  bool exports_kv() const override { return true; }
  void read_kv(const KvCache& cache, int64_t seq, int64_t from, int64_t n, void* host) override {
    transfer_kv(const_cast<CpuKvCache&>(static_cast<const CpuKvCache&>(cache)), seq, from, n,
                static_cast<char*>(host), false);
  }
  void write_kv(KvCache& cache, int64_t seq, int64_t from, int64_t n, const void* host) override {
    transfer_kv(static_cast<CpuKvCache&>(cache), seq, from, n,
                const_cast<char*>(static_cast<const char*>(host)), true);
  }
  // One position's keys (HD rows' element `pos` of K [HD, S]) to or from `host` (HD elements).
  template <typename T>
  static void gather_k(char* k, char* host, int64_t HD, int64_t S, int64_t pos, bool to_cache) {
    T* kt = reinterpret_cast<T*>(k) + pos;
    T* h = reinterpret_cast<T*>(host);
    if (to_cache) {
      for (int64_t r = 0; r < HD; ++r) kt[r * S] = h[r];
    } else {
      for (int64_t r = 0; r < HD; ++r) h[r] = kt[r * S];
    }
  }
  // Between the cache's K [Hkv, D, S] and V [Hkv, S, D] and the host's position-major layout
  // (Backend::read_kv): to the cache when `to_cache`, else from it. One task per layer.
  void transfer_kv(CpuKvCache& cache, int64_t seq, int64_t from, int64_t n, char* host, bool to_cache) {
    const KvCacheSpec& sp = cache.spec();
    if (seq < 0 || seq >= sp.n_seq || from < 0 || n < 0 || from + n > sp.n_ctx) {
      throw Error(ErrorKind::Argument, std::string("cpu ") + (to_cache ? "write_kv" : "read_kv") +
                                           ": positions [" + std::to_string(from) + ", " +
                                           std::to_string(from + n) + ") of sequence " + std::to_string(seq) +
                                           ", of a cache of " + std::to_string(sp.n_seq) + " x " +
                                           std::to_string(sp.n_ctx));
    }
    for (int64_t layer = 0; layer < sp.n_layer; ++layer) {
      if (cache.ring_capacity(layer) > 0) {
        throw Error(ErrorKind::Unsupported, "cpu backend: layer " + std::to_string(layer) +
                                                " keeps a ring of its last positions, which is not exported");
      }
    }
    if (n == 0) return;
    const int64_t HD = sp.n_kv_head * sp.head_dim, D = sp.head_dim;
    const size_t e = cache.elem(), pos_bytes = kv_position_bytes(cache), layer_bytes = size_t(2 * HD) * e;
    pool_.parallel_for(sp.n_layer, [&](int64_t l0, int64_t l1) {
      for (int64_t layer = l0; layer < l1; ++layer) {
        const int64_t S = cache.stride(layer);
        char* kc = cache.k<char>(layer, seq);
        char* vc = cache.v<char>(layer, seq);
        char* hl = host + size_t(layer) * layer_bytes;
        for (int64_t p = 0; p < n; ++p) {
          char* hk = hl + size_t(p) * pos_bytes;  // this position's keys (row r = h * D + d), then values
          char* hv = hk + size_t(HD) * e;
          const int64_t pos = from + p;
          // K is transposed: a position's keys are one element of each row, S elements apart.
          if (e == 4) {
            gather_k<uint32_t>(kc, hk, HD, S, pos, to_cache);
          } else {
            gather_k<uint16_t>(kc, hk, HD, S, pos, to_cache);
          }
          for (int64_t h = 0; h < sp.n_kv_head; ++h) {
            char* c = vc + size_t((h * S + pos) * D) * e;
            if (to_cache) {
              std::memcpy(c, hv + size_t(h * D) * e, size_t(D) * e);
            } else {
              std::memcpy(hv + size_t(h * D) * e, c, size_t(D) * e);
            }
          }
        }
      }
    });
  }

  // A decode step (one query per sequence): one task per sequence, KV head and chunk of keys, the `group`
  // query heads of the KV head together (cpu::attention_decode reads each cached key and value once for
  // all of them). The keys are cut into chunks, one per thread, where the tasks would not share out evenly
  // otherwise (3 KV heads on 2 threads would leave one thread idle a third of the time), and the
  // chunks' unnormalized parts merged. The chunks do not depend on the cache's dtype, so a 16-bit cache
  // gives bit for bit what the F32 cache gives on the rounded values.
  void decode_attention(Tensor out, const Tensor& q, CpuKvCache& cache, int64_t layer, const Step& step,
                        int64_t group, float scale) {
    const int64_t Hkv = cache.spec().n_kv_head, D = cache.spec().head_dim, S = cache.stride(layer);
    const int64_t W = cache.spec().window_of(layer), nth = pool_.size();
    // At least kMinChunk keys per chunk: shorter ones cost more in merging and thread hand-over than the
    // balance gains. How a query's keys are cut depends on its own key count only, never on the step's other
    // queries: a query is computed alike alone (decode) and among others (a speculative step's drafts, the
    // server's batch), so that a verified draft's logits are bit for bit those plain decoding would give.
    constexpr int64_t kMinChunk = 256;
    const int64_t chunks_max = nth;
    struct DecodeTask {
      int32_t run, kvh;
      int64_t key0, n_keys, part;  // part: index of its G x (D + 2) floats in `parts`, -1 when whole
    };
    std::vector<DecodeTask> tasks;
    int64_t n_parts = 0;
    for (size_t r = 0; r < step.runs.size(); ++r) {
      const int64_t p = step.runs[r].pos0, first = W > 0 ? std::max<int64_t>(0, p - W + 1) : 0,
                    n = p + 1 - first;
      const int64_t chunks = std::clamp<int64_t>(n / kMinChunk, 1, chunks_max);
      for (int64_t h = 0; h < Hkv; ++h) {
        for (int64_t c = 0; c < chunks; ++c) {
          const int64_t k0 = first + n * c / chunks, k1 = first + n * (c + 1) / chunks;
          tasks.push_back({int32_t(r), int32_t(h), k0, k1 - k0, chunks == 1 ? -1 : n_parts++});
        }
      }
    }
    const int64_t part_floats = group * (D + 2);
    // The parts of the heads whose keys are split: the calling thread's (two sessions may share a backend).
    // (The workers reach it through this pointer: the name inside the lambda would be their own.)
    thread_local std::vector<float> parts_buffer;
    parts_buffer.resize(size_t(std::max<int64_t>(n_parts, 1) * part_floats));
    float* const parts = parts_buffer.data();
    const cpu::KvKind kind = cache.dtype() == DType::F16    ? cpu::KvKind::F16
                             : cache.dtype() == DType::BF16 ? cpu::KvKind::BF16
                                                            : cpu::KvKind::F32;
    const size_t e = cache.elem();
    pool_.parallel_for(int64_t(tasks.size()), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const DecodeTask& t = tasks[size_t(i)];
        const SeqRun& run = step.runs[size_t(t.run)];
        const float* qq = q.ptr<float>() + run.first * q.stride + t.kvh * group * D;
        const int64_t slot = cache.slot(layer, t.key0);  // the chunk's keys are consecutive slots from it
        const char* kt = cache.k<char>(layer, run.seq) + size_t(t.kvh * D * S + slot) * e;
        const char* vv = cache.v<char>(layer, run.seq) + size_t((t.kvh * S + slot) * D) * e;
        if (t.part >= 0) {
          float* part = parts + t.part * part_floats;
          cpu::attention_decode(part, D, part + group * D, part + group * (D + 1), qq, D, group, t.n_keys, kt,
                                vv, S, D, scale, kind);
          continue;
        }
        float* o = out.ptr<float>() + run.first * out.stride + t.kvh * group * D;
        thread_local std::vector<float> ml;  // m and l of the group's heads
        ml.resize(size_t(2 * group));
        float* m = ml.data();
        float* l = m + group;
        cpu::attention_decode(o, D, m, l, qq, D, group, t.n_keys, kt, vv, S, D, scale, kind);
        for (int64_t g = 0; g < group; ++g) {
          const float inv = 1.0f / l[g];
          for (int64_t d = 0; d < D; ++d) o[g * D + d] *= inv;
        }
      }
    });
    if (n_parts == 0) return;
    // Merge each split head's chunks (consecutive tasks of one run and KV head): with M the largest m,
    // o = sum_c exp(m_c - M) o_c / sum_c exp(m_c - M) l_c.
    for (size_t i = 0; i < tasks.size();) {
      if (tasks[i].part < 0) {  // whole: written by its task
        ++i;
        continue;
      }
      size_t i1 = i + 1;
      while (i1 < tasks.size() && tasks[i1].run == tasks[i].run && tasks[i1].kvh == tasks[i].kvh) ++i1;
      const SeqRun& run = step.runs[size_t(tasks[i].run)];
      float* o = out.ptr<float>() + run.first * out.stride + tasks[i].kvh * group * D;
      for (int64_t g = 0; g < group; ++g) {
        float M = -INFINITY;
        for (size_t c = i; c < i1; ++c) M = std::max(M, parts[tasks[c].part * part_floats + group * D + g]);
        float L = 0.0f;
        float* og = o + g * D;
        std::fill(og, og + D, 0.0f);
        for (size_t c = i; c < i1; ++c) {
          const float* part = parts + tasks[c].part * part_floats;
          const float w = std::exp(part[group * D + g] - M);
          L += w * part[group * (D + 1) + g];
          for (int64_t d = 0; d < D; ++d) og[d] += w * part[g * D + d];
        }
        const float inv = 1.0f / L;
        for (int64_t d = 0; d < D; ++d) og[d] *= inv;
      }
      i = i1;
    }
  }

  void attention(Tensor out, const Tensor& q, KvCache& cache_base, int64_t layer, const Step& step,
                 int64_t n_head, float scale) override {
    auto& cache = static_cast<CpuKvCache&>(cache_base);
    const int64_t Hkv = cache.spec().n_kv_head, D = cache.spec().head_dim, S = cache.stride(layer);
    if (n_head % Hkv != 0 || q.cols != n_head * D) {
      throw Error(ErrorKind::Argument, "cpu attention: " + std::to_string(n_head) + " query heads of " +
                                           std::to_string(D) + " over " + std::to_string(Hkv) + " KV heads");
    }
    const int64_t group = n_head / Hkv, W = cache.spec().window_of(layer);
    // Runs of up to kDecodeRunMax queries (decode, a speculative step's drafts) go through the decode kernel
    // one query at a time, as runs of one: each query's arithmetic is then decode's own, whatever else the
    // step holds (its keys are all stored before attention), so verified drafts equal plain decoding.
    constexpr int64_t kDecodeRunMax = 16;
    if (D % 8 == 0 && cpu::attention_decode_available() &&
        std::all_of(step.runs.begin(), step.runs.end(),
                    [](const SeqRun& r) { return r.n <= kDecodeRunMax; })) {
      if (std::all_of(step.runs.begin(), step.runs.end(), [](const SeqRun& r) { return r.n == 1; })) {
        decode_attention(out, q, cache, layer, step, group, scale);
        return;
      }
      thread_local std::vector<SeqRun> singles;
      singles.clear();
      for (const SeqRun& r : step.runs) {
        for (int64_t i = 0; i < r.n; ++i) singles.push_back({r.seq, r.first + i, 1, r.pos0 + i});
      }
      decode_attention(out, q, cache, layer, Step{step.tokens, step.n_tokens, singles}, group, scale);
      return;
    }
    // The tasks: per run, per query head, a tile of queries. A run of up to 4 queries (decode) is one tile
    // per head, streaming its K and V once; a longer one (prefill) is cut into tiles of
    // kPrefillTileQueries queries, register-blocked like a GEMM.
    struct Task {
      int32_t run, head;
      int64_t t0, nq;
    };
    std::vector<Task> tasks;
    for (size_t r = 0; r < step.runs.size(); ++r) {
      const int64_t n = step.runs[r].n;
      const int64_t tq = n <= 4 ? n : cpu::kPrefillTileQueries;
      for (int64_t h = 0; h < n_head; ++h) {
        for (int64_t t0 = 0; t0 < n; t0 += tq)
          tasks.push_back({int32_t(r), int32_t(h), t0, std::min(tq, n - t0)});
      }
    }
    const bool wide = cache.dtype() == DType::F32, bf16 = cache.dtype() == DType::BF16;
    pool_.parallel_for(int64_t(tasks.size()), [&](int64_t begin, int64_t end) {
      // A 16-bit cache: the task's keys and values widened to F32 here (K rows of ld floats, zero past the
      // keys as the F32 cache's padding is), then the F32 kernels: the same arithmetic on the same values.
      thread_local std::vector<float> widened;
      for (int64_t i = begin; i < end; ++i) {
        const Task& task = tasks[size_t(i)];
        const SeqRun& run = step.runs[size_t(task.run)];
        const int64_t h = task.head, kvh = h / group, row = run.first + task.t0;
        float* o = out.ptr<float>() + row * out.stride + h * D;
        const float* qq = q.ptr<float>() + row * q.stride + h * D;
        // A decode step on a 16-bit cache: the kernel reads the cache itself where its level can (see
        // cpu::attention_row16), without the widened copy: Q8_0 124M, F16 cache, 2 threads, Zen 3, tg64 at
        // depth 448 +19%, at 896 +8% (bench/results/2026-11-27-cpu-kv16-decode-attention.md).
        // A sliding window: the first key the task's first query sees (0 without one, or before the window
        // has filled).
        const int64_t first_key = W > 0 ? std::max<int64_t>(0, run.pos0 + task.t0 - W + 1) : 0;
        // The task's keys, positions first_key .. n_keys - 1, are consecutive slots from this one (a windowed
        // layer's ring: CpuKvCache).
        const int64_t first_slot = cache.slot(layer, first_key), n_keys = run.pos0 + task.t0 + task.nq;
        if (!wide && run.n == 1 &&
            cpu::attention_row16(
                o, qq, run.pos0 + 1 - first_key, cache.k<uint16_t>(layer, run.seq) + kvh * D * S + first_slot,
                cache.v<uint16_t>(layer, run.seq) + (kvh * S + first_slot) * D, S, D, scale, bf16)) {
          continue;
        }
        // K and V from position first_key on: row stride ld.
        const float* kt = nullptr;
        const float* vv = nullptr;
        int64_t ld = S;
        if (wide) {
          kt = cache.k(layer, run.seq) + kvh * D * S + first_slot;
          vv = cache.v(layer, run.seq) + (kvh * S + first_slot) * D;
        } else {
          const int64_t n = n_keys - first_key;
          ld = (n + 15) / 16 * 16 + 16;
          widened.resize(size_t(D * ld + ld * D));
          float* kw = widened.data();
          float* vw = kw + D * ld;
          cpu::widen_rows(kw, ld, cache.k<uint16_t>(layer, run.seq) + kvh * D * S + first_slot, S, D, n,
                          bf16);
          for (int64_t d = 0; d < D; ++d) std::fill(kw + d * ld + n, kw + (d + 1) * ld, 0.0f);
          cpu::widen_rows(vw, D, cache.v<uint16_t>(layer, run.seq) + (kvh * S + first_slot) * D, D, n, D,
                          bf16);
          std::fill(vw + n * D, vw + ld * D, 0.0f);
          kt = kw;
          vv = vw;
        }
        if (W > 0 && n_keys > W) {
          // Past the window's length the queries of a task start at different keys: one at a time, each
          // from its own first key (the kernels read keys p0 - n + 1 .. p0 from the pointers given).
          for (int64_t i = 0; i < task.nq; ++i) {
            const int64_t p = run.pos0 + task.t0 + i, j0 = std::max<int64_t>(0, p - W + 1) - first_key;
            cpu::attention_block(o + i * out.stride, out.stride, qq + i * q.stride, q.stride, 1,
                                 p - first_key - j0, kt + j0, vv + j0 * D, ld, D, scale);
          }
        } else if (run.n <= 4) {
          cpu::attention_block(o, out.stride, qq, q.stride, task.nq, run.pos0 + task.t0, kt, vv, ld, D,
                               scale);
        } else {
          cpu::attention_prefill(o, out.stride, qq, q.stride, task.nq, run.pos0 + task.t0, kt, vv, ld, D,
                                 scale);
        }
      }
    });
  }

 private:
  // Up to this many rows (a decode step of that many sequences), a linear layer runs as our multi-row GEMV
  // (reads each weight once for all rows); beyond, as OpenBLAS sgemm (16-bit weights: blocks widened to F32
  // first). Measured on bench -b: see the closing note of the architecture issue.
  static constexpr int64_t kGemvMaxRowsF32 = 16;
  static constexpr int64_t kGemvMaxRows16 = 16;
  static constexpr int64_t kGemvMaxRowsQuant = 16;
  // The smallest piece of a decode GEMV handed to a thread (ThreadPool::parallel_guided): its end is where
  // the threads wait for each other; 16 rows of 576 Q8_0 weights are 10 KB.
  static constexpr int64_t kMinGemvPiece = 16;

  // The chunk size for a GEMV of n outputs handed out chunk by chunk: about 8 chunks per thread (a late
  // thread costs at most a chunk; one atomic add per chunk), at least 64 outputs (a long contiguous run of
  // weights for the prefetchers), a multiple of the kernel's unroll `quantum`.
  int64_t chunk(int64_t n, int64_t quantum) const {
    const int64_t c = std::max<int64_t>(64, (n + 8 * pool_.size() - 1) / (8 * pool_.size()));
    return (c + quantum - 1) / quantum * quantum;
  }

  // Thread ith's share of [0, n): contiguous, in multiples of `quantum` (a kernel's unroll).
  static std::pair<int64_t, int64_t> split(int64_t n, int ith, int nth, int64_t quantum) {
    const int64_t units = (n + quantum - 1) / quantum;
    const int64_t per = (units + nth - 1) / nth;
    const int64_t n0 = std::min(n, per * quantum * ith);
    return {n0, std::min(n, n0 + per * quantum)};
  }

  // Columns [n0, n1) of out's rows = the bias (+ out when accumulating into a residual; 0 without a bias):
  // what a product with beta = 1 then adds to.
  static void init_out(const Tensor& out, const Linear& lin, bool accumulate, int64_t n0, int64_t n1) {
    const float* b = lin.b.empty() ? nullptr : lin.b.ptr<float>();
    if (b == nullptr && accumulate) return;
    for (int64_t t = 0; t < out.rows; ++t) {
      float* o = out.ptr<float>() + t * out.stride;
      if (b == nullptr) {
        std::memset(o + n0, 0, size_t(n1 - n0) * sizeof(float));
      } else if (accumulate) {
        for (int64_t i = n0; i < n1; ++i) o[i] += b[i];
      } else {
        std::memcpy(o + n0, b + n0, size_t(n1 - n0) * sizeof(float));
      }
    }
  }

  // out (+)= in W^T for the T rows of `in` and a packed 16-bit weight, the weight rows split over the
  // threads: every weight read once for all rows. BF16 weights against several rows, where the backend
  // computes in BF16 (cpu::bf16_math): the rows rounded to BF16 once, here, then cpu::gemv_bf16_rows (one
  // row stays on the F32 kernel: a decode step of one sequence is bound by memory, not arithmetic).
  void gemv16(const Tensor& out, const Tensor& in, const Linear& lin, bool accumulate) {
    const int64_t N = lin.n_out, K = lin.n_in, T = in.rows;
    const bool bf16 = lin.w.dtype == DType::BF16;
    float* y = out.ptr<float>();
    if (bf16 && T > 1 && bf16_math_) {
      const int64_t kp = lin.w.stride;            // Packed16::padded_cols(K)
      thread_local std::vector<uint16_t> xb_buf;  // the caller's, named by pointer in the lambda
      xb_buf.resize(size_t(T * kp));
      cpu::to_bf16_rows(xb_buf.data(), kp, in.ptr<float>(), in.stride, T, K);
      const uint16_t* xb = xb_buf.data();
      pool_.parallel_guided(N, 4, kMinGemvPiece, [&](int64_t n0, int64_t n1) {
        init_out(out, lin, accumulate, n0, n1);
        cpu::gemv_bf16_rows(y + n0, out.stride, lin.w.ptr<uint16_t>(), kp, xb, kp, T, n0, n1 - n0, K, true);
      });
      return;
    }
    pool_.parallel_guided(N, 4, kMinGemvPiece, [&](int64_t n0, int64_t n1) {
      init_out(out, lin, accumulate, n0, n1);
      if (T == 1) {
        cpu::gemv_packed16(y + n0, lin.w.ptr<uint16_t>(), lin.w.stride, in.ptr<float>(), n0, n1 - n0, K, true,
                           bf16);
      } else {
        cpu::gemv_packed16_rows(y + n0, out.stride, lin.w.ptr<uint16_t>(), lin.w.stride, in.ptr<float>(),
                                in.stride, T, n0, n1 - n0, K, true, bf16);
      }
    });
  }

  // Rows [r0, r0 + n) of a packed 16-bit or quantized matrix widened to F32 at dst (row stride K).
  static void widen(float* dst, const Linear& lin, int64_t r0, int64_t n) {
    const int64_t K = lin.n_in;
    if (lin.layout == kQuant) {
      const int64_t nb = K / lin.format.block, bytes = lin.format.block_bytes;
      thread_local std::vector<uint8_t> row;
      row.resize(size_t(nb * bytes));
      for (int64_t i = 0; i < n; ++i) {
        cpu::gather_quant_row(row.data(), lin.w.ptr<uint8_t>(), r0 + i, nb, bytes,
                              layout_of(lin.format.quant));
        dequantize(lin.format.quant, row.data(), dst + i * K, K);
      }
    } else {
      cpu::widen_packed_rows(dst, K, lin.w.ptr<uint16_t>(), lin.w.stride, r0, n, K,
                             lin.w.dtype == DType::BF16);
    }
  }

  // out (+)= in W^T for the T rows of `in` and a quantized weight, the weight rows split over the threads:
  // the activations quantized once (their rows are few), every weight block read once for all rows. Types
  // without integer kernels: 4 rows at a time widened to F32 into the thread's own buffer.
  void gemv_quant(const Tensor& out, const Tensor& in, const Linear& lin, bool accumulate) {
    const int64_t N = lin.n_out, K = lin.n_in, T = in.rows;
    const uint8_t* w = lin.w.ptr<uint8_t>();
    float* y = out.ptr<float>();
    cpu::QKind kind;
    if (quant_kind(lin.format.quant, &kind)) {
      // The caller's own buffer: a thread_local named inside the lambda would be each worker's.
      thread_local QuantActs acts;
      acts.quantize(in, kind);
      const cpu::QAct* xq = acts.rows();
      pool_.parallel_guided(N, 4, kMinGemvPiece, [&](int64_t n0, int64_t n1) {
        init_out(out, lin, accumulate, n0, n1);
        cpu::gemv_quant(kind, y + n0, out.stride, w, n0, xq, T, n1 - n0, K, true);
      });
      return;
    }
    pool_.parallel_guided(N, 4, kMinGemvPiece, [&](int64_t n0, int64_t n1) {
      init_out(out, lin, accumulate, n0, n1);
      thread_local std::vector<float> rows;
      if (rows.size() < size_t(4 * K)) rows.resize(size_t(4 * K));
      for (int64_t i = n0; i < n1; i += 4) {
        const int64_t n = std::min<int64_t>(4, n1 - i);
        widen(rows.data(), lin, i, n);
        cpu::gemv_f32_rows(y + i, out.stride, rows.data(), K, in.ptr<float>(), in.stride, T, n, K, true);
      }
    });
  }

  // Decode's product of a projection kept in quantized parts of different types (llama-quantize's Q4_K_M:
  // q and k in Q5_0 beside v in Q8_0, on a model whose width is no multiple of 256), as one dispatch: the
  // activations quantized once per form the parts' kernels take, and every part's rows cut into chunks
  // handed out together. Part by part, each of k and v (192 rows of SmolLM2-135M: 3 chunks) kept one of two
  // threads waiting a third of its product, and each part cost its own hand-over. The same kernels on the
  // same rows: the result equals the parts' one by one, bit for bit. False (nothing done) where a part is
  // not such a matrix or the batch is prefill's.
  bool gemv_quant_parts(const Tensor& out, const Tensor& in, std::span<const Linear> parts) {
    const int64_t T = in.rows, K = in.cols;
    constexpr size_t kMaxParts = 4;
    if (T > kGemvMaxRowsQuant || parts.empty() || parts.size() > kMaxParts) return false;
    struct Part {
      cpu::QKind kind;
      const Linear* lin;
      int64_t col;  // its first column of `out`
      int form;     // which of `acts` holds its activations
    };
    std::array<Part, kMaxParts> ps;
    int64_t total = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      cpu::QKind kind;
      if (parts[i].layout != kQuant || !quant_kind(parts[i].format.quant, &kind) || parts[i].n_in != K)
        return false;
      // The activations' forms: 16-bit per 32 (Q8_0), int8 per 32, int8 per 256 (the K types).
      const int form = cpu::acts_int16(kind) ? 0 : cpu::act_block_size(kind) == 32 ? 1 : 2;
      ps[i] = {kind, &parts[i], total, form};
      total += parts[i].n_out;
    }
    // The caller's own buffers: a thread_local named inside the lambda would be each worker's.
    thread_local std::array<QuantActs, 3> acts;
    std::array<const cpu::QAct*, 3> xq{};
    for (size_t i = 0; i < parts.size(); ++i) {
      if (xq[size_t(ps[i].form)] != nullptr) continue;
      acts[size_t(ps[i].form)].quantize(in, ps[i].kind);
      xq[size_t(ps[i].form)] = acts[size_t(ps[i].form)].rows();
    }
    struct Chunk {
      int32_t part;
      int64_t r0, r1;
    };
    thread_local std::vector<Chunk> chunks;
    chunks.clear();
    const int64_t c = chunk(total, 4);
    for (size_t i = 0; i < parts.size(); ++i) {
      for (int64_t r = 0; r < parts[i].n_out; r += c)
        chunks.push_back({int32_t(i), r, std::min(parts[i].n_out, r + c)});
    }
    const Chunk* cs = chunks.data();
    pool_.parallel_chunks(int64_t(chunks.size()), 1, [&](int64_t b0, int64_t b1) {
      for (int64_t j = b0; j < b1; ++j) {
        const Part& p = ps[size_t(cs[j].part)];
        const Tensor o = out.col_slice(p.col, p.lin->n_out);
        init_out(o, *p.lin, false, cs[j].r0, cs[j].r1);
        cpu::gemv_quant(p.kind, o.ptr<float>() + cs[j].r0, o.stride, p.lin->w.ptr<uint8_t>(), cs[j].r0,
                        xq[size_t(p.form)], T, cs[j].r1 - cs[j].r0, K, true);
      }
    });
    return true;
  }

  // out (+)= in W^T for a batch and weights of a kind the level's int8 GEMM takes (cpu::qgemm_takes): with
  // VNNI 2.3x faster than widening to F32 for sgemm (bench pp512, Q4_0 and Q8_0, Zen 5, 2 threads: see the
  // closing note of the GGUF issue); with AVX2 alone ~1.3x (Q4_0, Q4_K_M, Zen 3). The activations are
  // quantized once, split over the threads; then the weight rows go out in chunks of 16-row panels, each
  // repacked by the thread that takes it and run against every token.
  void gemm_int8(Tensor out, const Tensor& in, const Linear& lin, bool accumulate, const Activation* act,
                 cpu::QKind kind) {
    const int64_t N = lin.n_out, K = lin.n_in, T = in.rows, nb = K / 32;
    // The caller's buffers, named by pointer in the lambdas (a thread_local named there is each worker's).
    thread_local std::vector<uint8_t> xu_buf;
    thread_local std::vector<float> xd_buf;
    xu_buf.resize(size_t(T * K));
    xd_buf.resize(size_t(2 * T * nb));
    uint8_t* xu = xu_buf.data();
    float* xd = xd_buf.data();
    float* xo = xd + T * nb;
    pool_.parallel_for(T, [&](int64_t t0, int64_t t1) {
      std::vector<int16_t> sums(size_t(K / 16));
      for (int64_t t = t0; t < t1; ++t) {
        uint8_t* u = xu + t * K;
        cpu::quantize_acts(in.ptr<float>() + t * in.stride, K, reinterpret_cast<int8_t*>(u), xd + t * nb,
                           sums.data(), 32);
        for (int64_t i = 0; i < K; ++i) u[i] ^= 0x80u;  // q + 128
        for (int64_t b = 0; b < nb; ++b)
          xo[t * nb + b] = xd[t * nb + b] * float(sums[2 * b] + sums[2 * b + 1]);
      }
    });
    const uint8_t* w = lin.w.ptr<uint8_t>();
    pool_.parallel_chunks(N, chunk(N, cpu::kQgemmRows), [&](int64_t n0, int64_t n1) {
      init_out(out, lin, accumulate, n0, n1);
      thread_local std::vector<uint8_t> panel;
      panel.resize(size_t(cpu::qgemm_panel_bytes(K)));
      for (int64_t p = n0; p < n1; p += cpu::kQgemmRows) {
        const int64_t rows = std::min<int64_t>(cpu::kQgemmRows, n1 - p);
        cpu::qgemm_pack(panel.data(), kind, w, p, rows, K);
        cpu::qgemm(kind, out.ptr<float>() + p, out.stride, panel.data(), xu, K, xd, xo, nb, T, rows, K);
      }
      if (act) apply_act(out, n0, n1, *act);
    });
  }

  // out (+)= in W^T for a batch and Q8_0 weights through the 16-bit GEMM (cpu::q8gemm, VNNI): the activations
  // quantized and packed once, split over the threads by blocks of 32 tokens; then the weight rows go out in
  // chunks of 8-row panels, each widened by the thread that takes it and run against every token.
  void gemm_q8(Tensor out, const Tensor& in, const Linear& lin, bool accumulate, const Activation* act) {
    const int64_t N = lin.n_out, K = lin.n_in, T = in.rows;
    thread_local std::vector<uint8_t> buf;  // the caller's, named by pointer in the lambdas
    buf.resize(size_t(cpu::q8gemm_x_bytes(T, K)) + 64);
    uint8_t* xp = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64;
    pool_.parallel_chunks((T + 31) / 32, 1, [&](int64_t b0, int64_t b1) {
      cpu::q8gemm_pack_x(xp, in.ptr<float>(), in.stride, T, K, 32 * b0, std::min(T, 32 * b1));
    });
    const uint8_t* w = lin.w.ptr<uint8_t>();
    // Without a bias to add, a product that does not accumulate writes its output alone (no clearing first).
    const bool add = accumulate || !lin.b.empty();
    pool_.parallel_chunks(N, chunk(N, cpu::kQ8gemmRows), [&](int64_t n0, int64_t n1) {
      if (add) init_out(out, lin, accumulate, n0, n1);
      thread_local std::vector<uint8_t> panel;
      panel.resize(size_t(cpu::q8gemm_panel_bytes(K)) + 64);
      uint8_t* pp = panel.data() + (64 - reinterpret_cast<uintptr_t>(panel.data()) % 64) % 64;
      for (int64_t p = n0; p < n1; p += cpu::kQ8gemmRows) {
        const int64_t rows = std::min<int64_t>(cpu::kQ8gemmRows, n1 - p);
        cpu::q8gemm_pack_w(pp, w, p, rows, K);
        cpu::q8gemm(out.ptr<float>() + p, out.stride, pp, xp, T, rows, K, add);
      }
      if (act) apply_act(out, n0, n1, *act);
    });
  }

  // out (+)= in W^T for a batch and BF16 weights where the backend computes in BF16 (cpu::bf16_math): the
  // activations rounded to BF16 and packed once, split over the threads by blocks of 32 tokens; then the
  // weight rows go out in chunks of 12-row tiles, each read in place (no widening) against every token.
  void gemm_bf16(Tensor out, const Tensor& in, const Linear& lin, bool accumulate, const Activation* act) {
    const int64_t N = lin.n_out, K = lin.n_in, T = in.rows;
    thread_local std::vector<uint16_t> buf;  // the caller's, named by pointer in the lambdas
    buf.resize(size_t(cpu::bgemm_packed_halves(T, K)) + 32);
    uint16_t* xp =
        buf.data() + (32 - (reinterpret_cast<uintptr_t>(buf.data()) / 2) % 32) % 32;  // 64-byte aligned
    pool_.parallel_chunks((T + 31) / 32, 1, [&](int64_t b0, int64_t b1) {
      cpu::bgemm_pack_x(xp, in.ptr<float>(), in.stride, T, K, 32 * b0, std::min(T, 32 * b1));
    });
    pool_.parallel_chunks(N, chunk(N, 12), [&](int64_t n0, int64_t n1) {
      init_out(out, lin, accumulate, n0, n1);
      cpu::bgemm(out.ptr<float>() + n0, out.stride, lin.w.ptr<uint16_t>(), lin.w.stride, n0, n1 - n0, xp, T,
                 K);
      if (act) apply_act(out, n0, n1, *act);
    });
  }

  // out (+)= in W^T for a batch through minigpt's GEMM (cpu::own_sgemm): the activations packed once, the
  // weight rows split over the threads in chunks of 12-row blocks. F32 weights are read where they are;
  // 16-bit or quantized ones are widened into the thread's own buffer, kWidenedBytes of rows at a time, each
  // chunk then run against every token: each weight widened once. (fgemm runs every row tile of a call
  // against one group of tokens before the next, so that the group's activations are read from L2 once per
  // call: with 12 rows per call every tile read them again from L3.)
  static constexpr int64_t kWidenedBytes = int64_t(1) << 20;
  void gemm_own(Tensor out, const Tensor& in, const Linear& lin, bool accumulate, const Activation* act) {
    const int64_t N = lin.n_out, K = lin.n_in;
    const bool f32 = lin.layout == kOutInF32;
    const float* xp = pack_x(in);
    const int64_t chunk_rows = std::max<int64_t>(12, kWidenedBytes / (K * int64_t(sizeof(float))) / 12 * 12);
    pool_.parallel_chunks(N, chunk(N, 12), [&](int64_t n0, int64_t n1) {
      init_out(out, lin, accumulate, n0, n1);
      if (f32) {
        cpu::fgemm(out.ptr<float>() + n0, out.stride, lin.w.ptr<float>() + n0 * lin.w.stride, lin.w.stride,
                   n1 - n0, xp, in.rows, K);
      } else {
        thread_local std::vector<float> wf;
        wf.resize(size_t(std::min(chunk_rows, n1 - n0) * K));
        for (int64_t r = n0; r < n1; r += chunk_rows) {
          const int64_t rows = std::min(chunk_rows, n1 - r);
          widen(wf.data(), lin, r, rows);
          cpu::fgemm(out.ptr<float>() + r, out.stride, wf.data(), K, rows, xp, in.rows, K);
        }
      }
      if (act) apply_act(out, n0, n1, *act);
    });
  }

  // out (+)= in W^T for a batch: blocks of W (16-bit or quantized) widened to F32, then sgemm (minigpt's GEMM
  // where cpu::own_sgemm). Holds a lock: the widening scratch is shared by every session of this backend.
  void gemm_widened(Tensor out, const Tensor& in, const Linear& lin, bool accumulate, const Activation* act) {
    if (cpu::own_sgemm()) {
      gemm_own(out, in, lin, accumulate, act);
      return;
    }
    const int64_t N = lin.n_out, K = lin.n_in;
    std::lock_guard<std::mutex> lock(gemm_mutex_);
    const int64_t block = std::max<int64_t>(64, (int64_t(4) << 20) / K);  // ~16 MB of F32 per block
    if (gemm_scratch_.size() < size_t(std::min(block, N) * K))
      gemm_scratch_.resize(size_t(std::min(block, N) * K));
    for (int64_t n0 = 0; n0 < N; n0 += block) {
      const int64_t nb = std::min(block, N - n0);
      // Each thread widens its own rows of the block and multiplies them (single-threaded OpenBLAS).
      pool_.run([&](int ith, int nth) {
        const auto [r0, r1] = split(nb, ith, nth, 16);
        if (r0 >= r1) return;
        init_out(out, lin, accumulate, n0 + r0, n0 + r1);
        float* wf = gemm_scratch_.data() + r0 * K;
        widen(wf, lin, n0 + r0, r1 - r0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(in.rows), int(r1 - r0), int(K), 1.0f,
                    in.ptr<float>(), int(in.stride), wf, int(K), 1.0f, out.ptr<float>() + n0 + r0,
                    int(out.stride));
        if (act) apply_act(out, n0 + r0, n0 + r1, *act);
      });
    }
  }

  // The activations of a batch packed for cpu::fgemm, split over the threads; valid until the caller's
  // thread packs again (a buffer per calling thread: sessions on several threads share the backend).
  const float* pack_x(const Tensor& in) {
    const int64_t T = in.rows, K = in.cols;
    thread_local std::vector<float> buf;
    buf.resize(size_t(cpu::fgemm_packed_floats(T, K)) + 16);
    float* xp =
        buf.data() + (16 - (reinterpret_cast<uintptr_t>(buf.data()) / 4) % 16) % 16;  // 64-byte aligned
    pool_.parallel_chunks((T + 31) / 32, 1, [&](int64_t b0, int64_t b1) {
      cpu::fgemm_pack_x(xp, in.ptr<float>(), in.stride, T, K, 32 * b0, std::min(T, 32 * b1));
    });
    return xp;
  }

  cpu::ThreadPool pool_;
  DType kv_dtype_;
  cpu::WeightArena weights_;  // what prepare_weight and prepare_linear hold
  const bool bf16_math_;      // BF16 weights in BF16 arithmetic (cpu::bf16_math)
  std::mutex gemm_mutex_;
  std::vector<float> gemm_scratch_;
};

}  // namespace

std::shared_ptr<Backend> make_cpu_backend(int n_threads, DType kv_dtype, Bf16Math bf16_math) {
  if (kv_dtype != DType::F32 && kv_dtype != DType::F16 && kv_dtype != DType::BF16) {
    throw Error(ErrorKind::Argument, std::string("cpu backend: the KV cache is F32, F16 or BF16, not ") +
                                         std::string(dtype_name(kv_dtype)));
  }
  if (n_threads < 0 || n_threads > 1024) {
    throw Error(ErrorKind::Argument,
                "thread count " + std::to_string(n_threads) + " is out of range [0, 1024]");
  }
  if (n_threads == 0) n_threads = cpu_count();
  // The kernel level (MINIGPT_CPU's, or the best this CPU runs) chosen here, on the caller's thread: a bad
  // MINIGPT_CPU is then an Error at load. Chosen first by a pool worker in the first product, it ended the
  // process in std::terminate (a server on its first request).
  cpu::kernels();
  cpu::own_sgemm();                                               // a bad MINIGPT_SGEMM, likewise
  const bool bf16 = cpu::bf16_math(cpu::bf16_choice(bf16_math));  // and MINIGPT_BF16_MATH, or the flag's
  return std::make_shared<CpuBackend>(n_threads, kv_dtype, bf16);
}

}  // namespace minigpt
