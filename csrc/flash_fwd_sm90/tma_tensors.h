// The forward's four tensors as TMA tensors (the TMA encoding itself: csrc/common/sm90/tma_host.h).
#pragma once

#include "../common/params.h"
#include "../common/sm90/tma_host.h"
#include "api.h"

namespace flashattn {
namespace sm90 {

// q, k, v and o of a forward call as TMA tensors (the support check and the launcher describe the
// same four).
struct FwdTmaTensors {
  TmaTensor q, k, v, o;
};
inline FwdTmaTensors fwd_tma_tensors(const FwdParams& p) {
  return {{p.q, p.batch, p.seqlen_q, p.heads_q, p.head_dim, p.q_batch_stride, p.q_row_stride, p.q_head_stride},
          {p.k, p.batch, p.seqlen_k, p.heads_kv, p.head_dim, p.k_batch_stride, p.k_row_stride, p.k_head_stride},
          {p.v, p.batch, p.seqlen_k, p.heads_kv, p.head_dim, p.v_batch_stride, p.v_row_stride, p.v_head_stride},
          {p.o, p.batch, p.seqlen_q, p.heads_q, p.head_dim, p.o_batch_stride, p.o_row_stride, p.o_head_stride}};
}

// The same four of a packed variable-length batch (FwdParams::set_varlen): the packed rows as one
// batch, [1, total, H, D] (the packed flavour addresses a sequence by its first row).
inline FwdTmaTensors fwd_packed_tma_tensors(const FwdParams& p) {
  return {{p.q, 1, p.total_q, p.heads_q, p.head_dim, 0, p.q_row_stride, p.q_head_stride},
          {p.k, 1, p.total_k, p.heads_kv, p.head_dim, 0, p.k_row_stride, p.k_head_stride},
          {p.v, 1, p.total_k, p.heads_kv, p.head_dim, 0, p.v_row_stride, p.v_head_stride},
          {p.o, 1, p.total_q, p.heads_q, p.head_dim, 0, p.o_row_stride, p.o_head_stride}};
}

// The FP8 forward's V^T [B, Hk, D, vt_keys] (contiguous, one byte per element) as a TMA tensor: its
// "rows" are the head dim, its innermost extent the (permuted, zero-padded) keys.
inline TmaTensor fp8_vt_tensor(const FwdParams& p, const Fp8FwdArgs& x) {
  const int64_t plane = static_cast<int64_t>(p.head_dim) * x.vt_keys;
  return {x.vt, p.batch, p.head_dim, p.heads_kv, x.vt_keys, p.heads_kv * plane, x.vt_keys, plane};
}

}  // namespace sm90
}  // namespace flashattn
