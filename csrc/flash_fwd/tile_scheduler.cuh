// Maps the 1-D grid onto (batch*head, query block). A 1-D grid keeps B*H beyond 65535 legal.
// Blocks of one (batch, head) are adjacent, so they share K/V in L2; within a head the query
// blocks run last-first, because under causal masking the last block sees the most keys and
// starting the longest work first evens out the tail.
//
// Packed variable-length batches use the same grid, sized by the longest sequence: a query block
// past its own sequence's end exits at once (fwd_seq), so padding costs a launch slot, no work.
#pragma once

#include "../common/packed_span.cuh"
#include "../common/params.h"

namespace flashattn {

struct FwdTile {
  int batch;
  int head_q;
  int head_kv;
  int m_block;
};

__device__ __forceinline__ FwdTile fwd_tile(const FwdParams& p, int num_m_blocks, int linear_block) {
  const int bh = linear_block / num_m_blocks;
  FwdTile t;
  t.m_block = num_m_blocks - 1 - (linear_block - bh * num_m_blocks);
  t.batch = bh / p.heads_q;
  t.head_q = bh - t.batch * p.heads_q;
  t.head_kv = t.head_q / (p.heads_q / p.heads_kv);
  return t;
}

// The sequence a tile of a packed batch belongs to (the kVarlen flavour of the kernel only; dense
// kernels read the lengths from the parameters), from cu_seqlens on the device.
struct FwdSeq {
  int seqlen_q;
  int seqlen_k;
  int causal_offset;  // alignment of the causal mask / window (csrc/common/mask.cuh)
  int q_row0;         // first packed row of the sequence in q / o
  int k_row0;         // first packed row of the sequence in k / v
};

__device__ __forceinline__ FwdSeq fwd_seq(const FwdParams& p, int batch) {
  FwdSeq s;
  packed_span(p.cu_seqlens_q, batch, p.total_q, s.q_row0, s.seqlen_q);
  packed_span(p.cu_seqlens_k, batch, p.total_k, s.k_row0, s.seqlen_k);
  s.causal_offset = p.mask_top_left ? 0 : s.seqlen_k - s.seqlen_q;
  return s;
}

}  // namespace flashattn
