// Backward, step 1 of 3: dpsum = rowsum(dO * O) per query row, in float32.
//
// dS = P * (dP - dpsum) needs, for every query row, the dot product of that row's output and its
// incoming gradient (the softmax Jacobian's diagonal term); computing it once here keeps the main
// loop from reloading O. A row of D <= 256 is at most 32 chunks of 16 bytes: a group of kLanes
// lanes (the next power of two of the row's chunks) reads one row, one chunk each, so a warp reads
// 32 / kLanes rows at once and no lane idles at D = 64 or 128 (one warp per row left half the
// lanes of a D = 128 row idle). The kernel streams O and dO once: its floor is their bytes over
// the memory bandwidth, so its index math stays 32-bit where the sizes allow (64-bit divisions per
// row made the first version compute-bound).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cuda_runtime.h>

#include <algorithm>
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

template <typename Element, int kLanes, typename Index>
__global__ void __launch_bounds__(kBwdPreprocessWarps * 32) flash_bwd_preprocess_kernel(const __grid_constant__ BwdParams p) {
  constexpr int kRowsPerWarp = 32 / kLanes;
  const int lane = threadIdx.x % 32;
  const int sub = lane % kLanes;  // this lane's 16-byte chunk of its row
  const Index rows = static_cast<Index>(p.batch) * p.seqlen_q * p.heads_q;
  // Rows in (batch, query, head) order: neighbouring groups read neighbouring heads of one token.
  const Index row = (static_cast<Index>(blockIdx.x) * kBwdPreprocessWarps + threadIdx.x / 32) * kRowsPerWarp + lane / kLanes;
  float acc = 0.f;
  Index h = 0, i = 0, b = 0;
  if (row < rows) {
    h = row % p.heads_q;
    const Index token = row / p.heads_q;
    i = token % p.seqlen_q;
    b = token / p.seqlen_q;
    if (sub * 8 < p.head_dim) {
      const Element* o = static_cast<const Element*>(p.o) + (b * static_cast<Index>(p.o_batch_stride) +
                                                              i * static_cast<Index>(p.o_row_stride) +
                                                              h * static_cast<Index>(p.o_head_stride));
      const Element* d = static_cast<const Element*>(p.dout) + (b * static_cast<Index>(p.do_batch_stride) +
                                                                i * static_cast<Index>(p.do_row_stride) +
                                                                h * static_cast<Index>(p.do_head_stride));
      acc = dot8<Element>(*reinterpret_cast<const uint4*>(o + sub * 8), *reinterpret_cast<const uint4*>(d + sub * 8));
    }
  }
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (sub == 0 && row < rows) p.dpsum[(static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q + i] = acc;
}

// Launches the preprocess for every query row of `p` (nothing when there is none). Shared by both
// backward paths (csrc/flash_bwd/launch.cuh, csrc/flash_bwd_sm90/launch.cuh).
template <typename Element, int kLanes>
cudaError_t launch_bwd_preprocess_lanes(const BwdParams& p, long long rows, cudaStream_t stream) {
  constexpr int kRowsPerCta = kBwdPreprocessWarps * (32 / kLanes);
  const long long grid = (rows + kRowsPerCta - 1) / kRowsPerCta;
  if (grid > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  // 32-bit offsets when every element offset the kernel forms fits (the row index and the
  // strided offsets into o / dout), else 64-bit.
  const long long span = (static_cast<long long>(p.batch) - 1) * std::max(p.o_batch_stride, p.do_batch_stride) +
                         (static_cast<long long>(p.seqlen_q) - 1) * std::max(p.o_row_stride, p.do_row_stride) +
                         (static_cast<long long>(p.heads_q) - 1) * std::max(p.o_head_stride, p.do_head_stride) + p.head_dim;
  const bool narrow = rows + kRowsPerCta < 0x7fffffffLL && span < 0x7fffffffLL;
  if (narrow)
    flash_bwd_preprocess_kernel<Element, kLanes, int><<<static_cast<unsigned>(grid), kBwdPreprocessWarps * 32, 0, stream>>>(p);
  else
    flash_bwd_preprocess_kernel<Element, kLanes, int64_t><<<static_cast<unsigned>(grid), kBwdPreprocessWarps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename Element>
cudaError_t launch_bwd_preprocess(const BwdParams& p, cudaStream_t stream) {
  const long long rows = static_cast<long long>(p.batch) * p.heads_q * p.seqlen_q;
  if (rows <= 0) return cudaSuccess;
  const int chunks = (p.head_dim + 7) / 8;
  if (chunks <= 4) return launch_bwd_preprocess_lanes<Element, 4>(p, rows, stream);
  if (chunks <= 8) return launch_bwd_preprocess_lanes<Element, 8>(p, rows, stream);
  if (chunks <= 16) return launch_bwd_preprocess_lanes<Element, 16>(p, rows, stream);
  return launch_bwd_preprocess_lanes<Element, 32>(p, rows, stream);
}

}  // namespace flashattn
