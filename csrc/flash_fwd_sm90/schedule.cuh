// How the CTAs of the Hopper forward kernel share out the query tiles. The tiles' order (and so
// which tile index means what) is tile_scheduler.h's decode_tile: within an L2 group, longest
// causal work first.
//
// Static (kDynamic = false): CTA c runs tiles c, c + grid, c + 2 grid, ... (or, with the traits'
// kStaticSnake, position c and grid - 1 - c of alternate rounds: static_next_tile). The producer and
// the consumers compute the same sequence, nothing is exchanged. Right when every tile costs the
// same (no causal mask) or when there is at most one wave of tiles.
//
// Dynamic (kDynamic = true): CTA c runs tile c first; each later tile is the next value of a
// per-call atomic counter (+ grid), taken by the producer thread once it has issued every load of
// its current tile. That happens about kStages key blocks before the consumers finish the tile,
// so the atomic's round trip stays off their path, while the choice is still made late enough to
// balance (the CTA that frees up first takes the next, longest remaining tile: greedy
// longest-first). The producer publishes each index to its consumers through a kTileRing-slot
// ring in shared memory, with the tile's decoded coordinates, which it computes for its own loads
// anyway: the consumers then start a tile without its integer divisions on their path; an index
// >= num_tiles tells them to stop. The dynamic schedule never runs a split over the keys (the
// launchers refuse it), so its tiles are whole query tiles: no split to decode, publish or apply.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../common/sm90/ptx.cuh"
#include "kernel_params.h"
#include "packed.cuh"
#include "smem.cuh"
#include "tile_scheduler.h"

namespace flashattn {
namespace sm90 {

#if defined(FLASHATTN_SM90A_ENABLED)

// The n-th use of the tile ring (both sides count their uses in one register instead of a
// PipeState: the producer warpgroup runs on few registers, and the consumers keep it live across
// every tile): its slot, and the parity of that slot's barrier phase.
template <typename Traits>
__device__ __forceinline__ int tile_ring_slot(uint32_t n) {
  return static_cast<int>(n % Traits::kTileRing);
}
template <typename Traits>
__device__ __forceinline__ uint32_t tile_ring_parity(uint32_t n) {
  return (n / Traits::kTileRing) & 1u;
}

// Params: Sm90Params, Sm90Fp8Params, or Sm90PackedParams (the packed flavour, dynamic schedule only:
// each tile's work then carries its sequence, packed.cuh).
template <typename Params>
constexpr bool kIsPacked = std::is_same<Params, Sm90PackedParams>::value;

// Sm90Params::q_row_shift where the config shifts its tiles (Traits::kPartialTileFirst), else a
// compile-time 0 that leaves the other configs' code as it was.
template <typename Traits, typename Params>
__device__ __forceinline__ int q_row_shift(const Params& params) {
  if constexpr (Traits::kPartialTileFirst && !kIsPacked<Params>)
    return params.q_row_shift;
  else
    return 0;
}

// The key blocks of query tile m_block: over the rows it owns where the config shifts its tiles.
template <typename Traits>
__device__ __forceinline__ KeyBlocks tile_block_range(const Sm90Params& params, int m_block) {
  if constexpr (Traits::kPartialTileFirst)
    return block_range(m_block, Traits::kBlockM, Traits::kBlockN, params.seqlen_q, params.seqlen_k,
                       params.causal_offset, Traits::kLocal ? params.window_left : -1,
                       Traits::kLocal ? params.window_right : -1, params.q_row_shift);
  else
    return block_range(m_block, Traits::kBlockM, Traits::kBlockN, params.seqlen_q, params.seqlen_k,
                       params.causal_offset, Traits::kLocal ? params.window_left : -1,
                       Traits::kLocal ? params.window_right : -1);
}

// The tile's key blocks from its decoded index (split_tile: the integer divisions).
template <typename Traits>
__device__ __forceinline__ TileWork tile_work_of(const Sm90Params& params, const SplitTile& st) {
  const KeyBlocks r = tile_block_range<Traits>(params, st.coord.m_block);
  return TileWork{st.coord, st.split, split_blocks(r, st.split, params.num_splits)};
}

__device__ __forceinline__ SplitTile decode_split_tile(const Sm90Params& params, int t) {
  return split_tile(t, params.num_splits, params.num_m_blocks, params.heads_q, params.batch * params.heads_q,
                    params.group_heads);
}

template <typename Traits>
__device__ __forceinline__ TileWork tile_work(const Sm90Params& params, int t) {
  return tile_work_of<Traits>(params, decode_split_tile(params, t));
}

// A whole query tile's work (the dynamic schedule: no split). tile_work_of's key range without the
// split (written apart: tile_work_of built on it changed the static FP8 kernels' PTX).
template <typename Traits>
__device__ __forceinline__ TileWork unsplit_tile_work(const Sm90Params& params, const TileCoord& c) {
  const KeyBlocks r = tile_block_range<Traits>(params, c.m_block);
  return TileWork{c, 0, r};
}

// The static schedule's next tile of this CTA (tile_scheduler.h's static_next_tile).
template <bool kSnake>
__device__ __forceinline__ int static_next_tile(int tile) {
  return static_next_tile(tile, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x), kSnake);
}

template <typename Params>
using TileWorkOf = typename std::conditional<kIsPacked<Params>, PackedTileWork, TileWork>::type;
// The parameter block the schedule reads: the packed flavour's own, else Sm90Params (the FP8 kernels
// too: their descales are read outside the schedule, and one schedule type keeps their code).
template <typename Params>
using ScheduleParamsOf = typename std::conditional<kIsPacked<Params>, Sm90PackedParams, Sm90Params>::type;

// A whole query tile's work under the dynamic schedule, the producer's and the consumers' alike.
template <typename Traits, typename Params>
__device__ __forceinline__ TileWorkOf<Params> dynamic_tile_work(const Params& params, const TileCoord& c) {
  if constexpr (kIsPacked<Params>)
    return packed_tile_work<Traits>(params, c);
  else
    return unsplit_tile_work<Traits>(params, c);
}

template <typename Traits, bool kDynamic, typename Params>
struct ProducerSchedule {
  static_assert(kDynamic || !kIsPacked<Params>, "the packed flavour runs the dynamic schedule");
  using Work = TileWorkOf<Params>;
  const Params& params;
  const SmemMap<Traits>& sm;
  uint32_t published = 0;  // tiles published so far

  __device__ __forceinline__ int first() const { return static_cast<int>(blockIdx.x); }

  // Tile `tile`'s work (valid while tile < num_tiles), and for the dynamic schedule the tile told
  // to the consumers (an index >= num_tiles: none) with its decoded index (coordinates and split:
  // the integer divisions, off the consumers' path at the start of every tile). The key blocks
  // are not published: the consumers derive them (no division), and the producer, on 24
  // registers, spilled with them.
  __device__ __forceinline__ Work publish(int tile) {
    Work w{};
    if constexpr (kDynamic) {
      const int slot = tile_ring_slot<Traits>(published);
      sm.wait(sm.tile_empty(slot), tile_ring_parity<Traits>(published) ^ 1u, kTagProducerTileEmpty);  // fresh: no wait
      const uint32_t a = sm.tile_slot(slot);
      st_shared_s32(a, tile);
      if (tile < params.num_tiles) {
        const TileCoord c = decode_tile(tile, params.num_m_blocks, params.heads_q, params.batch * params.heads_q,
                                        params.group_heads);
        st_shared_s32(a + 4, c.m_block);
        st_shared_s32(a + 8, c.batch);
        st_shared_s32(a + 12, c.head_q);
        w = dynamic_tile_work<Traits>(params, c);
      }
      mbar_arrive(sm.tile_full(slot));
      ++published;
    } else {
      if (tile < params.num_tiles) w = tile_work<Traits>(params, tile);
    }
    return w;
  }

  __device__ __forceinline__ int next(int tile) const {
    if constexpr (kDynamic) {
      // The grid size read at every tile (a volatile special-register read), not kept live across
      // the tile's loads in the producer's few registers: ptxas hoisted gridDim.x out of the loop
      // and spilled it at 24 (traits.h, RegisterSplit).
      uint32_t grid;
      asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(grid));
      return atomicAdd(params.tile_counter, 1) + static_cast<int>(grid);
    } else {
      return static_next_tile<Traits::kStaticSnake>(tile);
    }
  }
};

// first() and next() return the consumers' next tile and leave its TileWork in `work` (valid while
// the index is < num_tiles): read from the ring (dynamic), or computed here (static).
template <typename Traits, bool kDynamic, typename Params>
struct ConsumerSchedule {
  const Params& params;
  const SmemMap<Traits>& sm;
  uint32_t received = 0;  // tiles received so far
  TileWorkOf<Params> work;

  __device__ __forceinline__ int first() {
    if constexpr (kDynamic) {
      return receive();
    } else {
      return compute(static_cast<int>(blockIdx.x));
    }
  }

  __device__ __forceinline__ int next(int tile) {
    if constexpr (kDynamic) {
      return receive();
    } else {
      return compute(static_next_tile<Traits::kStaticSnake>(tile));
    }
  }

 private:
  __device__ __forceinline__ int compute(int tile) {
    if (tile < params.num_tiles) work = tile_work<Traits>(params, tile);
    return tile;
  }

  // Every consumer thread reads the slot, then releases it (tile_empty counts every consumer thread).
  __device__ __forceinline__ int receive() {
    const int slot = tile_ring_slot<Traits>(received);
    sm.wait(sm.tile_full(slot), tile_ring_parity<Traits>(received), kTagConsumerTileFull);
    const uint32_t a = sm.tile_slot(slot);
    const int tile = ld_shared_s32(a);
    TileCoord c;
    if (tile < params.num_tiles) {  // the stop index comes alone
      c.m_block = ld_shared_s32(a + 4);
      c.batch = ld_shared_s32(a + 8);
      c.head_q = ld_shared_s32(a + 12);
    }
    mbar_arrive(sm.tile_empty(slot));
    ++received;
    if (tile < params.num_tiles) work = dynamic_tile_work<Traits>(params, c);
    return tile;
  }
};

#endif  // FLASHATTN_SM90A_ENABLED

}  // namespace sm90
}  // namespace flashattn
