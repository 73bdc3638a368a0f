// dQ = softmax_scale * dq_accum for the Hopper backward, whose dq_accum holds each query block as
// one contiguous tile in the consumers' accumulator order (traits.h: dq_tile_offset), so the
// kernel adds it with a single bulk reduce. One CTA per (batch, query head, query block): the
// tile is read coalesced into shared memory, then written as 16-byte pieces of dq's rows.
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
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kTileFloats = Traits::kDqTileFloats;
  // A tile over 32 KB (D = 256: 64 KB) goes through shared memory in parts: with dQ split by
  // columns, warpgroup wg's columns [wg kDqN, (wg + 1) kDqN) are the tile's wg-th contiguous half.
  constexpr int kParts = kTileFloats * 4 > 32768 ? 2 : 1;
  static_assert(kParts == 1 || Traits::kDqSplit == Sm90BwdDqSplit::kSplitD, "parts are column halves");
  constexpr int kPartFloats = kTileFloats / kParts;
  constexpr int kPartCols = Traits::kHeadDim / kParts;
  __shared__ float4 tile[kPartFloats / 4];
  const int m_block = static_cast<int>(blockIdx.x % num_m_blocks);
  const int bh = static_cast<int>(blockIdx.x / num_m_blocks);
  const int h = bh % p.heads_q;
  const int b = bh / p.heads_q;
  const float4* src = reinterpret_cast<const float4*>(p.dq_accum) + static_cast<int64_t>(blockIdx.x) * (kTileFloats / 4);
  const float* t = reinterpret_cast<const float*>(tile);
  const int m0 = m_block * kBlockM;
  const int rows = min(kBlockM, p.seqlen_q - m0);
  const float s = p.softmax_scale;
#pragma unroll 1
  for (int part = 0; part < kParts; ++part) {
    const int col0 = part * kPartCols;
    const int chunks = max(0, min(p.head_dim - col0, kPartCols)) / 8;
    if (part > 0) __syncthreads();  // the previous part is read
    for (int i = threadIdx.x; i < kPartFloats / 4; i += kBwdSm90ConvertThreads) tile[i] = src[part * (kPartFloats / 4) + i];
    __syncthreads();
    for (int idx = threadIdx.x; idx < rows * chunks; idx += kBwdSm90ConvertThreads) {
      const int r = idx / chunks;
      const int c = idx % chunks;
      uint32_t packed[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        // Columns 8c + 2k and 8c + 2k + 1 are adjacent floats of the tile (same thread, e = 0, 1).
        const float2 v =
            *reinterpret_cast<const float2*>(t + Traits::dq_tile_offset_rc(r, col0 + 8 * c + 2 * k) - part * kPartFloats);
        packed[k] = pack2<Element>(v.x * s, v.y * s);
      }
      Element* dst = static_cast<Element*>(p.dq) + b * p.dq_batch_stride + static_cast<int64_t>(m0 + r) * p.dq_row_stride +
                     h * p.dq_head_stride + col0 + 8 * c;
      *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
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
