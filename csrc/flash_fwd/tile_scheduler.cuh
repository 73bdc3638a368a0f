// Maps the 1-D grid onto (batch*head, query block). A 1-D grid keeps B*H beyond 65535 legal.
// Blocks of one (batch, head) are adjacent, so they share K/V in L2; within a head the query
// blocks run last-first, because under causal masking the last block sees the most keys and
// starting the longest work first evens out the tail.
#pragma once

#include "params.h"

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

}  // namespace flashattn
