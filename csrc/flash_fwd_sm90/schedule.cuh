// How the CTAs of the Hopper forward kernel share out the query tiles. The tiles' order (and so
// which tile index means what) is tile_scheduler.h's decode_tile: within an L2 group, longest
// causal work first.
//
// Static (kDynamic = false): CTA c runs tiles c, c + grid, c + 2 grid, ... The producer and the
// consumers compute the same sequence, nothing is exchanged. Right when every tile costs the same
// (no causal mask) or when there is at most one wave of tiles.
//
// Dynamic (kDynamic = true): CTA c runs tile c first; each later tile is the next value of a
// per-call atomic counter (+ grid), taken by the producer thread once it has issued every load of
// its current tile. That happens about kStages key blocks before the consumers finish the tile,
// so the atomic's round trip stays off their path, while the choice is still made late enough to
// balance (the CTA that frees up first takes the next, longest remaining tile: greedy
// longest-first). The producer publishes each index to its consumers through a kTileRing-slot
// ring in shared memory; an index >= num_tiles tells them to stop.
#pragma once

#include <cstdint>

#include "kernel_params.h"
#include "ptx.cuh"
#include "smem.cuh"

namespace flashattn {
namespace sm90 {

#if defined(FLASHATTN_SM90A_ENABLED)

template <typename Traits, bool kDynamic>
struct ProducerSchedule {
  const Sm90Params& params;
  const SmemMap<Traits>& sm;
  // Tiles published so far: slot published % kTileRing, lap parity (published / kTileRing) & 1.
  // One counter rather than a PipeState: the producer warpgroup runs on few registers.
  uint32_t published = 0;

  __device__ __forceinline__ int first() const { return static_cast<int>(blockIdx.x); }

  // Tells the consumers which tile comes next (dynamic only; an index >= num_tiles: none).
  __device__ __forceinline__ void publish(int tile) {
    if constexpr (kDynamic) {
      const int slot = static_cast<int>(published % Traits::kTileRing);
      const uint32_t lap = (published / Traits::kTileRing) & 1u;
      sm.wait(sm.tile_empty(slot), lap ^ 1u, kTagProducerTileEmpty);  // a fresh ring: no wait
      st_shared_s32(sm.tile_slot(slot), tile);
      mbar_arrive(sm.tile_full(slot));
      ++published;
    }
  }

  __device__ __forceinline__ int next(int tile) const {
    if constexpr (kDynamic) {
      return atomicAdd(params.tile_counter, 1) + static_cast<int>(gridDim.x);
    } else {
      return tile + static_cast<int>(gridDim.x);
    }
  }
};

template <typename Traits, bool kDynamic>
struct ConsumerSchedule {
  const Sm90Params& params;
  const SmemMap<Traits>& sm;
  uint32_t received = 0;  // as ProducerSchedule::published: one register, live across every tile

  __device__ __forceinline__ int first() {
    if constexpr (kDynamic) {
      return receive();
    } else {
      return static_cast<int>(blockIdx.x);
    }
  }

  __device__ __forceinline__ int next(int tile) {
    if constexpr (kDynamic) {
      return receive();
    } else {
      return tile + static_cast<int>(gridDim.x);
    }
  }

 private:
  // Every consumer thread reads the slot, then releases it (tile_empty counts all 256).
  __device__ __forceinline__ int receive() {
    const int slot = static_cast<int>(received % Traits::kTileRing);
    sm.wait(sm.tile_full(slot), (received / Traits::kTileRing) & 1u, kTagConsumerTileFull);
    const int tile = ld_shared_s32(sm.tile_slot(slot));
    mbar_arrive(sm.tile_empty(slot));
    ++received;
    return tile;
  }
};

#endif  // FLASHATTN_SM90A_ENABLED

}  // namespace sm90
}  // namespace flashattn
