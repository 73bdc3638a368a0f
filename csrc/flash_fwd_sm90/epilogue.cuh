// Epilogue of a consumer warpgroup, two ways (Traits::kOTma):
//   store_o_lse: normalized O straight from the accumulator fragment to global memory (each quad
//     of lanes writes 16 contiguous bytes of a row per 8-column slice). Rows past seqlen_q and
//     columns past head_dim are skipped, so any sequence length and any head dim up to the
//     instantiated one work. No shared memory, hence no synchronization with the producer.
//   store_o_tma: O into the warpgroup's half of the O tile in shared memory, then one thread
//     TMA-stores it (the tensor map clips rows and columns out of bounds).
// LSE from one lane per quad either way. A tile of a split over the keys (num_splits > 1) writes
// float32 partials instead (store_o_partial), for the combine of ../common/split_combine.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "../common/sm90/ptx.cuh"
#include "kernel_params.h"
#include "traits.h"

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

// Four floats to four e4m3 (round to nearest, saturating to +-448) in one register, a in the lowest
// byte: the FP8 path's P (values in [0, 1]).
__device__ __forceinline__ uint32_t pack4_e4m3(float a, float b, float c, float d) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
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

// o: this thread's m64 x kHeadDim fragment, normalized over the split's keys, and the split's LSE:
// float2 stores into o_accum / lse_accum (Sm90Params), rows past seqlen_q and columns past head_dim
// skipped (the combine reads neither).
template <int kORegs>
__device__ __forceinline__ void store_o_partial(const Sm90Params& params, const float (&o)[kORegs], const float (&lse)[2],
                                                int split, int batch, int head_q, int row0, int col0, bool write_lse) {
  const int64_t rows_all = static_cast<int64_t>(params.batch) * params.heads_q * params.seqlen_q;
  const int64_t head_rows =
      split * rows_all + (static_cast<int64_t>(batch) * params.heads_q + head_q) * params.seqlen_q;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    if (row < params.seqlen_q) {
      float* o_row = params.o_accum + (head_rows + row) * params.head_dim;
#pragma unroll
      for (int j = 0; j < kORegs / 4; ++j) {
        const int col = 8 * j + col0;
        if (col < params.head_dim)
          *reinterpret_cast<float2*>(o_row + col) = make_float2(o[4 * j + 2 * h], o[4 * j + 2 * h + 1]);
      }
      if (write_lse) params.lse_accum[head_rows + row] = lse[h];
    }
  }
}

// o: this warpgroup's m64 x kHeadDim fragment (normalized). The warpgroup's rows are rows
// [64 wg, 64 wg + 64) of each kBlockM-row plane buffer, 1024-byte aligned, so its box is one 8 KB TMA
// store per 64-column plane. Thread 0 of the warpgroup owns the bulk groups.
template <typename Traits, typename Element, int kORegs>
__device__ __forceinline__ void store_o_tma(const Sm90Params& params, uint32_t o_tile, const float (&o)[kORegs],
                                            const float (&lse)[2], int batch, int head_q, int m_block, int wg,
                                            int row0, bool write_lse) {
  const int tid = threadIdx.x % 128;
  const int r0 = (tid / 32) * 16 + (tid % 32) / 4;  // this thread's rows in the warpgroup: r0, r0 + 8
  const uint32_t base = o_tile + wg * 64 * kChunkRowBytes + (tid % 4) * 4;
  // Slices j in [j0, j0 + n) (8 columns each; slice j is 16-byte chunk j % 8 of plane j / 8) into
  // buffer planes slot0, slot0 + 1, ... Within one store instruction the 8 rows (r % 8 distinct)
  // land in 8 distinct chunks of the 128-byte swizzle, so the 32 lanes hit 32 distinct banks.
  auto write_slices = [&](int j0, int n, int slot0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r0 + 8 * h;
#pragma unroll
      for (int j = j0; j < j0 + n; ++j) {
        const uint32_t addr =
            base + (slot0 + (j - j0) / 8) * Traits::kQChunkBytes + r * kChunkRowBytes + (((j % 8) ^ (r % 8)) * 16);
        st_shared_b32(addr, pack2<Element>(o[4 * j + 2 * h], o[4 * j + 2 * h + 1]));
      }
    }
  };
  auto store_plane = [&](int c, int slot) {
    tma_store_4d(&params.tma_o, o_tile + slot * Traits::kQChunkBytes + wg * 64 * kChunkRowBytes, c * kChunkCols,
                 m_block * Traits::kBlockM + wg * 64, head_q, batch);
  };
  if constexpr (Traits::kOBufPlanes == Traits::kOChunks) {
    // The whole tile fits: one wait for the previous tile's store to have read the buffer, one
    // write, one store group.
    if (tid == 0) bulk_wait_group_read<0>();
    named_barrier_sync(Traits::kEpilogueBarrierBase + wg, kWarpgroupThreads);
    write_slices(0, kORegs / 4, 0);
    fence_proxy_async();
    named_barrier_sync(Traits::kEpilogueBarrierBase + wg, kWarpgroupThreads);
    if (tid == 0) {
#pragma unroll
      for (int c = 0; c < Traits::kOChunks; ++c) store_plane(c, c);
      bulk_commit_group();
    }
  } else {
    // Streamed through kOBufPlanes plane buffers, one store group per plane: before a buffer is
    // rewritten, the group that last used it (kOBufPlanes groups ago) must have read it.
#pragma unroll
    for (int c = 0; c < Traits::kOChunks; ++c) {
      const int slot = c % Traits::kOBufPlanes;
      if (tid == 0) bulk_wait_group_read<Traits::kOBufPlanes - 1>();
      named_barrier_sync(Traits::kEpilogueBarrierBase + wg, kWarpgroupThreads);
      write_slices(8 * c, 8, slot);
      fence_proxy_async();
      named_barrier_sync(Traits::kEpilogueBarrierBase + wg, kWarpgroupThreads);
      if (tid == 0) {
        store_plane(c, slot);
        bulk_commit_group();
      }
    }
  }
  if (write_lse) {
    float* lse_head = params.lse + (static_cast<int64_t>(batch) * params.heads_q + head_q) * params.seqlen_q;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (row0 + 8 * h < params.seqlen_q) lse_head[row0 + 8 * h] = lse[h];
  }
}

#endif  // FLASHATTN_SM90A_ENABLED

}  // namespace sm90
}  // namespace flashattn
