// A sequence of a packed variable-length batch as the backward kernels see it (BwdParams with
// cu_seqlens_q set): its lengths, mask alignment and first packed rows, read on the device from
// cu_seqlens (the host never synchronizes), and the one-batch view of the packed rows on which the
// dense preprocess and dQ conversion kernels run. Shared by the portable backward's packed flavour
// (../flash_bwd/varlen.cuh) and the Hopper backward's (../flash_bwd_sm90/block.h).
//
// The scratch layouts of a packed batch are the varlen lse's, head-major over the packed rows:
// dpsum [Hq, total_q] and, for the portable backward, dq_accum [Hq, total_q, D] (the dense
// [B, Hq, Sq] and [B, Hq, Sq, D] with B = 1 and Sq = total_q). The Hopper backward keeps dq_accum
// in query-block tiles instead (../flash_bwd_sm90/block.h: bwd_packed_dq_block0).
#pragma once

#include "bwd_params.h"
#include "packed_span.cuh"

namespace flashattn {

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

// The packed rows as one dense batch of total_q rows: the view the preprocess and the dQ
// conversion run on (their kernels are the dense ones; every row of q is converted, those no
// sequence owns to 0). The scratch's zero region (zero_floats, dq_accum) is the call's own: the
// preprocess zeroes it on this view as on a dense call.
inline BwdParams bwd_packed_rows(const BwdParams& p) {
  BwdParams rows = p;
  rows.cu_seqlens_q = rows.cu_seqlens_k = nullptr;
  rows.batch = 1;
  rows.seqlen_q = p.total_q;
  rows.q_batch_stride = rows.o_batch_stride = rows.do_batch_stride = rows.dq_batch_stride = 0;
  return rows;
}

}  // namespace flashattn
