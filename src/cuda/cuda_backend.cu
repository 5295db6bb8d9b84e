// The CUDA backend: device buffers, weight upload, the ops (shape checks here, kernels in the other .cu
// files), recorded decode steps (CUDA graphs), and the factory.
//
// Everything runs in order on one stream per backend. Entry points that are not ops (alloc, prepare_*,
// to_host, run_step, forget_step) take the backend's lock, so several sessions may share it from several
// threads; ops called outside run_step (tests) must come from one thread at a time.
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cuda/kernels.cuh"
#include "minigpt/backend.h"

namespace minigpt {
namespace {

using cuda::StepValue;

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

bool graphs_disabled_by_env() {
  const char* e = std::getenv("MINIGPT_CUDA_GRAPHS");
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
      ensure_step_capacity(1 + 1024);
      int clock_khz = 0, bus_bits = 0;
      CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device_));
      CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device_));
      peak_gb_s_ = 2.0 * double(clock_khz) * 1e3 * double(bus_bits) / 8.0 / 1e9;  // double data rate
    } catch (...) {
      release();
      throw;
    }
  }
  ~CudaBackend() override { release(); }

  std::string name() const override { return "cuda"; }
  Device device() const override { return Device::Cuda; }
  DType kv_dtype() const override { return options_.kv_dtype; }
  double peak_bandwidth_gb_s() const override { return peak_gb_s_; }

  std::unique_ptr<Buffer> alloc(size_t bytes) override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    need(!capturing_, "alloc while a step is being recorded");
    CUDA_CHECK(cudaSetDevice(device_));
    return std::make_unique<CudaBuffer>(bytes, device_, stream_);
  }

  Tensor prepare_weight(const Tensor& host, std::vector<std::unique_ptr<Buffer>>& keep) override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    need(host.device == Device::Host && is_weight_dtype(host.dtype), "prepare_weight: a host F32/F16/BF16 tensor");
    std::vector<float> f32(size_t(host.numel()));
    for (int64_t r = 0; r < host.rows; ++r) {
      const char* src = static_cast<const char*>(host.data) + size_t(r * host.stride) * dtype_size(host.dtype);
      convert_to_f32(f32.data() + r * host.cols, src, host.dtype, size_t(host.cols));
    }
    keep.push_back(upload(f32.data(), f32.size() * sizeof(float)));
    return make_tensor(keep.back()->data(), DType::F32, Device::Cuda, host.rows, host.cols);
  }

  // Matrices live as [n_out, n_in] (OutIn) in `dtype`: the rows the GEMV kernel streams, and cuBLAS's
  // column-major [n_in, n_out] for a transposed GEMM.
  Linear prepare_linear(const Linear& host, DType dtype, std::vector<std::unique_ptr<Buffer>>& keep) override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    need(is_weight_dtype(dtype), "prepare_linear: dtype must be F32, F16 or BF16");
    need(host.w.device == Device::Host && is_weight_dtype(host.w.dtype), "prepare_linear: a host F32/F16/BF16 matrix");
    Linear l = host;
    if (!host.b.empty()) l.b = prepare_weight(host.b, keep);
    const int64_t N = host.n_out, K = host.n_in;
    const bool in_out = host.layout == WeightLayout::InOut;
    need(host.w.rows * host.w.cols == N * K, "prepare_linear: matrix shape disagrees with n_in x n_out");
    const size_t esize = dtype_size(dtype);
    std::vector<uint8_t> dst(size_t(N * K) * esize);
    std::vector<float> row(size_t(host.w.cols));
    for (int64_t r = 0; r < host.w.rows; ++r) {
      const char* src = static_cast<const char*>(host.w.data) + size_t(r * host.w.stride) * dtype_size(host.w.dtype);
      convert_to_f32(row.data(), src, host.w.dtype, row.size());
      for (int64_t c = 0; c < host.w.cols; ++c) {
        const int64_t idx = in_out ? c * K + r : r * K + c;  // InOut: W[k = r, n = c] -> [n, k]
        store_as(dst.data() + size_t(idx) * esize, row[size_t(c)], dtype);
      }
    }
    keep.push_back(upload(dst.data(), dst.size()));
    l.w = make_tensor(keep.back()->data(), dtype, Device::Cuda, N, K);
    l.layout = WeightLayout::OutIn;
    return l;
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
                                 size_t(src.stride) * sizeof(float), size_t(src.cols) * sizeof(float), size_t(src.rows),
                                 cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::memcpy(dst, pinned_logits_, bytes);
  }

  void embed(Tensor out, const int32_t* tokens, int64_t n_tokens, int64_t pos0, const Tensor& wte,
             const Tensor& wpe) override {
    need_device_f32(out, "embed", "out");
    need_device_f32(wpe, "embed", "wpe");
    need(wte.device == Device::Cuda && is_weight_dtype(wte.dtype), "embed: wte must be a device F32/F16/BF16 matrix");
    need(out.rows >= n_tokens && out.cols == wte.cols && out.cols == wpe.cols, "embed: shapes disagree");
    bind();
    StepValue pos;
    if (in_step_) {
      pos = step_value(n_tokens, pos0, "embed");
    } else {
      upload_step(tokens, n_tokens, pos0);  // ids travel like a step's, through the pinned staging
      pos.value = int32_t(pos0);
    }
    cuda::embed(out.ptr<float>(), out.stride, step_dev_ + 1, n_tokens, pos, wte.data, wte.dtype, wte.stride,
                wpe.ptr<float>(), wpe.stride, out.cols, stream_);
  }

  void layer_norm(Tensor out, const Tensor& in, const Tensor& w, const Tensor& b, float eps) override {
    need_device_f32(out, "layer_norm", "out");
    need_device_f32(in, "layer_norm", "in");
    need_device_f32(w, "layer_norm", "w");
    need_device_f32(b, "layer_norm", "b");
    need(out.rows == in.rows && out.cols == in.cols && w.cols == in.cols && b.cols == in.cols,
         "layer_norm: shapes disagree");
    bind();
    cuda::layer_norm(out.ptr<float>(), out.stride, in.ptr<float>(), in.stride, w.ptr<float>(), b.ptr<float>(), in.rows,
                     in.cols, eps, stream_);
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

  // The device caches stay [S, C] (heads side by side); the decode kernels read them as such.
  void store_kv(Tensor k_cache, Tensor v_cache, const Tensor& k, const Tensor& v, int64_t pos0,
                int64_t /*n_head*/) override {
    need_device_f32(k, "store_kv", "k");
    need_device_f32(v, "store_kv", "v");
    check_cache(k_cache, v_cache, "store_kv");
    need(k.rows == v.rows && k.cols == v.cols && k.cols == k_cache.cols, "store_kv: shapes disagree");
    need(pos0 >= 0 && pos0 + k.rows <= k_cache.rows, "store_kv: rows past the end of the cache");
    bind();
    const StepValue pos = step_value(k.rows, pos0, "store_kv");
    cuda::store_kv(k_cache.data, v_cache.data, k_cache.dtype, k_cache.stride, k.ptr<float>(), k.stride, v.ptr<float>(),
                   v.stride, k.rows, k.cols, pos, stream_);
  }

  void attention(Tensor out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t pos0,
                 int64_t n_head, float scale) override {
    need_device_f32(out, "attention", "out");
    need_device_f32(q, "attention", "q");
    check_cache(k_cache, v_cache, "attention");
    need(n_head >= 1 && q.cols % n_head == 0, "attention: n_head does not divide the width");
    need(out.rows == q.rows && out.cols == q.cols && k_cache.cols == q.cols, "attention: shapes disagree");
    need(pos0 >= 0 && pos0 + q.rows <= k_cache.rows, "attention: positions past the end of the cache");
    const int64_t D = q.cols / n_head;
    if (D > cuda::kMaxHeadDim) {
      throw Error(ErrorKind::Unsupported, "cuda attention: head dim " + std::to_string(D) + " > " +
                                              std::to_string(cuda::kMaxHeadDim) + " is not supported");
    }
    bind();
    const StepValue pos = step_value(q.rows, pos0, "attention");
    if (q.rows == 1) {
      // The split count depends on the cache size only, so every decode step of a session has one grid.
      const int64_t n_splits = cuda::attention_decode_splits(k_cache.rows);
      const size_t bytes = size_t(n_head * n_splits * (D + 2)) * sizeof(float);
      ensure_scratch(&partial_, &partial_bytes_, bytes);
      cuda::attention_decode(out.ptr<float>(), q.ptr<float>(), k_cache.data, v_cache.data, k_cache.dtype,
                             k_cache.stride, pos, n_head, D, scale, n_splits, static_cast<float*>(partial_), stream_);
    } else {
      cuda::attention_prefill(out.ptr<float>(), out.stride, q.ptr<float>(), q.stride, k_cache.data, v_cache.data,
                              k_cache.dtype, k_cache.stride, q.rows, pos, n_head, D, scale, stream_);
    }
  }

  void synchronize() override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    CUDA_CHECK(cudaSetDevice(device_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // A decode step (one token) of a session is recorded as a CUDA graph the first time and replayed after:
  // the kernels read pos0 and the token id from step_dev_, which is refreshed before every replay. Longer
  // steps (prefill) are launched directly: they are few, and long enough not to be launch-bound.
  void run_step(const void* key, const int32_t* tokens, int64_t n_tokens, int64_t pos0,
                const std::function<void()>& ops) override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    need(!in_step_, "run_step inside run_step");
    CUDA_CHECK(cudaSetDevice(device_));
    upload_step(tokens, n_tokens, pos0);
    StepScope scope(*this, n_tokens, pos0);
    if (!options_.graphs || key == nullptr || n_tokens != 1) {
      ops();
      return;
    }
    if (auto it = graphs_.find(key); it != graphs_.end()) {
      CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
      return;
    }
    // The first step runs directly (which also sizes every scratch buffer the recording will refer to),
    // then the same ops are recorded, not executed, for the next steps.
    ops();
    graphs_[key] = record(ops);
  }

  void forget_step(const void* key) override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    auto it = graphs_.find(key);
    if (it == graphs_.end()) return;
    cudaGraphExecDestroy(it->second);  // an in-flight replay still completes
    graphs_.erase(it);
  }

 private:
  struct StepScope {
    CudaBackend& be;
    StepScope(CudaBackend& b, int64_t n, int64_t pos0) : be(b) {
      be.in_step_ = true;
      be.step_n_ = n;
      be.step_pos0_ = pos0;
    }
    ~StepScope() { be.in_step_ = false; }
  };

  // Outside a step, ops may be called from any thread: make this backend's device current.
  void bind() {
    if (!in_step_) CUDA_CHECK(cudaSetDevice(device_));
  }

  // pos0 as a kernel reads it: from step_dev_ inside a step (so a recorded graph sees each step's value),
  // else by value.
  StepValue step_value(int64_t n_tokens, int64_t pos0, const char* op) const {
    StepValue v;
    if (!in_step_) {
      v.value = int32_t(pos0);
      return v;
    }
    need(n_tokens == step_n_ && pos0 == step_pos0_,
         std::string(op) + ": tokens or pos0 differ from the step's (run_step promises the same values)");
    v.dev = step_dev_;
    return v;
  }

  void check_cache(const Tensor& k_cache, const Tensor& v_cache, const char* op) const {
    need(k_cache.device == Device::Cuda && v_cache.device == Device::Cuda,
         std::string(op) + ": the KV cache is not in device memory");
    need(k_cache.dtype == v_cache.dtype && (k_cache.dtype == DType::F32 || k_cache.dtype == DType::F16 ||
                                            k_cache.dtype == DType::BF16),
         std::string(op) + ": K and V caches must share one dtype of F32, F16, BF16");
    need(k_cache.rows == v_cache.rows && k_cache.cols == v_cache.cols && k_cache.stride == v_cache.stride,
         std::string(op) + ": K and V caches differ in shape");
  }

  // T <= 4 rows: own GEMV (bias, residual and activation fused). More: bias (and residual) first, then
  // cuBLAS adds the product with beta = 1; 16-bit weights take the activations as hi + lo 16-bit halves
  // (two GEMMs), so the result is the product with the F32 activations to ~2^-16, as on the CPU.
  void linear_impl(Tensor out, const Tensor& in, const Linear& lin, bool accumulate, const Activation* act) {
    need_device_f32(out, "linear", "out");
    need_device_f32(in, "linear", "in");
    need(lin.w.device == Device::Cuda && lin.layout == WeightLayout::OutIn,
         "linear: the layer was not prepared by the CUDA backend");
    const int64_t T = in.rows, N = lin.n_out, K = lin.n_in;
    need(in.cols == K && out.cols == N && out.rows == T, "linear: shapes disagree");
    need(lin.b.empty() || (lin.b.device == Device::Cuda && lin.b.dtype == DType::F32), "linear: bias not on the device");
    bind();
    const float* bias = lin.b.empty() ? nullptr : lin.b.ptr<float>();
    if (T <= cuda::kGemvMaxRows) {
      cuda::gemv(out.ptr<float>(), out.stride, in.ptr<float>(), in.stride, lin.w.data, lin.w.dtype, lin.w.stride, bias, T,
                 N, K, accumulate, act, stream_);
      return;
    }
    need(!capturing_, "linear: a batched GEMM cannot be recorded");
    cuda::bias_fill(out.ptr<float>(), out.stride, bias, T, N, accumulate, stream_);
    const float one = 1.0f;
    auto gemm = [&](const void* x, DType x_dtype, int64_t ldx) {
      CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(T), int(K), &one, lin.w.data,
                                cuda_type(lin.w.dtype), int(lin.w.stride), x, cuda_type(x_dtype), int(ldx), &one,
                                out.data, CUDA_R_32F, int(out.stride), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    if (lin.w.dtype == DType::F32) {
      gemm(in.data, DType::F32, in.stride);
    } else {
      // lo starts 256-byte aligned, as cuBLAS's fastest (tensor-core) kernels want their operands.
      const size_t half_bytes = (size_t(T * K) * 2 + 255) / 256 * 256;
      ensure_scratch(&gemm_scratch_, &gemm_scratch_bytes_, 2 * half_bytes);
      char* hi = static_cast<char*>(gemm_scratch_);
      char* lo = hi + half_bytes;
      cuda::split16(hi, lo, lin.w.dtype, in.ptr<float>(), in.stride, T, K, stream_);
      gemm(hi, lin.w.dtype, K);
      gemm(lo, lin.w.dtype, K);
    }
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

  // The step values [pos0, tokens...]: pinned host staging and its device copy.
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

  void upload_step(const int32_t* tokens, int64_t n_tokens, int64_t pos0) {
    need(n_tokens >= 1 && pos0 >= 0 && pos0 + n_tokens <= INT32_MAX, "step: bad token count or position");
    ensure_step_capacity(1 + n_tokens);
    CUDA_CHECK(cudaEventSynchronize(step_uploaded_));  // the previous copy has left the staging
    step_host_[0] = int32_t(pos0);
    std::memcpy(step_host_ + 1, tokens, size_t(n_tokens) * sizeof(int32_t));
    CUDA_CHECK(cudaMemcpyAsync(step_dev_, step_host_, size_t(1 + n_tokens) * sizeof(int32_t), cudaMemcpyHostToDevice,
                               stream_));
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
    for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
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
    if (step_dev_) cudaFree(step_dev_);
    if (step_host_) cudaFreeHost(step_host_);
    if (pinned_logits_) cudaFreeHost(pinned_logits_);
    if (cublas_) cublasDestroy(cublas_);
    if (step_uploaded_) cudaEventDestroy(step_uploaded_);
    if (stream_) cudaStreamDestroy(stream_);
    partial_ = gemm_scratch_ = pinned_logits_ = nullptr;
    step_dev_ = step_host_ = nullptr;
    cublas_ = nullptr;
    step_uploaded_ = nullptr;
    stream_ = nullptr;
  }

  CudaOptions options_;
  int device_;
  double peak_gb_s_ = 0.0;
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
  void* partial_ = nullptr;  // flash-decoding partial results
  size_t partial_bytes_ = 0;

  std::unordered_map<const void*, cudaGraphExec_t> graphs_;  // session -> its recorded decode step
  bool in_step_ = false;
  bool capturing_ = false;
  int64_t step_n_ = 0, step_pos0_ = 0;
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
    throw Error(ErrorKind::Argument, "CUDA device " + std::to_string(options.device) + " does not exist (this machine has " +
                                         std::to_string(n) + ": 0 .. " + std::to_string(n - 1) + ")");
  }
  if (options.kv_dtype != DType::F16 && options.kv_dtype != DType::BF16 && options.kv_dtype != DType::F32) {
    throw Error(ErrorKind::Argument, "CUDA KV cache dtype must be F16, BF16 or F32");
  }
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, options.device));
  if (prop.major < 8) {
    throw Error(ErrorKind::Unsupported, "CUDA device " + std::to_string(options.device) + " (" + prop.name +
                                            ") has compute capability " + std::to_string(prop.major) + "." +
                                            std::to_string(prop.minor) + "; the CUDA backend needs 8.0 or newer");
  }
  CudaOptions o = options;
  if (graphs_disabled_by_env()) o.graphs = false;
  return std::make_shared<CudaBackend>(o);
}

std::shared_ptr<Backend> make_cuda_backend(int device) {
  CudaOptions o;
  o.device = device;
  return make_cuda_backend(o);
}

}  // namespace minigpt
