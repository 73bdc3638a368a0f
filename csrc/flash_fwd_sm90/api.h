// The Hopper (sm_90a) forward path: wgmma + TMA + warp specialization (see docs/hopper.md).
// Plain host C++ entry points, no torch; the binding picks this path for backend "hopper" (forced)
// and "auto" (when flash_fwd_sm90_supported() says yes).
#pragma once

#include <cuda_runtime.h>

#include "../common/params.h"

namespace flashattn {

// True when this build and device can run `p` on the Hopper path: compute capability 9.0, the
// kernel compiled for sm_90a in this build (TORCH_CUDA_ARCH_LIST with "9.0a"), head dim a multiple
// of 8 up to 256 (64 / 128 / 256 instantiated; smaller dims run on the next one up), float16 or
// bfloat16, both sequence lengths >= 1, and strides TMA accepts for q, k, v (16-byte aligned base
// pointers, batch/row/head strides multiples of 8 elements, nonzero where the dimension has more
// than one entry) and, for head dims above 64 (whose O leaves through a TMA store), for o too.
bool flash_fwd_sm90_supported(const FwdParams& p, const DeviceLimits& dev);

// True when `p` should come with a FwdParams::tile_counter: causal masking gives the query tiles
// unequal work, and with more tiles than SMs the static round-robin schedule leaves the busiest
// SM with up to 1.8x the mean work (lab/sm90_schedule_model.py on the standard grid); handing
// the tiles out through an atomic counter, longest first, brings that to <= 1.15x.
bool flash_fwd_sm90_wants_tile_counter(const FwdParams& p, const DeviceLimits& dev);

// How many CTAs should share each query tile's keys (FwdParams::num_splits): more than 1 when the
// query tiles fill at most half the SMs (short prefills, the B=1 H=1 latency shapes), each split
// keeps at least two key blocks, and there are 3 or more splits (2 for tiles of 16+ key blocks),
// else 1; the caller then provides FwdParams::o_accum / lse_accum.
int flash_fwd_sm90_num_splits(const FwdParams& p, const DeviceLimits& dev);

// Runs the forward pass asynchronously on `stream`. Returns cudaErrorNotSupported when
// flash_fwd_sm90_supported() is false, else the launch status.
cudaError_t flash_fwd_sm90(const FwdParams& p, const DeviceLimits& dev, cudaStream_t stream);

}  // namespace flashattn
