// Global -> shared loads of the Hopper backward kernel: cp.async by all 256 threads into the
// 128-byte-swizzled chunk-plane layout (traits.h), so that wgmma reads the tiles through
// descriptors. Rows past the sequence end and columns past the runtime head dim are zero-filled
// (cp.async with src-size 0 reads nothing).
//
// cp.async writes through the generic proxy and wgmma reads through the async proxy: after
// cp_async_wait every writer runs fence_proxy_async(), then a barrier, before any wgmma reads the
// tile (mainloop.cuh).
#pragma once

#include <cstdint>

#include "../flash_fwd/ptx.cuh"
#include "../flash_fwd_sm90/ptx.cuh"
#include "traits.h"

namespace flashattn {
namespace sm90 {

// 4-byte copy, zero-filled when !pred.
__device__ __forceinline__ void cp_async_4_zfill(uint32_t dst, const void* src, bool pred) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(pred ? 4 : 0));
}

// A [kRows, kHeadDim] tile starting at `gmem` (row stride `row_stride` elements) into the chunk
// planes at shared address `dst`; rows >= valid_rows and columns >= head_dim read as zeros.
template <int kRows, int kHeadDim, int kThreads, typename Element>
__device__ __forceinline__ void load_tile_sw128(uint32_t dst, const Element* gmem, int64_t row_stride, int valid_rows,
                                                int head_dim, int tid) {
  constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte pieces
  constexpr int kTotal = kRows * kChunksPerRow;
  static_assert(kTotal % kThreads == 0, "whole rounds of 16-byte copies");
#pragma unroll
  for (int i = 0; i < kTotal / kThreads; ++i) {
    const int idx = i * kThreads + tid;
    const int row = idx / kChunksPerRow;
    const int c = idx % kChunksPerRow;  // 16-byte piece of the row: plane c / 8, piece c % 8
    const bool ok = row < valid_rows && c * 8 < head_dim;
    const uint32_t off = swizzled_offset(kRows, row, c * 8);  // checked against CuTe (lab/sm90_desc_check.cu)
    const Element* src = ok ? gmem + row * row_stride + c * 8 : gmem;
    cp_async_16(dst + off, src, ok);
  }
}

}  // namespace sm90
}  // namespace flashattn
