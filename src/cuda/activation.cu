// activation: x = act(x) in place, elementwise.
#include "cuda/kernels.cuh"

namespace minigpt::cuda {
namespace {

__global__ void activation_kernel(float* x, int64_t ldx, int64_t F, Activation act) {
  pdl_wait();
  pdl_trigger();
  float* row = x + int64_t(blockIdx.y) * ldx;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < F;
       i += int64_t(gridDim.x) * blockDim.x) {
    row[i] = activate(row[i], act);
  }
}

}  // namespace

void activation(float* x, int64_t ldx, int64_t T, int64_t F, Activation act, cudaStream_t stream) {
  constexpr int kThreads = 256;
  launch(activation_kernel, dim3(blocks_for(F, kThreads), unsigned(T)), kThreads, 0, stream, x, ldx, F, act);
}

}  // namespace minigpt::cuda
