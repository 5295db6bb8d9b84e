// embed: token rows of wte plus position rows of wpe (when the model has learned positions).
#include "cuda/kernels.cuh"

namespace minigpt::cuda {
namespace {

template <typename W>
__global__ void embed_kernel(float* out, int64_t ldo, const int32_t* tokens, StepValue pos0, const W* wte,
                             int64_t ld_wte, const float* wpe, int64_t ld_wpe, int64_t C) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.y;
  const int64_t row = int64_t(tokens[t]) * ld_wte;
  if (wpe == nullptr) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < C;
         i += int64_t(gridDim.x) * blockDim.x) {
      out[t * ldo + i] = to_float(wte[row + i]);
    }
    return;
  }
  const int64_t prow = (int64_t(pos0.get()) + t) * ld_wpe;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < C;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[t * ldo + i] = to_float(wte[row + i]) + wpe[prow + i];
  }
}

}  // namespace

void embed(float* out, int64_t ldo, const int32_t* tokens, int64_t T, StepValue pos0, const void* wte,
           DType wte_dtype, int64_t ld_wte, const float* wpe, int64_t ld_wpe, int64_t C,
           cudaStream_t stream) {
  constexpr int kThreads = 256;
  const dim3 grid(blocks_for(C, kThreads), unsigned(T));
  switch (wte_dtype) {
    case DType::F32:
      launch(embed_kernel<float>, grid, kThreads, 0, stream, out, ldo, tokens, pos0,
             static_cast<const float*>(wte), ld_wte, wpe, ld_wpe, C);
      break;
    case DType::F16:
      launch(embed_kernel<__half>, grid, kThreads, 0, stream, out, ldo, tokens, pos0,
             static_cast<const __half*>(wte), ld_wte, wpe, ld_wpe, C);
      break;
    case DType::BF16:
      launch(embed_kernel<__nv_bfloat16>, grid, kThreads, 0, stream, out, ldo, tokens, pos0,
             static_cast<const __nv_bfloat16*>(wte), ld_wte, wpe, ld_wpe, C);
      break;
    default:
      throw Error(ErrorKind::Argument, "cuda embed: wte must be F32, F16 or BF16");
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace minigpt::cuda
