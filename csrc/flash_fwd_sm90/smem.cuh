// Shared-memory map and pipeline state of the Hopper forward kernel (see traits.h for the layout).
#pragma once

#include <cstdint>

#include "../common/sm90/ptx.cuh"

namespace flashattn {
namespace sm90 {

// Shared-window addresses of the tiles and mbarriers, from the 1024-byte-aligned base.
template <typename Traits>
struct SmemMap {
  uint32_t base;
  int* hang_report;  // FLASHATTN_SM90_HANG_CHECK builds only (see mbar_wait_checked)

#if defined(FLASHATTN_SM90A_ENABLED)
  // Waits for phase `parity` of barrier `bar`; `tag` (WaitTag) names the wait in a hang report.
  __device__ __forceinline__ void wait(uint32_t bar, uint32_t parity, int tag) const {
#if defined(FLASHATTN_SM90_HANG_CHECK)
    mbar_wait_checked(bar, parity, hang_report, tag);
#else
    (void)tag;
    mbar_wait(bar, parity);
#endif
  }
#endif

  __device__ __forceinline__ uint32_t q(int stage) const { return base + Traits::kOffQ + stage * Traits::kQBytes; }
  __device__ __forceinline__ uint32_t k(int stage) const { return base + Traits::kOffK + stage * Traits::kKVBytes; }
  __device__ __forceinline__ uint32_t v(int stage) const { return base + Traits::kOffV + stage * Traits::kKVBytes; }
  __device__ __forceinline__ uint32_t o() const { return base + Traits::kOffO; }  // kOTma only

  // Barriers. *_full: the producer's arrive.expect_tx (count 1) + the TMA transaction bytes.
  // *_empty: one arrival from each consumer thread (Traits::kConsumerThreads) once it no longer reads the buffer.
  __device__ __forceinline__ uint32_t bar(int i) const { return base + Traits::kOffBarriers + 8 * i; }
  static constexpr int kQ = Traits::kQStages;
  __device__ __forceinline__ uint32_t q_full(int s) const { return bar(s); }
  __device__ __forceinline__ uint32_t q_empty(int s) const { return bar(kQ + s); }
  __device__ __forceinline__ uint32_t k_full(int s) const { return bar(2 * kQ + s); }
  __device__ __forceinline__ uint32_t k_empty(int s) const { return bar(2 * kQ + Traits::kStages + s); }
  __device__ __forceinline__ uint32_t v_full(int s) const { return bar(2 * kQ + 2 * Traits::kStages + s); }
  __device__ __forceinline__ uint32_t v_empty(int s) const { return bar(2 * kQ + 3 * Traits::kStages + s); }
  // The dynamic schedule's tile ring (schedule.cuh): slot i holds a tile index and its TileWork; tile_full(i):
  // the producer's arrival (count 1); tile_empty(i): one arrival from each consumer thread.
  __device__ __forceinline__ uint32_t tile_full(int i) const { return bar(2 * kQ + 4 * Traits::kStages + i); }
  __device__ __forceinline__ uint32_t tile_empty(int i) const {
    return bar(2 * kQ + 4 * Traits::kStages + Traits::kTileRing + i);
  }
  __device__ __forceinline__ uint32_t tile_slot(int i) const { return base + Traits::kOffTileSlots + Traits::kTileSlotBytes * i; }
};

// Position in a ring of kStages buffers: the buffer index and the parity of the ring's lap. A
// consumer waits for *_full phase `phase`; the producer waits for *_empty phase `phase ^ 1`, which a
// fresh barrier reports complete, so the first lap does not wait.
template <int kStages>
struct PipeState {
  int index = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++index == kStages) {
      index = 0;
      phase ^= 1u;
    }
  }
};

// The same ring position as one count of uses (the producer's form: one register a ring where
// PipeState takes two; the dynamic FP8 D=256 producer, on 24 registers, spilled with PipeState).
template <int kStages>
struct PipeCount {
  uint32_t n = 0;
  __device__ __forceinline__ int index() const { return static_cast<int>(n % kStages); }
  __device__ __forceinline__ uint32_t phase() const { return (n / kStages) & 1u; }
  __device__ __forceinline__ void advance() { ++n; }
};

// Tags printed by the hang check (FLASHATTN_SM90_HANG_CHECK) to name the stuck wait.
enum WaitTag : int {
  kTagProducerKEmpty = 1,
  kTagProducerVEmpty = 2,
  kTagProducerQEmpty = 3,
  kTagProducerTileEmpty = 4,
  kTagConsumerQFull = 11,
  kTagConsumerKFull = 12,
  kTagConsumerVFull = 13,
  kTagConsumerTileFull = 14,
};

}  // namespace sm90
}  // namespace flashattn
