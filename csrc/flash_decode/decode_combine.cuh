// The two small kernels around the split kernel:
//   * kvcache_append_kernel: writes k_new / v_new into the caches at rows cache_len(b) + j, in
//     place, before the attention reads them (same stream, so ordered);
//   * the combine (../common/split_combine.cuh): merges the num_splits fp32 partials of every
//     output row with LSE weights: lse = log sum_s exp(lse_s), out = sum_s exp(lse_s - lse) * o_s.
#pragma once

#include <cmath>
#include <cstdint>

#include "../common/ptx.cuh"
#include "../common/split_combine.cuh"
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

// The combine itself is ../common/split_combine.cuh (shared with the Hopper forward's key splits).
static_assert(kDecodeMaxSplits <= kMaxKeySplits, "the combine holds a weight for every split");

}  // namespace flashattn
