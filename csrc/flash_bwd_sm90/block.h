// What every role of a Hopper backward CTA derives alike from its block index: its key block,
// (batch, K/V head), and the query blocks its steps walk. Plain host/device C++, so that the CTA
// order and the walk are checked on the CPU (tests/kernels/test_sm90_bwd_block_cpu.py).
#pragma once

#include "../common/bwd_params.h"
#include "../common/mask.cuh"
#include "../common/sm90/ptx.cuh"  // FLASHATTN_HD

namespace flashattn {
namespace sm90 {

struct BwdBlock {
  int n_block, head_kv, batch, group, n0;
  int m_begin, m_steps, steps;
  bool reverse;  // the query blocks of a head walked from the last down (Sm90BwdParams::reverse_m)
  // Step t is query block m_block(t) of query head head_kv * group + t / m_steps: the (t %
  // m_steps)-th of [m_begin, m_begin + m_steps), counted from the first or (reverse) the last.
  FLASHATTN_HD int head_q(int t) const { return head_kv * group + t / m_steps; }
  FLASHATTN_HD int m_block(int t) const {
    const int i = t % m_steps;
    return reverse ? m_begin + m_steps - 1 - i : m_begin + i;
  }
  FLASHATTN_HD int m0(int t, int block_m) const { return m_block(t) * block_m; }
};

template <typename Traits>
FLASHATTN_HD BwdBlock bwd_block(const BwdParams& p, int num_n_blocks, int lpt_heads, int reverse_m, int cta) {
  BwdBlock b;
  // Key blocks vary fastest (neighbouring CTAs share their Q/dO reads in L2), as in the portable
  // kernel: the first key block first (under a causal mask the one with the most query blocks),
  // but the last one first in deterministic mode, whose tickets count down from the last key block
  // (bwd_sm90_dq_writer): a CTA only ever waits for CTAs launched before it, which therefore run.
  // Under a causal mask (lpt_heads > 0, never in deterministic mode) the (batch, K/V head) pairs go
  // in groups of lpt_heads whose Q and dO fit in L2 together, key block slowest inside a group: the
  // longest CTAs of a group start first, so the grid's last wave is not a head's longest CTAs
  // starting late (longest-first over the whole grid lost the L2 sharing: perf-notes v11b).
  int idx, bh;
  if (lpt_heads > 0) {
    const int per_group = lpt_heads * num_n_blocks;
    const int group = cta / per_group;
    const int j = cta - group * per_group;
    const int rest = p.batch * p.heads_kv - group * lpt_heads;
    const int heads_here = lpt_heads < rest ? lpt_heads : rest;
    idx = j / heads_here;
    bh = group * lpt_heads + (j - idx * heads_here);
  } else {
    // Unsigned, as blockIdx.x % num_n_blocks was before this moved here (identical code).
    idx = static_cast<int>(static_cast<unsigned>(cta) % static_cast<unsigned>(num_n_blocks));
    bh = static_cast<int>(static_cast<unsigned>(cta) / static_cast<unsigned>(num_n_blocks));
  }
  b.n_block = p.dq_semaphore != nullptr ? num_n_blocks - 1 - idx : idx;
  b.head_kv = bh % p.heads_kv;
  b.batch = bh / p.heads_kv;
  b.group = p.heads_q / p.heads_kv;
  b.n0 = b.n_block * Traits::kBlockN;
  // Query blocks that see a key of this block (the causal mask and local window of
  // ../common/mask.cuh: one contiguous range).
  const int n1 = b.n0 + Traits::kBlockN < p.seqlen_k ? b.n0 + Traits::kBlockN : p.seqlen_k;
  const QueryBlocks qb = query_blocks(make_key_window(p.seqlen_k, p.causal_offset, p.window_left, p.window_right), b.n0,
                                      n1, p.seqlen_q, Traits::kBlockM);
  b.m_begin = qb.m_begin;
  b.m_steps = qb.m_end - qb.m_begin;
  b.steps = b.m_steps * b.group;
  // Not in deterministic mode: its tickets count on key blocks reaching a query block in the order
  // of their first visible block (bwd_sm90_dq_writer).
  b.reverse = reverse_m != 0 && p.dq_semaphore == nullptr;
  return b;
}

}  // namespace sm90
}  // namespace flashattn
