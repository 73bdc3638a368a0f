// The Hopper forward kernel: persistent, warp-specialized (1 producer + kConsumerWGs consumer warpgroups).
// See traits.h (tiles, shared memory), mainloop.cuh (producer), consumer.cuh (GEMMs + softmax),
// epilogue.cuh, tile_scheduler.h, and docs/hopper.md for the design.
//
// Only the compute_90a device pass compiles the real body (FLASHATTN_SM90A_ENABLED); every other
// pass (sm_80, sm_89, plain sm_90) gets a stub that traps. The stub declares a little static
// shared memory, which the real kernel never does: the host checks
// cudaFuncAttributes::sharedSizeBytes == 0 to know that this build holds the real sm_90a code for
// the device (../common/sm90/ptx.cuh: sm90_stub_body, sm90_kernel_is_real).
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "../common/sm90/ptx.cuh"
#include "consumer.cuh"
#include "kernel_params.h"
#include "mainloop.cuh"
#include "smem.cuh"
#include "traits.h"

namespace flashattn {
namespace sm90 {

#if defined(FLASHATTN_SM90A_ENABLED)
// The kernel's body, shared by the 16-bit kernel and the FP8 one (Params: Sm90Params or
// Sm90Fp8Params): shared memory and barriers, then the producer warpgroup and the consumers.
template <typename Traits, typename Element, bool kDynamic, typename Params>
__device__ __forceinline__ void fwd_sm90_body(const Params& params) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  SmemMap<Traits> sm;
  sm.hang_report = params.hang_report;
  sm.base = (smem_u32(smem_raw) + (kSwizzleAtomBytes - 1)) & ~static_cast<uint32_t>(kSwizzleAtomBytes - 1);

  // Warp-uniform role index (the shuffle tells the compiler it is uniform).
  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / kWarpgroupThreads, 0);

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < Traits::kQStages; ++s) {
      mbar_init(sm.q_full(s), 1);
      mbar_init(sm.q_empty(s), Traits::kConsumerThreads);
    }
#pragma unroll
    for (int s = 0; s < Traits::kStages; ++s) {
      mbar_init(sm.k_full(s), 1);
      mbar_init(sm.k_empty(s), Traits::kConsumerThreads);
      mbar_init(sm.v_full(s), 1);
      mbar_init(sm.v_empty(s), Traits::kConsumerThreads);
    }
    if constexpr (kDynamic) {
#pragma unroll
      for (int i = 0; i < Traits::kTileRing; ++i) {
        mbar_init(sm.tile_full(i), 1);
        mbar_init(sm.tile_empty(i), Traits::kConsumerThreads);
      }
    }
    fence_barrier_init();
  }
  __syncthreads();

  // A split over the keys merged in its cluster (no global partials: o_accum unset): the consumers
  // stash their partials at the end of consumer_loop, then every thread of every CTA passes the
  // same two cluster barriers: the stashes complete, then the merge's reads of the other CTAs'
  // shared memory done before any CTA exits. Each role runs them in its own branch: code after the
  // branches joined would run under the producer's setmaxnreg budget, and ptxas spills the merge.
  constexpr bool kMayMerge = !Traits::kFp8 && !kDynamic && Traits::kClusterMerge;
  if (warpgroup == 0) {
    setmaxnreg_dec<RegisterSplit<kDynamic, Traits::kConsumerWGs>::kProducer>();
    if (threadIdx.x == 0) producer_loop<Traits, kDynamic, ScheduleParamsOf<Params>>(params, sm);
    if constexpr (kMayMerge) {
      if (params.num_splits > 1 && params.o_accum == nullptr) {
        cluster_sync();
        cluster_sync();
      }
    }
  } else {
    setmaxnreg_inc<RegisterSplit<kDynamic, Traits::kConsumerWGs>::kConsumer>();
    consumer_loop<Traits, Element, kDynamic>(params, sm, warpgroup - 1);
    if constexpr (kMayMerge) {
      if (params.num_splits > 1 && params.o_accum == nullptr) {
        cluster_sync();
        merge_split_in_cluster<Traits, Element>(params, sm.base, threadIdx.x - kWarpgroupThreads);
        cluster_sync();
      }
    }
  }
}
#endif  // FLASHATTN_SM90A_ENABLED

// kDynamic: the tile schedule (schedule.cuh); both variants are instantiated for every config.
template <typename Traits, typename Element, bool kDynamic>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kCtasPerSm)
    flash_fwd_sm90_kernel(const __grid_constant__ Sm90Params params) {
#if defined(FLASHATTN_SM90A_ENABLED)
  fwd_sm90_body<Traits, Element, kDynamic>(params);
#else
  sm90_stub_body();  // not sm_90a: never launched (flash_fwd_sm90_supported() says no)
#endif
}

// A packed variable-length batch (Sm90PackedParams, packed.cuh) on the 16-bit configs: the same
// roles and pipeline, always the dynamic schedule (the tiles' work varies with their sequences). Its
// own kernel, so that the dense kernels keep their code (tools/kernel_identity.py).
template <typename Traits, typename Element>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kCtasPerSm)
    flash_fwd_sm90_packed_kernel(const __grid_constant__ Sm90PackedParams params) {
#if defined(FLASHATTN_SM90A_ENABLED)
  static_assert(!Traits::kFp8, "16-bit traits");
  fwd_sm90_body<Traits, Element, true>(params);
#else
  sm90_stub_body();  // not sm_90a: never launched (flash_fwd_sm90_varlen_supported() says no)
#endif
}

// The FP8 forward (Sm90Fp8FwdTraits, traits.h): the same roles and pipeline, e4m3 Q, K and V^T tiles,
// bfloat16 O. Its own kernel so that the 16-bit kernels keep their names and parameter block.
template <typename Traits, bool kDynamic>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    flash_fwd_sm90_fp8_kernel(const __grid_constant__ Sm90Fp8Params params) {
#if defined(FLASHATTN_SM90A_ENABLED)
  static_assert(Traits::kFp8, "FP8 traits");
  fwd_sm90_body<Traits, __nv_fp8_e4m3, kDynamic>(params);
#else
  sm90_stub_body();  // not sm_90a: never launched (flash_fwd_sm90_fp8_supported() says no)
#endif
}

}  // namespace sm90
}  // namespace flashattn
