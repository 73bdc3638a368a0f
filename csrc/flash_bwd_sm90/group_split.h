// The rule behind the Hopper backward's GQA group split (BwdParams::group_split; dispatch.cu
// applies it to a call): plain C++, so that tests/kernels/test_sm90_bwd_block_cpu.py checks it on
// the CPU.
//
// With one CTA per (key block, K/V head) walking the whole group, a grid of few K/V heads has few
// CTAs, and under a mask their work differs by the key block (key block 0 of a causal call walks
// every query block, the last one a single block): MQA at B=1 S=16k is 128 CTAs for 132 SMs and
// takes the longest CTA's time, twice the average. So the group is split: the smallest divisor of
// it that gives masked calls at least kBwdSplitMaskedWaves waves (two left a long tail at GQA 4:1:
// docs/perf-notes.md "Backward v17") and unmasked ones at least half a wave, or the whole group.
// Masked calls then take a larger divisor where the dispatch model below says it ends at least 1%
// sooner (bwd_group_split_raised): the model alone lost up to 18% on 16k-key MQA calls, the rule
// alone up to 6% on 4k-key ones.
#pragma once

#include <functional>
#include <queue>
#include <vector>

#include "block.h"

namespace flashattn {
namespace sm90 {

constexpr int kBwdSplitMaskedWaves = 4;

// group: Hq / Hk; ctas: the grid without a split (key blocks x B x Hk); masked: a causal mask or a
// window; waves: what masked calls want (kBwdSplitMaskedWaves but for the lab switch).
inline int bwd_group_split(const int group, const long long ctas, const bool masked, const int sm_count,
                           const int waves = kBwdSplitMaskedWaves) {
  const long long want = masked ? static_cast<long long>(waves) * sm_count : sm_count / 2;
  int split = 1;
  while (ctas * split < want && split < group) {
    do ++split;
    while (group % split != 0);
  }
  return split;
}

// A model of the dispatch (alone a lab rule, FLASHATTN_BWD_GROUP_SPLIT=m, dispatch.cu): the split
// whose grid ends first in a model of the dispatch, the units in launch order (bwd_block: under a
// causal mask groups of lpt units, key block slowest inside a group; else key block fastest) each
// taking the first free SM for its steps plus a fixed cost, a split unit's float32 dK/dV sums a
// little more. The same model as lab/bwd_schedule_model.py --gqa, which reproduces the measured
// 16:4 causal cell at 4k (0.93 of its MHA twin's time with 2 CTAs a group) and the D=64 32:8 2k loss
// with a split (docs/perf-notes.md "The landed tree on an H200"). The split last wave (tail_split.h,
// masked grids of at most half a wave) is left out. Costs in steps:
constexpr double kBwdModelFixedSteps = 2.0;       // a unit's K/V load and epilogue
constexpr double kBwdModelSplitSteps = 1.0;       // a split unit's dK/dV float32 sums on top
constexpr long long kBwdModelMaxUnitSteps = 1 << 16;  // larger grids keep the wave rule (host time)

struct BwdSplitGrid {
  int group;            // Hq / Hk
  int num_n_blocks;     // key blocks
  long long pairs;      // B x Hk
  bool lpt;             // the grouped longest-first order (launch.cuh bwd_lpt_heads: causal calls)
  long long lpt_budget; // its group budget in bytes
  long long head_bytes; // Q and dO bytes of one query head (2 x 2 x Sq x D)
  int sm_count;
};

// The model's end, in steps, with `split` CTAs a group; steps_of(n): query blocks key block n sees.
template <typename StepsOf>
inline double bwd_split_model_end(const BwdSplitGrid& g, const int split, StepsOf steps_of) {
  const int share = g.group / split;
  const long long units = g.pairs * split;
  const long long lpt = g.lpt ? bwd_lpt_group_units(g.lpt_budget, g.head_bytes * share, units) : 0;
  const double fixed = kBwdModelFixedSteps + (split > 1 ? kBwdModelSplitSteps : 0.0);
  std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;
  for (int i = 0; i < g.sm_count; ++i) free_at.push(0.0);
  double end = 0.0;
  const auto run = [&](int n) {
    const double t = free_at.top() + share * static_cast<double>(steps_of(n)) + fixed;
    free_at.pop();
    free_at.push(t);
    end = t > end ? t : end;
  };
  if (lpt > 0) {
    for (long long u0 = 0; u0 < units; u0 += lpt) {
      const long long here = units - u0 < lpt ? units - u0 : lpt;
      for (int n = 0; n < g.num_n_blocks; ++n)
        for (long long u = 0; u < here; ++u) run(n);
    }
  } else {
    for (long long u = 0; u < units; ++u)
      for (int n = 0; n < g.num_n_blocks; ++n) run(n);
  }
  return end;
}

// Whether the model walks this grid at its largest split (host time: larger grids keep the wave rule).
inline bool bwd_split_grid_modelled(const BwdSplitGrid& g) {
  return g.pairs * g.group * g.num_n_blocks <= kBwdModelMaxUnitSteps;
}

// The divisor of the group from `from` up with the model's earliest end (a larger split only where
// it ends 1% sooner: more splits, more float32 sums).
template <typename StepsOf>
inline int bwd_group_split_search(const BwdSplitGrid& g, const int from, StepsOf steps_of) {
  int best = from;
  double best_end = bwd_split_model_end(g, from, steps_of);
  for (int s = from + 1; s <= g.group; ++s) {
    if (g.group % s != 0) continue;
    const double e = bwd_split_model_end(g, s, steps_of);
    if (e < best_end * 0.99) {
      best_end = e;
      best = s;
    }
  }
  return best;
}

// The model alone: its best divisor of the group; the wave rule where the grid is too large to model.
template <typename StepsOf>
inline int bwd_group_split_model(const BwdSplitGrid& g, const bool masked, StepsOf steps_of) {
  if (g.group <= 1) return 1;
  if (!bwd_split_grid_modelled(g))
    return bwd_group_split(g.group, g.pairs * g.num_n_blocks, masked, g.sm_count);
  return bwd_group_split_search(g, 1, steps_of);
}

// The default for masked calls: the wave rule's split, raised to a larger divisor where the model
// ends at least 1% sooner. Measured on an H100 (2026-12-06, lab/bwd_group_split_time.py, bf16): the
// model alone gained 2-6% on the 4k causal cells (4 CTAs a group at 16:4 where the rule takes 2, 16
// at 16:1 where it takes 8) but lost 4-18% at 16k causal, where it takes fewer than the rule (2
// against 8 at 16:1: its blind spot is a grid of few long units, which the wave rule avoids).
template <typename StepsOf>
inline int bwd_group_split_raised(const BwdSplitGrid& g, StepsOf steps_of, const int waves = kBwdSplitMaskedWaves) {
  const int rule = bwd_group_split(g.group, g.pairs * g.num_n_blocks, true, g.sm_count, waves);
  if (rule >= g.group || !bwd_split_grid_modelled(g)) return rule;
  return bwd_group_split_search(g, rule, steps_of);
}

}  // namespace sm90
}  // namespace flashattn
