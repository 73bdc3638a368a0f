// Online softmax over the wgmma m64nN accumulator fragment of one consumer warpgroup.
//
// Fragment layout (checked against CuTe's CLayout_64xN by lab/sm90_desc_check.cu): thread t of
// the warpgroup holds value v = 4 j + 2 h + e of an m64nN accumulator at
//   row 16 (t / 32) + (t % 32) / 4 + 8 h,   col 8 j + 2 (t % 4) + e,
// so each thread owns two rows (h = 0, 1), each spread over the 4 lanes of a quad: row reductions
// are two xor-shuffles, exactly as in the portable kernel's m16n8 layout.
#pragma once

#include <cmath>
#include <cstdint>

#include "../common/sm90/ptx.cuh"
#include "../common/softmax_math.cuh"

namespace flashattn {
namespace sm90 {

#if defined(FLASHATTN_SM90A_ENABLED)

// kChains: independent accumulators for the row max and the row sum. A row's 64 pairs (N=128)
// reduced through one accumulator are a chain of 32 dependent FMNMX and 32 dependent FADD
// (floating-point adds are not reassociated by the compiler); the max chain sits between the
// score GEMM and the first exponential, i.e. on the softmax's critical path.
//
// kMaxOffset (log2 units, 0 for 16-bit P): the probabilities are computed as exp2(s - max +
// kMaxOffset), i.e. in [0, 2^kMaxOffset] instead of [0, 1]. The FP8 path rounds P to e4m3, whose
// normal range starts at 2^-6: unscaled, every p below 2^-6 is a subnormal with an absolute error
// up to 2^-10; scaled by 2^8 those stay normal numbers with e4m3's 2^-4 relative error (and 2^8 <
// 448, e4m3's largest value). The row sums carry the same factor, so o / sum is unchanged; the LSE
// takes it out again.
template <int kSRegs, int kChains = 1, int kMaxOffset = 0>
struct Sm90Softmax {
  static_assert(kChains >= 1 && (kSRegs / 4) % kChains == 0, "pairs per row a multiple of the chains");
  // Running max in log2 units (scores already multiplied by scale * log2(e)); -inf while the row
  // has seen no visible key. row_sum is this thread's share only (reduced over the quad once, in
  // finalize(), since every rescale factor is the same across the quad).
  float row_max[2];
  float row_sum[2];

  // Pairwise reduction of the partial results (a chain of log2(kChains), not kChains - 1).
  template <typename Op>
  static __device__ __forceinline__ float tree_reduce(float (&v)[kChains], Op op) {
#pragma unroll
    for (int w = 1; w < kChains; w *= 2)
#pragma unroll
      for (int c = 0; c + w < kChains; c += 2 * w) v[c] = op(v[c], v[c + w]);
    return v[0];
  }

  // This thread's share of row h's max over one key block's scores.
  static __device__ __forceinline__ float thread_row_max(const float (&s)[kSRegs], int h) {
    float part_max[kChains];
#pragma unroll
    for (int c = 0; c < kChains; ++c) part_max[c] = fmaxf(s[4 * c + 2 * h], s[4 * c + 2 * h + 1]);
#pragma unroll
    for (int j = kChains; j < kSRegs / 4; ++j)
      part_max[j % kChains] = fmaxf(part_max[j % kChains], fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
    return tree_reduce(part_max, [](float a, float b) { return fmaxf(a, b); });
  }

  // update_held's exponentials of row h, 2^(s k - exp_max) in place, returning this thread's share of
  // their sum (and in p_max of their max): update()'s arithmetic (its own loop stays as it is, so the
  // other configs' code is unchanged). kSelect: where `keep`, s becomes s * keep_scale instead (the
  // rows of another case).
  template <bool kSelect = false, bool kMax = false>
  static __device__ __forceinline__ float row_exps(float (&s)[kSRegs], int h, float k, float exp_max, bool keep = false,
                                                   float keep_scale = 1.f, float* p_max = nullptr) {
    float part_sum[kChains], part_max[kChains];
#pragma unroll
    for (int c = 0; c < kChains; ++c) part_sum[c] = part_max[c] = 0.f;
#pragma unroll
    for (int j = 0; j < kSRegs / 4; ++j) {
      const float p0 = ex2(fmaf(s[4 * j + 2 * h], k, -exp_max));
      const float p1 = ex2(fmaf(s[4 * j + 2 * h + 1], k, -exp_max));
      s[4 * j + 2 * h] = kSelect && keep ? s[4 * j + 2 * h] * keep_scale : p0;
      s[4 * j + 2 * h + 1] = kSelect && keep ? s[4 * j + 2 * h + 1] * keep_scale : p1;
      part_sum[j % kChains] += p0 + p1;
      if constexpr (kMax) part_max[j % kChains] = fmaxf(part_max[j % kChains], fmaxf(p0, p1));
    }
    if constexpr (kMax) *p_max = tree_reduce(part_max, [](float a, float b) { return fmaxf(a, b); });
    return tree_reduce(part_sum, [](float a, float b) { return a + b; });
  }

  __device__ __forceinline__ void init() {
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.f;
  }

  // s: one key block's scores, masked entries -inf, such that s * k are log2 units (k > 0: the
  // folded scale * log2(e), or 1 for scores already scaled). Turns s into the unnormalized
  // probabilities in place and returns in `rescale` the factor the output accumulated so far must
  // be multiplied by (applied by the caller, since O may still be in flight in a wgmma).
  __device__ __forceinline__ void update(float (&s)[kSRegs], float (&rescale)[2], float k) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float new_max = fmaxf(row_max[h], quad_max(thread_row_max(s, h)) * k);  // k > 0: max(k s) = k max(s)
      // A row with no visible key yet keeps max -inf; subtracting 0 instead keeps exp2(-inf - max)
      // at 0 rather than NaN.
      const float max_used = new_max == -INFINITY ? 0.f : new_max;
      rescale[h] = ex2(row_max[h] - max_used);
      row_max[h] = new_max;
      const float exp_max = max_used - static_cast<float>(kMaxOffset);
      float part_sum[kChains];
#pragma unroll
      for (int c = 0; c < kChains; ++c) part_sum[c] = 0.f;
#pragma unroll
      for (int j = 0; j < kSRegs / 4; ++j) {
        s[4 * j + 2 * h] = ex2(fmaf(s[4 * j + 2 * h], k, -exp_max));
        s[4 * j + 2 * h + 1] = ex2(fmaf(s[4 * j + 2 * h + 1], k, -exp_max));
        part_sum[j % kChains] += s[4 * j + 2 * h] + s[4 * j + 2 * h + 1];
      }
      row_sum[h] = row_sum[h] * rescale[h] + tree_reduce(part_sum, [](float a, float b) { return a + b; });
    }
  }

  // update() past a tile's first key block, with the exponentials issued before the block's max is
  // known: against the row max m held from the blocks before. Per row, as a function of that row
  // alone (its output bits never depend on the other rows of its warp: packed batches rely on it):
  //   m = -inf (no visible key yet): update()'s arithmetic.
  //   else p = 2^(s k - m), pm = the row's max p:
  //     pm <= 2^kHoldLog2:  P = p, O and the sum not rescaled (P in [0, 2^kHoldLog2], exact in 16 bits;
  //                         finalize() divides the common factor out);
  //     pm <= 2^kLostLog2:  the max moves to m + log2(pm), P = p f with f = 2^(m - that max);
  //     else (p may have overflowed): the row's scores again (refill(s, rows): S of those rows,
  //                         scaled and masked), then update()'s arithmetic.
  // The common case (every row of the warp in the first case) costs the exponentials, one FMNMX and
  // one FADD a score, which follow the SFU's results, and one vote: no row max before them and no
  // shuffle (the FMNMX chain and its shuffles were on the path from S to P: D=128 +6-7%, perf-notes
  // "The forward's exponentials against the held row max").
  static constexpr int kLostLog2 = 120;
  // What update_held leaves for settle(): this thread's share of each row's max p and sum.
  struct HeldRest {
    float p_max[2], block_sum[2];
  };
  // The common case: returns true when it applied (every row of the warp seen, no p above
  // 2^kHoldLog2); otherwise the state is untouched, s holds p for the rows seen and the scores for
  // the others, and settle() finishes the step.
  template <int kHoldLog2>
  __device__ __forceinline__ bool update_held(float (&s)[kSRegs], float (&rescale)[2], float k, HeldRest& rest) {
    static_assert(kMaxOffset == 0, "16-bit P: FP8's offset leaves no room above it");
    constexpr float kHold = static_cast<float>(1u << kHoldLog2);
    const bool seen[2] = {row_max[0] != -INFINITY, row_max[1] != -INFINITY};
    if (__all_sync(0xffffffffu, seen[0] && seen[1])) {
#pragma unroll
      for (int h = 0; h < 2; ++h) rest.block_sum[h] = row_exps<false, true>(s, h, k, row_max[h], false, 1.f, &rest.p_max[h]);
      // The sums join the vote (a non-finite one goes to settle(), whose result for the row is the
      // same): left out of it, ptxas sank their FADD chains behind the branch.
      if (!__any_sync(0xffffffffu, rest.p_max[0] > kHold || rest.p_max[1] > kHold ||
                                       !(rest.block_sum[0] + rest.block_sum[1] <= 3.0e38f))) {
        rescale[0] = rescale[1] = 1.f;
        row_sum[0] += rest.block_sum[0];
        row_sum[1] += rest.block_sum[1];
        return true;
      }
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h)
        rest.block_sum[h] = row_exps<true, true>(s, h, k, row_max[h], !seen[h], 1.f, &rest.p_max[h]);  // unseen rows kept
    }
    return false;
  }

  // update_held's step when the common case did not apply: every lane through the same instructions
  // (the shuffles need the whole warp), each row's result selected by its own case.
  template <int kHoldLog2, typename Refill>
  __device__ __forceinline__ void settle(float (&s)[kSRegs], float (&rescale)[2], float k, const HeldRest& rest,
                                         Refill&& refill) {
    constexpr float kHold = static_cast<float>(1u << kHoldLog2);
    const bool seen[2] = {row_max[0] != -INFINITY, row_max[1] != -INFINITY};
    const float(&p_max)[2] = rest.p_max;
    const float(&block_sum)[2] = rest.block_sum;
    constexpr float kLost = 0x1p120f;
    static_assert(kLostLog2 == 120, "kLost");
    float pm[2];
    bool lost[2], plain[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      pm[h] = quad_max(opaque(p_max[h]));  // opaque: ptxas hoisted these shuffles out of the rare branch
      lost[h] = seen[h] && !(pm[h] <= kLost);
      plain[h] = !seen[h] || lost[h];  // update()'s arithmetic
    }
    if (__any_sync(0xffffffffu, lost[0] || lost[1])) refill(s, lost);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const bool rise = pm[h] > kHold;
      const float held_max = rise ? row_max[h] + __log2f(pm[h]) : row_max[h];
      const float f = rise ? ex2(row_max[h] - held_max) : 1.f;
      // update()'s row h, expression for expression.
      const float new_max = fmaxf(row_max[h], quad_max(thread_row_max(s, h)) * k);
      const float max_used = new_max == -INFINITY ? 0.f : new_max;
      const float plain_rescale = ex2(row_max[h] - max_used);
      // The other rows keep their p, scaled by their factor.
      const float plain_sum =
          row_sum[h] * plain_rescale + row_exps<true>(s, h, k, max_used - static_cast<float>(kMaxOffset), !plain[h], f);
      row_sum[h] = plain[h] ? plain_sum : (row_sum[h] + block_sum[h]) * f;
      rescale[h] = plain[h] ? plain_rescale : f;
      row_max[h] = plain[h] ? new_max : held_max;
    }
  }

  // Normalizes o by the row sums (times o_scale: the FP8 path's v_descale); returns the natural-log
  // LSE of each of the thread's two rows (-inf for a row that saw no key: its o is 0 since every P
  // entry was 0).
  template <int kORegs>
  __device__ __forceinline__ void finalize(float (&o)[kORegs], float (&lse)[2], float o_scale = 1.f) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float sum = quad_sum(row_sum[h]);
      const float inv = sum > 0.f ? o_scale / sum : 0.f;
      lse[h] = sum > 0.f ? (row_max[h] - static_cast<float>(kMaxOffset) + __log2f(sum)) * 0.6931471805599453f
                         : -INFINITY;
#pragma unroll
      for (int j = 0; j < kORegs / 4; ++j) {
        o[4 * j + 2 * h] *= inv;
        o[4 * j + 2 * h + 1] *= inv;
      }
    }
  }
};

// O *= the rescale factors of its two rows. Skipped when no row of the warp changed its max
// (every factor is then exactly exp2(0) = 1): after the first few key blocks that is the common
// case, and in the consumer loop this multiply sits between the two GEMM issues of a ping-pong
// turn, i.e. on the tensor cores' critical path.
template <int kORegs>
__device__ __forceinline__ void rescale_o(float (&o)[kORegs], const float (&rescale)[2]) {
  if (!__any_sync(0xffffffffu, rescale[0] != 1.f || rescale[1] != 1.f)) return;
#pragma unroll
  for (int j = 0; j < kORegs / 4; ++j) {
    o[4 * j + 0] *= rescale[0];
    o[4 * j + 1] *= rescale[0];
    o[4 * j + 2] *= rescale[1];
    o[4 * j + 3] *= rescale[1];
  }
}

#endif  // FLASHATTN_SM90A_ENABLED

}  // namespace sm90
}  // namespace flashattn
