// Global -> shared tile loads with cp.async. Rows past the sequence end and columns past the
// runtime head dim are zero-filled, so the main loop never sees garbage (0 * NaN would poison P V).
#pragma once

#include <cstdint>

#include "ptx.cuh"

namespace flashattn {

template <typename Traits, int kRows, typename Element>
__device__ __forceinline__ void load_tile_async(Element* smem, const Element* gmem, int64_t row_stride,
                                                int rows_valid, int head_dim) {
  constexpr int kChunks = kRows * Traits::kChunksPerRow;
#pragma unroll
  for (int i = 0; i < (kChunks + Traits::kNThreads - 1) / Traits::kNThreads; ++i) {
    const int idx = static_cast<int>(threadIdx.x) + i * Traits::kNThreads;
    if (kChunks % Traits::kNThreads == 0 || idx < kChunks) {
      const int r = idx / Traits::kChunksPerRow;
      const int c = idx - r * Traits::kChunksPerRow;
      const bool pred = r < rows_valid && c * 8 < head_dim;
      const Element* src = pred ? gmem + r * row_stride + c * 8 : gmem;
      cp_async_16(smem_addr(smem + r * Traits::kSmemStride + c * 8), src, pred);
    }
  }
}

}  // namespace flashattn
