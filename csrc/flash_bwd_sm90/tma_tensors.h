// The backward's TMA tensors: q, dout, k, v read, dk, dv written (the TMA encoding itself:
// csrc/common/sm90/tma_host.h).
#pragma once

#include "../common/bwd_params.h"
#include "../common/sm90/tma_host.h"

namespace flashattn {
namespace sm90 {

// q, dout, k, v, dk and dv of a backward call as TMA tensors (the support check and the launcher
// describe the same six).
struct BwdTmaTensors {
  TmaTensor q, dout, k, v, dk, dv;
};
inline BwdTmaTensors bwd_tma_tensors(const BwdParams& p) {
  return {{p.q, p.batch, p.seqlen_q, p.heads_q, p.head_dim, p.q_batch_stride, p.q_row_stride, p.q_head_stride},
          {p.dout, p.batch, p.seqlen_q, p.heads_q, p.head_dim, p.do_batch_stride, p.do_row_stride, p.do_head_stride},
          {p.k, p.batch, p.seqlen_k, p.heads_kv, p.head_dim, p.k_batch_stride, p.k_row_stride, p.k_head_stride},
          {p.v, p.batch, p.seqlen_k, p.heads_kv, p.head_dim, p.v_batch_stride, p.v_row_stride, p.v_head_stride},
          {p.dk, p.batch, p.seqlen_k, p.heads_kv, p.head_dim, p.dk_batch_stride, p.dk_row_stride, p.dk_head_stride},
          {p.dv, p.batch, p.seqlen_k, p.heads_kv, p.head_dim, p.dv_batch_stride, p.dv_row_stride, p.dv_head_stride}};
}

}  // namespace sm90
}  // namespace flashattn
