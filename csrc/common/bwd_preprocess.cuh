// Backward, step 1 of 3: dpsum = rowsum(dO * O) per query row, in float32, and the zeroing of the
// scratch the later steps sum into.
//
// dS = P * (dP - dpsum) needs, for every query row, the dot product of that row's output and its
// incoming gradient (the softmax Jacobian's diagonal term); computing it once here keeps the main
// loop from reloading O. A row of D <= 256 is at most 32 chunks of 16 bytes: a group of kLanes
// lanes (the next power of two of the row's chunks) reads one row, one chunk each, so a warp reads
// 32 / kLanes rows at once and no lane idles at D = 64 or 128 (one warp per row left half the
// lanes of a D = 128 row idle).
//
// The same kernel zeroes BwdParams::zero_floats floats from dq_accum on (bwd_scratch: dq_accum,
// the GQA split's dkv_accum, the deterministic tickets). A memset of its own did that before it,
// and the two ran apart: on the H100, at 16k tokens of H * D = 2048, the memset took 42 us and
// the preprocess 54 us (~2.5 TB/s: short CTAs, one 16-byte load of O and one of dO a thread).
// Here each lane group reads kBwdPreprocessRows rows, and each thread issues all their loads, then
// its share of the zero stores, before it waits on a load: more bytes in flight, a launch fewer.
// Its floor is the bytes of O and dO read plus those zeroed over the memory bandwidth, so its
// index math stays 32-bit where the sizes allow (64-bit divisions per row made the first version
// compute-bound).
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
constexpr int kBwdPreprocessRows = 4;  // rows a lane group reads, their loads all in flight at once
// The grid gives each thread at most this many 16-byte zero stores (as many as its loads, where
// the zero region is dq_accum alone): a larger region than the rows' share adds CTAs.
constexpr int kBwdPreprocessZeroVecs = 8;

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
  constexpr int kRowsPerStep = kBwdPreprocessWarps * kRowsPerWarp;  // rows the CTA reads with one load a thread
  const int lane = threadIdx.x % 32;
  const int sub = lane % kLanes;  // this lane's 16-byte chunk of its row
  const Index rows = static_cast<Index>(p.batch) * p.seqlen_q * p.heads_q;
  // Rows in (batch, query, head) order, kBwdPreprocessRows steps of kRowsPerStep a CTA: at each
  // step neighbouring groups read neighbouring heads of one token. A grid sized by the zero region
  // has CTAs past the last row, which only zero.
  const int64_t first = static_cast<int64_t>(blockIdx.x) * (kBwdPreprocessRows * kRowsPerStep);
  const bool has_rows = first < rows;
  // A lane past its row's chunks, or past the last row, sums zeros: +0, the 0.f a lane that skipped
  // its dot product would add, so each row's sum has the same bits as with one row a thread.
  uint4 o_chunk[kBwdPreprocessRows], d_chunk[kBwdPreprocessRows];
  Index out[kBwdPreprocessRows];  // the row's dpsum index, -1 past the last row
  if (has_rows) {
#pragma unroll
    for (int r = 0; r < kBwdPreprocessRows; ++r) {
      o_chunk[r] = d_chunk[r] = make_uint4(0u, 0u, 0u, 0u);
      out[r] = -1;
      const Index row =
          static_cast<Index>(first) + (r * kBwdPreprocessWarps + threadIdx.x / 32) * kRowsPerWarp + lane / kLanes;
      if (row < rows) {
        const Index h = row % p.heads_q;
        const Index token = row / p.heads_q;
        const Index i = token % p.seqlen_q;
        const Index b = token / p.seqlen_q;
        out[r] = (b * p.heads_q + h) * p.seqlen_q + i;
        if (sub * 8 < p.head_dim) {
          const Element* o = static_cast<const Element*>(p.o) + (b * static_cast<Index>(p.o_batch_stride) +
                                                                  i * static_cast<Index>(p.o_row_stride) +
                                                                  h * static_cast<Index>(p.o_head_stride));
          const Element* d = static_cast<const Element*>(p.dout) + (b * static_cast<Index>(p.do_batch_stride) +
                                                                    i * static_cast<Index>(p.do_row_stride) +
                                                                    h * static_cast<Index>(p.do_head_stride));
          o_chunk[r] = *reinterpret_cast<const uint4*>(o + sub * 8);
          d_chunk[r] = *reinterpret_cast<const uint4*>(d + sub * 8);
        }
      }
    }
  }

  // This thread's share of the zero region while its loads are in flight: 16-byte stores a grid
  // apart, so that a warp's are contiguous, then the scalar tail. 64-bit: the grid's thread count
  // may pass 2^31 (the region itself is below 2^31 floats: BwdParams::zero_floats).
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t vecs = p.zero_floats / 4;
  float4* const zero = reinterpret_cast<float4*>(p.dq_accum);
  for (int64_t v = tid; v < vecs; v += threads) zero[v] = make_float4(0.f, 0.f, 0.f, 0.f);
  if (tid < p.zero_floats % 4) p.dq_accum[vecs * 4 + tid] = 0.f;

  if (has_rows) {
#pragma unroll
    for (int r = 0; r < kBwdPreprocessRows; ++r) {
      float acc = dot8<Element>(o_chunk[r], d_chunk[r]);
#pragma unroll
      for (int off = kLanes / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
      if (sub == 0 && out[r] >= 0) p.dpsum[out[r]] = acc;
    }
  }
}

// Launches the preprocess for every query row of `p` and the zeroing of its zero region (nothing
// when there is neither). Shared by both backward paths (csrc/flash_bwd/launch.cuh,
// csrc/flash_bwd_sm90/launch.cuh), which launch it before anything reads the zeroed scratch.
template <typename Element, int kLanes>
cudaError_t launch_bwd_preprocess_lanes(const BwdParams& p, long long rows, cudaStream_t stream) {
  constexpr int kThreads = kBwdPreprocessWarps * 32;
  constexpr int kRowsPerCta = kBwdPreprocessWarps * (32 / kLanes) * kBwdPreprocessRows;
  constexpr long long kVecsPerCta = static_cast<long long>(kThreads) * kBwdPreprocessZeroVecs;
  const long long zero_vecs = (p.zero_floats + 3) / 4;  // the tail's floats count as one
  const long long grid = std::max((rows + kRowsPerCta - 1) / kRowsPerCta, (zero_vecs + kVecsPerCta - 1) / kVecsPerCta);
  if (grid > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  // 32-bit offsets when every element offset the kernel forms fits (the row index and the
  // strided offsets into o / dout), else 64-bit.
  const long long span = (static_cast<long long>(p.batch) - 1) * std::max(p.o_batch_stride, p.do_batch_stride) +
                         (static_cast<long long>(p.seqlen_q) - 1) * std::max(p.o_row_stride, p.do_row_stride) +
                         (static_cast<long long>(p.heads_q) - 1) * std::max(p.o_head_stride, p.do_head_stride) + p.head_dim;
  const bool narrow = rows + kRowsPerCta < 0x7fffffffLL && span < 0x7fffffffLL;
  if (narrow)
    flash_bwd_preprocess_kernel<Element, kLanes, int><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(p);
  else
    flash_bwd_preprocess_kernel<Element, kLanes, int64_t><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename Element>
cudaError_t launch_bwd_preprocess(const BwdParams& p, cudaStream_t stream) {
  const long long rows = std::max(static_cast<long long>(p.batch) * p.heads_q * p.seqlen_q, 0LL);
  // The float4 stores need dq_accum 16-byte aligned (bwd_scratch's is).
  if (p.zero_floats < 0 || (p.zero_floats > 0 && reinterpret_cast<uintptr_t>(p.dq_accum) % 16 != 0))
    return cudaErrorInvalidValue;
  // With no row it still launches for a region to zero: what reads the region next finds it zeroed.
  if (rows == 0 && p.zero_floats == 0) return cudaSuccess;
  const int chunks = (p.head_dim + 7) / 8;
  if (chunks <= 4) return launch_bwd_preprocess_lanes<Element, 4>(p, rows, stream);
  if (chunks <= 8) return launch_bwd_preprocess_lanes<Element, 8>(p, rows, stream);
  if (chunks <= 16) return launch_bwd_preprocess_lanes<Element, 16>(p, rows, stream);
  return launch_bwd_preprocess_lanes<Element, 32>(p, rows, stream);
}

}  // namespace flashattn
