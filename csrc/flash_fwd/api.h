// The C++ entry point of the forward pass: no torch, callable from any host code.
#pragma once

#include <cuda_runtime.h>

#include "params.h"
#include "traits.h"

namespace flashattn {

// Picks the tile variant for a head dim on a device: kLarge when its shared memory fits the
// device's per-block limit, else kCompact. Returns false when neither fits.
bool select_fwd_variant(int head_dim, const DeviceLimits& dev, TileVariant* variant, int* smem_bytes);

// Runs the portable forward pass. Asynchronous on `stream`; returns the launch status.
cudaError_t flash_fwd(const FwdParams& p, const DeviceLimits& dev, cudaStream_t stream);

}  // namespace flashattn
