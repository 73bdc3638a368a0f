// The split over the keys of a small grid, as arithmetic on the grid and its longest tile: how many
// CTAs share each query tile's key blocks, and whether they merge in a thread-block cluster.
// dispatch.cu (flash_fwd_sm90_plan) feeds it a launcher's tile count, the longest tile's key
// blocks and an occupancy query; tests/kernels/test_fwd_split_cpu.py checks it on the host.
#pragma once

#include <algorithm>
#include <cstdint>

#include "tile_scheduler.h"  // kMaxClusterSplits

namespace flashattn {
namespace sm90 {

struct SplitGrid {
  int64_t tiles;       // query tiles of the call (batch x heads x query blocks)
  int64_t key_blocks;  // key blocks of the longest tile (the last query block under a causal mask)
  int sm_count;
  int max_splits;  // the most splits the combine kernel merges (kMaxKeySplits)
};

struct SplitChoice {
  int num_splits = 1;  // 1: no split
  bool in_cluster = false;
};

// forced >= 0: FLASHATTN_FWD_SPLITS's count (lab and tests), in place of the rule and never fewer
// to fit in clusters; -1: the rule. combine_only: FLASHATTN_FWD_SPLIT_MERGE=combine, no cluster
// merge. clusters_fit(s): whether s CTAs of every tile fit as clusters in one wave.
template <class ClustersFit>
SplitChoice split_rule(const SplitGrid& g, int64_t forced, bool combine_only, ClustersFit&& clusters_fit) {
  SplitChoice c;
  if (g.tiles < 1 || 2 * g.tiles > g.sm_count) return c;
  const int64_t count = g.key_blocks;
  const int64_t cap = std::min<int64_t>(g.max_splits, count);
  // Measured (lab/fwd_split_time.py, H200): 4-8 splits of the seed shapes' tiles gained 1.3-2.7x;
  // 2 splits gained 1.58x where the longest tile had 64 key blocks (B=1 H=1 S=8k D=64 causal) but
  // lost 14% where every tile had 8 (B=1 H=8 S=1k D=128: the float32 partials and the combine cost
  // more than half a tile's blocks saves). So 2 splits only for tiles of kMinBlocksForTwo blocks.
  constexpr int64_t kMinSplits = 3, kMinBlocksForTwo = 16;
  const auto worth_it = [&](int64_t s) { return s >= kMinSplits || (s == 2 && count >= kMinBlocksForTwo); };
  // Split j takes blocks [j per, (j + 1) per), per = ceil(count / s) (split_blocks): only
  // ceil(count / per) splits hold any. The rule launches no more than that (B=1 H=1 S=2048 D=64:
  // 12 splits of 16 blocks left 4 empty and merged 12 partials, 15.7 us against 11.2 for 8).
  const auto per_split = [&](int64_t s) { return s > 0 ? (count + s - 1) / s : 0; };
  const auto holding = [&](int64_t s) {
    const int64_t per = per_split(s);
    return per > 0 ? (count + per - 1) / per : 0;
  };
  if (forced >= 0) {
    c.num_splits = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(cap, forced)));
  } else {
    // As many splits as fill the SMs once, down to one key block each, and at least kMinSplits of
    // them (two for long tiles), or none. One block a split pays (lab/fwd_split_time.py --counts,
    // H200, B=1 H=1 D=64, kernel us): S=512 10.5 unsplit -> 8.3 in 4 splits, S=1024 10.1 in 4
    // splits of 2 blocks -> 8.8 in 8 of 1; S=256's 2 splits of 1 block lose (7.6 -> 8.1-9.6).
    const int64_t s = holding(std::min<int64_t>(g.sm_count / g.tiles, cap));
    c.num_splits = worth_it(s) ? static_cast<int>(s) : 1;
  }
  if (c.num_splits < 2 || combine_only) return c;
  if (c.num_splits <= kMaxClusterSplits && clusters_fit(c.num_splits)) {
    c.in_cluster = true;
    return c;
  }
  // The rule's count does not fit in clusters (B=1 H=1 S=2048 causal: 16 clusters of 8 CTAs do
  // not fit at once on an H200): fewer splits that do, if each holds at most one key block more
  // (no partials, no combine kernel, no second launch, against about a block's time: S=2048 causal
  // 8 splits of 2 blocks through the combine 10.29 us, 6 of 3 in clusters 10.44). Three blocks
  // more lose: S=4096 on 128-row tiles, 4 splits of 8 through the combine 18.5 us, 3 of 11 in
  // clusters 19.9 (lab/fwd_split_time.py --counts, H200).
  if (forced < 0) {
    const int64_t per = per_split(c.num_splits);
    for (int s = std::min(c.num_splits - 1, kMaxClusterSplits); worth_it(s) && per_split(s) <= per + 1; --s) {
      if (holding(s) == s && clusters_fit(s)) {
        c.num_splits = s;
        c.in_cluster = true;
        return c;
      }
    }
  }
  return c;
}

}  // namespace sm90
}  // namespace flashattn
