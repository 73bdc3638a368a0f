// The two small kernels around the split kernel:
//   * kvcache_append_kernel: writes k_new / v_new into the caches at rows cache_len(b) + j, in
//     place, before the attention reads them (same stream, so ordered);
//   * flash_decode_combine_kernel: merges the num_splits fp32 partials of every output row with
//     LSE weights: lse = log sum_s exp(lse_s), out = sum_s exp(lse_s - lse) * o_s.
#pragma once

#include <cmath>
#include <cstdint>

#include "../common/ptx.cuh"
#include "decode_params.h"
#include "decode_traits.h"

namespace flashattn {

// One thread per 16-byte chunk of one (batch, new row, kv head) of K and of V. Rows whose target
// falls outside [0, seqlen_k_max) (a cache_seqlens value breaking the caller's contract), or, in a
// paged cache, on a page index outside [0, num_pages), are skipped rather than written out of
// bounds. Bytes are copied as-is: no dtype dependence. kPaged: the target row is found through
// p.block_table. A template flag, not a runtime test of p.block_table, so that the contiguous
// cache's append compiles to the code it had before paging existed.
template <bool kPaged>
__global__ void __launch_bounds__(256) kvcache_append_kernel(const __grid_constant__ DecodeParams p) {
  const int chunks = p.head_dim / 8;
  const int64_t total = static_cast<int64_t>(p.batch) * p.seqlen_new * p.heads_kv * chunks;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t t = idx;
    const int c = static_cast<int>(t % chunks);
    t /= chunks;
    const int h = static_cast<int>(t % p.heads_kv);
    t /= p.heads_kv;
    const int j = static_cast<int>(t % p.seqlen_new);
    const int b = static_cast<int>(t / p.seqlen_new);
    const int64_t base = p.cache_seqlens != nullptr ? p.cache_seqlens[b] : p.cache_seqlen;
    const int64_t pos = base + j;
    if (pos < 0 || pos >= p.seqlen_k_max) continue;
    const uint16_t* ks = static_cast<const uint16_t*>(p.k_new) + b * p.knew_batch_stride + j * p.knew_row_stride +
                         h * p.knew_head_stride + c * 8;
    const uint16_t* vs = static_cast<const uint16_t*>(p.v_new) + b * p.vnew_batch_stride + j * p.vnew_row_stride +
                         h * p.vnew_head_stride + c * 8;
    uint16_t* kd;
    uint16_t* vd;
    if constexpr (kPaged) {
      // (page, row in page) in place of (batch, row)
      const int64_t page_idx = pos / p.page_size;
      const int64_t page = p.block_table[b * p.block_table_batch_stride + page_idx];
      const int64_t row = pos - page_idx * p.page_size;
      if (page < 0 || page >= p.num_pages) continue;
      kd = static_cast<uint16_t*>(p.k_cache) + page * p.k_batch_stride + row * p.k_row_stride + h * p.k_head_stride +
           c * 8;
      vd = static_cast<uint16_t*>(p.v_cache) + page * p.v_batch_stride + row * p.v_row_stride + h * p.v_head_stride +
           c * 8;
    } else {
      kd = static_cast<uint16_t*>(p.k_cache) + b * p.k_batch_stride + pos * p.k_row_stride + h * p.k_head_stride +
           c * 8;
      vd = static_cast<uint16_t*>(p.v_cache) + b * p.v_batch_stride + pos * p.v_row_stride + h * p.v_head_stride +
           c * 8;
    }
    *reinterpret_cast<uint4*>(kd) = *reinterpret_cast<const uint4*>(ks);
    *reinterpret_cast<uint4*>(vd) = *reinterpret_cast<const uint4*>(vs);
  }
}

constexpr int kCombineWarps = 4;

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// One warp per output row (b, hq, i), rows in [B, Hq, Sq] order like the LSE. The weights go
// through shared memory once; then each lane owns 4 columns (D/4 <= 64: at most two passes) and
// walks the splits with independent loads (unrolled), so the partials, still in L2 from the split
// kernel, stream at full rate. Splits with lse_s = -inf (no key in that split) weigh exactly 0 and
// their partial is 0, so empty splits need no special case; a row with no key anywhere gets
// out = 0, lse = -inf.
template <typename Element>
__global__ void __launch_bounds__(kCombineWarps * 32) flash_decode_combine_kernel(const __grid_constant__ DecodeParams p) {
  __shared__ float s_weight[kCombineWarps][kDecodeMaxSplits];
  // Launched programmatically (decode_dispatch.cu), this CTA may start before the split kernel has
  // finished: wait here until that grid has completed and its partials are visible. Returns at once
  // for an ordinary launch.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t rows_all = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kCombineWarps + warp;
  if (row >= rows_all) return;  // warp-uniform; the kernel has no block-wide barrier
  const int splits = p.num_splits;

  float m = -INFINITY;
  for (int s = lane; s < splits; s += 32) m = fmaxf(m, p.lse_accum[s * rows_all + row]);
  m = warp_max(m);
  float lse = -INFINITY;
  if (m != -INFINITY) {
    float l = 0.f;
    for (int s = lane; s < splits; s += 32) l += expf(p.lse_accum[s * rows_all + row] - m);
    l = warp_sum(l);
    lse = m + logf(l);
  }
  for (int s = lane; s < splits; s += 32)
    s_weight[warp][s] = lse == -INFINITY ? 0.f : expf(p.lse_accum[s * rows_all + row] - lse);
  __syncwarp();

  const int i = static_cast<int>(row % p.seqlen_q);
  const int64_t bh = row / p.seqlen_q;
  const int head_q = static_cast<int>(bh % p.heads_q);
  const int batch = static_cast<int>(bh / p.heads_q);
  Element* out = static_cast<Element*>(p.o) + batch * p.o_batch_stride + i * p.o_row_stride + head_q * p.o_head_stride;
  const int64_t split_stride = rows_all * p.head_dim;
  const float* part = p.o_accum + row * p.head_dim;
  for (int c4 = lane; c4 < p.head_dim / 4; c4 += 32) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    const float* src = part + c4 * 4;
#pragma unroll 8
    for (int s = 0; s < splits; ++s) {
      const float w = s_weight[warp][s];
      const float4 x = __ldg(reinterpret_cast<const float4*>(src + s * split_stride));
      acc.x += w * x.x, acc.y += w * x.y, acc.z += w * x.z, acc.w += w * x.w;
    }
    uint2 packed;
    packed.x = pack2<Element>(acc.x, acc.y);
    packed.y = pack2<Element>(acc.z, acc.w);
    *reinterpret_cast<uint2*>(out + c4 * 4) = packed;
  }
  if (lane == 0) p.lse[row] = lse;
}

}  // namespace flashattn
