// Host side of TMA: CUtensorMap encoding through the driver's cuTensorMapEncodeTiled, reached with
// cudaGetDriverEntryPoint* (no link dependency on libcuda; the runtime has loaded the driver anyway).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flashattn {
namespace sm90 {

// The driver's cuTensorMapEncodeTiled, looked up once (nullptr when the driver lacks it).
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeTiledFn encode_tiled_fn();

// One [B, S, H, D] tensor with element strides (last dimension contiguous).
struct TmaTensor {
  const void* ptr;
  int64_t batch, seqlen, heads, head_dim;
  int64_t batch_stride, row_stride, head_stride;
};

// True when TMA can describe `t` (16-byte aligned base; strides of dimensions with more than one
// entry positive, multiples of 8 elements, under 2^40 bytes; every extent >= 1).
bool tma_tensor_ok(const TmaTensor& t);

// Encodes the 4-D map (D, S, H, B) of a 16-bit tensor `t` with box 64 columns x box_rows rows, the
// 128-byte swizzle and zero fill out of bounds. Returns false when the driver entry point is
// missing or the driver rejects the map.
bool encode_tma_4d(CUtensorMap* map, const TmaTensor& t, bool bf16, int box_rows);

// The same for a tensor of one-byte elements (the FP8 forward's e4m3 q, k and V^T): strides multiples
// of 16 elements, head dim (the innermost extent) a multiple of 16; box box_cols columns (128: one
// 128-byte swizzle row, the 128-byte swizzle; 64: the 64-byte swizzle) x box_rows rows, zero fill
// out of bounds.
bool tma_tensor_ok_u8(const TmaTensor& t);
bool encode_tma_4d_u8(CUtensorMap* map, const TmaTensor& t, int box_rows, int box_cols = 128);

// Whether the driver encodes a map whose box is larger than the tensor (head dim < 64, or a
// sequence shorter than one tile): probed once, as an [1, 1, 1, 8] view of the caller's first
// 16-byte-aligned device pointer (encoding reads no memory).
bool small_tensor_boxes_ok(const void* device_ptr);

}  // namespace sm90
}  // namespace flashattn
