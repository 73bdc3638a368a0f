// Host/device parameter block for the forward kernels. Filled on the host (csrc/binding.cpp,
// or any C++ caller), passed by value to the kernel as a __grid_constant__.
#pragma once

#include <algorithm>
#include <cstdint>

namespace flashattn {

// kFloat8E4M3: q, k, v float8_e4m3fn, o bfloat16; only the Hopper FP8 forward takes it
// (flash_fwd_sm90_fp8); every other path refuses it.
enum class DType : int { kFloat16 = 0, kBFloat16 = 1, kFloat8E4M3 = 2 };

// Causal alignment. Key j is visible to query i iff j <= i + causal_offset, where
// causal_offset = 0 (top-left, torch SDPA's is_causal) or Sk - Sq (bottom-right, FlashAttention).
enum class CausalMode : int { kNone = 0, kTopLeft = 1, kBottomRight = 2 };

// A packed batch's rows, sequences and bounds stay below this: the packed kernels keep per-sequence
// offsets and window bounds in int, and 2^30 leaves room for their sums.
constexpr int64_t kMaxPackedRows = int64_t{1} << 30;

// A window edge that no query row reaches is no edge (-1): the kernels then take their unmasked
// paths, and offset +- window stays within int range. offset as in csrc/common/mask.cuh; for
// bottom-right alignment the bounds are exactly seqlen_k - 1 (left) and seqlen_q - 1 (right).
inline void normalize_window(int64_t seqlen_q, int64_t seqlen_k, int64_t offset, int64_t& left, int64_t& right) {
  if (left < 0 || left >= seqlen_q - 1 + offset) left = -1;
  if (right < 0 || right >= seqlen_k - 1 - offset) right = -1;
}

struct FwdParams {
  // Tensors: q [B, Sq, Hq, D], k/v [B, Sk, Hk, D], o [B, Sq, Hq, D]; strides in elements,
  // the last dimension contiguous. lse is float32 [B, Hq, Sq] contiguous.
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;

  int64_t q_batch_stride = 0, q_row_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_row_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_row_stride = 0, v_head_stride = 0;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;

  int batch = 0;
  int heads_q = 0;
  int heads_kv = 0;  // heads_q % heads_kv == 0 (GQA / MQA)
  int seqlen_q = 0;
  int seqlen_k = 0;
  int head_dim = 0;  // multiple of 8 in [8, 256]; kernels round up internally

  float softmax_scale = 0.f;       // any finite value, 0 and negative included
  float scale_log2 = 0.f;          // softmax_scale * log2(e); set by set_scale()
  bool causal = false;
  int causal_offset = 0;  // with set_mask(): the alignment of the window too (also without causal)

  // Local (sliding-window) attention, FlashAttention's semantics (csrc/common/mask.cuh): key j is
  // visible to query i iff i + causal_offset - window_left <= j <= i + causal_offset + window_right,
  // -1 meaning unbounded on that side. The forward kernels read only these two for the mask:
  // set_mask() folds causal masking in as window_right = 0 and turns edges no row reaches into -1
  // (dense calls; a packed call's are capped at the packed totals instead, set_mask says why).
  // The portable backward reads them the same way (csrc/flash_bwd/mainloop.cuh).
  int window_left = -1;
  int window_right = -1;

  // Logit softcap (Gemma 2): c > 0 replaces each scaled score x = s * softmax_scale by
  // c * tanh(x / c) before the softmax; 0 = off. Set by set_softcap() after set_scale(), which
  // also fills the two factors the kernels use: tanh's argument s * softcap_scale, and the capped
  // score in log2 units tanh(.) * softcap_log2.
  float softcap = 0.f;
  float softcap_scale = 0.f;  // softmax_scale / softcap
  float softcap_log2 = 0.f;   // softcap * log2(e)

  DType dtype = DType::kBFloat16;

  // Optional: one zeroed int32 in device memory, private to this call (stream-ordered). The
  // Hopper path then hands its query tiles out dynamically (Sm90FwdPlan::tile_counter
  // says when that pays); null means its static schedule. The portable path ignores it.
  int* tile_counter = nullptr;

  // Packed variable-length batches (both null: the dense layout above). int32 [batch + 1]
  // cumulative lengths in device memory: sequence b holds rows [cu_seqlens_q[b], cu_seqlens_q[b+1])
  // of q/o and [cu_seqlens_k[b], cu_seqlens_k[b+1]) of k/v, whose batch strides are then zero.
  // seqlen_q / seqlen_k are the caller's bounds on every sequence's lengths (grid sizing only: the
  // kernel reads each sequence's own lengths on the device, so the host never synchronizes).
  // lse is float32 [heads_q, total_q] (FlashAttention's varlen layout). Set by set_varlen().
  // Read by the forwards' packed flavours: the portable one (flash_fwd_varlen, kVarlen in
  // csrc/flash_fwd/kernel.cuh) and the Hopper one (flash_fwd_sm90_varlen, whose maps describe the
  // packed rows). flash_fwd and flash_fwd_sm90 (dense) refuse them.
  // The last fields of the struct, and to stay there: the fields before them keep their offsets,
  // so the dense kernels' code is the one they had before packed batches (tools/kernel_identity.py).
  const int* cu_seqlens_q = nullptr;
  const int* cu_seqlens_k = nullptr;
  int total_q = 0;             // rows of q / o: the lse head stride
  int total_k = 0;             // rows of k / v
  bool mask_top_left = false;  // alignment of the causal mask / window, per sequence (set_mask)

  // Hopper forward only: a split over the keys (flash_fwd_sm90_plan says how many, and how
  // they merge). With num_splits > 1 each query tile's key blocks are shared out among num_splits
  // CTAs, which either merge in their thread-block cluster (o_accum and lse_accum unset) or write
  // float32 partials, o_accum [num_splits, B, Hq, Sq, head_dim] and lse_accum [num_splits, B, Hq,
  // Sq] (contiguous, the caller's), that a second kernel merges into o and lse. Appended after the
  // packed fields for the same reason as they were.
  int num_splits = 1;
  float* o_accum = nullptr;
  float* lse_accum = nullptr;

  // Packed batches: the caller's max_seqlen bounds as given, capped at kMaxPackedRows (set_varlen, then
  // set_bounds), where seqlen_q / seqlen_k hold them clamped to the packed rows. The Hopper forward
  // picks its config from these (flash_fwd_sm90/dispatch.cu): the packed rows depend on the
  // neighbours, and a sequence's bits must not. Read on the host only; last, as the fields above.
  int bound_q = 0;
  int bound_k = 0;

  void set_bounds(int64_t max_q, int64_t max_k) {
    bound_q = static_cast<int>(std::min(max_q, kMaxPackedRows));
    bound_k = static_cast<int>(std::min(max_k, kMaxPackedRows));
  }

  void set_scale(float scale) {
    softmax_scale = scale;
    scale_log2 = scale * 1.4426950408889634f;
  }

  void set_causal(CausalMode mode) {
    set_mask(mode, -1, -1);  // the forward kernels read causal masking from window_right
  }

  // Causal mode and window together (the forward's setter; seqlen_q and seqlen_k set first). The
  // window is aligned like the causal mode: top-left for kTopLeft, bottom-right otherwise (kNone
  // included, as FlashAttention's window_size). left/right: -1 unbounded, else >= 0.
  void set_mask(CausalMode mode, int64_t left, int64_t right) {
    causal = mode != CausalMode::kNone;
    mask_top_left = mode == CausalMode::kTopLeft;
    causal_offset = mask_top_left ? 0 : seqlen_k - seqlen_q;
    if (causal) right = 0;  // causal == the right edge on the diagonal (on top of any window)
    if (cu_seqlens_q != nullptr) {
      // The offset is per sequence (the kernel computes it). An edge the caller gave is kept, capped
      // at normalize_window's bounds (bottom-right: left Sk - 1, right Sq - 1; top-left: left Sq - 1,
      // right Sk - 1) with Sq, Sk the packed totals, which bound every sequence's lengths whatever
      // the caller's max_seqlen says: a capped edge reaches no row of any sequence (mask.cuh clamps
      // each row's key range to the sequence) and offset +- window stays within int range (totals
      // < 2^30). Never dropped: whether a call has a window picks the Hopper config, and the totals
      // depend on the neighbours, so a sequence packed with longer ones would take another config
      // (other bits) than the same sequence packed alone.
      const int64_t left_bound = mask_top_left ? int64_t{total_q} - 1 : int64_t{total_k} - 1;
      const int64_t right_bound = mask_top_left ? int64_t{total_k} - 1 : int64_t{total_q} - 1;
      left = left < 0 ? -1 : std::min(left, std::max<int64_t>(left_bound, 0));
      right = right < 0 ? -1 : std::min(right, std::max<int64_t>(right_bound, 0));
    } else {
      normalize_window(seqlen_q, seqlen_k, causal_offset, left, right);
    }
    window_left = static_cast<int>(left);
    window_right = static_cast<int>(right);
  }

  // Packed variable-length batch: call before set_mask(). cu_q / cu_k: int32 [batch + 1] on the
  // device; max_q / max_k: the caller's bounds on the sequence lengths (seqlen_q / seqlen_k);
  // total_q / total_k: the packed rows of q and of k/v.
  void set_varlen(const int* cu_q, const int* cu_k, int max_q, int max_k, int total_q_rows, int total_k_rows) {
    cu_seqlens_q = cu_q;
    cu_seqlens_k = cu_k;
    seqlen_q = bound_q = max_q;
    seqlen_k = bound_k = max_k;
    total_q = total_q_rows;
    total_k = total_k_rows;
    q_batch_stride = k_batch_stride = v_batch_stride = o_batch_stride = 0;
  }

  void set_softcap(float c) {
    softcap = c > 0.f ? c : 0.f;
    softcap_scale = c > 0.f ? softmax_scale / c : 0.f;
    softcap_log2 = c > 0.f ? c * 1.4426950408889634f : 0.f;
  }

  // A sliding window beyond the causal mask (window_right == 0 alone is causal masking).
  bool has_window() const { return window_left >= 0 || (!causal && window_right >= 0); }
  // A causal mask or a window: the rows see different key ranges.
  bool has_mask() const { return causal || has_window(); }
};

// What the launcher needs to know of the device to pick a tile config.
struct DeviceLimits {
  int sm_count = 0;
  int max_smem_per_block = 0;  // opt-in limit: 99 KB on sm86/sm89, 163 KB on sm80, 227 KB on sm90
  int cc_major = 0;
  int cc_minor = 0;
};

}  // namespace flashattn
