// The C++ entry point of the backward pass: no torch, callable from any host code.
#pragma once

#include <cuda_runtime.h>

#include "../common/bwd_params.h"

namespace flashattn {

// Block M (query rows per main-loop step) of the config flash_bwd runs for p (its head dim, and
// whether it has a window or softcap: set p's mask and softcap first) on this device, or 0 when no
// config fits: the caller sizes the deterministic mode's ticket array [B, Hq, ceil(Sq / block M)]
// with it.
int flash_bwd_block_m(const BwdParams& p, const DeviceLimits& dev);

// Runs the portable backward pass (preprocess, main kernel, dQ conversion) with the tile config
// that fits `dev`. p.dq_accum (and p.dq_semaphore when set) must be zeroed, by the caller or by
// the preprocess (p.zero_floats from p.dq_accum on); p.dpsum is written. Asynchronous on
// `stream`; returns the launch status.
cudaError_t flash_bwd(const BwdParams& p, const DeviceLimits& dev, cudaStream_t stream);

}  // namespace flashattn
