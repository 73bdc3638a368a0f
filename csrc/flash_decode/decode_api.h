// The C++ entry points of the KV-cache decoding path: no torch, callable from any host code.
// Typical use (what csrc/binding_decode.cpp does), all asynchronous on one stream:
//   DecodeParams p = ...;                      // tensors, strides, sizes, scale, causal
//   flash_decode_plan(p, dev, requested, &p);  // sets p.num_splits, p.num_m_blocks
//   if (p.num_splits > 1) { allocate p.o_accum, p.lse_accum (sizes below) }
//   if (p.k_new) kvcache_append(p, stream);    // in-place append, before the attention
//   flash_decode(p, stream);                   // split kernel (+ combine when num_splits > 1)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "decode_params.h"

namespace flashattn {

// Chooses the tile config (decode_pick_variant: from the head dim, dev.cc_major and
// dev.max_smem_per_block), the split count (requested_splits > 0: that many, clamped to
// [1, min(128, key blocks of Sk_max)]; 0: the heuristic of decode_traits.h from the shape,
// dev.sm_count and the config's occupancy) and the query-tile count; writes all three into *plan
// (which may be &p). Host only: it reads no device memory and enqueues nothing.
cudaError_t flash_decode_plan(const DecodeParams& p, const DeviceLimits& dev, int requested_splits, DecodeParams* plan);

// fp32 elements of o_accum / lse_accum the plan needs (0 when num_splits == 1).
int64_t flash_decode_oaccum_numel(const DecodeParams& p);
int64_t flash_decode_lseaccum_numel(const DecodeParams& p);

// Copies k_new / v_new into the caches at rows cache_len(b) .. cache_len(b) + seqlen_new - 1.
cudaError_t kvcache_append(const DecodeParams& p, cudaStream_t stream);

// The attention over the caches (after any append): split kernel, then the combine kernel when
// p.num_splits > 1. Requires a plan.
cudaError_t flash_decode(const DecodeParams& p, cudaStream_t stream);

}  // namespace flashattn
