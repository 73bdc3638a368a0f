// What the Hopper forward kernel receives, by value, as a __grid_constant__ parameter.
#pragma once

#include <cuda.h>  // CUtensorMap (header only: the driver is reached through the runtime, see tma_host.h)

#include <cstdint>

namespace flashattn {
namespace sm90 {

struct Sm90Params {
  // TMA descriptors of q [B, Sq, Hq, D], k and v [B, Sk, Hk, D]: 4-D maps (D, S, H, B) over the
  // caller's strides, true extents (so TMA zero-fills rows past the sequence end and columns past
  // head_dim), box = 64 columns x (128 query rows | kBlockN keys), 128-byte swizzle.
  CUtensorMap tma_q;
  CUtensorMap tma_k;
  CUtensorMap tma_v;
  // o [B, Sq, Hq, D] as a store map (box 64 columns x 64 rows: one consumer warpgroup's half of
  // a tile), used by kOTma configs; the others write through `o` and the strides below.
  CUtensorMap tma_o;

  void* o;     // [B, Sq, Hq, D]
  float* lse;  // [B, Hq, Sq] float32, contiguous
  int64_t o_batch_stride, o_row_stride, o_head_stride;

  int batch, heads_q, heads_kv, q_per_kv;
  int seqlen_q, seqlen_k, head_dim;
  float scale_log2;
  int causal;
  int causal_offset;  // the diagonal's alignment: 0 top-left, Sk - Sq bottom-right (also for the window)
  // The mask the kernel applies (FwdParams: causal folded in as window_right = 0, -1 unbounded):
  // key j visible to query i iff i + causal_offset - window_left <= j <= i + causal_offset + window_right.
  int window_left, window_right;
  // Logit softcap (0: off): scores x -> tanh(x * softcap_scale) * softcap_log2, in log2 units.
  float softcap_scale, softcap_log2;

  // Schedule: tile t in [0, num_tiles) -> (query block, batch, head, key split), see tile_scheduler.h.
  int num_m_blocks;
  int num_tiles;
  int group_heads;  // (batch, head) pairs per L2 group
  // Dynamic schedule only: a zeroed int32 private to the call. After its first tile (blockIdx.x)
  // a CTA takes the next one with atomicAdd (+ grid); see schedule.cuh.
  int* tile_counter;

  int* hang_report;  // host-mapped diagnostics of a stuck wait (lab builds); null otherwise

  // Split over the keys (FwdParams::num_splits): tile t is split t % num_splits of query tile
  // t / num_splits (tile_scheduler.h, split_tile); with num_splits > 1 the consumers write float32
  // partials here instead of o and lse (epilogue.cuh, store_o_partial).
  int num_splits;
  // Query blocks m >= 1 start this many rows early (num_m_blocks * kBlockM - seqlen_q, under a causal
  // mask or a local window, dense, one split, on configs with Traits::kPartialTileFirst; else 0), so
  // that the partial block is block 0, which sees the fewest keys, not the last, which sees the most
  // (launch.cuh make_sm90_params, tile_scheduler.h tile_rows). In the padding before o_accum: the
  // struct's layout, and so every other config's code, stays as it was.
  int q_row_shift;
  float* o_accum;    // [num_splits, B, Hq, Sq, head_dim]
  float* lse_accum;  // [num_splits, B, Hq, Sq]
};

// The FP8 forward's parameters (flash_fwd_sm90_fp8_kernel): the 16-bit kernel's, with tma_v
// describing V^T [B, Hk, D, Sk_pad] (keys innermost, permuted per 32-key group; box kVtPlaneKeys
// keys x kHeadDim rows) and tma_o / o bfloat16, plus the descale factors: float32 [B, Hk] contiguous,
// entry batch * heads_kv + kv head. Scores are q_descale * k_descale * (q8 . k8) * softmax_scale;
// O = v_descale * (P V8) / rowsum.
struct Sm90Fp8Params : Sm90Params {
  const float* q_descale;
  const float* k_descale;
  const float* v_descale;
};

// The packed flavour's parameters (flash_fwd_sm90_packed_kernel: a packed variable-length batch,
// FwdParams::set_varlen). The maps tma_q/k/v/o describe the packed rows as one batch ([1, total, H,
// D]); batch is the number of sequences, seqlen_q / seqlen_k the caller's bounds (the grid's
// query blocks), lse float32 [Hq, total_q]. Each tile reads its sequence from cu_seqlens on the
// device (packed.cuh), so the host never synchronizes.
struct Sm90PackedParams : Sm90Params {
  const int* cu_seqlens_q;  // int32 [batch + 1]
  const int* cu_seqlens_k;
  int total_q, total_k;  // packed rows of q / o and of k / v
  int mask_top_left;     // the causal mask / window aligned top-left per sequence, else bottom-right
};

}  // namespace sm90
}  // namespace flashattn
