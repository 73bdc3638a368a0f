// Backward, step 1 of 3: dpsum = rowsum(dO * O) per query row, in float32.
//
// dS = P * (dP - dpsum) needs, for every query row, the dot product of that row's output and its
// incoming gradient (the softmax Jacobian's diagonal term); computing it once here keeps the main
// loop from reloading O. One warp per (batch, query, head) row; a row of D <= 256 is at most 32
// chunks of 16 bytes, so each lane reads at most one chunk of each.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "bwd_params.h"

namespace flashattn {

constexpr int kBwdPreprocessWarps = 8;

template <typename Element>
__device__ __forceinline__ float dot8(const uint4& a, const uint4& b) {
  using Pair = std::conditional_t<std::is_same_v<Element, __nv_bfloat16>, __nv_bfloat162, __half2>;
  const Pair* pa = reinterpret_cast<const Pair*>(&a);
  const Pair* pb = reinterpret_cast<const Pair*>(&b);
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 fa, fb;
    if constexpr (std::is_same_v<Element, __nv_bfloat16>) {
      fa = __bfloat1622float2(pa[i]);
      fb = __bfloat1622float2(pb[i]);
    } else {
      fa = __half22float2(pa[i]);
      fb = __half22float2(pb[i]);
    }
    acc = fmaf(fa.x, fb.x, acc);
    acc = fmaf(fa.y, fb.y, acc);
  }
  return acc;
}

template <typename Element>
__global__ void __launch_bounds__(kBwdPreprocessWarps * 32) flash_bwd_preprocess_kernel(const __grid_constant__ BwdParams p) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kBwdPreprocessWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.seqlen_q * p.heads_q;
  if (row >= rows) return;
  // Rows in (batch, query, head) order: neighbouring warps read neighbouring heads of one token.
  const int h = static_cast<int>(row % p.heads_q);
  const int i = static_cast<int>((row / p.heads_q) % p.seqlen_q);
  const int b = static_cast<int>(row / (static_cast<int64_t>(p.heads_q) * p.seqlen_q));
  float acc = 0.f;
  if (lane * 8 < p.head_dim) {
    const Element* o = static_cast<const Element*>(p.o) + b * p.o_batch_stride + i * p.o_row_stride + h * p.o_head_stride;
    const Element* d = static_cast<const Element*>(p.dout) + b * p.do_batch_stride + i * p.do_row_stride + h * p.do_head_stride;
    acc = dot8<Element>(*reinterpret_cast<const uint4*>(o + lane * 8), *reinterpret_cast<const uint4*>(d + lane * 8));
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) p.dpsum[(static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q + i] = acc;
}

// Launches the preprocess for every query row of `p` (nothing when there is none). Shared by both
// backward paths (csrc/flash_bwd/launch.cuh, csrc/flash_bwd_sm90/launch.cuh).
template <typename Element>
cudaError_t launch_bwd_preprocess(const BwdParams& p, cudaStream_t stream) {
  const long long rows = static_cast<long long>(p.batch) * p.heads_q * p.seqlen_q;
  if (rows <= 0) return cudaSuccess;
  const long long grid = (rows + kBwdPreprocessWarps - 1) / kBwdPreprocessWarps;
  if (grid > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  flash_bwd_preprocess_kernel<Element><<<static_cast<unsigned>(grid), kBwdPreprocessWarps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashattn
