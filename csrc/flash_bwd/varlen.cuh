// Packed variable-length batches in the portable backward (BwdParams::cu_seqlens_q non-null): the
// sequence a thread block of the main kernel works on (flash_bwd_kernel's kVarlen flavour).
//
// The grid is the dense one sized by the bounds (ceil(max_seqlen_k / kBlockN) key blocks x B x Hk):
// each block reads its sequence's offsets and lengths from cu_seqlens on the device (the host never
// synchronizes), and a key block past its sequence's end exits before any load or store. Tiles
// never cross a sequence boundary: Q/dO/K/V loads, lse/dpsum reads and dQ/dK/dV writes are bounded
// by the sequence's own lengths, from its first packed row. The mask is aligned per sequence
// exactly as the varlen forward's (csrc/flash_fwd/tile_scheduler.cuh): offset Sk_b - Sq_b, or 0
// top-left.
//
// The scratch layouts of a packed batch are the varlen lse's, head-major over the packed rows:
// dpsum [Hq, total_q] and dq_accum [Hq, total_q, D] (the dense [B, Hq, Sq] and [B, Hq, Sq, D]
// with B = 1 and Sq = total_q), so the preprocess and the dQ conversion, which treat every query
// row alike, run their dense kernels on that one-batch view (bwd_packed_rows) and dQ rows no
// sequence owns come out 0 from the zeroed accumulator. Deterministic mode's tickets stay
// [B, Hq, ceil(max_seqlen_q / kBlockM)]: query block m of sequence b, as dense.
#pragma once

#include "../common/bwd_params.h"
#include "../common/packed_span.cuh"

namespace flashattn {

struct BwdSeq {
  int seqlen_q;
  int seqlen_k;
  int causal_offset;  // alignment of the causal mask / window (csrc/common/mask.cuh)
  int q_row0;         // first packed row of the sequence in q, dO, dq_accum, lse, dpsum
  int k_row0;         // first packed row of the sequence in k, v, dk, dv
};

__device__ __forceinline__ BwdSeq bwd_seq(const BwdParams& p, int batch) {
  BwdSeq s;
  // Clamped into the packed tensors as the forward's (packed_span): bad offsets cannot move a
  // load or a store outside q, k, v, dO, lse, dpsum, dq_accum, dk or dv.
  packed_span(p.cu_seqlens_q, batch, p.total_q, s.q_row0, s.seqlen_q);
  packed_span(p.cu_seqlens_k, batch, p.total_k, s.k_row0, s.seqlen_k);
  s.causal_offset = p.mask_top_left ? 0 : s.seqlen_k - s.seqlen_q;
  // A sequence longer than max_seqlen_q breaks the caller's contract (the forward's grid, sized by
  // the bound, left its later rows unwritten); the walk stays inside the bound, where the
  // deterministic tickets (sized by it) are. A no-op for every call that keeps the contract.
  s.seqlen_q = min(s.seqlen_q, p.seqlen_q);
  return s;
}

// Where the main kernel keeps its sequence's geometry across the loop: in shared memory, re-read
// where used, as the forward does (held in registers across its loop, the forward's D=128 kernel
// spilled), rather than in registers beside the dK/dV accumulators. Only kVarlen kernels
// reference it, so only they allocate it.
__device__ __forceinline__ BwdSeq& bwd_seq_smem() {
  __shared__ BwdSeq seq;
  return seq;
}

// The packed rows as one dense batch of total_q rows: the view the preprocess and the dQ
// conversion run on (their kernels are the dense ones; every row of q is converted, those no
// sequence owns to 0).
inline BwdParams bwd_packed_rows(const BwdParams& p) {
  BwdParams rows = p;
  rows.cu_seqlens_q = rows.cu_seqlens_k = nullptr;
  rows.batch = 1;
  rows.seqlen_q = p.total_q;
  rows.q_batch_stride = rows.o_batch_stride = rows.do_batch_stride = rows.dq_batch_stride = 0;
  return rows;
}

}  // namespace flashattn
