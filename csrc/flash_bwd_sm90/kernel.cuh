// The Hopper backward kernel: a producer warpgroup (TMA loads, the dQ writer) and two consumer
// warpgroups (wgmma). See traits.h (tiles, shared memory), mainloop.cuh (the roles) and
// mainloop_roles.cuh (the consumers at D = 256).
//
// Only the compute_90a device pass compiles the real body (FLASHATTN_SM90A_ENABLED); every other
// pass gets a stub that traps, as the Hopper forward does (../flash_fwd_sm90/kernel.cuh).
#pragma once

#include <cstdint>

#include "../common/bwd_packed.cuh"
#include "../common/sm90/ptx.cuh"
#include "kernel_params.h"
#include "mainloop.cuh"
#include "mainloop_roles.cuh"
#include "traits.h"

namespace flashattn {
namespace sm90 {

// What every role derives from the CTA's index (block.h), the sequence read from cu_seqlens in the
// packed kernels.
template <typename Traits, bool kPacked>
__device__ __forceinline__ BwdBlock bwd_block_of_cta(const Sm90BwdParams& kp) {
  return bwd_block<Traits, kPacked>(kp.p, kp.num_n_blocks, kp.lpt_heads, kp.reverse_m, static_cast<int>(blockIdx.x),
                                    [&](int batch) {
                                      if constexpr (kPacked)
                                        return bwd_seq(kp.p, batch);
                                      else
                                        return bwd_dense_seq(kp.p);
                                    },
                                    kp.rotate_m);
}

// kSoftcap: the logit softcap's kernels (capped scores and tanh's derivative), apart so that the
// others compile as without it. kPacked: packed variable-length batches (block.h), likewise.
template <typename Traits, typename Element, bool kSoftcap, bool kPacked>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    flash_bwd_sm90_kernel(const __grid_constant__ Sm90BwdParams params) {
#if defined(FLASHATTN_SM90A_ENABLED)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  BwdSmem<Traits> sm;
  sm.base = (smem_u32(smem_raw) + (kSwizzleAtomBytes - 1)) & ~static_cast<uint32_t>(kSwizzleAtomBytes - 1);

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < Traits::kStages; ++s) {
      mbar_init(sm.full(s), 1 + 2 * 32);  // the TMA lane (with the bytes), the lse and dpsum warps' lanes
      // Freed by the consumers once they have read the stage, or at D = 256 by the dQ writer once
      // it has read the dQ the consumers wrote over it.
      mbar_init(sm.empty(s), Traits::kDqInStage ? 1 : Traits::kConsumerThreads);
      if constexpr (Traits::kDqInStage) mbar_init(sm.dq_ready(s), Traits::kConsumerThreads);
    }
    mbar_init(sm.kv_full(), 1);
    mbar_init(sm.dq_full(), Traits::kConsumerThreads);
    mbar_init(sm.dq_empty(), 1);
    fence_barrier_init();
  }
  __syncthreads();

  // Warp-uniform role index (the shuffle tells the compiler it is uniform). Each role derives the
  // block's coordinates after its setmaxnreg: values computed before the split keep the registers
  // the consumers' allocation gave them, which the producer's 24 cannot hold (they spilled).
  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / kWarpgroupThreads, 0);
  if (warpgroup == 0) {
    setmaxnreg_dec<Traits::kProducerRegs>();
    const BwdBlock blk = bwd_block_of_cta<Traits, kPacked>(params);
    const int warp = threadIdx.x / 32;
    if (warp == 0)
      bwd_sm90_load<Traits, kPacked>(params, sm, blk, threadIdx.x % 32);
    else if (warp == 1) {
      if constexpr (Traits::kDqInStage)
        bwd_sm90_dq_writer_roles<Traits, kPacked>(params, sm, blk, threadIdx.x % 32);
      else
        bwd_sm90_dq_writer<Traits, kPacked>(params, sm, blk, threadIdx.x % 32);
    }
    else
      bwd_sm90_load_row_stats<Traits, kPacked>(params, sm, blk, threadIdx.x % 32, warp == 3);
  } else {
    setmaxnreg_inc<Traits::kConsumerRegs>();
    const BwdBlock blk = bwd_block_of_cta<Traits, kPacked>(params);
    if constexpr (Traits::kRoles)
      bwd_sm90_consumer_roles<Traits, Element, kSoftcap, kPacked>(params, sm, blk, warpgroup - 1,
                                                                  threadIdx.x % kWarpgroupThreads);
    else
      bwd_sm90_consumer<Traits, Element, kSoftcap, kPacked>(params, sm, blk, warpgroup - 1,
                                                            threadIdx.x % kWarpgroupThreads);
  }
#else
  sm90_stub_body();  // not sm_90a: never launched (flash_bwd_sm90_supported() says no)
#endif
}

}  // namespace sm90
}  // namespace flashattn
