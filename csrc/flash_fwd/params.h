// Host/device parameter block for the forward kernels. Filled on the host (csrc/binding.cpp,
// or any C++ caller), passed by value to the kernel as a __grid_constant__.
#pragma once

#include <cstdint>

namespace flashattn {

enum class DType : int { kFloat16 = 0, kBFloat16 = 1 };

// Causal alignment. Key j is visible to query i iff j <= i + causal_offset, where
// causal_offset = 0 (top-left, torch SDPA's is_causal) or Sk - Sq (bottom-right, FlashAttention).
enum class CausalMode : int { kNone = 0, kTopLeft = 1, kBottomRight = 2 };

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
  int causal_offset = 0;

  DType dtype = DType::kBFloat16;

  // Optional: one zeroed int32 in device memory, private to this call (stream-ordered). The
  // Hopper path then hands its query tiles out dynamically (flash_fwd_sm90_wants_tile_counter
  // says when that pays); null means its static schedule. The portable path ignores it.
  int* tile_counter = nullptr;

  void set_scale(float scale) {
    softmax_scale = scale;
    scale_log2 = scale * 1.4426950408889634f;
  }

  void set_causal(CausalMode mode) {
    causal = mode != CausalMode::kNone;
    causal_offset = mode == CausalMode::kBottomRight ? seqlen_k - seqlen_q : 0;
  }
};

// What the launcher needs to know of the device to pick a tile config.
struct DeviceLimits {
  int sm_count = 0;
  int max_smem_per_block = 0;  // opt-in limit: 99 KB on sm86/sm89, 163 KB on sm80, 227 KB on sm90
  int cc_major = 0;
  int cc_minor = 0;
};

}  // namespace flashattn
