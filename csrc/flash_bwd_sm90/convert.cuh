// dQ = softmax_scale * dq_accum for the Hopper backward, whose dq_accum holds each query block as
// one contiguous tile in the consumers' accumulator order (traits.h: dq_tile_offset), so the
// kernel adds it with a single bulk reduce (or, at D = 256, with vector reductions). One CTA per
// (batch, query head, query block). Each thread reads the tile's float4s in order (coalesced, no
// shared memory: a transposing pass through shared memory hit 16-way bank conflicts and ran at
// half the memory bandwidth) and writes each as two 4-byte pairs of dq, rows r and r + 8: a warp's
// store covers 16 contiguous bytes of 8 rows, whose other halves the same warp writes next, so L2
// merges them before they reach memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/bwd_params.h"
#include "../common/ptx.cuh"
#include "traits.h"

namespace flashattn {
namespace sm90 {

constexpr int kBwdSm90ConvertThreads = 256;

template <typename Traits, typename Element>
__global__ void __launch_bounds__(kBwdSm90ConvertThreads)
    flash_bwd_sm90_convert_dq_kernel(const __grid_constant__ BwdParams p, const int num_m_blocks) {
  static_assert(Traits::kDqSplit != Sm90BwdDqSplit::kSplitKeys, "the kernel's tile orders");
  constexpr int kVecs = Traits::kDqTileFloats / 4;
  constexpr int kVecsPerPart = Traits::kDqRegs / 4 * kWarpgroupThreads;  // one warpgroup's part
  constexpr bool kSplitD = Traits::kDqSplit == Sm90BwdDqSplit::kSplitD;
  const int m_block = static_cast<int>(blockIdx.x % num_m_blocks);
  const int bh = static_cast<int>(blockIdx.x / num_m_blocks);
  const int h = bh % p.heads_q;
  const int b = bh / p.heads_q;
  const float4* src = reinterpret_cast<const float4*>(p.dq_accum) + static_cast<int64_t>(blockIdx.x) * kVecs;
  const int m0 = m_block * Traits::kBlockM;
  const int rows = min(Traits::kBlockM, p.seqlen_q - m0);
  const float s = p.softmax_scale;
  Element* dq = static_cast<Element*>(p.dq) + b * p.dq_batch_stride + static_cast<int64_t>(m0) * p.dq_row_stride +
                h * p.dq_head_stride;
#pragma unroll 4
  for (int i = threadIdx.x; i < kVecs; i += kBwdSm90ConvertThreads) {
    const float4 v = src[i];
    // Float4 i = dq_tile_offset(wg, j, wtid, 0) / 4: values (row, col), (row, col + 1),
    // (row + 8, col), (row + 8, col + 1) of warpgroup wg's part.
    const int wg = i / kVecsPerPart;
    const int j = (i % kVecsPerPart) / kWarpgroupThreads;
    const int wtid = i % kWarpgroupThreads;
    const int row = (kSplitD ? 0 : wg * kRowsPerConsumer) + 16 * (wtid / 32) + (wtid % 32) / 4;
    const int col = (kSplitD ? wg * Traits::kDqN : 0) + 8 * j + 2 * (wtid % 4);
    if (col < p.head_dim) {
      if (row < rows) *reinterpret_cast<uint32_t*>(dq + row * p.dq_row_stride + col) = pack2<Element>(v.x * s, v.y * s);
      if (row + 8 < rows)
        *reinterpret_cast<uint32_t*>(dq + (row + 8) * p.dq_row_stride + col) = pack2<Element>(v.z * s, v.w * s);
    }
  }
}

template <typename Traits, typename Element>
cudaError_t launch_bwd_sm90_convert_dq(const BwdParams& p, int num_m_blocks, cudaStream_t stream) {
  const long long grid = static_cast<long long>(p.batch) * p.heads_q * num_m_blocks;
  if (grid <= 0) return cudaSuccess;
  if (grid > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  flash_bwd_sm90_convert_dq_kernel<Traits, Element>
      <<<static_cast<unsigned>(grid), kBwdSm90ConvertThreads, 0, stream>>>(p, num_m_blocks);
  return cudaGetLastError();
}

}  // namespace sm90
}  // namespace flashattn
