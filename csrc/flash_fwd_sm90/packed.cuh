// A sequence of a packed variable-length batch as the Hopper forward's packed flavour sees it
// (Sm90PackedParams): where its rows lie in the packed tensors, its lengths and mask alignment, read
// per tile from cu_seqlens, and the key blocks a query tile of it visits.
//
// The grid is the dense one sized by the bounds (batch x ceil(max_seqlen_q / kBlockM) x Hq tiles, in
// the dynamic schedule's order); a tile whose first row is past its sequence's queries has nothing to
// do and stores nothing (its rows belong to the next sequence). Every load starts at the sequence's
// first packed row, so a block that runs past the sequence's end holds the next sequence's rows:
// their scores are masked (the key window ends at the sequence's keys), the consumers zero those V
// rows before the P V that reads them (consumer.cuh), and the epilogue stores only the sequence's
// own rows (epilogue.cuh, store_o_rows).
#pragma once

#include "../common/mask.cuh"
#include "../common/packed_span.cuh"
#include "kernel_params.h"
#include "tile_scheduler.h"

namespace flashattn {
namespace sm90 {

#if defined(FLASHATTN_SM90A_ENABLED)

struct PackedSeq {
  int q_row0, k_row0;      // the sequence's first packed rows
  int seqlen_q, seqlen_k;  // its lengths (queries bounded by max_seqlen_q, the grid's extent)
  int causal_offset;       // 0 top-left, seqlen_k - seqlen_q bottom-right
};

// Sequence b, clamped into the packed tensors (packed_span: bad offsets cannot move a load or a
// store outside them), as the portable forward and the backwards read it.
__device__ __forceinline__ PackedSeq packed_seq(const Sm90PackedParams& p, int b) {
  PackedSeq s;
  packed_span(p.cu_seqlens_q, b, p.total_q, s.q_row0, s.seqlen_q);
  packed_span(p.cu_seqlens_k, b, p.total_k, s.k_row0, s.seqlen_k);
  s.causal_offset = p.mask_top_left ? 0 : s.seqlen_k - s.seqlen_q;
  s.seqlen_q = min(s.seqlen_q, p.seqlen_q);  // a sequence longer than the bound: rows past it not computed
  return s;
}

// How many rows a tile of the sequence starts early by where the config puts its partial tile first
// (Traits::kPartialTileFirst, the dense calls' Sm90Params::q_row_shift; tile_scheduler.h tile_rows):
// a function of the sequence's own query count, so that each sequence's partial tile is its first.
// The packed configs with it serve masked calls only (dispatch.cu), where the first tile sees the
// fewest keys. Tile m of the sequence then owns rows tile_rows(m, kBlockM, seqlen_q, shift).
template <typename Traits>
__device__ __forceinline__ int packed_row_shift(const PackedSeq& s) {
  if constexpr (Traits::kPartialTileFirst)
    return (Traits::kBlockM - s.seqlen_q % Traits::kBlockM) % Traits::kBlockM;
  else
    return 0;
}

// The rows query tile m_block of the sequence owns (unshifted: [m kBlockM, (m + 1) kBlockM) up to
// seqlen_q), relative to the sequence's first row.
template <typename Traits>
__device__ __forceinline__ TileRows packed_tile_rows(const PackedSeq& s, int m_block) {
  return tile_rows(m_block, Traits::kBlockM, s.seqlen_q, packed_row_shift<Traits>(s));
}

// A tile's work with its sequence (the packed flavour's TileWork).
struct PackedTileWork : TileWork {
  PackedSeq seq;
  // Whether the tile holds rows of its sequence (else it loads, computes and stores nothing); the
  // same shifted or not: a shift below kBlockM moves no tile past the sequence's last one.
  template <typename Traits>
  __device__ __forceinline__ bool has_rows() const {
    return coord.m_block * Traits::kBlockM < seq.seqlen_q;
  }
};

// Query tile c's work: its sequence, and the key blocks of its rows under the sequence's own lengths
// and mask (none for a tile past the sequence's queries).
template <typename Traits>
__device__ __forceinline__ PackedTileWork packed_tile_work(const Sm90PackedParams& params, const TileCoord& c) {
  PackedTileWork w;
  w.coord = c;
  w.split = 0;
  w.seq = packed_seq(params, c.batch);
  if (w.has_rows<Traits>()) {
    if constexpr (Traits::kPartialTileFirst)
      w.blocks = block_range(c.m_block, Traits::kBlockM, Traits::kBlockN, w.seq.seqlen_q, w.seq.seqlen_k,
                             w.seq.causal_offset, Traits::kLocal ? params.window_left : -1,
                             Traits::kLocal ? params.window_right : -1, packed_row_shift<Traits>(w.seq));
    else
      w.blocks = block_range(c.m_block, Traits::kBlockM, Traits::kBlockN, w.seq.seqlen_q, w.seq.seqlen_k,
                             w.seq.causal_offset, Traits::kLocal ? params.window_left : -1,
                             Traits::kLocal ? params.window_right : -1);
  } else {
    w.blocks.n_begin = w.blocks.n_end = w.blocks.full_begin = w.blocks.full_end = 0;
  }
  return w;
}

#endif  // FLASHATTN_SM90A_ENABLED

}  // namespace sm90
}  // namespace flashattn
