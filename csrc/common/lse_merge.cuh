// The arithmetic of merging partial attention results, each normalized over its own disjoint set of
// keys and carried with its log-sum-exp: lse = log sum_s exp(lse_s), out = sum_s w_s o_s with
// w_s = exp(lse_s - lse). Shared by the combine kernel (split_combine.cuh: partials in global
// memory) and the Hopper forward's merge inside a thread-block cluster (partials in the cluster's
// shared memory), so both give a row the same weights.
//
// A part that saw no key has lse_s = -inf and weighs exactly 0. A row that no part saw a key for
// (every lse_s = -inf) gets lse = -inf and no weights at all: the callers leave its output 0
// rather than multiply partials they did not need to read.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace flashattn {

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

// log sum_s exp(l[s]) over this thread's N values and, with kAcrossWarp, over the whole warp's
// (every lane must call it then; slots without a part hold -inf). Subtracting the maximum first
// keeps every exponential in [0, 1]. With kAcrossWarp the maximum is warp-uniform, so the early
// return is too and the second shuffle reduction sees every lane.
template <bool kAcrossWarp, int N>
__device__ __forceinline__ float merged_lse(const float (&l)[N]) {
  float m = -INFINITY;
#pragma unroll
  for (int s = 0; s < N; ++s) m = fmaxf(m, l[s]);
  if constexpr (kAcrossWarp) m = warp_max(m);
  if (m == -INFINITY) return -INFINITY;
  float sum = 0.f;
#pragma unroll
  for (int s = 0; s < N; ++s) sum += expf(l[s] - m);
  if constexpr (kAcrossWarp) sum = warp_sum(sum);
  return m + logf(sum);
}

// The weight of a part with log-sum-exp `l` in a row whose merged log-sum-exp is `lse`.
__device__ __forceinline__ float merge_weight(float l, float lse) { return lse == -INFINITY ? 0.f : expf(l - lse); }

}  // namespace flashattn
