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

#include "../common/bwd_packed.cuh"

namespace flashattn {

// Where the main kernel keeps its sequence's geometry across the loop: in shared memory, re-read
// where used, as the forward does (held in registers across its loop, the forward's D=128 kernel
// spilled), rather than in registers beside the dK/dV accumulators. Only kVarlen kernels
// reference it, so only they allocate it.
__device__ __forceinline__ BwdSeq& bwd_seq_smem() {
  __shared__ BwdSeq seq;
  return seq;
}

}  // namespace flashattn
