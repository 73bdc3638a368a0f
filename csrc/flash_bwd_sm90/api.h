// The Hopper (sm_90a) backward path: TMA loads by a producer warp, wgmma in two consumer
// warpgroups, dQ added by bulk reduce from shared memory (see mainloop.cuh) or, at D = 256, by
// vector reductions from registers (mainloop_roles.cuh). Plain
// host C++ entry points, no torch; csrc/binding_bwd.cpp picks this path for backends "auto" and
// "hopper" when flash_bwd_sm90_supported() says yes, the portable backward otherwise.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/bwd_params.h"

namespace flashattn {

// Query rows per step of this path for `p` (128 up to D = 64, 80 for dense D = 128 calls with no
// mask, a causal one or a wide window (traits.h's wide config), else 64): dq_semaphore of the
// deterministic mode is [B, Hq, ceil(Sq / flash_bwd_sm90_block_m(p))].
int flash_bwd_sm90_block_m(const BwdParams& p);

// Floats of this path's zeroed dq_accum for `p`: every query block is one tile of
// flash_bwd_sm90_block_m(p) x (64, 128, 192 or 256: D = 96 pads to 128) floats in the kernel's accumulator order (traits.h);
// a packed batch's per query head ceil(total_q / block_m) + B of them (block.h).
int64_t flash_bwd_sm90_dq_accum_floats(const BwdParams& p);

// How many CTAs share each GQA group's query heads for `p` on `dev` (BwdParams::group_split: a grid
// of few K/V heads shares each group's query heads out so that it fills the GPU; dense calls in the
// default mode only, 1 otherwise). The caller sets p.group_split to it, then p.dkv_accum to a
// float32 buffer of flash_bwd_sm90_dkv_accum_floats(p) floats (0, and no buffer, for 1), zeroed
// as dq_accum is (launch.cuh).
int flash_bwd_sm90_group_split(const BwdParams& p, const DeviceLimits& dev, bool deterministic);
// The split of the grid's last wave for `p` on `dev` (BwdParams::tail_split and tail_units: the
// last wave's units run in pieces that fill the GPU; under a mask only grids of at most half a
// wave; dense calls in the default mode only): sets both, after p.group_split. The caller then sets p.dkv_accum to a float32 buffer
// of flash_bwd_sm90_dkv_accum_floats(p) floats (0, and no buffer, when neither split is on), zeroed
// as dq_accum is (launch.cuh).
void flash_bwd_sm90_plan_tail(BwdParams& p, const DeviceLimits& dev, bool deterministic);
int64_t flash_bwd_sm90_dkv_accum_floats(const BwdParams& p);

// True when this build and device can run `p` on the Hopper backward: compute capability 9.0, the
// kernel compiled for sm_90a in this build, float16 or bfloat16, head dim a multiple of 8 up to
// 256 (64, 96, 128, 192 and 256 instantiated; smaller dims run on the next one up), causal masks, local
// windows and the softcap, packed variable-length batches (cu_seqlens_q set: the packed kernels),
// both sequence lengths (bounds) >= 1, and q, k, v, dO describable by TMA (16-byte aligned,
// positive strides in multiples of 8 elements: the bindings' aligned_or_copy and the dense one's
// copy of a broadcast dO guarantee it).
bool flash_bwd_sm90_supported(const BwdParams& p, const DeviceLimits& dev);

// Runs the backward pass (preprocess, main kernel, dQ conversion) asynchronously on `stream`.
// Returns cudaErrorNotSupported when flash_bwd_sm90_supported() is false, else the launch status.
cudaError_t flash_bwd_sm90(const BwdParams& p, const DeviceLimits& dev, cudaStream_t stream);

}  // namespace flashattn
