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
      float part_max[kChains];
#pragma unroll
      for (int c = 0; c < kChains; ++c) part_max[c] = fmaxf(s[4 * c + 2 * h], s[4 * c + 2 * h + 1]);
#pragma unroll
      for (int j = kChains; j < kSRegs / 4; ++j)
        part_max[j % kChains] = fmaxf(part_max[j % kChains], fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
      const float block_max = tree_reduce(part_max, [](float a, float b) { return fmaxf(a, b); });
      const float new_max = fmaxf(row_max[h], quad_max(block_max) * k);  // k > 0: max(k s) = k max(s)
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
