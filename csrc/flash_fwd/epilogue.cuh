// Epilogue: normalized O goes registers -> shared (the warp's own Q rows, free once its last
// Q K^T is done, so no block barrier) -> global in 16-byte coalesced stores; LSE straight out.
#pragma once

#include <cmath>
#include <cstdint>

#include "../common/params.h"
#include "../common/ptx.cuh"

namespace flashattn {

template <typename Traits, typename Element>
__device__ __forceinline__ void store_output(const float (&o)[Traits::kMTiles][Traits::kNTilesO][4],
                                             const float (&lse)[Traits::kMTiles][2], Element* smem_rows,
                                             Element* o_gmem, int64_t o_row_stride, float* lse_gmem,
                                             int rows_valid, int head_dim) {
  const int lane = threadIdx.x % 32;
  __syncwarp();
#pragma unroll
  for (int mt = 0; mt < Traits::kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = mt * 16 + lane / 4 + h * 8;
#pragma unroll
      for (int nt = 0; nt < Traits::kNTilesO; ++nt) {
        const int c = nt * 8 + (lane % 4) * 2;
        *reinterpret_cast<uint32_t*>(smem_rows + r * Traits::kSmemStride + c) =
            pack2<Element>(o[mt][nt][2 * h], o[mt][nt][2 * h + 1]);
      }
      if (lane % 4 == 0 && r < rows_valid) lse_gmem[r] = lse[mt][h];
    }
  __syncwarp();
  constexpr int kChunks = Traits::kWarpM * Traits::kChunksPerRow;
#pragma unroll
  for (int idx = lane; idx < kChunks; idx += 32) {
    const int r = idx / Traits::kChunksPerRow;
    const int c = idx - r * Traits::kChunksPerRow;
    if (r < rows_valid && c * 8 < head_dim)
      *reinterpret_cast<uint4*>(o_gmem + r * o_row_stride + c * 8) =
          *reinterpret_cast<const uint4*>(smem_rows + r * Traits::kSmemStride + c * 8);
  }
}

// A query block in which no row sees any key (bottom-right causal with Sq > Sk): O = 0, LSE = -inf.
template <typename Traits, typename Element>
__device__ __forceinline__ void store_empty_rows(Element* o_gmem, int64_t o_row_stride, float* lse_gmem,
                                                 int rows_valid, int head_dim) {
  const int rows = rows_valid < Traits::kBlockM ? rows_valid : Traits::kBlockM;
  const int chunks = head_dim / 8;
  for (int idx = threadIdx.x; idx < rows * chunks; idx += Traits::kNThreads) {
    const int r = idx / chunks;
    const int c = idx - r * chunks;
    *reinterpret_cast<uint4*>(o_gmem + r * o_row_stride + c * 8) = make_uint4(0, 0, 0, 0);
  }
  for (int r = threadIdx.x; r < rows; r += Traits::kNThreads) lse_gmem[r] = -INFINITY;
}

}  // namespace flashattn
