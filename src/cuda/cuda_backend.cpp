// The CUDA backend: device buffers, weight upload, the KV cache, the ops (shape checks here, kernels in the
// .cu files), recorded decode steps (CUDA graphs), the factory and the device list. Host code only, built
// by the host compiler (C++20, as backend.h needs; nvcc builds the .cu files as C++17).
//
// Everything runs in order on one stream per backend. Entry points that are not ops (alloc, prepare_*,
// to_host, run_step, forget_step) take the backend's lock, so several sessions may share it from several
// threads; ops called outside run_step (tests) must come from one thread at a time.
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "cuda/cuda.h"
#include "cuda/kernels.cuh"
#include "formats/gguf.h"
#include "minigpt/backend.h"

namespace minigpt {
namespace {

using cuda::StepValue;

// The block types the kernels of src/cuda/quant.cu widen (those of the CPU's dequantizer), with their names
// (WeightFormat::name needs the GGUF type table, which this module does not link).
struct QuantTypeName {
  GgmlType ggml;
  cuda::QuantType type;
  const char* name;
};
constexpr QuantTypeName kQuantTypes[] = {
    {GgmlType::Q8_0, cuda::QuantType::Q8_0, "Q8_0"}, {GgmlType::Q4_0, cuda::QuantType::Q4_0, "Q4_0"},
    {GgmlType::Q4_1, cuda::QuantType::Q4_1, "Q4_1"}, {GgmlType::Q5_0, cuda::QuantType::Q5_0, "Q5_0"},
    {GgmlType::Q5_1, cuda::QuantType::Q5_1, "Q5_1"}, {GgmlType::Q4_K, cuda::QuantType::Q4_K, "Q4_K"},
    {GgmlType::Q5_K, cuda::QuantType::Q5_K, "Q5_K"}, {GgmlType::Q6_K, cuda::QuantType::Q6_K, "Q6_K"}};
const QuantTypeName* quant_type(GgmlType g) {
  for (const QuantTypeName& q : kQuantTypes)
    if (q.ggml == g) return &q;
  return nullptr;
}

std::string format_name(const WeightFormat& f) {
  if (!f.is_quantized()) return std::string(dtype_name(f.dtype));
  const QuantTypeName* q = quant_type(f.quant);
  return q ? q->name : "GGUF type " + std::to_string(uint32_t(f.quant));
}

// A quantized Linear's blocks as the kernels take them (its rows are the file's: n_in / block blocks each).
cuda::QuantFormat quant_format(const Linear& l) {
  cuda::QuantFormat f{};
  const QuantTypeName* q = quant_type(l.format.quant);
  if (q == nullptr)
    throw Error(ErrorKind::Argument,
                "cuda: " + format_name(l.format) + " is not a block type the kernels widen");
  f.type = q->type;
  f.block = l.format.block;
  f.block_bytes = l.format.block_bytes;
  f.row_bytes = int64_t(l.format.row_bytes(l.n_in));
  return f;
}

// Device memory owned by a Buffer: zero-filled, freed in the destructor (cudaFree waits for queued work).
class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(size_t bytes, int device, cudaStream_t stream) : bytes_(bytes), device_(device) {
    CUDA_CHECK(cudaMalloc(&data_, std::max<size_t>(bytes, 256)));
    // On the backend's stream, so it is ordered before every op that touches the buffer.
    const cudaError_t e = cudaMemsetAsync(data_, 0, std::max<size_t>(bytes, 256), stream);
    if (e != cudaSuccess) {
      cudaFree(data_);
      CUDA_CHECK(e);
    }
  }
  ~CudaBuffer() override {
    int current = -1;
    cudaGetDevice(&current);
    if (current != device_) cudaSetDevice(device_);
    cudaFree(data_);  // no throwing from a destructor; a failure here means the context is already gone
    if (current != device_ && current >= 0) cudaSetDevice(current);
  }
  void* data() override { return data_; }
  size_t bytes() const override { return bytes_; }
  Device device() const override { return Device::Cuda; }

 private:
  void* data_ = nullptr;
  size_t bytes_;
  int device_;
};

void need(bool ok, const std::string& what) {
  if (!ok) throw Error(ErrorKind::Argument, "cuda backend: " + what);
}
void need_device_f32(const Tensor& t, const char* op, const char* name) {
  need(t.device == Device::Cuda, std::string(op) + ": '" + name + "' is not in device memory");
  need(t.dtype == DType::F32, std::string(op) + ": '" + name + "' must be F32");
}
bool is_weight_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
cudaDataType_t cuda_type(DType t) {
  return t == DType::F32 ? CUDA_R_32F : t == DType::F16 ? CUDA_R_16F : CUDA_R_16BF;
}

// Stores one float as `dtype` (F32, F16 or BF16 bits) at dst.
void store_as(uint8_t* dst, float v, DType dtype) {
  if (dtype == DType::F32) {
    std::memcpy(dst, &v, 4);
  } else {
    const uint16_t h = dtype == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
    std::memcpy(dst, &h, 2);
  }
}

// The KV cache: one device allocation holding, for each layer and each sequence, K then V as [n_ctx, Hkv * D]
// rows in the backend's KV dtype (heads side by side, as the kernels read them):
//   [layer][seq][K | V][n_ctx][Hkv * D]
class CudaKvCache final : public KvCache {
 public:
  CudaKvCache(const KvCacheSpec& spec, DType dtype, const void* owner, std::unique_ptr<Buffer> buffer)
      : KvCache(spec, dtype), owner_(owner), buffer_(std::move(buffer)) {}
  size_t bytes() const override { return buffer_->bytes(); }

  const void* owner() const { return owner_; }
  int64_t width() const { return spec().n_kv_head * spec().head_dim; }
  // Bytes of one sequence's K (or V) rows of one layer.
  static size_t plane_bytes(const KvCacheSpec& s, DType dtype) {
    return size_t(s.n_ctx) * size_t(s.n_kv_head * s.head_dim) * dtype_size(dtype);
  }
  void* k(int64_t layer, int64_t seq) const { return plane(layer, seq, 0); }
  void* v(int64_t layer, int64_t seq) const { return plane(layer, seq, 1); }

 private:
  void* plane(int64_t layer, int64_t seq, int64_t kv) const {
    const size_t index = size_t((layer * spec().n_seq + seq) * 2 + kv);
    return static_cast<char*>(buffer_->data()) + index * plane_bytes(spec(), dtype());
  }

  const void* owner_;
  std::unique_ptr<Buffer> buffer_;
};

bool disabled_by_env(const char* name) {
  const char* e = std::getenv(name);
  return e != nullptr && std::string(e) == "0";
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaOptions& options) : options_(options), device_(options.device) {
    try {
      CUDA_CHECK(cudaSetDevice(device_));
      CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      CUDA_CHECK(cudaEventCreateWithFlags(&step_uploaded_, cudaEventDisableTiming));
      CUBLAS_CHECK(cublasCreate(&cublas_));
      CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
      // Plain F32 arithmetic for F32 weights (no TF32), so F32 models match the CPU backend to rounding.
      CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
      cuda::attention_init();
      cudaDeviceProp prop{};
      CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
      cuda::set_pdl(stream_, options_.pdl && prop.major >= 9);
      ensure_step_capacity(1 + 1024);
    } catch (...) {
      release();
      throw;
    }
  }
  ~CudaBackend() override { release(); }

  std::string name() const override { return "cuda"; }
  Device device() const override { return Device::Cuda; }

  std::unique_ptr<Buffer> alloc(size_t bytes) override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    need(!capturing_, "alloc while a step is being recorded");
    CUDA_CHECK(cudaSetDevice(device_));
    return std::make_unique<CudaBuffer>(bytes, device_, stream_);
  }

  Tensor prepare_weight(const Tensor& host, std::vector<std::unique_ptr<Buffer>>& keep) override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    need(host.device == Device::Host && is_weight_dtype(host.dtype),
         "prepare_weight: a host F32/F16/BF16 tensor");
    std::vector<float> f32(size_t(host.numel()));
    for (int64_t r = 0; r < host.rows; ++r) {
      const char* src =
          static_cast<const char*>(host.data) + size_t(r * host.stride) * dtype_size(host.dtype);
      convert_to_f32(f32.data() + r * host.cols, src, host.dtype, size_t(host.cols));
    }
    keep.push_back(upload(f32.data(), f32.size() * sizeof(float)));
    return make_tensor(keep.back()->data(), DType::F32, Device::Cuda, host.rows, host.cols);
  }

  // Matrices live as [n_out, n_in] (OutIn) in `format.dtype`: the rows the GEMV kernel streams, and cuBLAS's
  // column-major [n_in, n_out] for a transposed GEMM.
  Linear prepare_linear(const HostLinear& host, const WeightFormat& format,
                        std::vector<std::unique_ptr<Buffer>>& keep) override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    if (format.is_quantized()) return prepare_quantized(host, format, keep);
    const DType dtype = format.dtype;
    need(is_weight_dtype(dtype), "prepare_linear: dtype must be F32, F16 or BF16");
    need(host.w.device == Device::Host && is_weight_dtype(host.w.dtype),
         "prepare_linear: a host F32/F16/BF16 matrix");
    const int64_t N = host.n_out, K = host.n_in;
    const bool in_out = host.order == MatrixOrder::InOut;
    need(N >= 1 && K >= 1 &&
             (in_out ? host.w.rows == K && host.w.cols == N : host.w.rows == N && host.w.cols == K),
         "prepare_linear: matrix shape disagrees with n_in x n_out");
    need(host.b.empty() || host.b.rows * host.b.cols == N, "prepare_linear: bias is not [1, n_out]");
    Linear l;
    if (!host.b.empty()) l.b = prepare_weight(host.b, keep);
    const size_t esize = dtype_size(dtype);
    std::vector<uint8_t> dst(size_t(N * K) * esize);
    std::vector<float> row(size_t(host.w.cols));
    for (int64_t r = 0; r < host.w.rows; ++r) {
      const char* src =
          static_cast<const char*>(host.w.data) + size_t(r * host.w.stride) * dtype_size(host.w.dtype);
      convert_to_f32(row.data(), src, host.w.dtype, row.size());
      for (int64_t c = 0; c < host.w.cols; ++c) {
        const int64_t idx = in_out ? c * K + r : r * K + c;  // InOut: W[k = r, n = c] -> [n, k]
        store_as(dst.data() + size_t(idx) * esize, row[size_t(c)], dtype);
      }
    }
    keep.push_back(upload(dst.data(), dst.size()));
    l.w = make_tensor(keep.back()->data(), dtype, Device::Cuda, N, K);
    l.format = WeightFormat::plain(dtype);
    l.n_in = K;
    l.n_out = N;
    return l;
  }

  bool holds(const WeightFormat& format) const override {
    return !format.is_quantized() || (quant_type(format.quant) != nullptr && format.block % 32 == 0);
  }

  // A quantized matrix is held as the file holds it: [n_out, n_in] rows of GGUF blocks (the kernels of
  // src/cuda/quant.cu widen them as they read).
  Linear prepare_quantized(const HostLinear& host, const WeightFormat& format,
                           std::vector<std::unique_ptr<Buffer>>& keep) {
    if (!holds(format)) {
      throw Error(ErrorKind::Unsupported,
                  "cuda backend: weights held as " + format_name(format) + " are not supported");
    }
    if (!(host.stored == format) || host.order != MatrixOrder::OutIn || host.n_in % format.block != 0 ||
        host.w.rows != host.n_out || host.w.cols != host.n_in || host.w.device != Device::Host) {
      throw Error(ErrorKind::Argument, "cuda backend: a " + format_name(format) + " matrix must come as " +
                                           format_name(format) + " blocks in [n_out, n_in] rows (got " +
                                           format_name(host.stored) + ")");
    }
    Linear l;
    l.format = format;
    l.n_in = host.n_in;
    l.n_out = host.n_out;
    if (!host.b.empty()) l.b = prepare_weight(host.b, keep);
    keep.push_back(upload(host.w.data, format.row_bytes(host.n_in) * size_t(host.n_out)));
    l.w = make_tensor(keep.back()->data(), DType::F32, Device::Cuda, host.n_out, host.n_in);  // blocks
    return l;
  }

  std::unique_ptr<KvCache> make_kv_cache(const KvCacheSpec& spec) override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    need(!capturing_, "make_kv_cache while a step is being recorded");
    need(spec.n_layer >= 1 && spec.n_kv_head >= 1 && spec.head_dim >= 1 && spec.n_ctx >= 1 && spec.n_seq >= 1,
         "make_kv_cache: every dimension of the spec must be >= 1");
    need(spec.n_ctx <= INT32_MAX, "make_kv_cache: n_ctx past the positions the kernels take (2^31 - 1)");
    const DType dtype = options_.kv_dtype;
    // Overflow-checked size: layers * sequences * 2 planes of n_ctx rows of Hkv * D elements.
    const double total = double(spec.n_layer) * double(spec.n_seq) * 2.0 * double(spec.n_ctx) *
                         double(spec.n_kv_head) * double(spec.head_dim) * double(dtype_size(dtype));
    need(total < 9.0e18, "make_kv_cache: the cache's size overflows");
    const size_t bytes = size_t(spec.n_layer * spec.n_seq * 2) * CudaKvCache::plane_bytes(spec, dtype);
    CUDA_CHECK(cudaSetDevice(device_));
    auto buffer = std::make_unique<CudaBuffer>(bytes, device_, stream_);
    return std::make_unique<CudaKvCache>(spec, dtype, this, std::move(buffer));
  }

  // Through pinned staging: a page-locked buffer is what the copy engine writes at full speed.
  void to_host(float* dst, const Tensor& src) override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    need_device_f32(src, "to_host", "src");
    CUDA_CHECK(cudaSetDevice(device_));
    const size_t bytes = size_t(src.rows * src.cols) * sizeof(float);
    if (bytes > pinned_logits_bytes_) {
      if (pinned_logits_) CUDA_CHECK(cudaFreeHost(pinned_logits_));
      pinned_logits_ = nullptr;
      pinned_logits_bytes_ = 0;
      CUDA_CHECK(cudaMallocHost(&pinned_logits_, bytes));
      pinned_logits_bytes_ = bytes;
    }
    CUDA_CHECK(cudaMemcpy2DAsync(pinned_logits_, size_t(src.cols) * sizeof(float), src.data,
                                 size_t(src.stride) * sizeof(float), size_t(src.cols) * sizeof(float),
                                 size_t(src.rows), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::memcpy(dst, pinned_logits_, bytes);
  }

  // One launch per run (each at its own positions); the ids are read from step_dev_ (uploaded by run_step,
  // or here outside a step).
  void embed(Tensor out, const Step& step, const Linear& table, const Tensor& wpe) override {
    need_device_f32(out, "embed", "out");
    const Tensor& wte = table.w;
    const bool quant = table.format.is_quantized();
    need(wte.device == Device::Cuda && (quant ? table.n_in == out.cols && out.cols % table.format.block == 0
                                              : is_weight_dtype(wte.dtype) && table.format.block == 1 &&
                                                    wte.dtype == table.format.dtype),
         "embed: the token table was not prepared by the CUDA backend");
    need(out.rows >= step.n_tokens && out.cols == wte.cols, "embed: shapes disagree");
    if (!wpe.empty()) {
      need_device_f32(wpe, "embed", "wpe");
      need(wpe.cols == out.cols, "embed: shapes disagree (wpe)");
    }
    check_runs(step, "embed");
    for (const SeqRun& r : step.runs) {
      need(wpe.empty() || r.pos0 + r.n <= wpe.rows, "embed: positions past the end of wpe");
    }
    bind();
    if (in_step_) {
      same_step(step, "embed");
      if (!wpe.empty()) note_limit(wpe.rows);
    } else {
      upload_step(step);  // ids travel like a step's, through the pinned staging
    }
    for (const SeqRun& r : step.runs) {
      const StepValue pos = step_value(r);
      if (quant) {
        cuda::embed_quant(out.row_slice(r.first, r.n).ptr<float>(), out.stride, step_dev_ + 1 + r.first, r.n,
                          pos, wte.data, quant_format(table), wpe.empty() ? nullptr : wpe.ptr<float>(),
                          wpe.empty() ? 0 : wpe.stride, out.cols, stream_);
        continue;
      }
      cuda::embed(out.row_slice(r.first, r.n).ptr<float>(), out.stride, step_dev_ + 1 + r.first, r.n, pos,
                  wte.data, wte.dtype, wte.stride, wpe.empty() ? nullptr : wpe.ptr<float>(),
                  wpe.empty() ? 0 : wpe.stride, out.cols, stream_);
    }
  }

  void add_positions(Tensor out, const Step& step, const Tensor& wpe) override {
    need_device_f32(out, "add_positions", "out");
    need_device_f32(wpe, "add_positions", "wpe");
    need(out.rows >= step.n_tokens && wpe.cols == out.cols, "add_positions: shapes disagree");
    check_runs(step, "add_positions");
    for (const SeqRun& r : step.runs) {
      need(r.pos0 + r.n <= wpe.rows, "add_positions: positions past the end of wpe");
    }
    bind();
    if (in_step_) {
      same_step(step, "add_positions");
      note_limit(wpe.rows);
    }
    for (const SeqRun& r : step.runs) {
      cuda::add_positions(out.row_slice(r.first, r.n).ptr<float>(), out.stride, r.n, step_value(r),
                          wpe.ptr<float>(), wpe.stride, out.cols, stream_);
    }
  }

  using Backend::rope;
  void rope(Tensor x, const Step& step, int64_t n_heads, int64_t head_dim, int64_t rotary_dim, float theta,
            RopeLayout layout) override {
    need_device_f32(x, "rope", "x");
    need(x.rows >= step.n_tokens && x.cols == n_heads * head_dim && rotary_dim >= 2 && rotary_dim % 2 == 0 &&
             rotary_dim <= head_dim,
         "rope: shapes disagree");
    check_runs(step, "rope");
    bind();
    if (in_step_) same_step(step, "rope");
    for (const SeqRun& r : step.runs) {
      cuda::rope(x.row_slice(r.first, r.n).ptr<float>(), x.stride, r.n, step_value(r), n_heads, head_dim,
                 rotary_dim, theta, nullptr, layout, stream_);
    }
  }

  void rope_freqs(Tensor x, const Step& step, int64_t n_heads, int64_t head_dim, int64_t rotary_dim,
                  const Tensor& inv_freq, RopeLayout layout, float mscale) override {
    if (mscale != 1.0f) {
      throw Error(ErrorKind::Unsupported,
                  "cuda backend: rope_freqs with cos and sin scaled (mscale " + std::to_string(mscale) +
                      ", LongRoPE's attention factor) is not implemented (try the cpu backend)");
    }
    need_device_f32(x, "rope", "x");
    need_device_f32(inv_freq, "rope", "inv_freq");
    need(x.rows >= step.n_tokens && x.cols == n_heads * head_dim && rotary_dim >= 2 && rotary_dim % 2 == 0 &&
             rotary_dim <= head_dim && inv_freq.numel() == rotary_dim / 2,
         "rope: shapes disagree");
    check_runs(step, "rope");
    bind();
    if (in_step_) same_step(step, "rope");
    for (const SeqRun& r : step.runs) {
      cuda::rope(x.row_slice(r.first, r.n).ptr<float>(), x.stride, r.n, step_value(r), n_heads, head_dim,
                 rotary_dim, 0.0f, inv_freq.ptr<float>(), layout, stream_);
    }
  }

  void norm_heads(Tensor x, int64_t n_heads, const Tensor& w, NormKind kind, float eps) override {
    need_device_f32(x, "norm_heads", "x");
    need_device_f32(w, "norm_heads", "w");
    need(n_heads >= 1 && x.cols % n_heads == 0 && w.numel() == x.cols / n_heads,
         "norm_heads: shapes disagree");
    bind();
    cuda::norm_heads(x.ptr<float>(), x.stride, x.rows, n_heads, x.cols / n_heads, w.ptr<float>(), kind, eps,
                     stream_);
  }

  void norm(Tensor out, const Tensor& in, const Tensor& w, const Tensor& b, NormKind kind,
            float eps) override {
    need_device_f32(out, "norm", "out");
    need_device_f32(in, "norm", "in");
    need_device_f32(w, "norm", "w");
    if (!b.empty()) need_device_f32(b, "norm", "b");
    need(out.rows == in.rows && out.cols == in.cols && w.cols == in.cols && (b.empty() || b.cols == in.cols),
         "norm: shapes disagree");
    bind();
    cuda::norm(out.ptr<float>(), out.stride, in.ptr<float>(), in.stride, w.ptr<float>(),
               b.empty() ? nullptr : b.ptr<float>(), in.rows, in.cols, kind, eps, stream_);
  }

  void linear(Tensor out, const Tensor& in, const Linear& lin, bool accumulate) override {
    linear_impl(out, in, lin, accumulate, nullptr);
  }
  void linear_act(Tensor out, const Tensor& in, const Linear& lin, Activation act) override {
    linear_impl(out, in, lin, false, &act);
  }

  void activation(Tensor x, Activation act) override {
    need_device_f32(x, "activation", "x");
    bind();
    cuda::activation(x.ptr<float>(), x.stride, x.rows, x.cols, act, stream_);
  }

  void gated_act(Tensor out, const Tensor& gate_up, Activation act) override {
    need_device_f32(out, "gated_act", "out");
    need_device_f32(gate_up, "gated_act", "gate_up");
    need(gate_up.rows == out.rows && gate_up.cols == 2 * out.cols,
         "gated_act: shapes disagree (out [T, F], gate_up [T, 2F])");
    bind();
    cuda::gated_act(out.ptr<float>(), out.stride, gate_up.ptr<float>(), gate_up.stride, out.rows, out.cols,
                    act, stream_);
  }

  // Each run's rows go to its sequence's caches at its positions (rows [S, Hkv * D], heads side by side).
  void store_kv(KvCache& cache, int64_t layer, const Tensor& k, const Tensor& v, const Step& step) override {
    check_step(step, cache.spec());
    const CudaKvCache& c = own_cache(cache, layer, "store_kv");
    need_device_f32(k, "store_kv", "k");
    need_device_f32(v, "store_kv", "v");
    need(k.rows == step.n_tokens && v.rows == k.rows && k.cols == c.width() && v.cols == k.cols,
         "store_kv: shapes disagree (k, v: [tokens, n_kv_head * head_dim])");
    bind();
    if (in_step_) {
      same_step(step, "store_kv");
      note_limit(cache.spec().n_ctx);
    }
    for (const SeqRun& r : step.runs) {
      cuda::store_kv(c.k(layer, r.seq), c.v(layer, r.seq), c.dtype(), c.width(),
                     k.row_slice(r.first, r.n).ptr<float>(), k.stride, v.row_slice(r.first, r.n).ptr<float>(),
                     v.stride, r.n, c.width(), step_value(r), stream_);
    }
  }

  bool copies_kv() const override { return true; }
  // The first n rows of every layer's K and V planes of sequence `from` onto those of `to`, on the stream, so
  // ordered with the steps before and after (a recorded step of `to` reads its planes when replayed).
  void copy_kv(KvCache& cache, int64_t from, int64_t to, int64_t n) override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    const CudaKvCache& c = own_cache(cache, 0, "copy_kv");
    const KvCacheSpec& sp = cache.spec();
    need(from >= 0 && from < sp.n_seq && to >= 0 && to < sp.n_seq && n >= 0 && n <= sp.n_ctx,
         "copy_kv: sequences " + std::to_string(from) + " -> " + std::to_string(to) + ", " +
             std::to_string(n) + " positions, of a cache of " + std::to_string(sp.n_seq) + " x " +
             std::to_string(sp.n_ctx));
    if (from == to || n == 0) return;
    bind();
    const size_t bytes = size_t(n) * size_t(c.width()) * dtype_size(c.dtype());
    for (int64_t layer = 0; layer < sp.n_layer; ++layer) {
      CUDA_CHECK(cudaMemcpyAsync(c.k(layer, to), c.k(layer, from), bytes, cudaMemcpyDeviceToDevice, stream_));
      CUDA_CHECK(cudaMemcpyAsync(c.v(layer, to), c.v(layer, from), bytes, cudaMemcpyDeviceToDevice, stream_));
    }
  }

  // Per run: one query (decode) -> flash-decoding over that sequence's cache, split by cache size; more
  // (prefill) -> the tiled kernel.
  void attention(Tensor out, const Tensor& q, KvCache& cache, int64_t layer, const Step& step, int64_t n_head,
                 float scale) override {
    check_step(step, cache.spec());
    const CudaKvCache& c = own_cache(cache, layer, "attention");
    need_device_f32(out, "attention", "out");
    need_device_f32(q, "attention", "q");
    const int64_t D = cache.spec().head_dim, Hkv = cache.spec().n_kv_head;
    need(n_head >= 1, "attention: n_head must be >= 1");
    need(Hkv >= 1 && n_head % Hkv == 0, "attention: n_head is not a multiple of n_kv_head");
    need(q.rows == step.n_tokens && out.rows == q.rows && q.cols == n_head * D && out.cols == q.cols,
         "attention: shapes disagree (q, out: [tokens, n_head * head_dim])");
    if (D > cuda::kMaxHeadDim) {
      throw Error(ErrorKind::Unsupported, "cuda attention: head dim " + std::to_string(D) + " > " +
                                              std::to_string(cuda::kMaxHeadDim) + " is not supported");
    }
    bind();
    if (in_step_) {
      same_step(step, "attention");
      note_limit(cache.spec().n_ctx);
    }
    const int64_t S = cache.spec().n_ctx;
    for (const SeqRun& r : step.runs) {
      const StepValue pos = step_value(r);
      const void* kc = c.k(layer, r.seq);
      const void* vc = c.v(layer, r.seq);
      if (r.n == 1) {
        // The split count depends on the cache size only, so every decode step of a session has one grid.
        const int64_t n_splits = cuda::attention_decode_splits(S);
        const size_t bytes = size_t(n_head * n_splits * (D + 2)) * sizeof(float);
        ensure_scratch(&partial_, &partial_bytes_, bytes);
        cuda::attention_decode(out.row_slice(r.first, 1).ptr<float>(), q.row_slice(r.first, 1).ptr<float>(),
                               kc, vc, c.dtype(), c.width(), pos, n_head, Hkv, D, scale, n_splits,
                               cache.spec().window_of(layer), static_cast<float*>(partial_), stream_);
      } else {
        cuda::attention_prefill(out.row_slice(r.first, r.n).ptr<float>(), out.stride,
                                q.row_slice(r.first, r.n).ptr<float>(), q.stride, kc, vc, c.dtype(),
                                c.width(), r.n, pos, n_head, Hkv, D, scale, options_.mma_attention,
                                cache.spec().window_of(layer), stream_);
      }
    }
  }

  // A decode step of one sequence (one run of one token) is recorded as a CUDA graph the first time and
  // replayed after (one graph per key and sequence, as the graph holds that sequence's cache addresses): its
  // kernels read pos0 and the token id from step_dev_, which is refreshed before every replay. Other steps
  // (prefill, several sequences) are launched directly with positions passed by value: prefill is long enough
  // not to be launch-bound. The token ids are on the device (step_dev_ + 1) for every step.
  void run_step(const void* key, const Step& step, const std::function<void()>& ops) override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    need(!in_step_, "run_step inside run_step");
    check_runs(step, "run_step");
    CUDA_CHECK(cudaSetDevice(device_));
    const bool graph = options_.graphs && key != nullptr && step.runs.size() == 1 && step.n_tokens == 1;
    upload_step(step);  // first: growing the step buffer drops the recorded graphs
    if (graph) {
      if (auto it = graphs_.find({key, step.runs[0].seq}); it != graphs_.end()) {
        // The replay runs no op, so no op checks its position: check it against the limit the recorded ops
        // checked (the cache's n_ctx, wpe's rows).
        need(step.runs[0].pos0 < it->second.pos_limit, "run_step: position past the end of the cache");
        CUDA_CHECK(cudaGraphLaunch(it->second.exec, stream_));
        return;
      }
    }
    StepScope scope(*this, step, graph);
    if (!graph) {
      ops();
      return;
    }
    // The first step runs directly (which also sizes every scratch buffer the recording will refer to and
    // checks every op), then the same ops are recorded, not executed, for the next steps.
    ops();
    Recorded rec;
    rec.pos_limit = step_limit_;
    rec.exec = record(ops);
    graphs_[{key, step.runs[0].seq}] = rec;
  }

  void forget_step(const void* key) override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    auto it = graphs_.lower_bound({key, INT64_MIN});
    while (it != graphs_.end() && it->first.first == key) {
      cudaGraphExecDestroy(it->second.exec);  // an in-flight replay still completes
      it = graphs_.erase(it);
    }
  }

 private:
  struct StepScope {
    CudaBackend& be;
    StepScope(CudaBackend& b, const Step& step, bool graph) : be(b) {
      be.in_step_ = true;
      be.graph_step_ = graph;
      be.step_n_ = step.n_tokens;
      be.step_runs_.assign(step.runs.begin(), step.runs.end());
      be.step_limit_ = INT64_MAX;
    }
    ~StepScope() {
      be.in_step_ = false;
      be.graph_step_ = false;
    }
  };

  // Outside a step, ops may be called from any thread: make this backend's device current.
  void bind() {
    if (!in_step_) CUDA_CHECK(cudaSetDevice(device_));
  }

  // A run's pos0 as a kernel reads it: from step_dev_ in a step that is recorded as a graph (so the graph
  // sees each replay's value; that step has one run), else by value.
  StepValue step_value(const SeqRun& run) const {
    StepValue v;
    if (graph_step_) {
      v.dev = step_dev_;
    } else {
      v.value = int32_t(run.pos0);
    }
    return v;
  }

  // Inside run_step the ops take exactly its step (a recorded graph replays them with the step's values).
  void same_step(const Step& step, const char* op) const {
    bool same = step.n_tokens == step_n_ && step.runs.size() == step_runs_.size();
    for (size_t i = 0; same && i < step_runs_.size(); ++i) {
      const SeqRun &a = step.runs[i], &b = step_runs_[i];
      same = a.seq == b.seq && a.first == b.first && a.n == b.n && a.pos0 == b.pos0;
    }
    need(same,
         std::string(op) + ": tokens or runs differ from the step's (run_step promises the same values)");
  }

  // While a graph's first step runs directly: the smallest position limit its ops checked against.
  void note_limit(int64_t limit) {
    if (in_step_) step_limit_ = std::min(step_limit_, limit);
  }

  // The step's own consistency where no cache is at hand (embed, run_step): runs consecutive from token 0,
  // covering the tokens, at positions the kernels can take. check_step does this and more against a cache.
  static void check_runs(const Step& step, const char* op) {
    need(step.n_tokens >= 1 && step.tokens != nullptr, std::string(op) + ": a step needs at least one token");
    int64_t next = 0;
    for (const SeqRun& r : step.runs) {
      need(r.first == next && r.n >= 1 && r.seq >= 0 && r.pos0 >= 0 && r.pos0 + r.n <= INT32_MAX,
           std::string(op) + ": the step's runs are not consecutive, non-empty runs at valid positions");
      next += r.n;
    }
    need(next == step.n_tokens, std::string(op) + ": the step's runs do not cover its tokens");
  }

  // The cache as this backend made it, and a valid layer of it.
  const CudaKvCache& own_cache(const KvCache& cache, int64_t layer, const char* op) const {
    const auto* c = dynamic_cast<const CudaKvCache*>(&cache);
    need(c != nullptr && c->owner() == this,
         std::string(op) + ": the KV cache was not made by this CUDA backend");
    need(layer >= 0 && layer < cache.spec().n_layer, std::string(op) + ": layer " + std::to_string(layer) +
                                                         " outside the cache's " +
                                                         std::to_string(cache.spec().n_layer));
    return *c;
  }

  // T <= 4 rows: own GEMV (bias, residual and activation fused). More: bias (and residual) first, then
  // cuBLAS adds the product with beta = 1; 16-bit weights take the activations as hi + lo 16-bit halves
  // (two GEMMs), so the result is the product with the F32 activations to ~2^-16, as on the CPU.
  void linear_impl(Tensor out, const Tensor& in, const Linear& lin, bool accumulate, const Activation* act) {
    need_device_f32(out, "linear", "out");
    need_device_f32(in, "linear", "in");
    if (lin.format.is_quantized()) {
      linear_quant(out, in, lin, accumulate, act);
      return;
    }
    need(lin.w.device == Device::Cuda && lin.format.block == 1 && lin.w.dtype == lin.format.dtype &&
             is_weight_dtype(lin.w.dtype) && lin.w.rows == lin.n_out && lin.w.cols == lin.n_in,
         "linear: the layer was not prepared by the CUDA backend");
    const int64_t T = in.rows, N = lin.n_out, K = lin.n_in;
    need(in.cols == K && out.cols == N && out.rows == T, "linear: shapes disagree");
    need(lin.b.empty() || (lin.b.device == Device::Cuda && lin.b.dtype == DType::F32),
         "linear: bias not on the device");
    bind();
    const float* bias = lin.b.empty() ? nullptr : lin.b.ptr<float>();
    if (T <= cuda::kGemvMaxRows) {
      cuda::gemv(out.ptr<float>(), out.stride, in.ptr<float>(), in.stride, lin.w.data, lin.w.dtype,
                 lin.w.stride, bias, T, N, K, accumulate, act, stream_);
      return;
    }
    need(!capturing_, "linear: a batched GEMM cannot be recorded");
    cuda::bias_fill(out.ptr<float>(), out.stride, bias, T, N, accumulate, stream_);
    if (lin.w.dtype == DType::F32) {
      gemm_add(out, K, lin.w.data, DType::F32, lin.w.stride, in.data, DType::F32, in.stride);
    } else {
      gemm_add_split16(out, in, lin.w.data, nullptr, lin.w.dtype, lin.w.stride);
    }
    if (act) cuda::activation(out.ptr<float>(), out.stride, T, N, *act, stream_);
  }

  // out += x W^T, cuBLAS with F32 accumulation: W [N, K] rows of `ldw` in w_dtype, x [T, K] rows of `ldx`,
  // out [T, N].
  void gemm_add(Tensor out, int64_t K, const void* w, DType w_dtype, int64_t ldw, const void* x,
                DType x_dtype, int64_t ldx) {
    const float one = 1.0f;
    CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, int(out.cols), int(out.rows), int(K), &one,
                              w, cuda_type(w_dtype), int(ldw), x, cuda_type(x_dtype), int(ldx), &one,
                              out.data, CUDA_R_32F, int(out.stride), CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
  }

  // out += in W^T for 16-bit W = w_hi (+ w_lo): in split into 16-bit hi + lo halves, the GEMMs w_hi hi, w_hi
  // lo and (with w_lo) w_lo hi; w_lo lo, below 2^-22 of the product, is left out.
  void gemm_add_split16(Tensor out, const Tensor& in, const void* w_hi, const void* w_lo, DType dtype,
                        int64_t ldw) {
    const int64_t T = in.rows, K = in.cols;
    // lo starts 256-byte aligned, as cuBLAS's fastest (tensor-core) kernels want their operands.
    const size_t half_bytes = (size_t(T * K) * 2 + 255) / 256 * 256;
    ensure_scratch(&gemm_scratch_, &gemm_scratch_bytes_, 2 * half_bytes);
    char* hi = static_cast<char*>(gemm_scratch_);
    char* lo = hi + half_bytes;
    cuda::split16(hi, lo, dtype, in.ptr<float>(), in.stride, T, K, stream_);
    gemm_add(out, K, w_hi, dtype, ldw, hi, dtype, K);
    gemm_add(out, K, w_hi, dtype, ldw, lo, dtype, K);
    if (w_lo) gemm_add(out, K, w_lo, dtype, ldw, hi, dtype, K);
  }

  // A quantized layer: the GEMV on the blocks for T <= 4 rows. A batch widens the matrix to F16 hi + lo
  // halves (a scratch of 2 x n_out x n_in halves; hi + lo is the dequantized weight to ~2^-22) for three
  // tensor-core GEMMs with the activations' halves (gemm_add_split16): the F32 product to ~2^-21, as the
  // CPU's prefill on widened tiles; one F32 GEMM on the matrix widened to F32 is 0.8x as fast (H200, pp512).
  void linear_quant(Tensor out, const Tensor& in, const Linear& lin, bool accumulate, const Activation* act) {
    need(lin.w.device == Device::Cuda && lin.w.rows == lin.n_out && lin.w.cols == lin.n_in,
         "linear: the layer was not prepared by the CUDA backend");
    const int64_t T = in.rows, N = lin.n_out, K = lin.n_in;
    need(in.cols == K && out.cols == N && out.rows == T, "linear: shapes disagree");
    need(lin.b.empty() || (lin.b.device == Device::Cuda && lin.b.dtype == DType::F32),
         "linear: bias not on the device");
    bind();
    const float* bias = lin.b.empty() ? nullptr : lin.b.ptr<float>();
    const cuda::QuantFormat f = quant_format(lin);
    if (T <= cuda::kGemvMaxRows) {
      cuda::gemv_quant(out.ptr<float>(), out.stride, in.ptr<float>(), in.stride, lin.w.data, f, bias, T, N, K,
                       accumulate, act, stream_);
      return;
    }
    need(!capturing_, "linear: a batched GEMM cannot be recorded");
    const size_t half_bytes = (size_t(N * K) * 2 + 255) / 256 * 256;
    ensure_scratch(&widen_scratch_, &widen_scratch_bytes_, 2 * half_bytes);
    char* w_hi = static_cast<char*>(widen_scratch_);
    char* w_lo = w_hi + half_bytes;
    cuda::widen_quant16(w_hi, w_lo, K, lin.w.data, f, N, K, stream_);
    cuda::bias_fill(out.ptr<float>(), out.stride, bias, T, N, accumulate, stream_);
    gemm_add_split16(out, in, w_hi, w_lo, DType::F16, K);
    if (act) cuda::activation(out.ptr<float>(), out.stride, T, N, *act, stream_);
  }

  std::unique_ptr<Buffer> upload(const void* src, size_t bytes) {
    CUDA_CHECK(cudaSetDevice(device_));
    auto buf = std::make_unique<CudaBuffer>(bytes, device_, stream_);
    CUDA_CHECK(cudaMemcpyAsync(buf->data(), src, bytes, cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // `src` is the caller's temporary
    return buf;
  }

  // Grows a scratch buffer. Recorded graphs refer to the old address, so they are dropped (and recorded
  // again at their next step); growing while recording is a bug (the direct first run sizes everything).
  void ensure_scratch(void** ptr, size_t* bytes, size_t need_bytes) {
    if (need_bytes <= *bytes) return;
    need(!capturing_, "scratch would grow while a step is being recorded");
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    drop_graphs();
    if (*ptr) CUDA_CHECK(cudaFree(*ptr));
    *ptr = nullptr;
    *bytes = 0;
    CUDA_CHECK(cudaMalloc(ptr, need_bytes));
    *bytes = need_bytes;
  }

  // The step values [pos0 of the first run, tokens...]: pinned host staging and its device copy.
  void ensure_step_capacity(int64_t n_ints) {
    if (n_ints <= step_capacity_) return;
    need(!capturing_, "the step buffer would grow while a step is being recorded");
    const int64_t cap = std::max(n_ints, 2 * step_capacity_);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    drop_graphs();
    if (step_host_) CUDA_CHECK(cudaFreeHost(step_host_));
    if (step_dev_) CUDA_CHECK(cudaFree(step_dev_));
    step_host_ = nullptr;
    step_dev_ = nullptr;
    step_capacity_ = 0;
    CUDA_CHECK(cudaMallocHost(&step_host_, size_t(cap) * sizeof(int32_t)));
    CUDA_CHECK(cudaMalloc(&step_dev_, size_t(cap) * sizeof(int32_t)));
    step_capacity_ = cap;
  }

  void upload_step(const Step& step) {
    const int64_t n_tokens = step.n_tokens;
    const int64_t pos0 = step.runs.empty() ? 0 : step.runs[0].pos0;
    need(n_tokens >= 1 && n_tokens < INT32_MAX && step.tokens != nullptr && pos0 >= 0 && pos0 <= INT32_MAX,
         "step: bad token count or position");
    ensure_step_capacity(1 + n_tokens);
    CUDA_CHECK(cudaEventSynchronize(step_uploaded_));  // the previous copy has left the staging
    step_host_[0] = int32_t(pos0);
    std::memcpy(step_host_ + 1, step.tokens, size_t(n_tokens) * sizeof(int32_t));
    CUDA_CHECK(cudaMemcpyAsync(step_dev_, step_host_, size_t(1 + n_tokens) * sizeof(int32_t),
                               cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaEventRecord(step_uploaded_, stream_));
  }

  cudaGraphExec_t record(const std::function<void()>& ops) {
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    capturing_ = true;
    cudaGraph_t graph = nullptr;
    try {
      ops();
    } catch (...) {
      capturing_ = false;
      if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
      cudaGetLastError();  // the capture's own error is not the one to report
      throw;
    }
    capturing_ = false;
    CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    struct GraphGuard {
      cudaGraph_t g;
      ~GraphGuard() { cudaGraphDestroy(g); }
    } guard{graph};
    cudaGraphExec_t exec = nullptr;
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    return exec;
  }

  void drop_graphs() {
    for (auto& [key, rec] : graphs_) cudaGraphExecDestroy(rec.exec);
    graphs_.clear();
  }

  // Frees everything this backend owns; safe on a half-constructed backend. Errors are ignored: this runs
  // from the destructor.
  void release() {
    cudaSetDevice(device_);
    if (stream_) cudaStreamSynchronize(stream_);
    drop_graphs();
    if (partial_) cudaFree(partial_);
    if (gemm_scratch_) cudaFree(gemm_scratch_);
    if (widen_scratch_) cudaFree(widen_scratch_);
    if (step_dev_) cudaFree(step_dev_);
    if (step_host_) cudaFreeHost(step_host_);
    if (pinned_logits_) cudaFreeHost(pinned_logits_);
    if (cublas_) cublasDestroy(cublas_);
    if (step_uploaded_) cudaEventDestroy(step_uploaded_);
    if (stream_) {
      cuda::set_pdl(stream_, false);
      cudaStreamDestroy(stream_);
    }
    partial_ = gemm_scratch_ = widen_scratch_ = pinned_logits_ = nullptr;
    step_dev_ = step_host_ = nullptr;
    cublas_ = nullptr;
    step_uploaded_ = nullptr;
    stream_ = nullptr;
  }

  CudaOptions options_;
  int device_;
  std::recursive_mutex mutex_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;

  cudaEvent_t step_uploaded_ = nullptr;  // the last copy out of step_host_
  int32_t* step_host_ = nullptr;         // pinned [pos0, tokens...]
  int32_t* step_dev_ = nullptr;          // the device copy kernels read
  int64_t step_capacity_ = 0;            // ints in each

  void* pinned_logits_ = nullptr;
  size_t pinned_logits_bytes_ = 0;
  void* gemm_scratch_ = nullptr;  // hi | lo halves of a batch of activations
  size_t gemm_scratch_bytes_ = 0;
  void* widen_scratch_ = nullptr;  // a quantized matrix widened to F32 for a batch's GEMM
  size_t widen_scratch_bytes_ = 0;
  void* partial_ = nullptr;  // flash-decoding partial results
  size_t partial_bytes_ = 0;

  // A recorded decode step and the position limit its ops checked (positions < pos_limit).
  struct Recorded {
    cudaGraphExec_t exec = nullptr;
    int64_t pos_limit = 0;
  };
  std::map<std::pair<const void*, int64_t>, Recorded> graphs_;  // (session, sequence) -> its decode step
  bool in_step_ = false;
  bool graph_step_ = false;  // the step in progress is (being made into) a graph: positions from step_dev_
  bool capturing_ = false;
  int64_t step_n_ = 0;
  std::vector<SeqRun> step_runs_;
  int64_t step_limit_ = INT64_MAX;
};

}  // namespace

bool cuda_available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = std::string("no CUDA device: ") + cudaGetErrorString(e);
    return false;
  }
  if (n == 0) {
    if (why) *why = "no CUDA device: the driver reports none";
    return false;
  }
  if (why) why->clear();
  return true;
}

std::shared_ptr<Backend> make_cuda_backend(const CudaOptions& options) {
  std::string why;
  if (!cuda_available(&why)) throw Error(ErrorKind::Unsupported, why);
  int n = 0;
  CUDA_CHECK(cudaGetDeviceCount(&n));
  if (options.device < 0 || options.device >= n) {
    throw Error(ErrorKind::Argument, "CUDA device " + std::to_string(options.device) +
                                         " does not exist (this machine has " + std::to_string(n) +
                                         ": 0 .. " + std::to_string(n - 1) + ")");
  }
  if (options.kv_dtype != DType::F16 && options.kv_dtype != DType::BF16 && options.kv_dtype != DType::F32) {
    throw Error(ErrorKind::Argument, "CUDA KV cache dtype must be F16, BF16 or F32");
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, options.device));
  if (prop.major < 8) {
    throw Error(ErrorKind::Unsupported, "CUDA device " + std::to_string(options.device) + " (" + prop.name +
                                            ") has compute capability " + std::to_string(prop.major) + "." +
                                            std::to_string(prop.minor) +
                                            "; the CUDA backend needs 8.0 or newer");
  }
  CudaOptions o = options;
  if (disabled_by_env("MINIGPT_CUDA_GRAPHS")) o.graphs = false;
  if (disabled_by_env("MINIGPT_CUDA_PDL")) o.pdl = false;
  if (disabled_by_env("MINIGPT_CUDA_MMA_ATTENTION")) o.mma_attention = false;
  return std::make_shared<CudaBackend>(o);
}

std::shared_ptr<Backend> make_cuda_backend(int device) {
  CudaOptions o;
  o.device = device;
  return make_cuda_backend(o);
}

std::vector<CudaDeviceInfo> cuda_devices() {
  std::vector<CudaDeviceInfo> out;
  if (!cuda_available()) return out;
  int n = 0;
  CUDA_CHECK(cudaGetDeviceCount(&n));
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, i));
    int clock_khz = 0, bus_bits = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, i));
    CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, i));
    CudaDeviceInfo d;
    d.index = i;
    d.name = prop.name;
    d.cc_major = prop.major;
    d.cc_minor = prop.minor;
    d.memory_bytes = prop.totalGlobalMem;
    d.peak_bandwidth_gb_s = 2.0 * double(clock_khz) * 1e3 * double(bus_bits) / 8.0 / 1e9;  // double data rate
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace minigpt
