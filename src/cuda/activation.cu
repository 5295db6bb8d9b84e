// activation: x = act(x) in place, elementwise; a gated MLP's act(gate) * up.
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

// out[t][i] = act(gate) * up, gate and up at columns i and F + i of row t of gu. Each element is read and
// written by the same thread, so out may be gu's first half itself.
__global__ void gated_act_kernel(float* out, int64_t ldo, const float* gu, int64_t ldg, int64_t F,
                                 Activation act) {
  pdl_wait();
  pdl_trigger();
  const float* g = gu + int64_t(blockIdx.y) * ldg;
  float* o = out + int64_t(blockIdx.y) * ldo;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < F;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float up = g[F + i];
    o[i] = activate(g[i], act) * up;
  }
}

}  // namespace

void gated_act(float* out, int64_t ldo, const float* gu, int64_t ldg, int64_t T, int64_t F, Activation act,
               cudaStream_t stream) {
  constexpr int kThreads = 256;
  launch(gated_act_kernel, dim3(blocks_for(F, kThreads), unsigned(T)), kThreads, 0, stream, out, ldo, gu, ldg,
         F, act);
}

void activation(float* x, int64_t ldx, int64_t T, int64_t F, Activation act, cudaStream_t stream) {
  constexpr int kThreads = 256;
  launch(activation_kernel, dim3(blocks_for(F, kThreads), unsigned(T)), kThreads, 0, stream, x, ldx, F, act);
}

}  // namespace minigpt::cuda
