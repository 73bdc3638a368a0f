// The Hopper (sm_90a) forward path: wgmma + TMA + warp specialization (see docs/hopper.md).
// Plain host C++ entry points, no torch; the binding picks this path for backend "hopper" (forced)
// and "auto" (when flash_fwd_sm90_supported() says yes).
#pragma once

#include <cuda_runtime.h>

#include "../common/params.h"

namespace flashattn {

// True when this build and device can run `p` on the Hopper path: compute capability 9.0, the
// kernel compiled for sm_90a in this build (TORCH_CUDA_ARCH_LIST with "9.0a"), head dim a multiple
// of 8 up to 256 (64 / 96 / 128 / 192 / 256 instantiated; smaller dims run on the next one up), float16 or
// bfloat16, both sequence lengths >= 1, and strides TMA accepts for q, k, v (16-byte aligned base
// pointers, batch/row/head strides multiples of 8 elements, nonzero where the dimension has more
// than one entry) and, where the config serving `p` stores O by TMA (every config above D=64, D=64's
// default one: traits.h kOTma), for o too.
bool flash_fwd_sm90_supported(const FwdParams& p, const DeviceLimits& dev);

// True when backend "auto" should run `p` on the portable path although the Hopper path supports
// it: one short tile a head (at most 64 queries and 64 keys, D <= 64) on a grid filling at most
// half the SMs, where the Hopper kernel's fixed prologue (barrier setup, tensor maps, the
// producer's first loads) outlasts the portable kernel's whole run (B=1 H=1 D=64 fp16, H200,
// kernel us: S=32 4.84 against 4.02, S=64 5.00 against 3.95; S=128 even, 5.01 against 5.07).
bool flash_fwd_sm90_prefers_portable(const FwdParams& p, const DeviceLimits& dev);

// How a call shares each query tile's keys among several CTAs (a split over the keys), and how the
// splits merge.
struct FwdSplitPlan {
  int num_splits = 1;       // FwdParams::num_splits; 1: no split
  bool in_cluster = false;  // the splits of a tile run as one thread-block cluster that merges them in
                            // shared memory: the caller leaves o_accum / lse_accum unset and no
                            // combine kernel runs; else it provides them and a combine kernel merges
};

// What the Hopper path runs for one dense call, decided once per call (choosing the config reads the
// environment on small grids): which instantiation, whether the caller should provide a tile
// counter, and the split over the keys.
struct Sm90FwdPlan {
  int launcher = -1;  // the instantiation; -1 when the Hopper path cannot run the call
                      // (flash_fwd_sm90_supported() false)
  // True when the call should come with a FwdParams::tile_counter: causal masking gives the query
  // tiles unequal work, and with more tiles than SMs the static round-robin schedule leaves the
  // busiest SM with up to 1.8x the mean work (lab/sm90_schedule_model.py on the standard grid);
  // handing the tiles out through an atomic counter, longest first, brings that to <= 1.15x.
  bool tile_counter = false;
  // More than one split when the query tiles fill at most half the SMs (short prefills, the B=1 H=1
  // latency shapes), each split keeps at least one key block, and there are 3 or more splits (2
  // for tiles of 16+ key blocks); in a cluster where up to 8 splits of every tile fit in one wave,
  // taking fewer splits for that where each then holds at most one key block more.
  FwdSplitPlan split;
};

// The plan for `p` (its tensors set: the plan checks their strides as TMA takes them) on this device.
Sm90FwdPlan flash_fwd_sm90_plan(const FwdParams& p, const DeviceLimits& dev);

// Runs the forward pass of `p` asynchronously on `stream` with the instantiation `plan` chose for
// it: `p` as it was planned, plus the tile counter and split the plan asked for (the dynamic
// schedule runs when p.tile_counter is set, the call is not split and the config has a dynamic
// kernel: the small-grid config, whose grids fit in one wave, has none). Returns
// cudaErrorNotSupported when plan.launcher < 0 or the driver refuses a tensor map, before any
// launch; else the launch status.
cudaError_t flash_fwd_sm90(const FwdParams& p, const Sm90FwdPlan& plan, const DeviceLimits& dev, cudaStream_t stream);

// ---- packed variable-length batches (FwdParams::set_varlen; docs/varlen.md) -----------------------
// True when this build and device run the packed batch `p` on the Hopper path: what
// flash_fwd_sm90_supported() asks of a dense call, on the packed rows ([1, total, H, D] as TMA sees
// them), with at least one row of q and of k/v and no split over the keys.
bool flash_fwd_sm90_varlen_supported(const FwdParams& p, const DeviceLimits& dev);

// Runs the packed batch `p` on the Hopper forward's packed flavour (the dynamic schedule: p.tile_counter, a
// zeroed int32 private to the call, is required). lse [Hq, total_q]; rows no sequence owns are not
// written. cudaErrorNotSupported when flash_fwd_sm90_varlen_supported() is false, before any launch.
cudaError_t flash_fwd_sm90_varlen(const FwdParams& p, const DeviceLimits& dev, cudaStream_t stream);

// ---- FP8 forward (issue 29; docs/hopper.md "FP8 forward") -------------------------------------------
// q, k, v float8_e4m3fn (FwdParams::dtype kFloat8E4M3), o bfloat16 [B, Sq, Hq, D], lse as the
// 16-bit path's. What the FP8 kernel needs besides FwdParams:
struct Fp8FwdArgs {
  // V^T: uint8 [B, Hk, D, vt_keys] contiguous, vt_keys = flash_fwd_sm90_fp8_vt_keys(seqlen_k); written
  // by flash_fwd_sm90_fp8_transpose_v (stream-ordered before the forward).
  void* vt = nullptr;
  int64_t vt_keys = 0;
  // Descale factors, float32 [B, Hk] contiguous on the device (FlashAttention-3's form): the inputs
  // are q8 * q_descale etc. Scores use q_descale * k_descale * softmax_scale, O = v_descale * P V8.
  const float* q_descale = nullptr;
  const float* k_descale = nullptr;
  const float* v_descale = nullptr;
};

// The key extent of V^T: seqlen_k rounded up to a multiple of 128 keys (the padding holds zeros).
int64_t flash_fwd_sm90_fp8_vt_keys(int64_t seqlen_k);

// True when this build and device run `p` on the FP8 path: compute capability 9.0, the FP8 kernel
// compiled for sm_90a, dtype kFloat8E4M3, head dim a multiple of 16 up to 256 (128 and 256
// instantiated), 16-byte aligned q/k with strides multiples of 16 elements, o 16-byte aligned
// bfloat16 with even strides TMA takes, no split, no softcap.
bool flash_fwd_sm90_fp8_supported(const FwdParams& p, const DeviceLimits& dev);

// As Sm90FwdPlan::tile_counter, for the FP8 configs.
bool flash_fwd_sm90_fp8_wants_tile_counter(const FwdParams& p, const DeviceLimits& dev);

// Writes V^T (Fp8FwdArgs::vt) from p.v: vt[b, h, d, 32 g + k] = v[b, 32 g + fp8_key_of_position(k),
// h, d] (flash_fwd_sm90/traits.h), 0 for keys >= seqlen_k. Any arch (plain CUDA), its own launch.
cudaError_t flash_fwd_sm90_fp8_transpose_v(const FwdParams& p, const Fp8FwdArgs& x, cudaStream_t stream);

// Runs the FP8 forward (after flash_fwd_sm90_fp8_transpose_v, same stream). cudaErrorNotSupported
// when flash_fwd_sm90_fp8_supported() is false, before any launch.
cudaError_t flash_fwd_sm90_fp8(const FwdParams& p, const Fp8FwdArgs& x, const DeviceLimits& dev, cudaStream_t stream);

}  // namespace flashattn
