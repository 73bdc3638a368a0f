// Host/device parameter block of the split-KV decoding path (flash_attn_with_kvcache). Filled on
// the host (csrc/binding_decode.cpp or any C++ caller), passed by value as a __grid_constant__.
// Plain C++: no CUDA header, so host-only tools can include it.
#pragma once

#include <cstdint>

#include "../common/params.h"  // DType, DeviceLimits

namespace flashattn {

struct DecodeParams {
  // q [B, Sq, Hq, D]; k_cache / v_cache [B, Sk_max, Hk, D], updated in place by the append;
  // k_new / v_new [B, Sq_new, Hk, D] (nullptr: nothing to append); o [B, Sq, Hq, D];
  // lse float32 [B, Hq, Sq] contiguous. Strides in elements, the last dimension contiguous, every
  // stride a multiple of 8 and every base pointer 16-byte aligned (16-byte cp.async / vector IO).
  const void* q = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  const void* k_new = nullptr;
  const void* v_new = nullptr;
  void* o = nullptr;
  float* lse = nullptr;

  // Split-KV partials, used only when num_splits > 1 (contiguous float32):
  //   o_accum [num_splits, B, Hq, Sq, head_dim], lse_accum [num_splits, B, Hq, Sq].
  float* o_accum = nullptr;
  float* lse_accum = nullptr;

  // Valid cache entries per batch *before* the append: cache_seqlens[b] (int32, device memory),
  // or cache_seqlen for every batch when cache_seqlens is nullptr. The attention of batch b then
  // sees seqlen_k(b) = cache_len(b) + seqlen_new keys. Values are the caller's contract (checking
  // them would need a host sync); out-of-range values are clamped to [0, seqlen_k_max] so that
  // they can never make a kernel touch memory outside the caches.
  const int* cache_seqlens = nullptr;
  int cache_seqlen = 0;

  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  int64_t knew_batch_stride = 0, knew_row_stride = 0, knew_head_stride = 0;
  int64_t vnew_batch_stride = 0, vnew_row_stride = 0, vnew_head_stride = 0;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;

  int batch = 0;
  int heads_q = 0;
  int heads_kv = 0;     // heads_q % heads_kv == 0
  int seqlen_q = 0;     // Sq
  int seqlen_k_max = 0;  // Sk_max, the cache capacity
  int seqlen_new = 0;   // Sq_new, rows of k_new / v_new (0 when nothing is appended)
  int head_dim = 0;     // multiple of 8 in [8, 256]; kernels round up internally

  float softmax_scale = 0.f;
  float scale_log2 = 0.f;  // softmax_scale * log2(e)
  bool causal = false;     // bottom-right: query i sees keys j <= i + seqlen_k(b) - Sq

  // Local (sliding-window) attention and causal masking, bottom-right aligned per batch
  // (csrc/common/mask.cuh with offset seqlen_k(b) - Sq): key j visible to query i iff
  // i + offset - window_left <= j <= i + offset + window_right, -1 unbounded. The kernel reads only
  // these for the mask; set_mask() folds causal in as window_right = 0 and turns edges no row of
  // any batch reaches into -1 (left >= Sk_max - 1, right >= Sq - 1).
  int window_left = -1;
  int window_right = -1;

  // Logit softcap, as FwdParams: c > 0 turns each scaled score x into c * tanh(x / c).
  float softcap = 0.f;
  float softcap_scale = 0.f;  // softmax_scale / softcap
  float softcap_log2 = 0.f;   // softcap * log2(e)

  DType dtype = DType::kBFloat16;

  // Set by the planner (flash_decode_plan), read by the kernels.
  int num_splits = 1;    // key-range splits per (batch, kv head, query tile)
  int num_m_blocks = 1;  // query tiles per (batch, kv head): ceil(Sq * Hq/Hk / 16)
  int kernel_variant = 0;  // the tile config (DecodeVariant in decode_traits.h) the plan was made for

  // Fields past this point are read by no contiguous-cache kernel: appended here, at the end, so
  // that every field above keeps its offset and those kernels compile to the code measured before
  // them (tools/kernel_identity.py checks it).

  // Paged cache (block_table != nullptr): k_cache / v_cache are [num_pages, page_size, Hk, D] and
  // the k/v batch strides above are the page strides; key j of batch b is row j % page_size of
  // page block_table[b * block_table_batch_stride + j / page_size]. seqlen_k_max is then
  // max_pages_per_seq * page_size. page_size must be a multiple of kDecodeMinPageSize (16): the
  // split kernel reads one table entry per aligned 16-row group of a key tile, which then lies in
  // one page (decode_traits.h). Page indices are the caller's contract; the kernels clamp reads
  // to [0, num_pages) and drop appends outside it, so a bad index never touches memory outside
  // the caches.
  const int* block_table = nullptr;
  int64_t block_table_batch_stride = 0;
  int page_size = 0;
  int num_pages = 0;

  // Keys used per batch (int32, device memory), or nullptr: batch b's attention then sees exactly
  // its first seqused_k[b] keys (clamped to [0, seqlen_k_max]) instead of cache_len(b) +
  // seqlen_new; the append still writes at cache_len(b). Host side only: flash_decode() runs the
  // kernels with cache_seqlens = seqused_k and seqlen_new = 0, so no kernel reads it.
  const int* seqused_k = nullptr;

  void set_scale(float scale) {
    softmax_scale = scale;
    scale_log2 = scale * 1.4426950408889634f;
  }

  // After seqlen_q and seqlen_k_max are set. left/right: -1 unbounded, else >= 0.
  void set_mask(bool is_causal, int64_t left, int64_t right) {
    causal = is_causal;
    if (causal) right = 0;
    if (left < 0 || left >= static_cast<int64_t>(seqlen_k_max) - 1) left = -1;
    if (right < 0 || right >= static_cast<int64_t>(seqlen_q) - 1) right = -1;
    window_left = static_cast<int>(left);
    window_right = static_cast<int>(right);
  }

  // After set_scale().
  void set_softcap(float c) {
    softcap = c > 0.f ? c : 0.f;
    softcap_scale = c > 0.f ? softmax_scale / c : 0.f;
    softcap_log2 = c > 0.f ? c * 1.4426950408889634f : 0.f;
  }

  // Keys one (batch, query tile) can need at most: what the split heuristic should plan for.
  int64_t keys_needed() const {
    if (window_left < 0) return seqlen_k_max;
    const int64_t span = static_cast<int64_t>(window_left) + seqlen_q + (window_right > 0 ? window_right : 0);
    return span < seqlen_k_max ? span : seqlen_k_max;
  }
};

}  // namespace flashattn
