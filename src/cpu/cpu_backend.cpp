// The CPU backend: OpenBLAS for matrix products, plain loops (vectorised by the compiler) for the rest,
// spread over a persistent thread pool.
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>

#include <sys/mman.h>

#include "cpu/kernels.h"
#include "cpu/thread_pool.h"
#include "minigpt/backend.h"
#include "minigpt/error.h"

namespace minigpt {
namespace {

class HostBuffer final : public Buffer {
 public:
  explicit HostBuffer(size_t bytes) : bytes_(bytes) {
    // 64-byte alignment (whole cache lines, aligned vector loads) for small buffers. Large buffers (weights, KV cache) in 2 MB pages where the kernel allows it (THP "madvise" mode):
    // a decode step streams hundreds of MB, and with 4 KB pages every 4 KB of it is a TLB miss.
    constexpr size_t kHuge = size_t(2) << 20;
    const bool huge = bytes >= kHuge;
    const size_t align = huge ? kHuge : 64;
    const size_t rounded = bytes == 0 ? 64 : (bytes + align - 1) / align * align;
    data_ = std::aligned_alloc(align, rounded);
    if (data_ == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    if (huge) ::madvise(data_, rounded, MADV_HUGEPAGE);  // advice only: failure leaves 4 KB pages
#endif
    std::memset(data_, 0, rounded);
  }
  ~HostBuffer() override { std::free(data_); }
  void* data() override { return data_; }
  size_t bytes() const override { return bytes_; }
  Device device() const override { return Device::Host; }

 private:
  void* data_;
  size_t bytes_;
};


class CpuBackend final : public Backend {
 public:
  // OpenBLAS runs single-threaded inside our threads: a batch GEMM is split by output columns over the
  // pool, so OpenBLAS's own threads never exist to compete with ours for the cores (nor spin after a call).
  explicit CpuBackend(int n_threads) : pool_(n_threads) { openblas_set_num_threads(1); }

  std::string name() const override { return "cpu"; }
  Device device() const override { return Device::Host; }
  int n_threads() const override { return pool_.size(); }

  std::unique_ptr<Buffer> alloc(size_t bytes) override { return std::make_unique<HostBuffer>(bytes); }

  Tensor prepare_weight(const Tensor& host, std::vector<std::unique_ptr<Buffer>>& keep) override {
    // Always a copy: `host` is only valid during the call. 16-bit weights are widened once here: the F32
    // OpenBLAS path is the reference CPU path.
    auto buf = alloc(size_t(host.numel()) * sizeof(float));
    float* dst = static_cast<float*>(buf->data());
    for (int64_t r = 0; r < host.rows; ++r) {
      const char* src = static_cast<const char*>(host.data) + size_t(r * host.stride) * dtype_size(host.dtype);
      convert_to_f32(dst + r * host.cols, src, host.dtype, size_t(host.cols));
    }
    Tensor t = make_tensor(dst, DType::F32, Device::Host, host.rows, host.cols);
    keep.push_back(std::move(buf));
    return t;
  }

  Linear prepare_linear(const Linear& host, DType dtype, std::vector<std::unique_ptr<Buffer>>& keep) override {
    Linear l = host;
    if (!host.b.empty()) l.b = prepare_weight(host.b, keep);
    if (dtype == DType::F32) {
      // OpenBLAS takes either layout, so an F32 matrix keeps its stored layout, copied into our own buffer
      // (2 MB pages when large, see HostBuffer: a decode step streams every matrix, and 4 KB pages cost a
      // TLB miss per 4 KB; measured: F32 decode ~10% slower in 4 KB pages).
      const size_t bytes = size_t(host.w.numel()) * sizeof(float);
      if (host.w.dtype == DType::F32 && host.w.stride == host.w.cols) {
        auto buf = alloc(bytes);
        std::memcpy(buf->data(), host.w.data, bytes);
        l.w = host.w;
        l.w.data = buf->data();
        keep.push_back(std::move(buf));
      } else {
        l.w = prepare_weight(host.w, keep);
      }
      return l;
    }
    // 16-bit matrices are kept Packed4 (see kernels.h), transposing GPT-2's Conv1D [n_in, n_out] on the way.
    using cpu::Packed16;
    const int64_t N = host.n_out, K = host.n_in, Kp = Packed16::padded_cols(K);
    auto buf = alloc(size_t(Packed16::padded_rows(N) * Kp) * sizeof(uint16_t));  // zero-filled: the padding
    uint16_t* dst = static_cast<uint16_t*>(buf->data());
    const bool in_out = host.layout == WeightLayout::InOut;
    std::vector<float> row(size_t(host.w.cols));
    for (int64_t r = 0; r < host.w.rows; ++r) {
      const char* src = static_cast<const char*>(host.w.data) + size_t(r * host.w.stride) * dtype_size(host.w.dtype);
      convert_to_f32(row.data(), src, host.w.dtype, row.size());
      for (int64_t c = 0; c < host.w.cols; ++c) {
        const uint16_t v = dtype == DType::BF16 ? f32_to_bf16(row[size_t(c)]) : f32_to_f16(row[size_t(c)]);
        // element (n, k) of the [n_out, n_in] matrix
        dst[in_out ? Packed16::offset(c, r, Kp) : Packed16::offset(r, c, Kp)] = v;
      }
    }
    l.w = Tensor{dst, dtype, Device::Host, N, K, Kp};
    l.layout = WeightLayout::Packed4;
    keep.push_back(std::move(buf));
    return l;
  }

  void to_host(float* dst, const Tensor& src) override {
    for (int64_t r = 0; r < src.rows; ++r) {
      std::memcpy(dst + r * src.cols, src.ptr<float>() + r * src.stride, size_t(src.cols) * sizeof(float));
    }
  }

  void embed(Tensor out, const int32_t* tokens, int64_t n_tokens, int64_t pos0, const Tensor& wte,
             const Tensor& wpe) override {
    const int64_t C = out.cols;
    for (int64_t t = 0; t < n_tokens; ++t) {
      float* o = out.ptr<float>() + t * out.stride;
      const int64_t row = int64_t(tokens[t]) * wte.stride;
      if (wte.dtype == DType::F32) {
        std::memcpy(o, wte.ptr<float>() + row, size_t(C) * sizeof(float));
      } else {  // 16-bit matrices are Packed4 here
        cpu::widen_packed_rows(o, C, wte.ptr<uint16_t>(), wte.stride, tokens[t], 1, C, wte.dtype == DType::BF16);
      }
      const float* p = wpe.ptr<float>() + (pos0 + t) * wpe.stride;
      for (int64_t i = 0; i < C; ++i) o[i] += p[i];
    }
  }

  void layer_norm(Tensor out, const Tensor& in, const Tensor& w, const Tensor& b, float eps) override {
    const int64_t C = in.cols;
    const float* wp = w.ptr<float>();
    const float* bp = b.ptr<float>();
    auto rows = [&](int64_t r0, int64_t r1) {
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
        for (int64_t i = 0; i < C; ++i) y[i] = (x[i] - mean) * rstd * wp[i] + bp[i];
      }
    };
    if (in.rows < 8) {
      rows(0, in.rows);
    } else {
      pool_.parallel_for(in.rows, rows);
    }
  }

  void linear(Tensor out, const Tensor& in, const Linear& lin, bool accumulate) override {
    linear_impl(out, in, lin, accumulate, nullptr);
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
    if (lin.w.dtype != DType::F32) {
      if (T <= kGemvMaxRows) {
        for (int64_t t = 0; t < T; ++t) gemv16(out.row_slice(t, 1), in.ptr<float>() + t * in.stride, lin, accumulate);
        return false;
      }
      gemm16(out, in, lin, accumulate, act);
      return true;
    }
    const bool in_out = lin.layout == WeightLayout::InOut;
    if (T <= kGemvMaxRows) {
      // Decode: our GEMV kernels on our threads (OpenBLAS's sgemv would wake its own threads for every
      // small product), each thread owning a contiguous block of outputs.
      for (int64_t t = 0; t < T; ++t) {
        const Tensor y = out.row_slice(t, 1);
        const float* x = in.ptr<float>() + t * in.stride;
        if (in_out) {
          gemv_inout_slabs(y, x, lin, accumulate);
          continue;
        }
        pool_.parallel_chunks(N, chunk(N, 4), [&](int64_t n0, int64_t n1) {
          init_out(y, lin, accumulate, n0, n1);
          cpu::gemv_f32(y.ptr<float>() + n0, lin.w.ptr<float>() + n0 * lin.w.stride, lin.w.stride, x, n1 - n0, K, true);
        });
      }
      return false;
    }
    pool_.run([&](int ith, int nth) {
      const auto [n0, n1] = split(N, ith, nth, 16);
      if (n0 >= n1) return;
      init_out(out, lin, accumulate, n0, n1);
      // columns [n0, n1) of W: a column block of [K, N] (InOut) or a row block of [N, K] (OutIn)
      const float* w = lin.w.ptr<float>() + (in_out ? n0 : n0 * lin.w.stride);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, in_out ? CblasNoTrans : CblasTrans, int(T), int(n1 - n0), int(K), 1.0f,
                  in.ptr<float>(), int(in.stride), w, int(lin.w.stride), 1.0f, out.ptr<float>() + n0, int(out.stride));
      if (act) apply_act(out, n0, n1, *act);
    });
    return true;
  }

  void activation(Tensor x, Activation act) override {
    pool_.parallel_for(x.rows, [&](int64_t r0, int64_t r1) { apply_act(x.row_slice(r0, r1 - r0), 0, x.cols, act); });
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
      }
    }
  }

  // K is stored transposed (below), so the keys of one head dimension are a row of S floats: with S a
  // multiple of 1024 (GPT-2's 1024 positions), the rows of a head would lie a multiple of 4 KB apart, all in
  // the same L1 set, and a block of keys across the head dimensions would not stay in L1. 16 more rows
  // (64 bytes) put consecutive rows in consecutive sets.
  int64_t kv_cache_rows(int64_t n_ctx) const override { return (n_ctx + 15) / 16 * 16 + 16; }

  // The caches are kept per head: K transposed [H, D, S] (a block of keys' scores is then one FMA per head
  // dimension over contiguous keys), V [H, S, D]. A decode step reads each head's K and V as long
  // contiguous streams instead of 256-byte pieces a whole row apart.
  void store_kv(Tensor k_cache, Tensor v_cache, const Tensor& k, const Tensor& v, int64_t pos0, int64_t n_head) override {
    const int64_t S = k_cache.rows, D = k.cols / n_head;
    const int64_t T = k.rows;
    auto heads = [&](int64_t h0, int64_t h1) {
      for (int64_t h = h0; h < h1; ++h) {
        float* kc = k_cache.ptr<float>() + h * D * S + pos0;
        float* vc = v_cache.ptr<float>() + (h * S + pos0) * D;
        // K transposed in blocks of 16 rows: the block's D x 16 source floats stay in L1 while each of the D
        // destination rows gets 16 contiguous ones.
        for (int64_t r0 = 0; r0 < T; r0 += 16) {
          const int64_t r1 = std::min(T, r0 + 16);
          const float* src = k.ptr<float>() + h * D;
          for (int64_t d = 0; d < D; ++d) {
            for (int64_t r = r0; r < r1; ++r) kc[d * S + r] = src[r * k.stride + d];
          }
        }
        for (int64_t r = 0; r < T; ++r) {
          std::memcpy(vc + r * D, v.ptr<float>() + r * v.stride + h * D, size_t(D) * sizeof(float));
        }
      }
    };
    if (T < 16) {
      heads(0, n_head);  // a decode step: a few hundred floats, not worth waking the threads
    } else {
      pool_.parallel_for(n_head, heads);
    }
  }

  void attention(Tensor out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t pos0,
                 int64_t n_head, float scale) override {
    const int64_t T = q.rows;
    const int64_t D = q.cols / n_head;
    const int64_t S = k_cache.rows;
    if (T > 4) {
      // A prefill: one task per (head, tile of queries), register-blocked like a GEMM.
      constexpr int64_t tq = cpu::kPrefillTileQueries;
      const int64_t tiles = (T + tq - 1) / tq;
      pool_.parallel_for(n_head * tiles, [&](int64_t begin, int64_t end) {
        for (int64_t task = begin; task < end; ++task) {
          const int64_t h = task / tiles, t0 = (task % tiles) * tq, nq = std::min(tq, T - t0);
          cpu::attention_prefill(out.ptr<float>() + t0 * out.stride + h * D, out.stride, q.ptr<float>() + t0 * q.stride + h * D,
                                 q.stride, nq, pos0 + t0, k_cache.ptr<float>() + h * D * S, v_cache.ptr<float>() + h * S * D,
                                 S, D, scale);
        }
      });
      return;
    }
    // Decode: one task per head, each streaming its K and V once.
    pool_.parallel_for(n_head, [&](int64_t begin, int64_t end) {
      for (int64_t h = begin; h < end; ++h) {
        cpu::attention_block(out.ptr<float>() + h * D, out.stride, q.ptr<float>() + h * D, q.stride, T, pos0,
                             k_cache.ptr<float>() + h * D * S, v_cache.ptr<float>() + h * S * D, S, D, scale);
      }
    });
  }

 private:
  // Up to this many rows, a 16-bit linear layer runs as row-by-row GEMV (reads each weight once per row);
  // beyond, as blocks widened to F32 and multiplied by OpenBLAS sgemm.
  static constexpr int64_t kGemvMaxRows = 4;

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

  // out (+)= x W for one row of an F32 [K, N] (InOut) weight. W is cut into 8 slabs of whole rows, each a
  // contiguous block read front to back (column blocks per thread would read every row in pieces, which
  // the prefetchers follow less well), handed to the threads as they come free. Each slab's partial sums
  // go to scratch and are added in slab order: the result does not depend on the thread count.
  void gemv_inout_slabs(const Tensor& out, const float* x, const Linear& lin, bool accumulate) {
    const int64_t N = lin.n_out, K = lin.n_in;
    constexpr int64_t kSlabs = 8;
    const int64_t rows = (K + kSlabs * 4 - 1) / (kSlabs * 4) * 4;  // per slab, a multiple of the kernel's 4
    const int64_t slabs = (K + rows - 1) / rows;
    std::lock_guard<std::mutex> lock(gemv_mutex_);
    if (gemv_partial_.size() < size_t(slabs * N)) gemv_partial_.resize(size_t(slabs * N));
    float* partial = gemv_partial_.data();
    pool_.parallel_chunks(slabs, 1, [&](int64_t s0, int64_t s1) {
      for (int64_t sl = s0; sl < s1; ++sl) {
        const int64_t k0 = sl * rows;
        cpu::gemv_inout_f32(partial + sl * N, lin.w.ptr<float>() + k0 * lin.w.stride, lin.w.stride, x + k0, N,
                            std::min(rows, K - k0), false);
      }
    });
    init_out(out, lin, accumulate, 0, N);
    float* y = out.ptr<float>();
    for (int64_t sl = 0; sl < slabs; ++sl) {
      const float* p = partial + sl * N;
      for (int64_t i = 0; i < N; ++i) y[i] += p[i];
    }
  }

  // out (+)= W x for one row, the weight rows split over the threads.
  void gemv16(const Tensor& out, const float* x, const Linear& lin, bool accumulate) {
    const int64_t N = lin.n_out, K = lin.n_in;
    const bool bf16 = lin.w.dtype == DType::BF16;
    float* y = out.ptr<float>();
    pool_.parallel_chunks(N, chunk(N, 4), [&](int64_t n0, int64_t n1) {
      init_out(out, lin, accumulate, n0, n1);
      cpu::gemv_packed16(y + n0, lin.w.ptr<uint16_t>(), lin.w.stride, x, n0, n1 - n0, K, true, bf16);
    });
  }

  // out (+)= in W^T for a batch: blocks of W widened to F32, then sgemm. Holds a lock: the widening
  // scratch is shared by every session of this backend.
  void gemm16(Tensor out, const Tensor& in, const Linear& lin, bool accumulate, const Activation* act) {
    std::lock_guard<std::mutex> lock(gemm_mutex_);
    const int64_t N = lin.n_out, K = lin.n_in;
    const int64_t block = std::max<int64_t>(64, (int64_t(4) << 20) / K);  // ~16 MB of F32 per block
    if (gemm_scratch_.size() < size_t(std::min(block, N) * K)) gemm_scratch_.resize(size_t(std::min(block, N) * K));
    const bool bf16 = lin.w.dtype == DType::BF16;
    for (int64_t n0 = 0; n0 < N; n0 += block) {
      const int64_t nb = std::min(block, N - n0);
      // Each thread widens its own rows of the block and multiplies them (single-threaded OpenBLAS).
      pool_.run([&](int ith, int nth) {
        const auto [r0, r1] = split(nb, ith, nth, 16);
        if (r0 >= r1) return;
        init_out(out, lin, accumulate, n0 + r0, n0 + r1);
        float* wf = gemm_scratch_.data() + r0 * K;
        cpu::widen_packed_rows(wf, K, lin.w.ptr<uint16_t>(), lin.w.stride, n0 + r0, r1 - r0, K, bf16);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(in.rows), int(r1 - r0), int(K), 1.0f, in.ptr<float>(),
                    int(in.stride), wf, int(K), 1.0f, out.ptr<float>() + n0 + r0, int(out.stride));
        if (act) apply_act(out, n0 + r0, n0 + r1, *act);
      });
    }
  }

  cpu::ThreadPool pool_;
  std::mutex gemm_mutex_;
  std::mutex gemv_mutex_;
  std::vector<float> gemv_partial_;
  std::vector<float> gemm_scratch_;
};

}  // namespace

std::shared_ptr<Backend> make_cpu_backend(int n_threads) {
  if (n_threads < 0 || n_threads > 1024) {
    throw Error(ErrorKind::Argument, "thread count " + std::to_string(n_threads) + " is out of range [0, 1024]");
  }
  if (n_threads == 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  return std::make_shared<CpuBackend>(n_threads);
}

}  // namespace minigpt
