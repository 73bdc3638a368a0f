// The rule behind the Hopper backward's split of the grid's last wave (BwdParams::tail_split and
// tail_units; dispatch.cu applies it to a call): plain C++, so that
// tests/kernels/test_sm90_bwd_block_cpu.py checks it on the CPU.
//
// One CTA per unit (a key block of a (batch, K/V head), or of its share of a GQA group) and one
// CTA per SM: without a mask every unit has the same steps, so a grid of N units on P SMs runs in
// ceil(N / P) waves and the last one holds N mod P units while the other SMs idle. The standard
// grids (B * S = 16k tokens, H * D = 2048) have N = 2048 or 4096 units, 15.5 or 31.03 waves: the
// last wave costs 3% of the call. Splitting each of the last r = N mod P units into s pieces of
// consecutive steps (their dK/dV summed in float32, as the GQA split does) makes the tail
// ceil(r s / P) rounds of L / s steps instead of one round of L. A grid smaller than one wave
// (q = 0: a few heads, short sequences) is all tail, and its units spread over the idle SMs.
//
// Masked calls (causal, windows): their units differ in length, and the CTA order of launch.cuh
// already ends a grid of several waves on its shortest units; but a grid of at most half a wave
// (a few heads, short sequences) takes its longest unit's time (key block 0 of a causal call walks
// every query block), so there every unit is split into as many pieces as the SMs allow
// (bwd_tail_plan_masked). Deterministic mode and packed batches are never split (the tickets'
// order; the packed grid's units differ by sequence).
#pragma once

namespace flashattn {
namespace sm90 {

// A piece's cost besides its steps, in steps: loading its K/V block and the first Q/dO stage (~1),
// and adding dK and dV in float32 at the end, 2 x kBlockN x D' floats by reductions (~2: at
// D = 128, 128 KB a piece, all pieces of a round at once).
constexpr double kBwdTailPieceCost = 3.0;
// Pieces per unit at most (the dK/dV reductions grow with it).
constexpr int kBwdTailMaxSplit = 64;
// The split is taken only when it saves at least this share of the unsplit tail.
constexpr double kBwdTailMinGain = 0.10;

struct BwdTailPlan {
  int units;  // the last `units` units of the grid are split (0: none)
  int split;  // into `split` CTAs each (1: none)
};

// units: the unsplit grid (key blocks x B x Hk x group_split); steps: each unit's steps (query
// blocks x query heads of its share); sm_count: CTAs that run at once (one per SM).
inline BwdTailPlan bwd_tail_plan(const long long units, const int steps, const int sm_count) {
  BwdTailPlan none{0, 1};
  if (units < 1 || steps < 2 || sm_count < 2) return none;
  const long long r = units % sm_count;
  if (r == 0) return none;
  // The tail's time in steps: one round of the unsplit units (a unit's own cost ~1 step), or
  // ceil(r s / P) rounds of pieces of steps / s.
  const double unsplit = steps + 1.0;
  double best = unsplit * (1.0 - kBwdTailMinGain);
  BwdTailPlan plan = none;
  const int max_split = steps < kBwdTailMaxSplit ? steps : kBwdTailMaxSplit;
  for (int s = 2; s <= max_split; ++s) {
    const long long rounds = (r * s + sm_count - 1) / sm_count;
    const double t = static_cast<double>(rounds) * ((steps + s - 1) / s + kBwdTailPieceCost);
    if (t < best * 0.99) {  // 1% below the best so far (the threshold first): more pieces, more reductions
      best = t;
      plan = BwdTailPlan{static_cast<int>(r), s};
    }
  }
  return plan;
}

// A masked call's grid: units (as above), steps: the longest unit's steps (an upper bound: query
// blocks x query heads of its share). Only a grid of at most half a wave is split, all of it, into
// the most pieces a unit that fit one wave, where its longest unit's pieces save >= 10%.
inline BwdTailPlan bwd_tail_plan_masked(const long long units, const int steps, const int sm_count) {
  BwdTailPlan none{0, 1};
  if (units < 1 || 2 * units > sm_count || steps < 2) return none;
  int s = static_cast<int>(sm_count / units);
  s = s < steps ? s : steps;
  s = s < kBwdTailMaxSplit ? s : kBwdTailMaxSplit;
  const double t = (steps + s - 1) / s + kBwdTailPieceCost;
  if (s < 2 || t >= (steps + 1.0) * (1.0 - kBwdTailMinGain)) return none;
  return BwdTailPlan{static_cast<int>(units), s};
}

// The CTAs of a grid of `units` units with the plan: the unsplit ones, then the pieces.
inline long long bwd_tail_grid(const long long units, const int tail_units, const int tail_split) {
  return units - tail_units + static_cast<long long>(tail_units) * tail_split;
}

}  // namespace sm90
}  // namespace flashattn
