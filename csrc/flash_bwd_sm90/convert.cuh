// dQ = softmax_scale * dq_accum for the Hopper backward, whose dq_accum holds each query block as
// one contiguous tile in the consumers' accumulator order (traits.h: dq_tile_offset), so the
// kernel adds it with a single bulk reduce (or, at D = 256, with vector reductions). One CTA per
// (batch, query head, query block), two passes through shared memory:
//   1. the tile's float4s in order (coalesced), each scaled and packed to two 16-bit pairs, rows r
//      and r + 8 of one column pair, into a row-major [kBlockM][D + 8] tile (the 16-byte row
//      padding puts a warp's 8 rows x 4 column pairs on 32 distinct banks);
//   2. 16-byte pieces of its rows out to dq, a warp's stores contiguous along each row.
// (Reading the float tile through shared memory by rows instead hit 16-way bank conflicts, and
// storing the pairs straight from registers wrote 16 scattered bytes per row and instruction:
// both ran at half the memory bandwidth or less.)
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
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kPitch = kHeadDim + 8;  // elements per shared row
  constexpr int kVecs = Traits::kDqTileFloats / 4;
  constexpr int kVecsPerPart = Traits::kDqRegs / 4 * kWarpgroupThreads;  // one warpgroup's part
  constexpr bool kSplitD = Traits::kDqSplit == Sm90BwdDqSplit::kSplitD;
  static_assert(kBlockM * kPitch * 2 <= 48 * 1024, "static shared memory");
  __shared__ __align__(16) uint32_t tile[kBlockM * kPitch / 2];
  const int m_block = static_cast<int>(blockIdx.x % num_m_blocks);
  const int bh = static_cast<int>(blockIdx.x / num_m_blocks);
  const int h = bh % p.heads_q;
  const int b = bh / p.heads_q;
  const float4* src = reinterpret_cast<const float4*>(p.dq_accum) + static_cast<int64_t>(blockIdx.x) * kVecs;
  const float s = p.softmax_scale;
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
    tile[(row * kPitch + col) / 2] = pack2<Element>(v.x * s, v.y * s);
    tile[((row + 8) * kPitch + col) / 2] = pack2<Element>(v.z * s, v.w * s);
  }
  __syncthreads();
  const int m0 = m_block * kBlockM;
  const int rows = min(kBlockM, p.seqlen_q - m0);
  const int chunks = p.head_dim / 8;  // 16-byte pieces of a row that dq holds
  Element* dq = static_cast<Element*>(p.dq) + b * p.dq_batch_stride + static_cast<int64_t>(m0) * p.dq_row_stride +
                h * p.dq_head_stride;
  for (int c = threadIdx.x; c < rows * chunks; c += kBwdSm90ConvertThreads) {
    const int row = c / chunks;
    const int piece = c % chunks;
    *reinterpret_cast<uint4*>(dq + row * p.dq_row_stride + 8 * piece) =
        *reinterpret_cast<const uint4*>(&tile[(row * kPitch + 8 * piece) / 2]);
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
