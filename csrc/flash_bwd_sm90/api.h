// The Hopper (sm_90a) backward path: wgmma, two computing warpgroups (see mainloop.cuh). Plain
// host C++ entry points, no torch; csrc/binding_bwd.cpp picks this path for backends "auto" and
// "hopper" when flash_bwd_sm90_supported() says yes, the portable backward otherwise.
#pragma once

#include <cuda_runtime.h>

#include "../flash_bwd/params.h"

namespace flashattn {

// Query rows per dQ ticket of the deterministic mode on this path: dq_semaphore is
// [B, Hq, ceil(Sq / flash_bwd_sm90_block_m())].
int flash_bwd_sm90_block_m();

// True when this build and device can run `p` on the Hopper backward: compute capability 9.0, the
// kernel compiled for sm_90a in this build, float16 or bfloat16, head dim a multiple of 8 up to
// 128 (64 and 128 instantiated; smaller dims run on the next one up), no local window and no
// softcap (those run on the portable backward), both sequence lengths >= 1, and q, k, v, dO
// readable 16 bytes at a time (the binding's aligned_or_copy guarantees it).
bool flash_bwd_sm90_supported(const BwdParams& p, const DeviceLimits& dev);

// Runs the backward pass (preprocess, main kernel, dQ conversion) asynchronously on `stream`.
// Returns cudaErrorNotSupported when flash_bwd_sm90_supported() is false, else the launch status.
cudaError_t flash_bwd_sm90(const BwdParams& p, const DeviceLimits& dev, cudaStream_t stream);

}  // namespace flashattn
