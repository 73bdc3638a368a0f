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
#pragma once

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

}  // namespace sm90
}  // namespace flashattn
