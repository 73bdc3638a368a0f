// Dense shared-memory rows of whole 128-byte lines with their 16-byte chunks XOR-swizzled by row.
//
// Chunk c of row r is stored at chunk swizzled_chunk_128b(c, r) = (c & ~7) | ((c ^ r) & 7): within
// each 128-byte line the 8 chunks are permuted by r mod 8. The 8 row addresses of one ldmatrix
// phase (8 consecutive rows, one chunk column) then fall in 8 distinct bank groups, as with rows
// padded by 16 bytes, while a cp.async row fills whole lines (a padded row straddles one more
// line per row, which costs the copy shared-memory wavefronts: docs/perf-notes.md).
//
// Used where a thread's rows keep one value of r mod 8 (rows it reads or writes step by multiples
// of 8): its swizzle is then one XOR fixed per thread, and a compile-time column offset o whose
// in-line bits do not overlap the thread's own chunk bits moves an address a to
// (a ^ (o_bytes & 127)) + (o_bytes & ~127) (swizzled_col_offset).
#pragma once

#include <cstdint>

// Callable from kernels without --expt-relaxed-constexpr (the lab's programs build without it) and
// from host code compiled by the host compiler alone (decode_traits.h is).
#if defined(__CUDACC__)
#define FLASHATTN_SWIZZLE_FN __host__ __device__ constexpr
#else
#define FLASHATTN_SWIZZLE_FN constexpr
#endif

namespace flashattn {

FLASHATTN_SWIZZLE_FN int swizzled_chunk_128b(int chunk, int row) { return (chunk & ~7) | ((chunk ^ row) & 7); }

// Address of a swizzled row's element `col_elems` (a compile-time multiple of 8) past the 16-byte
// chunk at `addr`, for 2-byte elements: the offset's in-line bits XOR-ed, its whole lines added.
// Valid where addr's line is 128-byte aligned and the offset's in-line chunk bits are clear in
// addr's chunk (see above).
FLASHATTN_SWIZZLE_FN uint32_t swizzled_col_offset(uint32_t addr, int col_elems) {
  return (addr ^ (static_cast<uint32_t>(col_elems * 2) & 127u)) + (static_cast<uint32_t>(col_elems * 2) & ~127u);
}

}  // namespace flashattn

#undef FLASHATTN_SWIZZLE_FN
