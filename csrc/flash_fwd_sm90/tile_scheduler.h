// Static persistent tile schedule of the Hopper forward kernel (grid = min(#tiles, #SMs)), shared by
// its producer and consumer warpgroups; plain host/device C++ so that lab/sm90_desc_check.cu
// checks on the CPU that it visits every tile exactly once.
#pragma once

#include "../common/mask.cuh"
#include "../common/sm90/ptx.cuh"  // FLASHATTN_HD

namespace flashattn {
namespace sm90 {

struct TileCoord {
  int m_block;
  int batch;
  int head_q;
};

// What tile index t means, the same for the producer (which loads its key blocks) and the
// consumers (which walk them): its query tile, its key split and the key blocks of that split
// (the causal mask / local window's range, then the split's share of it). schedule.cuh.
struct TileWork {
  TileCoord coord;
  int split;
  KeyBlocks blocks;
};

// Tiles are walked in groups of `group_heads` consecutive (batch, head) pairs, sized on the host so
// that a group's K and V stay resident in L2 while the CTAs stream through them. Inside a group the
// query blocks go last-first (under causal masking the last block sees the most keys: longest work
// first), the pairs fastest. CTA c runs tiles c, c + grid, c + 2 grid, ... (static persistent schedule:
// the producer and both consumers compute the same sequence, no communication needed).
FLASHATTN_HD TileCoord decode_tile(int t, int num_m_blocks, int heads_q, int batch_heads, int group_heads) {
  const int tiles_per_group = group_heads * num_m_blocks;
  const int g = t / tiles_per_group;
  const int within = t - g * tiles_per_group;
  const int bh0 = g * group_heads;
  const int rest = batch_heads - bh0;
  const int heads_here = group_heads < rest ? group_heads : rest;
  const int m_idx = within / heads_here;
  const int bh = bh0 + (within - m_idx * heads_here);
  TileCoord c;
  c.m_block = num_m_blocks - 1 - m_idx;
  c.batch = bh / heads_q;
  c.head_q = bh - c.batch * heads_q;
  return c;
}

// The static schedule's tile after `tile` for CTA `cta` of `grid` (schedule.cuh; every CTA starts
// at tile cta). Plain: tile + grid, so CTA c runs position c of every round of grid tiles, and
// under a causal mask (rounds from long to short tiles, decode_tile) CTA 0 the longest each time.
// snake: round r gives CTA c position c when r is even and grid - 1 - c when r is odd, so the CTA
// that took a round's longest tile takes the next round's shortest. Either way the CTAs' sequences
// partition the tiles; a CTA stops at its first index >= the tile count (only the last round can
// be partial, and every later index is larger).
FLASHATTN_HD int static_next_tile(int tile, int cta, int grid, bool snake) {
  if (!snake) return tile + grid;
  const int round = tile / grid + 1;
  return round * grid + ((round & 1) ? grid - 1 - cta : cta);
}

// A tile of the kernel with the key split (Sm90Params::num_splits): split t % num_splits of query
// tile t / num_splits, so the splits of one query tile run side by side (one wave: splits are used
// only when the query tiles fill few SMs) and share its Q in L2.
struct SplitTile {
  TileCoord coord;
  int split;
};

// Splits of one query tile that merge inside a thread-block cluster (one CTA each, launch.cuh):
// at most the portable cluster size. Beyond it the splits write float32 partials for the combine
// kernel (../common/split_combine.cuh).
constexpr int kMaxClusterSplits = 8;

FLASHATTN_HD SplitTile split_tile(int t, int num_splits, int num_m_blocks, int heads_q, int batch_heads,
                                  int group_heads) {
  const int base = t / num_splits;
  SplitTile s;
  s.split = t - base * num_splits;
  s.coord = decode_tile(base, num_m_blocks, heads_q, batch_heads, group_heads);
  return s;
}

// The key blocks of split `split` of a query tile whose blocks are `r`: consecutive runs of
// ceil(count / num_splits) blocks, the last ones possibly short or empty (an empty split writes
// O = 0, LSE = -inf, which the combine weighs 0). The mask's full range stays absolute.
FLASHATTN_HD KeyBlocks split_blocks(KeyBlocks r, int split, int num_splits) {
  if (num_splits <= 1) return r;
  const int per = (r.count() + num_splits - 1) / num_splits;
  const int begin = r.n_begin + split * per;
  r.n_begin = begin < r.n_end ? begin : r.n_end;
  r.n_end = r.n_begin + per < r.n_end ? r.n_begin + per : r.n_end;
  return r;
}

// (batch, head) pairs per L2 group (decode_tile): as many as keep their K and V (16-bit) within
// kL2GroupBudgetBytes, a multiple of the query heads sharing one K/V head, at least one K/V head.
// A group's query blocks of one head then run at most `group` tiles apart, so its K/V, fetched
// from DRAM by the first of them, is still in L2 for the others. 8 MB, not half the H100's 50 MB
// L2: with 24 MB a head's 4 query tiles at S=512 ran up to three waves apart while 8 MB of Q and
// O per wave streamed through the same L2, and ncu counted ~1.4x the Q+K+V+O bytes from DRAM
// (cuDNN: 1.0x). Lab A/B 8 vs 24 MB over D {64,128,256} x S 512..16k x causal: geomean 1.024x,
// D=128 S=512 +13.5%, worst cell -1.3% (docs/perf-notes.md, "v7").
constexpr long long kL2GroupBudgetBytes = 8ll << 20;
// The dynamic schedule's groups (causal or windowed calls with more tiles than SMs) take 16 MB. Its
// greedy hand-out keeps the CTAs busy until the last group, and that group is the grid's tail: at
// D=256, S 2k-8k, 8 MB holds 1-4 heads, i.e. 32-128 tiles of very unequal length, fewer than the
// SMs, so the last group's longest tiles start together with its shortest ones and then run on
// alone (balance 0.90 in lab/sm90_schedule_model.py --budget-mb 8 16; 1.00 with 16 MB from S=4k).
// Lab A/B on the causal cells (docs/perf-notes.md "v15"): D=256 +2% (S=1k) to +10% (S=8k), D=64
// and D=128 within noise; 32 MB no better than 16.
constexpr long long kL2GroupBudgetDynamicBytes = 16ll << 20;
FLASHATTN_HD constexpr long long l2_group_budget_bytes(bool dynamic_schedule) {
  return dynamic_schedule ? kL2GroupBudgetDynamicBytes : kL2GroupBudgetBytes;
}

FLASHATTN_HD int l2_group_heads(long long seqlen_k, int head_dim, int heads_q, int heads_kv, int batch,
                                long long budget_bytes = kL2GroupBudgetBytes) {
  const long long kv_bytes_per_head = 2ll * (seqlen_k > 0 ? seqlen_k : 1) * head_dim * 2;  // K and V
  long long kv_heads = budget_bytes / kv_bytes_per_head;
  if (kv_heads < 1) kv_heads = 1;
  const long long group = kv_heads * (heads_q / heads_kv);
  const long long total = static_cast<long long>(batch) * heads_q;
  return static_cast<int>(group < total ? group : total);
}

// The policy behind Sm90FwdPlan::tile_counter (dispatch.cu flash_fwd_sm90_plan): the dynamic schedule of
// schedule.cuh pays when the tiles have unequal work (causal masking or a local window, and more
// than one query block per head) and there is more than one wave of them (with at most one tile per CTA there
// is nothing to balance). Measured on the H100: 1.08x geomean over the causal standard grid,
// up to 1.5x; docs/perf-notes.md "v3".
FLASHATTN_HD bool dynamic_schedule_pays(bool causal, long long seqlen_q, long long batch_heads, int block_m,
                                        int sm_count) {
  const long long m_blocks = (seqlen_q + block_m - 1) / block_m;
  return causal && m_blocks > 1 && m_blocks * batch_heads > sm_count;
}

// Key blocks a query tile visits, the same for the producer (which loads them) and the consumers
// (which walk them): [n_begin, n_end), walked from n_end - 1 down to n_begin, so that cost follows
// the causal mask / local window, not Sk; blocks outside [full_begin, full_end) need the mask (past
// Sk, crossing the diagonal or a window edge for some row of the tile). csrc/common/mask.cuh.
// The rows of query tile m_block under Sm90Params::q_row_shift (0: rows [m block_m, (m + 1) block_m)
// up to seqlen_q). With a shift s, tile m >= 1 starts s rows early and tile 0 owns rows [0, block_m - s)
// only; it still loads and computes block_m rows from row 0 (no negative TMA coordinate), the last s
// of them the next tile's, which it never stores. Every tile's rows end at or before seqlen_q.
struct TileRows {
  int first;  // the sequence row of the tile's row 0
  int end;    // one past the last row the tile owns (stores)
};
FLASHATTN_HD TileRows tile_rows(int m_block, int block_m, int seqlen_q, int row_shift) {
  const int start = m_block * block_m - row_shift;
  const int end = start + block_m;
  // Only a shift makes start negative: unshifted (a compile-time 0 in most kernels) no clamp is compiled.
  return TileRows{row_shift == 0 || start > 0 ? start : 0, end < seqlen_q ? end : seqlen_q};
}

FLASHATTN_HD KeyBlocks block_range(int m_block, int block_m, int block_n, int seqlen_q, int seqlen_k, int offset,
                                   int window_left, int window_right) {
  const int m0 = m_block * block_m;
  const int m1 = m0 + block_m < seqlen_q ? m0 + block_m : seqlen_q;
  return key_blocks(make_key_window(seqlen_k, offset, window_left, window_right), m0, m1, block_n);
}
// The same over the rows a tile owns under a shift (tile_rows). Apart from the unshifted form, which
// the configs without Traits::kPartialTileFirst keep: through one function with a compile-time 0
// shift, the static FP8 kernels' PTX numbered its registers apart and ptxas scheduled them anew.
FLASHATTN_HD KeyBlocks block_range(int m_block, int block_m, int block_n, int seqlen_q, int seqlen_k, int offset,
                                   int window_left, int window_right, int row_shift) {
  const TileRows rows = tile_rows(m_block, block_m, seqlen_q, row_shift);
  return key_blocks(make_key_window(seqlen_k, offset, window_left, window_right), rows.first, rows.end, block_n);
}

}  // namespace sm90
}  // namespace flashattn
