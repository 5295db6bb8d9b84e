// Positions applied after the embeddings: learned rows added to a projected embedding (OPT's project_in),
// and rotary positions on the query and key heads (GPT-NeoX's rotate_half, or GPT-J's adjacent pairs).
#include "cuda/kernels.cuh"

namespace minigpt::cuda {
namespace {

__global__ void add_positions_kernel(float* out, int64_t ldo, StepValue pos0, const float* wpe,
                                     int64_t ld_wpe, int64_t C) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.y;
  const int64_t prow = (int64_t(pos0.get()) + t) * ld_wpe;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < C;
       i += int64_t(gridDim.x) * blockDim.x)
    out[t * ldo + i] += wpe[prow + i];
}

// A block per token, a thread per (head, pair): the angle as transformers computes it, in F32:
// position * (1 / theta^(2i / rotary_dim)), or position * inv_freq[i] where the frequencies are given (a
// rescaled rope); cos and sin of it in F32 (the CPU backend rounds a double's).
// Pair i is dimensions (i, i + rotary_dim / 2), or (2i, 2i + 1) when `adjacent`.
__global__ void rope_kernel(float* x, int64_t ldx, StepValue pos0, int H, int D, int rotary_dim, float theta,
                            const float* __restrict__ inv_freq, bool adjacent) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  const int half = rotary_dim / 2;
  const float p = float(int64_t(pos0.get()) + t);
  for (int j = threadIdx.x; j < H * half; j += blockDim.x) {
    const int h = j / half, i = j % half;
    const float inv = inv_freq ? inv_freq[i] : 1.0f / powf(theta, float(2 * i) / float(rotary_dim));
    const float angle = p * inv;
    float s, c;
    sincosf(angle, &s, &c);
    float* v = x + t * ldx + int64_t(h) * D;
    const int ia = adjacent ? 2 * i : i, ib = adjacent ? 2 * i + 1 : i + half;
    const float a = v[ia], b = v[ib];
    v[ia] = a * c - b * s;
    v[ib] = b * c + a * s;
  }
}

}  // namespace

void add_positions(float* out, int64_t ldo, int64_t T, StepValue pos0, const float* wpe, int64_t ld_wpe,
                   int64_t C, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const dim3 grid(blocks_for(C, kThreads), unsigned(T));
  launch(add_positions_kernel, grid, kThreads, 0, stream, out, ldo, pos0, wpe, ld_wpe, C);
}

void rope(float* x, int64_t ldx, int64_t T, StepValue pos0, int64_t H, int64_t D, int64_t rotary_dim,
          float theta, const float* inv_freq, RopeLayout layout, cudaStream_t stream) {
  if (T == 0) return;
  launch(rope_kernel, unsigned(T), 128, 0, stream, x, ldx, pos0, int(H), int(D), int(rotary_dim), theta,
         inv_freq, layout == RopeLayout::AdjacentPairs);
}

}  // namespace minigpt::cuda
