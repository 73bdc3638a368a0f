// Online softmax over the rows a warp owns. In the m16n8 accumulator layout a thread holds two
// rows per m-tile (lane/4 and lane/4 + 8), spread over the 4 lanes of its quad, so row
// reductions are two xor-shuffles.
#pragma once

#include <cmath>

#include "ptx.cuh"
#include "softmax_math.cuh"

namespace flashattn {

template <int kMTiles, int kNTilesS, int kNTilesO>
struct OnlineSoftmax {
  // Running max of the scores in log2 units (scale * log2(e) applied), -inf while a row has seen
  // no visible key; and this thread's share of the running sum, reduced over the quad only once,
  // in finalize(), since every rescale factor is the same across the quad.
  float row_max[kMTiles][2];
  float row_sum[kMTiles][2];

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        row_max[mt][h] = -INFINITY;
        row_sum[mt][h] = 0.f;
      }
  }

  // s: scores of one key block in log2 units, masked entries -inf. Turns s into the unnormalized
  // probabilities P in place and rescales the output accumulators to the new row max.
  __device__ __forceinline__ void update(float (&s)[kMTiles][kNTilesS][4], float (&o)[kMTiles][kNTilesO][4]) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float block_max = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kNTilesS; ++nt) block_max = fmaxf(block_max, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
        const float new_max = fmaxf(row_max[mt][h], quad_max(block_max));
        // A row with no visible key yet keeps max -inf; subtracting 0 instead keeps
        // exp2(-inf - max) at 0 rather than NaN.
        const float max_used = new_max == -INFINITY ? 0.f : new_max;
        const float rescale = ex2(row_max[mt][h] - max_used);
        row_max[mt][h] = new_max;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNTilesS; ++nt) {
          s[mt][nt][2 * h] = ex2(s[mt][nt][2 * h] - max_used);
          s[mt][nt][2 * h + 1] = ex2(s[mt][nt][2 * h + 1] - max_used);
          sum += s[mt][nt][2 * h] + s[mt][nt][2 * h + 1];
        }
        row_sum[mt][h] = row_sum[mt][h] * rescale + sum;
#pragma unroll
        for (int nt = 0; nt < kNTilesO; ++nt) {
          o[mt][nt][2 * h] *= rescale;
          o[mt][nt][2 * h + 1] *= rescale;
        }
      }
    }
  }

  // Normalizes o by the row sums and returns the natural-log LSE per row (-inf for rows that saw
  // no key; their o is 0 since every P entry was 0).
  __device__ __forceinline__ void finalize(float (&o)[kMTiles][kNTilesO][4], float (&lse)[kMTiles][2]) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float sum = quad_sum(row_sum[mt][h]);
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
        lse[mt][h] = sum > 0.f ? (row_max[mt][h] + __log2f(sum)) * 0.6931471805599453f : -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kNTilesO; ++nt) {
          o[mt][nt][2 * h] *= inv;
          o[mt][nt][2 * h + 1] *= inv;
        }
      }
    }
  }
};

}  // namespace flashattn
