// Host side of TMA (tma_host.h): CUtensorMap encoding through the driver's cuTensorMapEncodeTiled.
// Arch-independent host code, shared by the Hopper forward and backward paths.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "layout.h"
#include "tma_host.h"

namespace flashattn {
namespace sm90 {

EncodeTiledFn encode_tiled_fn() {
  static const EncodeTiledFn fn = []() -> EncodeTiledFn {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &status);
#else
    const cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &ptr, cudaEnableDefault, &status);
#endif
    if (err != cudaSuccess || status != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    return reinterpret_cast<EncodeTiledFn>(ptr);
  }();
  return fn;
}

namespace {

constexpr int64_t kMaxStrideBytes = int64_t(1) << 40;

bool stride_ok(int64_t extent, int64_t stride_elems) {
  if (extent <= 1) return true;  // never stepped: replaced by a valid value when encoding
  const int64_t bytes = stride_elems * 2;
  return stride_elems > 0 && bytes % 16 == 0 && bytes < kMaxStrideBytes;
}

}  // namespace

bool tma_tensor_ok(const TmaTensor& t) {
  if (t.ptr == nullptr || reinterpret_cast<uintptr_t>(t.ptr) % 16 != 0) return false;
  if (t.batch < 1 || t.seqlen < 1 || t.heads < 1 || t.head_dim < 8 || t.head_dim % 8 != 0) return false;
  if (t.batch > (int64_t(1) << 31) || t.seqlen > (int64_t(1) << 31) || t.heads > (int64_t(1) << 31)) return false;
  return stride_ok(t.seqlen, t.row_stride) && stride_ok(t.heads, t.head_stride) && stride_ok(t.batch, t.batch_stride);
}

bool encode_tma_4d(CUtensorMap* map, const TmaTensor& t, bool bf16, int box_rows) {
  if (!tma_tensor_ok(t)) return false;
  const EncodeTiledFn encode = encode_tiled_fn();
  if (encode == nullptr) return false;
  // Dimensions innermost first: (D, S, H, B). A dimension of extent 1 is never stepped, so its
  // stride only has to be valid: use the packed value.
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(t.head_dim), static_cast<cuuint64_t>(t.seqlen),
                              static_cast<cuuint64_t>(t.heads), static_cast<cuuint64_t>(t.batch)};
  int64_t row = t.seqlen > 1 ? t.row_stride * 2 : t.head_dim * 2;
  row = (row + 15) / 16 * 16;
  int64_t head = t.heads > 1 ? t.head_stride * 2 : row * t.seqlen;
  int64_t batch = t.batch > 1 ? t.batch_stride * 2 : head * t.heads;
  if (row >= kMaxStrideBytes || head >= kMaxStrideBytes || batch >= kMaxStrideBytes) return false;
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(row), static_cast<cuuint64_t>(head),
                                 static_cast<cuuint64_t>(batch)};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(kChunkCols), static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const CUresult res =
      encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, const_cast<void*>(t.ptr),
             dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return res == CUDA_SUCCESS;
}

namespace {

bool stride_ok_u8(int64_t extent, int64_t stride) {
  if (extent <= 1) return true;
  return stride > 0 && stride % 16 == 0 && stride < kMaxStrideBytes;
}

}  // namespace

bool tma_tensor_ok_u8(const TmaTensor& t) {
  if (t.ptr == nullptr || reinterpret_cast<uintptr_t>(t.ptr) % 16 != 0) return false;
  if (t.batch < 1 || t.seqlen < 1 || t.heads < 1 || t.head_dim < 16 || t.head_dim % 16 != 0) return false;
  if (t.batch > (int64_t(1) << 31) || t.seqlen > (int64_t(1) << 31) || t.heads > (int64_t(1) << 31)) return false;
  return stride_ok_u8(t.seqlen, t.row_stride) && stride_ok_u8(t.heads, t.head_stride) &&
         stride_ok_u8(t.batch, t.batch_stride);
}

bool encode_tma_4d_u8(CUtensorMap* map, const TmaTensor& t, int box_rows, int box_cols) {
  if (!tma_tensor_ok_u8(t) || (box_cols != 128 && box_cols != 64)) return false;
  const EncodeTiledFn encode = encode_tiled_fn();
  if (encode == nullptr) return false;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(t.head_dim), static_cast<cuuint64_t>(t.seqlen),
                              static_cast<cuuint64_t>(t.heads), static_cast<cuuint64_t>(t.batch)};
  int64_t row = t.seqlen > 1 ? t.row_stride : t.head_dim;
  row = (row + 15) / 16 * 16;
  const int64_t head = t.heads > 1 ? t.head_stride : row * t.seqlen;
  const int64_t batch = t.batch > 1 ? t.batch_stride : head * t.heads;
  if (row >= kMaxStrideBytes || head >= kMaxStrideBytes || batch >= kMaxStrideBytes) return false;
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(row), static_cast<cuuint64_t>(head),
                                 static_cast<cuuint64_t>(batch)};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const CUtensorMapSwizzle swizzle = box_cols == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B;
  const CUresult res = encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, const_cast<void*>(t.ptr), dims, strides, box,
                              elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return res == CUDA_SUCCESS;
}

bool small_tensor_boxes_ok(const void* device_ptr) {
  static const bool ok = [device_ptr] {
    alignas(64) CUtensorMap map;
    const TmaTensor tiny{device_ptr, 1, 1, 1, 8, 8, 8, 8};
    return encode_tma_4d(&map, tiny, true, 128);
  }();
  return ok;
}

}  // namespace sm90
}  // namespace flashattn
