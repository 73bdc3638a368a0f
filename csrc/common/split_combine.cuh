// Merging the partial results of a split over the keys: num_splits float32 partials of every
// output row, each normalized over its own keys, with their LSEs, into the output and its LSE:
// lse = log sum_s exp(lse_s), out = sum_s exp(lse_s - lse) * o_s. Used by the decode path
// (flash_attn_with_kvcache) and by the Hopper forward when a grid of query tiles would leave most
// SMs idle (flash_fwd_sm90_num_splits).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "ptx.cuh"

namespace flashattn {

constexpr int kMaxKeySplits = 128;  // splits one combine handles (shared memory for the weights)

struct SplitCombineParams {
  // o_accum [num_splits, B, Hq, Sq, head_dim], lse_accum [num_splits, B, Hq, Sq]: float32,
  // contiguous. o [B, Sq, Hq, D] in the caller's strides (elements); lse [B, Hq, Sq] float32,
  // contiguous, natural log.
  const float* o_accum = nullptr;
  const float* lse_accum = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  int batch = 0, heads_q = 0, seqlen_q = 0;
  int head_dim = 0;  // a multiple of 4
  int num_splits = 1;
};

// The combine's parameters from any parameter block with the output's fields (o, lse, their
// strides, batch, heads_q, seqlen_q, head_dim: FwdParams, DecodeParams) and the partials.
template <typename Params>
SplitCombineParams split_combine_params(const Params& p, const float* o_accum, const float* lse_accum, int num_splits) {
  SplitCombineParams c;
  c.o_accum = o_accum;
  c.lse_accum = lse_accum;
  c.o = p.o;
  c.lse = p.lse;
  c.o_batch_stride = p.o_batch_stride;
  c.o_row_stride = p.o_row_stride;
  c.o_head_stride = p.o_head_stride;
  c.batch = p.batch;
  c.heads_q = p.heads_q;
  c.seqlen_q = p.seqlen_q;
  c.head_dim = p.head_dim;
  c.num_splits = num_splits;
  return c;
}

constexpr int kCombineWarps = 4;

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// One warp per output row (b, hq, i), rows in [B, Hq, Sq] order like the LSE. The weights go
// through shared memory once; then each lane owns 4 columns (D/4 <= 64: at most two passes) and
// walks the splits with independent loads (unrolled), so the partials, still in L2 from the split
// kernel, stream at full rate. Splits with lse_s = -inf (no key in that split) weigh exactly 0 and
// their partial is 0, so empty splits need no special case; a row with no key anywhere gets
// out = 0, lse = -inf.
template <typename Element>
__global__ void __launch_bounds__(kCombineWarps * 32) split_combine_kernel(const __grid_constant__ SplitCombineParams p) {
  __shared__ float s_weight[kCombineWarps][kMaxKeySplits];
  // Launched programmatically (launch_split_combine), this CTA may start before the split kernel
  // has finished: wait here until that grid has completed and its partials are visible. Returns at
  // once for an ordinary launch.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t rows_all = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kCombineWarps + warp;
  if (row >= rows_all) return;  // warp-uniform; the kernel has no block-wide barrier
  const int splits = p.num_splits;

  float m = -INFINITY;
  for (int s = lane; s < splits; s += 32) m = fmaxf(m, p.lse_accum[s * rows_all + row]);
  m = warp_max(m);
  float lse = -INFINITY;
  if (m != -INFINITY) {
    float l = 0.f;
    for (int s = lane; s < splits; s += 32) l += expf(p.lse_accum[s * rows_all + row] - m);
    l = warp_sum(l);
    lse = m + logf(l);
  }
  for (int s = lane; s < splits; s += 32)
    s_weight[warp][s] = lse == -INFINITY ? 0.f : expf(p.lse_accum[s * rows_all + row] - lse);
  __syncwarp();

  const int i = static_cast<int>(row % p.seqlen_q);
  const int64_t bh = row / p.seqlen_q;
  const int head_q = static_cast<int>(bh % p.heads_q);
  const int batch = static_cast<int>(bh / p.heads_q);
  Element* out = static_cast<Element*>(p.o) + batch * p.o_batch_stride + i * p.o_row_stride + head_q * p.o_head_stride;
  const int64_t split_stride = rows_all * p.head_dim;
  const float* part = p.o_accum + row * p.head_dim;
  for (int c4 = lane; c4 < p.head_dim / 4; c4 += 32) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    const float* src = part + c4 * 4;
#pragma unroll 8
    for (int s = 0; s < splits; ++s) {
      const float w = s_weight[warp][s];
      const float4 x = __ldg(reinterpret_cast<const float4*>(src + s * split_stride));
      acc.x += w * x.x, acc.y += w * x.y, acc.z += w * x.z, acc.w += w * x.w;
    }
    uint2 packed;
    packed.x = pack2<Element>(acc.x, acc.y);
    packed.y = pack2<Element>(acc.z, acc.w);
    *reinterpret_cast<uint2*>(out + c4 * 4) = packed;
  }
  if (lane == 0) p.lse[row] = lse;
}

// Launches the combine on `stream` after the split kernel. programmatic: a programmatic dependent
// launch (sm90+ only): the combine grid is scheduled while the split grid still runs and waits on
// it in griddepcontrol.wait, which takes the launch gap between the two kernels off the critical
// path (it matters where the whole call is tens of microseconds).
template <typename Element>
cudaError_t launch_split_combine(const SplitCombineParams& p, cudaStream_t stream, bool programmatic) {
  if (p.num_splits < 1 || p.num_splits > kMaxKeySplits || p.head_dim % 4 != 0) return cudaErrorInvalidValue;
  const int64_t rows_all = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
  if (rows_all == 0) return cudaSuccess;
  const int64_t blocks = (rows_all + kCombineWarps - 1) / kCombineWarps;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(kCombineWarps * 32);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = programmatic ? 1 : 0;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, split_combine_kernel<Element>, p);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace flashattn
