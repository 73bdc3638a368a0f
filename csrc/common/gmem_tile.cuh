// Global -> shared tile loads with cp.async. Rows past the sequence end and columns past the
// runtime head dim are zero-filled, so the main loop never sees garbage (0 * NaN would poison P V).
//
// Every thread owns one fixed 16-byte column chunk and every kRowsPerPass-th row, so its source
// address advances by one uniform stride per pass. Deriving each chunk's row and column from a
// flat index instead made the compiler hoist one 64-bit address per chunk out of the main loop,
// some 80 registers, and the kernel spilled.
//
// The tile's rows are kStride elements apart. kSwizzle: dense rows (whole 128-byte lines) with
// each chunk at swizzled_chunk_128b (swizzle.h); a thread's rows step by kRowsPerPass, a multiple
// of 8, so its chunk's place is the same in every row it copies.
#pragma once

#include <cstdint>

#include "ptx.cuh"
#include "swizzle.h"

namespace flashattn {

template <typename Traits, int kRows, typename Element, int kStride = Traits::kSmemStride, bool kSwizzle = false>
struct GmemTileLoader {
  static constexpr int kChunksPerRow = Traits::kChunksPerRow;
  static constexpr int kRowsPerPass = Traits::kNThreads / kChunksPerRow;
  static constexpr int kPasses = (kRows + kRowsPerPass - 1) / kRowsPerPass;
  static_assert(kRowsPerPass >= 1, "one pass must cover at least one row");
  static_assert(!kSwizzle || (kChunksPerRow % 8 == 0 && kRowsPerPass % 8 == 0 && kStride * 2 % 128 == 0),
                "swizzled: whole 128-byte lines a row, a thread's rows one value mod 8");

  const Element* src;  // this thread's chunk in row 0 of the tensor's (batch, head) slice
  uint32_t dst;        // this thread's chunk in row 0 of the shared tile
  int row0;            // first row this thread copies; >= kRows for threads left idle
  bool col_ok;         // chunk inside the runtime head dim

  __device__ __forceinline__ GmemTileLoader(const Element* base, int64_t row_stride, const Element* smem_tile,
                                            int head_dim) {
    const int tid = threadIdx.x;
    const int c = tid % kChunksPerRow;
    row0 = tid < kRowsPerPass * kChunksPerRow ? tid / kChunksPerRow : kRows;
    col_ok = c * 8 < head_dim;
    src = base + c * 8 + (row0 < kRows ? row0 : 0) * row_stride;
    const int row = row0 < kRows ? row0 : 0;
    dst = smem_addr(smem_tile + row * kStride + (kSwizzle ? swizzled_chunk_128b(c, row) : c) * 8);
  }

  // Copies rows [first_row, first_row + kRows) of the slice into the tile at dst_offset bytes
  // past the constructor's; rows at or past rows_valid (relative to first_row) read as zeros.
  // The row stride is passed per call (from the kernel parameters) rather than kept in registers.
  __device__ __forceinline__ void load(int first_row, int rows_valid, uint32_t dst_offset, int64_t row_stride) const {
    const Element* p = src + first_row * row_stride;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int r = row0 + i * kRowsPerPass;
      if (kRows % kRowsPerPass == 0 || r < kRows) {
        const bool pred = col_ok && r < rows_valid;
        cp_async_16(dst + dst_offset + i * kRowsPerPass * kStride * 2, pred ? p : src, pred);
      }
      p += kRowsPerPass * row_stride;
    }
  }
};

}  // namespace flashattn
