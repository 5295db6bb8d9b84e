// store_kv: the new K and V rows into the caches at pos0, rounded to the cache's dtype.
#include "cuda/kernels.cuh"

namespace minigpt::cuda {
namespace {

template <typename KV>
__global__ void store_kv_kernel(KV* k_cache, KV* v_cache, int64_t ld_cache, const float* k, int64_t ldk,
                                const float* v, int64_t ldv, int64_t C, StepValue pos0) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.y;
  const int64_t row = (int64_t(pos0.get()) + t) * ld_cache;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < C;
       i += int64_t(gridDim.x) * blockDim.x) {
    k_cache[row + i] = from_float<KV>(k[t * ldk + i]);
    v_cache[row + i] = from_float<KV>(v[t * ldv + i]);
  }
}

template <typename KV>
void launch(void* k_cache, void* v_cache, int64_t ld_cache, const float* k, int64_t ldk, const float* v,
            int64_t ldv, int64_t T, int64_t C, StepValue pos0, cudaStream_t stream) {
  constexpr int kThreads = 256;
  launch(store_kv_kernel<KV>, dim3(blocks_for(C, kThreads), unsigned(T)), kThreads, 0, stream,
         static_cast<KV*>(k_cache), static_cast<KV*>(v_cache), ld_cache, k, ldk, v, ldv, C, pos0);
}

}  // namespace

void store_kv(void* k_cache, void* v_cache, DType kv_dtype, int64_t ld_cache, const float* k, int64_t ldk,
              const float* v, int64_t ldv, int64_t T, int64_t C, StepValue pos0, cudaStream_t stream) {
  switch (kv_dtype) {
    case DType::F32:
      launch<float>(k_cache, v_cache, ld_cache, k, ldk, v, ldv, T, C, pos0, stream);
      break;
    case DType::F16:
      launch<__half>(k_cache, v_cache, ld_cache, k, ldk, v, ldv, T, C, pos0, stream);
      break;
    case DType::BF16:
      launch<__nv_bfloat16>(k_cache, v_cache, ld_cache, k, ldk, v, ldv, T, C, pos0, stream);
      break;
    default:
      throw Error(ErrorKind::Argument, "cuda store_kv: the cache must be F32, F16 or BF16");
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace minigpt::cuda
