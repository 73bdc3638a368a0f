// Epilogue of a consumer warpgroup, two ways (Traits::kOTma):
//   store_o_lse: normalized O straight from the accumulator fragment to global memory (each quad
//     of lanes writes 16 contiguous bytes of a row per 8-column slice). Rows past seqlen_q and
//     columns past head_dim are skipped, so any sequence length and any head dim up to the
//     instantiated one work. No shared memory, hence no synchronization with the producer.
//   store_o_tma: O into the warpgroup's half of the O tile in shared memory, then one thread
//     TMA-stores it (the tensor map clips rows and columns out of bounds).
// LSE from one lane per quad either way. A tile of a split over the keys (num_splits > 1) writes
// float32 partials instead: to global memory (store_o_partial) for the combine kernel of
// ../common/split_combine.cuh, or, where the splits of a tile run as one thread-block cluster, to
// its own shared memory (stash_o_partial), from which the cluster's CTAs merge the tile
// (merge_split_in_cluster, each a share of its rows) with no second kernel and no global partials.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "../common/lse_merge.cuh"
#include "../common/sm90/ptx.cuh"
#include "kernel_params.h"
#include "packed.cuh"
#include "tile_scheduler.h"
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
// relative to the sequence start, into a head's rows [0, rows) (o_head, o_row_stride elements apart;
// lse_head contiguous); col0 = 2 (lane % 4).
template <typename Element, int kORegs>
__device__ __forceinline__ void store_o_rows(Element* o_head, int64_t o_row_stride, float* lse_head, int rows,
                                             int head_dim, const float (&o)[kORegs], const float (&lse)[2], int row0,
                                             int col0, bool write_lse) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    if (row < rows) {
      Element* o_row = o_head + row * o_row_stride;
#pragma unroll
      for (int j = 0; j < kORegs / 4; ++j) {
        const int col = 8 * j + col0;
        if (col < head_dim)
          *reinterpret_cast<uint32_t*>(o_row + col) = pack2<Element>(o[4 * j + 2 * h], o[4 * j + 2 * h + 1]);
      }
      if (write_lse) lse_head[row] = lse[h];
    }
  }
}

template <typename Element, int kORegs>
__device__ __forceinline__ void store_o_lse(const Sm90Params& params, const float (&o)[kORegs], const float (&lse)[2],
                                            int batch, int head_q, int row0, int col0, bool write_lse,
                                            int row_end = -1) {  // rows from row_end on not stored; -1: seqlen_q
  Element* o_head = static_cast<Element*>(params.o) + batch * params.o_batch_stride + head_q * params.o_head_stride;
  float* lse_head = params.lse + (static_cast<int64_t>(batch) * params.heads_q + head_q) * params.seqlen_q;
  store_o_rows<Element>(o_head, params.o_row_stride, lse_head, row_end < 0 ? params.seqlen_q : row_end, params.head_dim,
                        o, lse, row0, col0, write_lse);
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

// o: this thread's m64 x kHeadDim fragment, normalized over the split's keys, and the split's LSE,
// into the stash (Traits::kStashStride, kStashLseOffset) at shared-window address `stash`; rows
// local to the tile (row0 = 64 wg + thread row), every column of the instantiated head dim.
template <typename Traits, int kORegs>
__device__ __forceinline__ void stash_o_partial(uint32_t stash, const float (&o)[kORegs], const float (&lse)[2], int row0,
                                                int col0, bool write_lse) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    const uint32_t row_addr = stash + static_cast<uint32_t>(row * Traits::kStashStride + col0) * 4;
#pragma unroll
    for (int j = 0; j < kORegs / 4; ++j) st_shared_v2_f32(row_addr + 32 * j, o[4 * j + 2 * h], o[4 * j + 2 * h + 1]);
    if (write_lse) st_shared_f32(stash + Traits::kStashLseOffset + 4 * row, lse[h]);
  }
}

// The merge of a query tile split over the CTAs of one cluster (CTA rank = split, one tile per CTA:
// tile blockIdx.x), once every CTA has stashed its partial (a cluster barrier before and after).
// The CTA of rank r merges rows r, r + splits, ... with its consumer threads (tid <
// kConsumerThreads), one (row, 4 columns) item at a time: the splits' LSEs and their 4 columns,
// all loads from the other CTAs' shared memory independent of each other (one round trip), then
// the combine kernel's arithmetic (../common/lse_merge.cuh), computed again by every item of a row
// (cheaper than a barrier between a pass of weights and a pass of sums): a row that no split saw a
// key for (every lse_s = -inf) gets O = 0, LSE = -inf.
template <typename Traits, typename Element>
__device__ __forceinline__ void merge_split_in_cluster(const Sm90Params& params, uint32_t stash, int tid) {
  const int splits = params.num_splits;
  const SplitTile st = split_tile(static_cast<int>(blockIdx.x), splits, params.num_m_blocks, params.heads_q,
                                  params.batch * params.heads_q, params.group_heads);
  const int rows = (Traits::kBlockM - st.split + splits - 1) / splits;
  const int row_base = st.coord.m_block * Traits::kBlockM;
  const int cols4 = params.head_dim / 4;
  Element* o_head =
      static_cast<Element*>(params.o) + st.coord.batch * params.o_batch_stride + st.coord.head_q * params.o_head_stride;
  float* lse_head = params.lse + (static_cast<int64_t>(st.coord.batch) * params.heads_q + st.coord.head_q) * params.seqlen_q;
  for (int item = tid; item < rows * cols4; item += Traits::kConsumerThreads) {
    const int j = item / cols4, c4 = item - j * cols4;
    const int i = st.split + splits * j;  // the row in the tile
    const int row = row_base + i;
    if (row >= params.seqlen_q) continue;
    const uint32_t src = stash + static_cast<uint32_t>(i * Traits::kStashStride + 4 * c4) * 4;
    const uint32_t src_lse = stash + Traits::kStashLseOffset + 4 * i;
    float l[kMaxClusterSplits];
    float4 x[kMaxClusterSplits];
#pragma unroll
    for (int s = 0; s < kMaxClusterSplits; ++s) {
      l[s] = s < splits ? ld_cluster_f32(cluster_map(src_lse, s)) : -INFINITY;
      x[s] = s < splits ? ld_cluster_v4_f32(cluster_map(src, s)) : float4{};
    }
    const float lse = merged_lse<false>(l);  // the splits past `splits` hold -inf: weight 0
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if (lse != -INFINITY) {
#pragma unroll
      for (int s = 0; s < kMaxClusterSplits; ++s) {
        const float w = merge_weight(l[s], lse);
        acc.x += w * x[s].x, acc.y += w * x[s].y, acc.z += w * x[s].z, acc.w += w * x[s].w;
      }
    }
    // 4-byte stores: the launcher promises O 4-byte alignment only (dispatch.cu).
    Element* o = o_head + static_cast<int64_t>(row) * params.o_row_stride + 4 * c4;
    *reinterpret_cast<uint32_t*>(o) = pack2<Element>(acc.x, acc.y);
    *reinterpret_cast<uint32_t*>(o + 2) = pack2<Element>(acc.z, acc.w);
    if (c4 == 0) lse_head[row] = lse;
  }
}

// o: this warpgroup's m64 x kHeadDim fragment (normalized). The warpgroup's rows are rows
// [64 wg, 64 wg + 64) of each kBlockM-row plane buffer, 1024-byte aligned, so its box is one 8 KB TMA
// store per 64-column plane. Thread 0 of the warpgroup owns the bulk groups.
// o_row: the map's row of the warpgroup's first row (the tile's row 64 wg), batch its batch.
template <typename Traits, typename Element, int kORegs>
__device__ __forceinline__ void store_o_tile_tma(const Sm90Params& params, uint32_t o_tile, const float (&o)[kORegs],
                                                 int batch, int head_q, int o_row, int wg) {
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
    tma_store_4d(&params.tma_o, o_tile + slot * Traits::kQChunkBytes + wg * 64 * kChunkRowBytes, c * kChunkCols, o_row,
                 head_q, batch);
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
}

template <typename Traits, typename Element, int kORegs>
__device__ __forceinline__ void store_o_tma(const Sm90Params& params, uint32_t o_tile, const float (&o)[kORegs],
                                            const float (&lse)[2], int batch, int head_q, int tile_row0, int wg,
                                            int row0, bool write_lse) {
  // LSE first: its registers are then free before the O stores' barriers (kept until after them, the
  // FP8 D=256 dynamic kernel spilled them).
  if (write_lse) {
    float* lse_head = params.lse + (static_cast<int64_t>(batch) * params.heads_q + head_q) * params.seqlen_q;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (row0 + 8 * h < params.seqlen_q) lse_head[row0 + 8 * h] = lse[h];
  }
  store_o_tile_tma<Traits, Element>(params, o_tile, o, batch, head_q, tile_row0 + wg * 64, wg);
}

// The packed flavour (packed.cuh): the tile's own rows of the sequence only, LSE [Hq, total_q]. A
// warpgroup whose 64 rows all lie in them stores O through the TMA map over the packed rows (kOTma
// configs); one whose rows run past them stores from registers, row-bounded, as the TMA store would
// write on into the next sequence's rows or the next shifted tile's (another CTA's).
template <typename Traits, typename Element, int kORegs>
__device__ __forceinline__ void store_o_packed(const Sm90PackedParams& params, const PackedSeq& seq, uint32_t o_tile,
                                               const float (&o)[kORegs], const float (&lse)[2], int head_q,
                                               int m_block, int wg, int row0, int col0, bool write_lse) {
  float* lse_head = params.lse + static_cast<int64_t>(head_q) * params.total_q + seq.q_row0;
  int wg_row0 = m_block * Traits::kBlockM + wg * kRowsPerConsumer;
  int row_end = seq.seqlen_q;
  if constexpr (Traits::kPartialTileFirst) {
    const TileRows rows = packed_tile_rows<Traits>(seq, m_block);
    wg_row0 = rows.first + wg * kRowsPerConsumer;
    row_end = rows.end;
  }
  if constexpr (Traits::kOTma) {
    if (wg_row0 + kRowsPerConsumer <= row_end) {  // uniform across the warpgroup
      if (write_lse) {
        lse_head[row0] = lse[0];
        lse_head[row0 + 8] = lse[1];
      }
      store_o_tile_tma<Traits, Element>(params, o_tile, o, 0, head_q, seq.q_row0 + wg_row0, wg);
      return;
    }
  }
  Element* o_head = static_cast<Element*>(params.o) + static_cast<int64_t>(seq.q_row0) * params.o_row_stride +
                    static_cast<int64_t>(head_q) * params.o_head_stride;
  store_o_rows<Element>(o_head, params.o_row_stride, lse_head, row_end, params.head_dim, o, lse, row0, col0,
                        write_lse);
}

#endif  // FLASHATTN_SM90A_ENABLED

}  // namespace sm90
}  // namespace flashattn
