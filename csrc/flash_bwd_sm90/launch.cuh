// Launcher of the Hopper backward: the portable backward's preprocess (dpsum) kernel, the sm_90a
// main kernel and this path's dQ conversion (convert.cuh), in stream order. dq_accum, sized by
// flash_bwd_sm90_dq_accum_floats() (and dq_semaphore, [B, Hq, ceil(Sq / flash_bwd_sm90_block_m())],
// and dkv_accum, when set) start zeroed, by the caller or by the preprocess (BwdParams::zero_floats),
// as for the portable run_bwd. kPacked: packed variable-length batches (block.h); the preprocess
// runs on the packed rows as one batch.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>

#include "../common/bwd_packed.cuh"
#include "../common/bwd_params.h"
#include "../common/bwd_preprocess.cuh"
#include "../common/kernel_attributes.h"
#include "../common/sm90/tma_host.h"
#include "convert.cuh"
#include "kernel.cuh"
#include "kernel_params.h"
#include "tail_split.h"
#include "tma_tensors.h"
#include "traits.h"

namespace flashattn {
namespace sm90 {

template <typename Traits>
int bwd_lpt_heads(const BwdParams& p) {
  if (!p.causal || p.dq_semaphore != nullptr) return 0;
  // A unit is a (batch, K/V head) pair, or its share of the GQA group (BwdParams::group_split).
  const long long pair_bytes =
      2ll * 2 * (p.heads_q / p.heads_kv / p.group_split) * static_cast<long long>(p.seqlen_q) * Traits::kHeadDim;
  const long long pairs = static_cast<long long>(p.batch) * p.heads_kv * p.group_split;
  return static_cast<int>(bwd_lpt_group_units(bwd_lpt_budget_bytes(), pair_bytes, pairs));
}

// The query blocks' walk inside a CTA under a causal mask or a window. Forward (0): key block n
// starts at its first visible query block, so the CTAs running together are each at a different
// block and their Q, dO and dQ rows in flight span as many blocks as CTAs. Reverse (1): every CTA
// starts at the last query block and walks down to its first, so the CTAs of a head that start
// together read the same Q/dO block and add to the same dQ rows at the same time, as without a
// mask. Deterministic mode keeps the forward walk (bwd_block). Measured on the H100 (perf-notes
// "v14"): reverse with the 8 MiB groups 1.052x the plain order over 20 causal cells at D 128/256,
// forward with them 1.040x; up to +5% at D=256 S=1k. FLASHATTN_BWD_REVERSE=0|1 overrides it (a
// lab switch read at every masked call, for lab/bwd_order_time.py's side-by-side rounds).
constexpr int kBwdReverseM = 1;

inline int bwd_reverse_m(const BwdParams& p) {
  if (!p.has_mask()) return 0;
  const char* v = std::getenv("FLASHATTN_BWD_REVERSE");
  return v == nullptr || *v == '\0' ? kBwdReverseM : (std::atoi(v) != 0 ? 1 : 0);
}

// Deterministic mode without a mask: every key block of a head walks the same query blocks, so with
// the count-down order (block.h: bwd_det_ticket) the head's CTAs, which start together, queue on
// one ticket after another: key block n's first addition waits for the N - 1 - n blocks above it,
// each a bulk reduction performed in L2, and the mode cost up to 1.38x the default's time (D=256
// S=512-2k, perf-notes "Backward v18"). Rotated walks (key block n starts at query block n) have
// them add to different rows. A CTA may then wait for a CTA launched after it: taken only where a
// head's key blocks (one CTA per SM) need at most half the SMs, so that they are all resident
// while other heads' CTAs, which never wait on them, finish, and only where no key block shares a
// rotation (N <= M). FLASHATTN_BWD_ROTATE=0 keeps the count-down order (a lab switch read at every
// such call, for side-by-side timing).
template <bool kPacked>
int bwd_rotate_m(const BwdParams& p, const DeviceLimits& dev, int num_n_blocks, int num_m_blocks) {
  // (Deterministic mode never splits a GQA group or the last wave: run_bwd_sm90 refuses those.)
  if (p.dq_semaphore == nullptr || kPacked || p.has_mask() || num_n_blocks > num_m_blocks) return 0;
  const char* v = std::getenv("FLASHATTN_BWD_ROTATE");
  if (v != nullptr && *v != '\0' && std::atoi(v) == 0) return 0;
  return 2 * num_n_blocks <= dev.sm_count ? 1 : 0;
}

// dq_accum tiles per query head of a packed batch (block.h: bwd_packed_dq_block0).
template <typename Traits>
long long bwd_packed_dq_blocks(const BwdParams& p) {
  return (static_cast<long long>(p.total_q) + Traits::kBlockM - 1) / Traits::kBlockM + p.batch;
}

template <typename Traits, typename Element, bool kSoftcap, bool kPacked>
cudaError_t run_bwd_sm90(const BwdParams& p, const DeviceLimits& dev, cudaStream_t stream) {
  if ((p.softcap != 0.f) != kSoftcap || (p.cu_seqlens_q != nullptr) != kPacked) return cudaErrorInvalidValue;
  if (p.head_dim > Traits::kHeadDim || p.head_dim % 8 != 0) return cudaErrorInvalidValue;
  // A split GQA group: dense calls in the default mode only, with the float32 dK/dV sums.
  if (p.group_split < 1 || (p.heads_q / p.heads_kv) % p.group_split != 0 ||
      (p.group_split > 1 && (kPacked || p.dq_semaphore != nullptr || p.dkv_accum == nullptr)))
    return cudaErrorInvalidValue;
  Sm90BwdParams kp;
  kp.p = p;
  kp.num_n_blocks = (p.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
  // The split last wave likewise (tail_split.h), over at most the grid's units.
  const long long units = static_cast<long long>(kp.num_n_blocks) * p.batch * p.heads_kv * p.group_split;
  if (p.tail_split < 1 || p.tail_units < 0 || p.tail_units > units ||
      (p.tail_split > 1 && (kPacked || p.dq_semaphore != nullptr || p.dkv_accum == nullptr || p.tail_units < 1)))
    return cudaErrorInvalidValue;
  kp.num_m_blocks = (p.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;
  kp.lpt_heads = bwd_lpt_heads<Traits>(p);
  kp.reverse_m = bwd_reverse_m(p);
  kp.rotate_m = bwd_rotate_m<kPacked>(p, dev, kp.num_n_blocks, kp.num_m_blocks);
  const long long dq_blocks = kPacked ? bwd_packed_dq_blocks<Traits>(p) : 0;
  if (dq_blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  kp.dq_blocks_per_head = static_cast<int>(dq_blocks);
  const bool bf16 = p.dtype == DType::kBFloat16;
  const BwdTmaTensors t = bwd_tma_tensors(p);
  if (!encode_tma_4d(&kp.tma_q, t.q, bf16, Traits::kBlockM) || !encode_tma_4d(&kp.tma_do, t.dout, bf16, Traits::kBlockM) ||
      !encode_tma_4d(&kp.tma_k, t.k, bf16, 64) || !encode_tma_4d(&kp.tma_v, t.v, bf16, 64) ||
      !encode_tma_4d(&kp.tma_dk, t.dk, bf16, 64) || !encode_tma_4d(&kp.tma_dv, t.dv, bf16, 64))
    return cudaErrorInvalidValue;

  cudaError_t err = launch_bwd_preprocess<Element>(kPacked ? bwd_packed_rows(p) : p, stream);
  if (err != cudaSuccess) return err;

  constexpr auto kernel = flash_bwd_sm90_kernel<Traits, Element, kSoftcap, kPacked>;
  constexpr int kSmem = Traits::kSmemBytes;
  err = set_max_dynamic_smem_once<kernel>(kSmem);
  if (err != cudaSuccess) return err;
  const long long grid = p.tail_split > 1 ? bwd_tail_grid(units, p.tail_units, p.tail_split) : units;
  if (grid > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  if (grid > 0) {
    kernel<<<static_cast<unsigned>(grid), Traits::kThreads, kSmem, stream>>>(kp);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  if (p.group_split > 1) {  // the split last wave's pieces too
    err = launch_bwd_sm90_convert_dkv<Traits, Element>(p, stream);
    if (err != cudaSuccess) return err;
  } else if (p.tail_split > 1) {
    err = launch_bwd_sm90_convert_tail<Traits, Element>(p, kp.num_n_blocks, kp.lpt_heads, stream);
    if (err != cudaSuccess) return err;
  }
  return launch_bwd_sm90_convert_dq<Traits, Element, kPacked>(p, kp.num_m_blocks, kp.dq_blocks_per_head, stream);
}

// Whether this build holds the real sm_90a main kernel (the other device passes compile a stub
// that traps, kernel.cuh).
template <typename Traits, typename Element, bool kSoftcap, bool kPacked>
bool bwd_kernel_is_real() {
  return sm90_kernel_is_real(flash_bwd_sm90_kernel<Traits, Element, kSoftcap, kPacked>);
}

}  // namespace sm90
}  // namespace flashattn
