// The Hopper backward kernel: 2 warpgroups, wgmma, cp.async loads. See traits.h
// (tiles, shared memory) and mainloop.cuh (the step).
//
// Only the compute_90a device pass compiles the real body (FLASHATTN_SM90A_ENABLED); every other
// pass gets a stub that traps, as the Hopper forward does (../flash_fwd_sm90/kernel.cuh).
#pragma once

#include <cstdint>

#include "../flash_bwd/params.h"
#include "../flash_fwd_sm90/ptx.cuh"
#include "mainloop.cuh"
#include "traits.h"

namespace flashattn {
namespace sm90 {

template <typename Traits, typename Element>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    flash_bwd_sm90_kernel(const __grid_constant__ BwdParams params, const int num_n_blocks) {
#if defined(FLASHATTN_SM90A_ENABLED)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base =
      (smem_u32(smem_raw) + (kSwizzleAtomBytes - 1)) & ~static_cast<uint32_t>(kSwizzleAtomBytes - 1);
  bwd_sm90_mainloop<Traits, Element>(params, base, num_n_blocks);
#else
  sm90_stub_body();  // not sm_90a: never launched (flash_bwd_sm90_supported() says no)
#endif
}

}  // namespace sm90
}  // namespace flashattn
