// Host side of TMA: CUtensorMap encoding through the driver's cuTensorMapEncodeTiled, reached with
// cudaGetDriverEntryPoint* (no link dependency on libcuda; the runtime has loaded the driver anyway).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../flash_fwd/params.h"

namespace flashattn {
namespace sm90 {

// One [B, S, H, D] tensor with element strides (last dimension contiguous).
struct TmaTensor {
  const void* ptr;
  int64_t batch, seqlen, heads, head_dim;
  int64_t batch_stride, row_stride, head_stride;
};

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

// True when TMA can describe `t` (16-byte aligned base; strides of dimensions with more than one
// entry positive, multiples of 8 elements, under 2^40 bytes; every extent >= 1).
bool tma_tensor_ok(const TmaTensor& t);

// Encodes the 4-D map (D, S, H, B) of a 16-bit tensor `t` with box 64 columns x box_rows rows, the
// 128-byte swizzle and zero fill out of bounds. Returns false when the driver entry point is
// missing or the driver rejects the map.
bool encode_tma_4d(CUtensorMap* map, const TmaTensor& t, bool bf16, int box_rows);

// Whether the driver encodes a map whose box is larger than the tensor (head dim < 64, or a
// sequence shorter than one tile): probed once, as an [1, 1, 1, 8] view of the caller's first
// 16-byte-aligned device pointer (encoding reads no memory).
bool small_tensor_boxes_ok(const void* device_ptr);

}  // namespace sm90
}  // namespace flashattn
