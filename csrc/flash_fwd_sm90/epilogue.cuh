// Epilogue of a consumer warpgroup: normalized O straight from the accumulator fragment to global
// memory (each quad of lanes writes 16 contiguous bytes of a row per 8-column slice), LSE from
// one lane per quad. Rows past seqlen_q and columns past head_dim are skipped, so any sequence
// length and any head dim up to the instantiated one work. No shared memory, hence no
// synchronization with the producer, which may already be loading the next tile's Q.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernel_params.h"
#include "ptx.cuh"

namespace flashattn {
namespace sm90 {

#if defined(FLASHATTN_SM90A_ENABLED)

template <typename Element>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same<Element, __half>::value) {
    __half2 h = __floats2half2_rn(lo, hi);
    r = *reinterpret_cast<uint32_t*>(&h);
  } else {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    r = *reinterpret_cast<uint32_t*>(&h);
  }
  return r;
}

// o: this thread's m64 x kHeadDim fragment (normalized), rows (row0, row0 + 8) of the query tile
// relative to the sequence start; col0 = 2 (lane % 4).
template <typename Element, int kORegs>
__device__ __forceinline__ void store_o_lse(const Sm90Params& params, const float (&o)[kORegs], const float (&lse)[2],
                                            int batch, int head_q, int row0, int col0, bool write_lse) {
  Element* o_head = static_cast<Element*>(params.o) + batch * params.o_batch_stride + head_q * params.o_head_stride;
  float* lse_head = params.lse + (static_cast<int64_t>(batch) * params.heads_q + head_q) * params.seqlen_q;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    if (row < params.seqlen_q) {
      Element* o_row = o_head + row * params.o_row_stride;
#pragma unroll
      for (int j = 0; j < kORegs / 4; ++j) {
        const int col = 8 * j + col0;
        if (col < params.head_dim)
          *reinterpret_cast<uint32_t*>(o_row + col) = pack2<Element>(o[4 * j + 2 * h], o[4 * j + 2 * h + 1]);
      }
      if (write_lse) lse_head[row] = lse[h];
    }
  }
}

#endif  // FLASHATTN_SM90A_ENABLED

}  // namespace sm90
}  // namespace flashattn
