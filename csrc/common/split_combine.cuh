// Merging the partial results of a split over the keys: num_splits float32 partials of every
// output row, each normalized over its own keys, with their LSEs, into the output and its LSE:
// lse = log sum_s exp(lse_s), out = sum_s exp(lse_s - lse) * o_s. Used by the decode path
// (flash_attn_with_kvcache) and by the Hopper forward when a grid of query tiles would leave most
// SMs idle and its splits do not merge in a cluster (flash_fwd_sm90_plan).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "lse_merge.cuh"
#include "ptx.cuh"

namespace flashattn {

constexpr int kMaxKeySplits = 128;  // splits one combine handles (kMaxKeySplits / 32 weights per lane)

struct SplitCombineParams {
  // o_accum [num_splits, B, Hq, Sq, head_dim], lse_accum [num_splits, B, Hq, Sq]: float32,
  // contiguous. o [B, Sq, Hq, D] in the caller's strides (elements); lse [B, Hq, Sq] float32,
  // contiguous, natural log.
  const float* o_accum = nullptr;
  const float* lse_accum = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  int batch = 0, heads_q = 0, seqlen_q = 0;
  int head_dim = 0;  // a multiple of 4, at most 256
  int num_splits = 1;
};

// The combine's parameters from any parameter block with the output's fields (o, lse, their
// strides, batch, heads_q, seqlen_q, head_dim: FwdParams, DecodeParams) and the partials.
template <typename Params>
SplitCombineParams split_combine_params(const Params& p, const float* o_accum, const float* lse_accum, int num_splits) {
  SplitCombineParams c;
  c.o_accum = o_accum;
  c.lse_accum = lse_accum;
  c.o = p.o;
  c.lse = p.lse;
  c.o_batch_stride = p.o_batch_stride;
  c.o_row_stride = p.o_row_stride;
  c.o_head_stride = p.o_head_stride;
  c.batch = p.batch;
  c.heads_q = p.heads_q;
  c.seqlen_q = p.seqlen_q;
  c.head_dim = p.head_dim;
  c.num_splits = num_splits;
  return c;
}

// Output rows (b, hq, i) in [B, Hq, Sq] order like the LSE; each lane owns 4 columns (D/4 <= 64:
// at most two passes). A row's splits are shared by kRowWarps warps, warp w taking splits w,
// w + kRowWarps, ..., their sums meeting in shared memory:
//   kRowWarps = 1   (<= 8 splits): one warp per row, 4 rows per CTA (many rows, few splits);
//   kRowWarps = 4   (<= 32): the 4 warps of a CTA share one row;
//   kRowWarps = 16  (<= 128): a CTA of 16 warps shares one row (few rows, many splits: MQA at B=1
//                   splits one tile 128 ways; 4 warps walked 32 partials each, three round trips
//                   to L2 after the first).
// So no warp handles more than kCombinePrefetch splits, and every load of a row is issued before
// any is used: each lane reads the LSEs of splits lane, lane + 32, ... into registers and its
// warp's partials for its columns, so a warp waits for one memory latency, not for a chain of them.
// Splits with lse_s = -inf (no key in that split) weigh exactly 0 and their partial is 0, so empty
// splits need no special case; a row with no key anywhere gets out = 0, lse = -inf (lse_merge.cuh).
constexpr int kCombineWarps = 4;     // warps of a CTA whose rows have at most 32 splits
constexpr int kCombinePrefetch = 8;  // partials a warp loads before using any
static_assert(kMaxKeySplits % 32 == 0, "whole slots of 32 splits per lane");
static_assert(kMaxKeySplits <= 16 * kCombinePrefetch, "the widest CTA's warps prefetch every split");

// Warps sharing a row with `splits` splits: the fewest of {1, 4, 16} that leave each at most
// kCombinePrefetch splits.
constexpr int combine_row_warps(int splits) {
  return splits <= kCombinePrefetch ? 1 : splits <= kCombineWarps * kCombinePrefetch ? kCombineWarps : 16;
}
// Warps of the CTA whose rows have `row_warps` warps each: kCombineWarps, or one row's 16.
constexpr int combine_cta_warps(int row_warps) { return row_warps > kCombineWarps ? row_warps : kCombineWarps; }

template <typename Element, int kRowWarps>
__global__ void __launch_bounds__(combine_cta_warps(kRowWarps) * 32)
    split_combine_kernel(const __grid_constant__ SplitCombineParams p) {
  static_assert(kRowWarps == 1 || kRowWarps == kCombineWarps || kRowWarps == 16, "the widths combine_row_warps picks");
  constexpr int kWarps = combine_cta_warps(kRowWarps);
  constexpr int kRowsPerCta = kWarps / kRowWarps;
  constexpr int kLsePerLane = kMaxKeySplits / 32;
  __shared__ float s_weight[kWarps][kMaxKeySplits];  // each warp's copy of its row's weights
  __shared__ float4 s_acc[kRowWarps > 1 ? kWarps : 1][kRowWarps > 1 ? 64 : 1];  // [warp][column / 4]
  // Launched programmatically (launch_split_combine), this CTA may start before the split kernel
  // has finished: wait here until that grid has completed and its partials are visible. Returns at
  // once for an ordinary launch.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int first = warp % kRowWarps;  // this warp's first split
  const int64_t rows_all = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerCta + warp / kRowWarps;
  // Uniform per warp, and per CTA where its warps share the row (the barrier below).
  if (row >= rows_all) return;
  const int splits = p.num_splits;
  const int cols4 = p.head_dim / 4;
  const int64_t split_stride = rows_all * p.head_dim;
  const float* part = p.o_accum + row * p.head_dim;

  float lse_s[kLsePerLane];
#pragma unroll
  for (int j = 0; j < kLsePerLane; ++j) {
    const int s = j * 32 + lane;
    lse_s[j] = s < splits ? __ldg(p.lse_accum + s * rows_all + row) : -INFINITY;
  }
  float4 pre[kCombinePrefetch];
#pragma unroll
  for (int k = 0; k < kCombinePrefetch; ++k) {
    const int s = first + k * kRowWarps;
    pre[k] = s < splits && lane < cols4 ? __ldg(reinterpret_cast<const float4*>(part + s * split_stride + lane * 4))
                                        : make_float4(0.f, 0.f, 0.f, 0.f);
  }

  const float lse = merged_lse<true>(lse_s);
#pragma unroll
  for (int j = 0; j < kLsePerLane; ++j) s_weight[warp][j * 32 + lane] = merge_weight(lse_s[j], lse);
  __syncwarp();

  const int i = static_cast<int>(row % p.seqlen_q);
  const int64_t bh = row / p.seqlen_q;
  const int head_q = static_cast<int>(bh % p.heads_q);
  const int batch = static_cast<int>(bh / p.heads_q);
  Element* out = static_cast<Element*>(p.o) + batch * p.o_batch_stride + i * p.o_row_stride + head_q * p.o_head_stride;
  auto store = [&](int c4, float4 acc) {
    uint2 packed;
    packed.x = pack2<Element>(acc.x, acc.y);
    packed.y = pack2<Element>(acc.z, acc.w);
    *reinterpret_cast<uint2*>(out + c4 * 4) = packed;
  };
  for (int pass = 0; pass * 32 < cols4; ++pass) {
    const int c4 = pass * 32 + lane;
    if (c4 >= cols4) break;  // lanes past the head dim: nothing to load or store (no shuffles below)
    const float* src = part + c4 * 4;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    int s = first;
    if (pass == 0) {
#pragma unroll
      for (int k = 0; k < kCombinePrefetch; ++k) {
        const float w = s + k * kRowWarps < splits ? s_weight[warp][s + k * kRowWarps] : 0.f;
        acc.x += w * pre[k].x, acc.y += w * pre[k].y, acc.z += w * pre[k].z, acc.w += w * pre[k].w;
      }
      s += kCombinePrefetch * kRowWarps;
    }
#pragma unroll 8
    for (; s < splits; s += kRowWarps) {
      const float w = s_weight[warp][s];
      const float4 x = __ldg(reinterpret_cast<const float4*>(src + s * split_stride));
      acc.x += w * x.x, acc.y += w * x.y, acc.z += w * x.z, acc.w += w * x.w;
    }
    if constexpr (kRowWarps == 1)
      store(c4, acc);
    else
      s_acc[warp][c4] = acc;
  }
  if constexpr (kRowWarps > 1) {
    __syncthreads();
    for (int c4 = threadIdx.x; c4 < cols4; c4 += kWarps * 32) {
      float4 acc = s_acc[0][c4];
#pragma unroll
      for (int w = 1; w < kRowWarps; ++w) {
        const float4 x = s_acc[w][c4];
        acc.x += x.x, acc.y += x.y, acc.z += x.z, acc.w += x.w;
      }
      store(c4, acc);
    }
  }
  if (lane == 0 && first == 0) p.lse[row] = lse;
}

// Launches the combine on `stream` after the split kernel. programmatic: a programmatic dependent
// launch (sm90+ only): the combine grid is scheduled while the split grid still runs and waits on
// it in griddepcontrol.wait, which takes the launch gap between the two kernels off the critical
// path (it matters where the whole call is tens of microseconds).
template <typename Element>
cudaError_t launch_split_combine(const SplitCombineParams& p, cudaStream_t stream, bool programmatic) {
  if (p.num_splits < 1 || p.num_splits > kMaxKeySplits || p.head_dim % 4 != 0 || p.head_dim > 256)
    return cudaErrorInvalidValue;
  const int64_t rows_all = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
  if (rows_all == 0) return cudaSuccess;
  // More splits than one warp's prefetch: the CTA's warps share a row (see the kernel).
  const int row_warps = combine_row_warps(p.num_splits);
  const int rows_per_cta = row_warps == 1 ? kCombineWarps : 1;
  const int64_t blocks = (rows_all + rows_per_cta - 1) / rows_per_cta;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(combine_cta_warps(row_warps) * 32);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = programmatic ? 1 : 0;
  const cudaError_t err = row_warps == 16            ? cudaLaunchKernelEx(&cfg, split_combine_kernel<Element, 16>, p)
                          : row_warps == kCombineWarps ? cudaLaunchKernelEx(&cfg, split_combine_kernel<Element, kCombineWarps>, p)
                                                       : cudaLaunchKernelEx(&cfg, split_combine_kernel<Element, 1>, p);
  if (err != cudaSuccess) return err;
  return cudaGetLastError();
}

}  // namespace flashattn
