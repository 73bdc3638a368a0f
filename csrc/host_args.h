// What every torch binding checks of its arguments and how it hands a tensor to a kernel: the one
// host helper of csrc/binding*.cpp. Each check names the op and the argument; the public entry
// points (flashattn/_validate.py) check the same conditions first on their checked path, so these
// messages reach only direct callers of the ops. Torch and the CUDA runtime's declarations (for the
// tile counter's memset): what a check needs of a tensor is its metadata.
#pragma once

#include <ATen/ATen.h>
#include <cuda_runtime.h>
#include <c10/util/Exception.h>
#include <c10/util/string_view.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>

#include "check.h"
#include "common/params.h"

namespace flashattn {

// ---- the 16-byte access rule ---------------------------------------------------------------------

// 16-byte vector access (cp.async, TMA, the decode kernels' loads): base 16-byte aligned, unit last
// stride, every other stride of a dimension longer than 1 a multiple of 16 bytes (8 elements of a
// 16-bit tensor, 16 of an FP8 one; a dimension of extent 1 is never stepped, so its stride does not
// matter).
inline bool aligned16(const at::Tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0) return false;
  if (t.dim() > 0 && t.size(-1) > 1 && t.stride(-1) != 1) return false;
  for (int64_t dim = 0; dim < t.dim() - 1; ++dim)
    if (t.size(dim) > 1 && (t.stride(dim) * t.element_size()) % 16 != 0) return false;
  return true;
}

// True when some dimension longer than 1 has stride 0 (a broadcast view, e.g. the gradient of
// out.sum()).
inline bool has_broadcast_dim(const at::Tensor& t) {
  for (int64_t dim = 0; dim < t.dim(); ++dim)
    if (t.size(dim) > 1 && t.stride(dim) == 0) return true;
  return false;
}

// The Hopper path's tile counter (FwdParams::tile_counter): the int32 word behind a forward's lse in
// `lse_storage` (lse_numel floats, then that word: one allocation for both), zeroed by a
// stream-ordered memset, so concurrent streams never share one and CUDA-graph capture records it.
inline void set_zeroed_tile_counter(const char* op, FwdParams& p, const at::Tensor& lse_storage, int64_t lse_numel,
                                    cudaStream_t stream) {
  p.tile_counter = reinterpret_cast<int*>(lse_storage.data_ptr<float>() + lse_numel);
  const cudaError_t zero = cudaMemsetAsync(p.tile_counter, 0, sizeof(int), stream);
  FLASHATTN_CHECK(zero == cudaSuccess, op, ": zeroing the tile counter failed: ", cudaGetErrorString(zero));
}

// A view the kernels cannot read 16 bytes at a time is copied once (the API promises any strides,
// not speed for every one of them). Tensors used in place (the KV caches) are checked instead.
// A clone, not contiguous(): a contiguous view at an unaligned address (a slice of a flat buffer, one
// row of a padded tensor) is contiguous by torch's rule, and contiguous() hands it back unchanged.
inline at::Tensor aligned_or_copy(const at::Tensor& t) {
  return aligned16(t) ? t : t.clone(at::MemoryFormat::Contiguous);
}

// ---- filling a parameter block -------------------------------------------------------------------

inline DType dtype_of(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 ? DType::kBFloat16 : DType::kFloat16;
}

// A [B, S, H, D] tensor: its pointer and the batch, row and head strides, in elements. s_dim and
// h_dim: where its rows and heads are (2 and 1 for a tensor stored as [B, H, S, D]).
template <class Ptr>
inline void set_bshd(const at::Tensor& t, Ptr& ptr, int64_t& batch_stride, int64_t& row_stride,
                     int64_t& head_stride, int s_dim = 1, int h_dim = 2) {
  ptr = t.data_ptr();
  batch_stride = t.stride(0);
  row_stride = t.stride(s_dim);
  head_stride = t.stride(h_dim);
}

// A dense call: q, k, v and o [B, S, H, D] (or seen as [B, H, S, D]: s_dim 2, h_dim 1), their
// pointers and strides, and the sizes read from them (each binding has checked them against int32
// first).
inline void set_dense(FwdParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o,
                      int s_dim = 1, int h_dim = 2) {
  set_bshd(q, p.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride, s_dim, h_dim);
  set_bshd(k, p.k, p.k_batch_stride, p.k_row_stride, p.k_head_stride, s_dim, h_dim);
  set_bshd(v, p.v, p.v_batch_stride, p.v_row_stride, p.v_head_stride, s_dim, h_dim);
  set_bshd(o, p.o, p.o_batch_stride, p.o_row_stride, p.o_head_stride, s_dim, h_dim);
  p.batch = static_cast<int>(q.size(0));
  p.seqlen_q = static_cast<int>(q.size(s_dim));
  p.heads_q = static_cast<int>(q.size(h_dim));
  p.head_dim = static_cast<int>(q.size(3));
  p.seqlen_k = static_cast<int>(k.size(s_dim));
  p.heads_kv = static_cast<int>(k.size(h_dim));
}

// A packed [total, H, D] tensor: its pointer and the row and head strides (no batch stride: the
// sequences' offsets come from cu_seqlens).
template <class Ptr>
inline void set_packed(const at::Tensor& t, Ptr& ptr, int64_t& row_stride, int64_t& head_stride) {
  ptr = t.data_ptr();
  row_stride = t.stride(0);
  head_stride = t.stride(1);
}

// A packed call (set_dense's counterpart): q, o [total_q, Hq, D] and k, v [total_k, Hk, D], their
// pointers and strides, the sizes read from them and the batch's int32 cu_seqlens (batch + 1
// offsets each, check_packing) with the max_seqlen bounds (check_packed_sizes has clamped them).
inline void set_packed(FwdParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& o,
                       const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q,
                       int64_t max_seqlen_k) {
  set_packed(q, p.q, p.q_row_stride, p.q_head_stride);
  set_packed(k, p.k, p.k_row_stride, p.k_head_stride);
  set_packed(v, p.v, p.v_row_stride, p.v_head_stride);
  set_packed(o, p.o, p.o_row_stride, p.o_head_stride);
  p.batch = static_cast<int>(cu_seqlens_q.size(0) - 1);
  p.heads_q = static_cast<int>(q.size(1));
  p.heads_kv = static_cast<int>(k.size(1));
  p.head_dim = static_cast<int>(q.size(2));
  p.set_varlen(cu_seqlens_q.data_ptr<int>(), cu_seqlens_k.data_ptr<int>(), static_cast<int>(max_seqlen_q),
               static_cast<int>(max_seqlen_k), static_cast<int>(q.size(0)), static_cast<int>(k.size(0)));
}

// ---- checks ---------------------------------------------------------------------------------------

inline bool is_half_type(at::ScalarType s) { return s == at::kHalf || s == at::kBFloat16; }

// q, k, v of one attention call, each `rank`-D with the head dim last and the heads at rank - 2:
// one fp16/bf16 dtype, one CUDA device, k and v alike, q's head dim, Hq a multiple of Hk, a head
// dim the kernels take. `layout` names the expected shape in messages. Strides: unit_last_stride.
inline void check_qkv(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t rank,
                      const char* layout, int64_t h_dim = -2) {
  FLASHATTN_CHECK(q.dim() == rank && k.dim() == rank && v.dim() == rank, op, ": q, k, v must be ", rank, "-D ", layout,
              ", got shapes ", q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  const at::ScalarType dtype = q.scalar_type();
  FLASHATTN_CHECK(is_half_type(dtype), op, ": dtype must be float16 or bfloat16, got ", dtype);
  FLASHATTN_CHECK(k.scalar_type() == dtype && v.scalar_type() == dtype, op, ": q, k, v must share one dtype, got ", dtype,
              ", ", k.scalar_type(), ", ", v.scalar_type());
  FLASHATTN_CHECK(q.is_cuda() && k.device() == q.device() && v.device() == q.device(), op,
              ": q, k, v must be on one CUDA device, got ", q.device(), ", ", k.device(), ", ", v.device());
  FLASHATTN_CHECK(k.sizes() == v.sizes(), op, ": k and v shapes differ: ", k.sizes(), " and ", v.sizes());
  const int64_t D = q.size(-1), Hq = q.size(h_dim), Hk = k.size(h_dim);
  FLASHATTN_CHECK(k.size(-1) == D, op, ": k/v head dim differs from q's ", D);
  FLASHATTN_CHECK(Hk > 0 && Hq % Hk == 0, op, ": q heads (", Hq, ") must be a multiple of k/v heads (", Hk, ")");
  FLASHATTN_CHECK(D >= 8 && D <= 256 && D % 8 == 0, op, ": head dim must be a multiple of 8 in [8, 256], got ", D);
}

// The layout the forward ops promise to take as it is: a contiguous last dimension (other strides
// are free; aligned_or_copy copies what the kernels cannot load).
inline void check_unit_last_stride(const char* op, std::initializer_list<const at::Tensor*> tensors) {
  for (const at::Tensor* t : tensors)
    FLASHATTN_CHECK(t->size(-1) <= 1 || t->stride(-1) == 1, op, ": last dimension must be contiguous, got strides ",
                t->strides());
}

// A tensor that must match q's dtype and device (dout, out, the new keys of a decode step).
inline void check_like(const char* op, const char* name, const at::Tensor& t, const at::Tensor& q) {
  FLASHATTN_CHECK(t.scalar_type() == q.scalar_type(), op, ": ", name, " dtype must be q's ", q.scalar_type(), ", got ",
              t.scalar_type());
  FLASHATTN_CHECK(t.device() == q.device(), op, ": ", name, " must be on q's device ", q.device(), ", got ", t.device());
}

// The forward's lse as the backward takes it back: float32 of the given shape, on q's device.
inline void check_lse(const char* op, const at::Tensor& lse, const at::Tensor& q, at::IntArrayRef shape,
                      const char* layout) {
  FLASHATTN_CHECK(lse.scalar_type() == at::kFloat && lse.sizes() == shape, op, ": lse must be float32 ", layout, " = ",
              shape, " as the forward returns it, got ", lse.scalar_type(), " ", lse.sizes());
  FLASHATTN_CHECK(lse.device() == q.device(), op, ": lse must be on q's device ", q.device(), ", got ", lse.device());
}

// int32 [batch + 1] cumulative lengths, contiguous, on q's device (never read on the host).
inline void check_cu_seqlens(const char* op, const char* name, const at::Tensor& cu, const at::Tensor& q) {
  FLASHATTN_CHECK(cu.scalar_type() == at::kInt, op, ": ", name, " must be int32, got ", cu.scalar_type());
  FLASHATTN_CHECK(cu.device() == q.device(), op, ": ", name, " must be on q's device ", q.device(), ", got ", cu.device());
  FLASHATTN_CHECK(cu.dim() == 1 && cu.size(0) >= 1, op, ": ", name, " must be 1-D [batch + 1], got shape ", cu.sizes());
  FLASHATTN_CHECK(cu.is_contiguous(), op, ": ", name, " must be contiguous");
}

// Both packings of a packed batch; returns the batch size.
inline int64_t check_packing(const char* op, const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                             int64_t max_seqlen_q, int64_t max_seqlen_k, const at::Tensor& q) {
  check_cu_seqlens(op, "cu_seqlens_q", cu_seqlens_q, q);
  check_cu_seqlens(op, "cu_seqlens_k", cu_seqlens_k, q);
  FLASHATTN_CHECK(cu_seqlens_q.size(0) == cu_seqlens_k.size(0), op,
              ": cu_seqlens_q and cu_seqlens_k must have the same length (batch + 1), got ", cu_seqlens_q.size(0),
              " and ", cu_seqlens_k.size(0));
  FLASHATTN_CHECK(max_seqlen_q >= 0 && max_seqlen_k >= 0, op, ": max_seqlen_q and max_seqlen_k must be >= 0, got ",
              max_seqlen_q, " and ", max_seqlen_k);
  return cu_seqlens_q.size(0) - 1;
}

// The packed kernels' limits (kMaxPackedRows), then max_seqlen_q/k clamped to the totals: no
// sequence is longer, and a larger bound would only launch blocks that exit at once.
inline void check_packed_sizes(const char* op, int64_t batch, int64_t total_q, int64_t total_k, int64_t heads_q,
                               int64_t& max_seqlen_q, int64_t& max_seqlen_k) {
  FLASHATTN_CHECK(total_q < kMaxPackedRows && total_k < kMaxPackedRows && batch < kMaxPackedRows &&
                      heads_q <= INT32_MAX,
                  op, ": sizes too large (total rows must be below 2^30)");
  max_seqlen_q = std::min(max_seqlen_q, total_q);
  max_seqlen_k = std::min(max_seqlen_k, total_k);
}

// The scale a kernel runs with: 1/sqrt(head dim) for none, else the caller's, which must be finite.
inline float softmax_scale_of(const char* op, std::optional<double> scale, int64_t head_dim) {
  const double s = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
  FLASHATTN_CHECK(std::isfinite(s), op, ": softmax_scale must be finite, got ", s);
  return static_cast<float>(s);
}

// The causal mode (0, 1 or 2: CausalMode), the window edges (-1 unbounded) and the softcap (0 off,
// else a positive value within float32's normal range).
inline void check_mask(const char* op, int64_t causal_mode, int64_t window_left, int64_t window_right, double softcap) {
  FLASHATTN_CHECK(causal_mode >= 0 && causal_mode <= 2, op, ": causal_mode must be 0, 1 or 2, got ", causal_mode);
  FLASHATTN_CHECK(window_left >= -1 && window_right >= -1, op, ": window_left and window_right must be >= -1 "
              "(-1: unbounded), got ", window_left, " and ", window_right);
  FLASHATTN_CHECK(softcap == 0.0 || (softcap > 0.0 && std::isfinite(static_cast<float>(softcap)) &&
                                 static_cast<float>(softcap) >= std::numeric_limits<float>::min()),
              op, ": softcap must be 0 (off) or a positive value within float32's normal range, got ", softcap);
}

inline void check_backend(const char* op, c10::string_view backend) {
  FLASHATTN_CHECK(backend == "auto" || backend == "portable" || backend == "hopper", op,
              ": backend must be 'auto', 'portable' or 'hopper', got '", std::string(backend), "'");
}

// Packed batches: 'auto' runs them on the Hopper kernels' packed flavours on an H100 and on the
// portable ones elsewhere; 'hopper' names the dense Hopper kernels, and a forced 'hopper' says so
// rather than running another path (the text of flashattn/_validate.py's VARLEN_HOPPER_MESSAGE).
constexpr const char* kVarlenHopperMessage =
    "backend 'hopper' does not support packed variable-length batches (it names the dense Hopper kernels); "
    "use set_backend('auto'), which runs the Hopper kernels' packed flavours on an H100 and the portable ones "
    "elsewhere, or 'portable'";

inline void check_packed_backend(const char* op, c10::string_view backend) {
  check_backend(op, backend);
  FLASHATTN_CHECK(backend != "hopper", op, ": ", kVarlenHopperMessage);
}

}  // namespace flashattn
