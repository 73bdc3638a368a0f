// The C++ entry point of the forward pass: no torch, callable from any host code.
#pragma once

#include <cuda_runtime.h>

#include "../common/params.h"

namespace flashattn {

// Runs the portable forward pass with the tile config that fits `dev` (registry.h).
// Asynchronous on `stream`; returns the launch status.
// Dense batches only (cu_seqlens null; cudaErrorInvalidValue otherwise).
cudaError_t flash_fwd(const FwdParams& p, const DeviceLimits& dev, cudaStream_t stream);

// The same for a packed variable-length batch (FwdParams::set_varlen), on the kernel's packed
// flavour; cudaErrorInvalidValue without cu_seqlens.
cudaError_t flash_fwd_varlen(const FwdParams& p, const DeviceLimits& dev, cudaStream_t stream);

}  // namespace flashattn
