// What every role of a Hopper backward CTA derives alike from its block index: its key block,
// (batch, K/V head), its sequence (a packed batch's, from cu_seqlens) and the query blocks its
// steps walk. Plain host/device C++, so that the CTA order and the walk are checked on the CPU
// (tests/kernels/test_sm90_bwd_block_cpu.py).
//
// Packed variable-length batches (kPacked): the grid is the dense one sized by the bounds
// (max_seqlen_k key blocks x B x Hk); a key block past its sequence's keys has no step and writes
// nothing. Q, dO, K and V are read through TMA maps over the packed rows, from the sequence's
// first row; rows of the next sequence inside a partial tile are zeroed in shared memory before
// any GEMM reads them (mainloop.cuh: bwd_sm90_zero_tail), as TMA zero-fills rows past a dense
// tensor, so a neighbour's values (NaN/inf included) never reach a sequence's gradients. dq_accum
// keeps whole query-block tiles: sequence b's block m is tile bwd_packed_dq_block0 + m of its
// query head, a layout with one spare block per sequence, so tiles of two sequences never overlap.
#pragma once

#include <cstdlib>

#include "../common/bwd_params.h"
#include "../common/mask.cuh"
#include "../common/sm90/ptx.cuh"  // FLASHATTN_HD

namespace flashattn {
namespace sm90 {

// The CTA order under a causal mask (bwd_block): groups of (batch, K/V head) pairs whose Q and dO
// (2 bytes an element) take at most kBwdLptL2Bytes together, at least one pair a group. 0 (key
// blocks one head after another) without a causal mask, where every key block has the same
// query blocks, and in deterministic mode, whose tickets need that order.
constexpr long long kBwdLptL2Bytes = 8ll << 20;

// FLASHATTN_BWD_LPT=<MiB> sets the group budget, 0 keeps the plain order under a causal mask too: a
// lab switch for measuring the orders side by side in one process (lab/bwd_order_time.py), read at
// every causal call (a getenv, well under a microsecond).
inline long long bwd_lpt_budget_bytes() {
  const char* v = std::getenv("FLASHATTN_BWD_LPT");
  return v == nullptr || *v == '\0' ? kBwdLptL2Bytes : std::atoll(v) << 20;
}

// Units a group of that order holds: as many as fit `budget` bytes of Q and dO (`unit_bytes` a unit:
// a (batch, K/V head) pair, or its share of a split GQA group), at least one, at most all `units`;
// 0, the plain order, for no budget. launch.cuh's bwd_lpt_heads and group_split.h's model share it.
inline long long bwd_lpt_group_units(const long long budget, const long long unit_bytes, const long long units) {
  if (budget <= 0) return 0;
  const long long fit = unit_bytes > 0 ? budget / unit_bytes : units;
  return fit < 1 ? 1 : (fit > units ? units : fit);
}

struct BwdBlock {
  int n_block, head_kv, batch, group, n0;
  int head_q0;  // the first query head of the block's walk (its share of the GQA group)
  int m_begin, m_steps, steps;
  int t0;    // the block's first step in its unit's walk (a piece of a split last wave, else 0)
  int tail;  // a piece of the split last wave (BwdParams::tail_split): its unit's place among the
             // split units, whose dK/dV sums dkv_accum holds; -1 otherwise
  bool reverse;  // the query blocks of a head walked from the last down (Sm90BwdParams::reverse_m)
  bool rotated;  // deterministic mode's rotated walk (Sm90BwdParams::rotate_m): key block n starts at
                 // query block n and wraps around (rot = n), so the key blocks of a head running
                 // together add to different dQ rows; its tickets: bwd_det_ticket
  int rot;       // the walk's rotation (0 unless rotated)
  BwdSeq seq;     // the sequence: a packed batch's (kPacked), else the call's lengths and rows 0
  int dq_block0;  // kPacked: the first dq_accum tile of the sequence (bwd_packed_dq_block0)
  // Step t is step u = t0 + t of the unit's walk: query block m_block(t) of query head
  // head_q0 + u / m_steps, the (u % m_steps)-th of [m_begin, m_begin + m_steps), counted from the
  // first or (reverse) the last, or (rotated) the (u % m_steps + rot)-th modulo m_steps. group: the
  // query heads the unit walks (the GQA group, or its share with BwdParams::group_split > 1).
  FLASHATTN_HD int head_q(int t) const { return head_q0 + (t0 + t) / m_steps; }
  FLASHATTN_HD int m_block(int t) const {
    int i = (t0 + t) % m_steps + rot;
    if (i >= m_steps) i -= m_steps;
    return reverse ? m_begin + m_steps - 1 - i : m_begin + i;
  }
  FLASHATTN_HD int m0(int t, int block_m) const { return m_block(t) * block_m; }
};

// Sequence b of a packed batch (first query row q_row0) starts at dq_accum tile
// (q_row0 + b kBlockM) / kBlockM of each query head: at least one tile past where sequence b - 1's
// tiles end (its first tile + ceil(len / kBlockM) <= this), and every tile below
// ceil(total_q / kBlockM) + B (flash_bwd_sm90_dq_accum_floats), offsets clamped or not.
FLASHATTN_HD int bwd_packed_dq_block0(int q_row0, int batch, int block_m) {
  return static_cast<int>((static_cast<int64_t>(q_row0) + static_cast<int64_t>(batch) * block_m) / block_m);
}

// Deterministic mode: how many key blocks add their dQ share of query block m before key block n
// does (the ticket value n waits for), of the n_end key blocks that see m. Count-down order (the
// default): from the last key block down, the order in which they reach m under a causal mask and
// the launch order, so a CTA only waits for CTAs launched before it. Rotated walks (no mask, every
// key block sees all M >= n_end query blocks: key block n visits m at step (m - n) mod M of a
// head's walk): in the order of those steps, so that the key blocks of a head that run together
// rarely wait; a CTA may then wait for one launched after it, which launch.cuh's bwd_rotate_m
// bounds (a head's key blocks at most half the SMs, so they always come to run).
FLASHATTN_HD int bwd_det_ticket(bool rotated, int n, int m, int n_end) {
  if (!rotated) return n_end - 1 - n;
  return n <= m ? (m < n_end - 1 ? m : n_end - 1) - n : m + n_end - n;
}

// The lengths and mask alignment the roles read: the kernel's parameters in the dense kernels (the
// code they had before packed batches), the block's sequence in the packed ones.
template <bool kPacked>
FLASHATTN_HD int seqlen_q_of(const BwdParams& p, const BwdBlock& b) { return kPacked ? b.seq.seqlen_q : p.seqlen_q; }
template <bool kPacked>
FLASHATTN_HD int seqlen_k_of(const BwdParams& p, const BwdBlock& b) { return kPacked ? b.seq.seqlen_k : p.seqlen_k; }
template <bool kPacked>
FLASHATTN_HD int causal_offset_of(const BwdParams& p, const BwdBlock& b) {
  return kPacked ? b.seq.causal_offset : p.causal_offset;
}

// The dense call's one sequence shape.
FLASHATTN_HD BwdSeq bwd_dense_seq(const BwdParams& p) { return BwdSeq{p.seqlen_q, p.seqlen_k, p.causal_offset, 0, 0}; }

// seq_of(batch) -> BwdSeq: the sequence of a batch index (bwd_dense_seq for a dense call;
// bwd_packed.cuh's bwd_seq in the packed kernels).
template <typename Traits, bool kPacked = false, typename SeqOf>
FLASHATTN_HD BwdBlock bwd_block(const BwdParams& p, int num_n_blocks, int lpt_heads, int reverse_m, int cta,
                                SeqOf seq_of, int rotate_m = 0) {
  BwdBlock b;
  // Key blocks vary fastest (neighbouring CTAs share their Q/dO reads in L2), as in the portable
  // kernel: the first key block first (under a causal mask the one with the most query blocks),
  // but the last one first in deterministic mode, whose tickets count down from the last key block
  // (bwd_sm90_dq_writer): a CTA only ever waits for CTAs launched before it, which therefore run.
  // Under a causal mask (lpt_heads > 0, never in deterministic mode) the (batch, K/V head) pairs go
  // in groups of lpt_heads whose Q and dO fit in L2 together, key block slowest inside a group: the
  // longest CTAs of a group start first, so the grid's last wave is not a head's longest CTAs
  // starting late (longest-first over the whole grid lost the L2 sharing: perf-notes v11b).
  // With a split GQA group (BwdParams::group_split = s > 1) the unit of this order is a (batch,
  // K/V head, share) triple: the s shares of a K/V head's group are neighbours, as its key blocks.
  const int split = p.group_split;
  const int units = p.heads_kv * split;  // per batch
  // The split last wave (tail_split.h): CTAs from the first piece on run piece `piece` of unit
  // `cta` in the order below; the CTAs before it run their unit whole.
  int piece = -1;
  if (p.tail_split > 1) {
    const int first_piece = p.batch * units * num_n_blocks - p.tail_units;
    if (cta >= first_piece) {
      piece = (cta - first_piece) % p.tail_split;
      cta = first_piece + (cta - first_piece) / p.tail_split;
    }
  }
  int idx, bh;
  if (lpt_heads > 0) {
    const int per_group = lpt_heads * num_n_blocks;
    const int group = cta / per_group;
    const int j = cta - group * per_group;
    const int rest = p.batch * units - group * lpt_heads;
    const int heads_here = lpt_heads < rest ? lpt_heads : rest;
    idx = j / heads_here;
    bh = group * lpt_heads + (j - idx * heads_here);
  } else {
    // Unsigned, as blockIdx.x % num_n_blocks was before this moved here (identical code).
    idx = static_cast<int>(static_cast<unsigned>(cta) % static_cast<unsigned>(num_n_blocks));
    bh = static_cast<int>(static_cast<unsigned>(cta) / static_cast<unsigned>(num_n_blocks));
  }
  b.n_block = p.dq_semaphore != nullptr ? num_n_blocks - 1 - idx : idx;
  const int unit = bh % units;
  b.head_kv = unit / split;
  b.batch = bh / units;
  b.group = p.heads_q / p.heads_kv / split;
  b.head_q0 = b.head_kv * (p.heads_q / p.heads_kv) + (unit % split) * b.group;
  b.n0 = b.n_block * Traits::kBlockN;
  b.seq = seq_of(b.batch);
  b.dq_block0 = kPacked ? bwd_packed_dq_block0(b.seq.q_row0, b.batch, Traits::kBlockM) : 0;
  const int seqlen_q = seqlen_q_of<kPacked>(p, b), seqlen_k = seqlen_k_of<kPacked>(p, b);
  // Query blocks that see a key of this block (the causal mask and local window of
  // ../common/mask.cuh: one contiguous range). None for a packed sequence's key block past its
  // keys, or of a sequence with no query.
  if (kPacked && (b.n0 >= seqlen_k || seqlen_q < 1)) {
    b.m_begin = b.m_steps = 0;
  } else {
    const int n1 = b.n0 + Traits::kBlockN < seqlen_k ? b.n0 + Traits::kBlockN : seqlen_k;
    const QueryBlocks qb = query_blocks(
        make_key_window(seqlen_k, causal_offset_of<kPacked>(p, b), p.window_left, p.window_right), b.n0, n1, seqlen_q,
        Traits::kBlockM);
    b.m_begin = qb.m_begin;
    b.m_steps = qb.m_end - qb.m_begin;
  }
  b.steps = b.m_steps * b.group;
  b.t0 = 0;
  b.tail = -1;
  if (piece >= 0) {
    const int first_piece = p.batch * units * num_n_blocks - p.tail_units;
    const int t1 = static_cast<int>(static_cast<long long>(piece + 1) * b.steps / p.tail_split);
    b.t0 = static_cast<int>(static_cast<long long>(piece) * b.steps / p.tail_split);
    b.steps = t1 - b.t0;
    b.tail = cta - first_piece;
  }
  // Not in deterministic mode: its tickets count on key blocks reaching a query block in the order
  // of their first visible block (bwd_sm90_dq_writer).
  b.reverse = reverse_m != 0 && p.dq_semaphore == nullptr;
  b.rotated = rotate_m != 0 && p.dq_semaphore != nullptr && b.m_steps > 0;
  b.rot = b.rotated ? b.n_block % b.m_steps : 0;
  return b;
}

// A dense call's block.
template <typename Traits>
FLASHATTN_HD BwdBlock bwd_block(const BwdParams& p, int num_n_blocks, int lpt_heads, int reverse_m, int cta,
                                int rotate_m = 0) {
  return bwd_block<Traits, false>(p, num_n_blocks, lpt_heads, reverse_m, cta, [&](int) { return bwd_dense_seq(p); },
                                  rotate_m);
}

}  // namespace sm90
}  // namespace flashattn
