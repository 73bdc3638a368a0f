// Host/device parameter block of the backward pass. Filled on the host (csrc/binding_bwd.cpp, or
// any C++ caller), passed by value to the kernels as a __grid_constant__.
//
// It extends the forward's block (q, k, v, o, lse, their strides, sizes, scale, causal alignment)
// with the incoming gradient dO, the three gradients and the backward's scratch buffers.
#pragma once

#include <cstdint>

#include "params.h"

namespace flashattn {

// Packed variable-length batches (FwdParams::set_varlen; bwd_packed.cuh): the tensors are
// [total, H, D] with zero batch strides, lse is [Hq, total_q], and so is dpsum; dq_accum is
// [Hq, total_q, head_dim] for the portable backward and query-block tiles for the Hopper one
// (flash_bwd_sm90_dq_accum_floats); seqlen_q / seqlen_k are the bounds and batch the sequence
// count, which size the grid and the ticket array.
struct BwdParams : FwdParams {
  // dO [B, Sq, Hq, D] like o; dq [B, Sq, Hq, D]; dk, dv [B, Sk, Hk, D]: strides in elements, the
  // last dimension contiguous. lse (inherited) is the forward's float32 [B, Hq, Sq], natural log.
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  int64_t do_batch_stride = 0, do_row_stride = 0, do_head_stride = 0;
  int64_t dq_batch_stride = 0, dq_row_stride = 0, dq_head_stride = 0;
  int64_t dk_batch_stride = 0, dk_row_stride = 0, dk_head_stride = 0;
  int64_t dv_batch_stride = 0, dv_row_stride = 0, dv_head_stride = 0;

  // Scratch, float32, contiguous: dpsum [B, Hq, Sq] = rowsum(dO * O) (written by the preprocess
  // kernel); dq_accum [B, Hq, Sq, head_dim], zeroed before the main kernel (by the caller, or by
  // the preprocess: zero_floats), summed into by every key block.
  float* dpsum = nullptr;
  float* dq_accum = nullptr;

  // Deterministic mode: int32 [B, Hq, ceil(Sq / kBlockM)] zeroed as dq_accum. The key blocks add
  // their dQ shares of query block m one at a time in a fixed order (a ticket per query block), so
  // the float sums happen in one fixed order. Null: plain atomics, in whatever order blocks finish.
  int* dq_semaphore = nullptr;

  // The Hopper backward's split of a GQA group over CTAs (flash_bwd_sm90_group_split says when):
  // group_split CTAs per (key block, K/V head), each walking Hq / Hk / group_split query heads,
  // add their float32 dK and dV into dkv_accum [2][B][Hk][Sk][D'] (D' the
  // instantiated head dim: flash_bwd_sm90_dkv_accum_floats), zeroed as dq_accum; a last kernel
  // converts it into dk and dv. 1 (and null): each CTA walks the whole group and writes dk, dv.
  // After the other fields, so that the kernels that never read them keep their code.
  float* dkv_accum = nullptr;
  int group_split = 1;

  // Floats from dq_accum on that the preprocess kernel zeroes before the main kernel runs
  // (bwd_preprocess.cuh; bwd_scratch lays dq_accum, dkv_accum and the tickets out there back to
  // back, dpsum past them); 0: the caller zeroed what needs it. dq_accum 16-byte aligned. An int
  // in what was the padding after group_split, not a base pointer and a 64-bit count: the Hopper
  // kernel's Sm90BwdParams holds a BwdParams before fields of its own, which a larger block would
  // move, changing that kernel's code. bwd_scratch zeroes a region of 2^31 floats or more (8 GiB)
  // by a memset instead.
  int zero_floats = 0;

  // The Hopper backward's split of the grid's last partial wave (flash_bwd_sm90_plan_tail says
  // when; tail_split.h the rule): the last tail_units CTAs' worth of work (each a key block of a
  // (batch, K/V head) or of its GQA share) run as tail_split CTAs each, every one a contiguous run
  // of the unit's steps, so that the last wave fills the GPU. They add their float32 dK and dV
  // into dkv_accum ([2][tail_units][kBlockN][D'], or the GQA split's layout when group_split > 1),
  // converted by a last kernel. 1 (and 0): no split.
  int tail_split = 1;
  int tail_units = 0;
};

// One sequence of a backward call: of a packed batch, read from cu_seqlens on the device
// (bwd_packed.cuh: bwd_seq); of a dense call, its lengths with first rows 0.
struct BwdSeq {
  int seqlen_q;
  int seqlen_k;
  int causal_offset;  // alignment of the causal mask / window (csrc/common/mask.cuh)
  int q_row0;         // first packed row of the sequence in q, dO, lse, dpsum (and the portable dq_accum)
  int k_row0;         // first packed row of the sequence in k, v, dk, dv
};

}  // namespace flashattn
