// See unowned_rows.h.
#include "unowned_rows.h"

namespace flashattn {

namespace {

constexpr int kThreads = 256;
constexpr int kBlocks = 64;  // enough for the rare large tail; an empty one costs one read each

__global__ void __launch_bounds__(kThreads) fill_unowned_rows_kernel(uint32_t* data, int64_t outer, int64_t total,
                                                                     int64_t words_per_row, const int* cu_seqlens,
                                                                     int batch, uint32_t value) {
  const int64_t first = min(max(static_cast<int64_t>(cu_seqlens[0]), int64_t{0}), total);
  const int64_t last = min(max(static_cast<int64_t>(cu_seqlens[batch]), first), total);
  const int64_t head = first * words_per_row;                // words before the first sequence
  const int64_t tail = (total - last) * words_per_row;       // words after the last one
  const int64_t per_slice = head + tail;
  const int64_t n = outer * per_slice;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t slice = i / per_slice;
    const int64_t w = i % per_slice;
    data[slice * total * words_per_row + (w < head ? w : last * words_per_row + (w - head))] = value;
  }
}

}  // namespace

cudaError_t fill_unowned_rows(void* data, int64_t outer, int64_t total, int64_t words_per_row, const int* cu_seqlens,
                              int batch, uint32_t value, cudaStream_t stream) {
  if (outer <= 0 || total <= 0 || words_per_row <= 0 || batch <= 0) return cudaSuccess;
  fill_unowned_rows_kernel<<<kBlocks, kThreads, 0, stream>>>(static_cast<uint32_t*>(data), outer, total, words_per_row,
                                                            cu_seqlens, batch, value);
  return cudaGetLastError();
}

}  // namespace flashattn
