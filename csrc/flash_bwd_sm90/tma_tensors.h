// The backward's TMA tensors: q, dout, k, v read, dk, dv written (the TMA encoding itself:
// csrc/common/sm90/tma_host.h).
#pragma once

#include "../common/bwd_params.h"
#include "../common/sm90/tma_host.h"

namespace flashattn {
namespace sm90 {

// q, dout, k, v, dk and dv of a backward call as TMA tensors (the support check and the launcher
// describe the same six). A packed batch's tensors are one batch of all the packed rows (its batch
// strides are 0): the kernel reads from each sequence's first row and bounds what it uses itself.
struct BwdTmaTensors {
  TmaTensor q, dout, k, v, dk, dv;
};
inline BwdTmaTensors bwd_tma_tensors(const BwdParams& p) {
  const bool packed = p.cu_seqlens_q != nullptr;
  const int b = packed ? 1 : p.batch;
  const int sq = packed ? p.total_q : p.seqlen_q;
  const int sk = packed ? p.total_k : p.seqlen_k;
  return {{p.q, b, sq, p.heads_q, p.head_dim, p.q_batch_stride, p.q_row_stride, p.q_head_stride},
          {p.dout, b, sq, p.heads_q, p.head_dim, p.do_batch_stride, p.do_row_stride, p.do_head_stride},
          {p.k, b, sk, p.heads_kv, p.head_dim, p.k_batch_stride, p.k_row_stride, p.k_head_stride},
          {p.v, b, sk, p.heads_kv, p.head_dim, p.v_batch_stride, p.v_row_stride, p.v_head_stride},
          {p.dk, b, sk, p.heads_kv, p.head_dim, p.dk_batch_stride, p.dk_row_stride, p.dk_head_stride},
          {p.dv, b, sk, p.heads_kv, p.head_dim, p.dv_batch_stride, p.dv_row_stride, p.dv_head_stride}};
}

}  // namespace sm90
}  // namespace flashattn
