// The producer of the Hopper forward kernel: one thread issues every TMA load (the FP8 traits load
// V^T tiles, planes of kVtPlaneKeys keys and all D rows, where the 16-bit ones load V: traits.h).
//
// Tiles come from schedule.cuh (static: c, c + grid, ...; dynamic: an atomic counter, each
// index published to the consumers). Per query tile (order = the consumers' order of use), over
// the key blocks [first, last] the tile needs (block_range: causal mask and local window):
//   K[last], Q, then for n = last .. first+1: K[n-1], V[n]; then V[first]
// (K runs one block ahead of V because the consumers compute S = Q K[n-1]^T while P V[n] is
// still pending: see consumer.cuh). K and V have separate kStages-deep rings so that S can start
// as soon as its K block lands.
#pragma once

#include "../common/sm90/ptx.cuh"
#include "kernel_params.h"
#include "schedule.cuh"
#include "smem.cuh"
#include "tile_scheduler.h"

namespace flashattn {
namespace sm90 {

#if defined(FLASHATTN_SM90A_ENABLED)

// Params: Sm90Params or Sm90Fp8Params, or Sm90PackedParams (the packed flavour: the maps span the
// packed rows as one batch, and a tile's rows start at its sequence's first rows, packed.cuh).
template <typename Traits, bool kDynamic, typename Params>
__device__ __forceinline__ void producer_loop(const Params& params, const SmemMap<Traits>& sm) {
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  prefetch_tmap(&params.tma_q);
  prefetch_tmap(&params.tma_k);
  prefetch_tmap(&params.tma_v);

  PipeCount<Traits::kStages> kst, vst;
  PipeCount<Traits::kQStages> qst;

  using Schedule = ProducerSchedule<Traits, kDynamic, Params>;
  Schedule sched{params, sm};

  auto load_tile = [&](const typename Schedule::Work& st) {
    const TileCoord& tc = st.coord;
    const KeyBlocks& r = st.blocks;
    if (r.count() <= 0) return;  // the consumers write O = 0, LSE = -inf without any load
    const int head_kv = tc.head_q / params.q_per_kv;
    // The maps' batch coordinate and the rows of a key block (index n) and of the tile's queries. The
    // packed flavour's maps hold the packed rows as one batch, and it walks its key blocks by their
    // first rows (from the sequence's first row): the producer's 24 registers then hold one bound
    // where block indices and a row base spilled.
    int batch = tc.batch;
    if constexpr (kIsPacked<Params>) batch = 0;
    auto key_row = [&](int n) {
      if constexpr (kIsPacked<Params>)
        return n;
      else
        return n * kBlockN;
    };
    auto query_row = [&]() {
      if constexpr (kIsPacked<Params> && Traits::kPartialTileFirst)
        return st.seq.q_row0 + packed_tile_rows<Traits>(st.seq, tc.m_block).first;
      else if constexpr (kIsPacked<Params>)
        return st.seq.q_row0 + tc.m_block * kBlockM;
      else
        return tile_rows(tc.m_block, kBlockM, params.seqlen_q, q_row_shift<Traits>(params)).first;
    };

    auto load_kv = [&](const CUtensorMap* tmap, PipeCount<Traits::kStages>& st, uint32_t tile_base, uint32_t full,
                       uint32_t empty, int n, int tag) {
      sm.wait(empty, st.phase() ^ 1u, tag);
      mbar_arrive_expect_tx(full, Traits::kKVBytes);
#pragma unroll
      for (int c = 0; c < Traits::kChunks; ++c)
        tma_load_4d(tile_base + c * Traits::kKVChunkBytes, tmap, full, c * Traits::kChunkElems, key_row(n), head_kv,
                    batch);
      st.advance();
    };
    auto load_k = [&](int n) {
      load_kv(&params.tma_k, kst, sm.k(kst.index()), sm.k_full(kst.index()), sm.k_empty(kst.index()), n, kTagProducerKEmpty);
    };
    auto load_v = [&](int n) {
      if constexpr (Traits::kFp8) {
        // V^T [B, Hk, D, Sk_pad]: planes of kVtPlaneKeys keys x all kHeadDim rows (traits.h).
        sm.wait(sm.v_empty(vst.index()), vst.phase() ^ 1u, kTagProducerVEmpty);
        mbar_arrive_expect_tx(sm.v_full(vst.index()), Traits::kKVBytes);
#pragma unroll
        for (int c = 0; c < Traits::kVtPlanes; ++c)
          tma_load_4d(sm.v(vst.index()) + c * Traits::kVtPlaneBytes, &params.tma_v, sm.v_full(vst.index()),
                      n * kBlockN + c * Traits::kVtPlaneKeys, 0, head_kv, tc.batch);
        vst.advance();
      } else {
        load_kv(&params.tma_v, vst, sm.v(vst.index()), sm.v_full(vst.index()), sm.v_empty(vst.index()), n, kTagProducerVEmpty);
      }
    };

    // Q: the consumers release the previous tile's Q after their last S = Q K^T of it.
    auto load_q = [&]() {
      sm.wait(sm.q_empty(qst.index()), qst.phase() ^ 1u, kTagProducerQEmpty);
      mbar_arrive_expect_tx(sm.q_full(qst.index()), Traits::kQBytes);
#pragma unroll
      for (int c = 0; c < Traits::kChunks; ++c)
        tma_load_4d(sm.q(qst.index()) + c * Traits::kQChunkBytes, &params.tma_q, sm.q_full(qst.index()),
                    c * Traits::kChunkElems, query_row(), tc.head_q, batch);
      qst.advance();
    };

    if constexpr (kIsPacked<Params>) {
      // "Blocks" by their first rows: n_end - 1 .. n_begin become last .. first, kBlockN apart.
      const int first = st.seq.k_row0 + r.n_begin * kBlockN;
      int row = st.seq.k_row0 + (r.n_end - 1) * kBlockN;
      load_k(row);
      load_q();
      for (; row > first; row -= kBlockN) {
        load_k(row - kBlockN);
        load_v(row);
      }
      load_v(first);
    } else {
      load_k(r.n_end - 1);
      load_q();
      for (int n = r.n_end - 1; n > r.n_begin; --n) {
        load_k(n - 1);
        load_v(n);
      }
      load_v(r.n_begin);
    }
  };

  for (int t = sched.first();; t = sched.next(t)) {
    const typename Schedule::Work w = sched.publish(t);
    if (t >= params.num_tiles) break;
    load_tile(w);
  }
}

#endif  // FLASHATTN_SM90A_ENABLED

}  // namespace sm90
}  // namespace flashattn
