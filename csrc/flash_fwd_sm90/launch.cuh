// Host launcher of the Hopper forward kernel, one instantiation per (traits, dtype): the explicit
// instantiations live in csrc/flash_fwd_sm90/fwd_sm90_*.cu; dispatch.cu picks one.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "../flash_fwd/params.h"
#include "kernel.cuh"
#include "kernel_params.h"
#include "launch_decl.h"
#include "tma_host.h"
#include "traits.h"

namespace flashattn {
namespace sm90 {

// (batch, head) pairs per L2 group: as many as keep their K and V under ~24 MB (half of an H100's
// 50 MB L2), a multiple of the query heads sharing one K/V head.
inline int l2_group_heads(const FwdParams& p) {
  const int64_t kv_bytes_per_head = 2ll * p.seqlen_k * p.head_dim * 2;  // K and V, 16-bit
  const int64_t budget = 24ll << 20;
  int64_t kv_heads = std::max<int64_t>(1, budget / std::max<int64_t>(1, kv_bytes_per_head));
  const int64_t q_per_kv = p.heads_q / p.heads_kv;
  const int64_t total = static_cast<int64_t>(p.batch) * p.heads_q;
  return static_cast<int>(std::min<int64_t>(total, kv_heads * q_per_kv));
}

// Where a FLASHATTN_SM90_HANG_CHECK build reports a stuck mbarrier wait (host-mapped int[8],
// set by tools/sm90_lab.cu); one slot per process (inline function: shared by every TU).
inline int*& sm90_hang_report_slot() {
  static int* slot = nullptr;
  return slot;
}

// True when this build holds the real sm_90a kernel for the current device (see kernel.cuh).
template <typename Traits, typename Element>
bool kernel_is_real() {
  cudaFuncAttributes attr;
  if (cudaFuncGetAttributes(&attr, flash_fwd_sm90_kernel<Traits, Element>) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.sharedSizeBytes == 0 && attr.binaryVersion >= 90;
}

// Fills the kernel parameters (tensor maps included). False when TMA cannot describe the tensors.
template <typename Traits>
bool make_sm90_params(const FwdParams& p, Sm90Params& k) {
  const bool bf16 = p.dtype == DType::kBFloat16;
  const TmaTensor tq{p.q, p.batch, p.seqlen_q, p.heads_q, p.head_dim, p.q_batch_stride, p.q_row_stride, p.q_head_stride};
  const TmaTensor tk{p.k, p.batch, p.seqlen_k, p.heads_kv, p.head_dim, p.k_batch_stride, p.k_row_stride, p.k_head_stride};
  const TmaTensor tv{p.v, p.batch, p.seqlen_k, p.heads_kv, p.head_dim, p.v_batch_stride, p.v_row_stride, p.v_head_stride};
  if (!encode_tma_4d(&k.tma_q, tq, bf16, Traits::kBlockM)) return false;
  if (!encode_tma_4d(&k.tma_k, tk, bf16, Traits::kBlockN)) return false;
  if (!encode_tma_4d(&k.tma_v, tv, bf16, Traits::kBlockN)) return false;
  k.o = p.o;
  k.lse = p.lse;
  k.o_batch_stride = p.o_batch_stride;
  k.o_row_stride = p.o_row_stride;
  k.o_head_stride = p.o_head_stride;
  k.batch = p.batch;
  k.heads_q = p.heads_q;
  k.heads_kv = p.heads_kv;
  k.q_per_kv = p.heads_q / p.heads_kv;
  k.seqlen_q = p.seqlen_q;
  k.seqlen_k = p.seqlen_k;
  k.head_dim = p.head_dim;
  k.scale_log2 = p.scale_log2;
  k.causal = p.causal ? 1 : 0;
  k.causal_offset = p.causal_offset;
  k.num_m_blocks = (p.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;
  k.num_tiles = k.num_m_blocks * p.batch * p.heads_q;
  k.group_heads = l2_group_heads(p);
  k.hang_report = sm90_hang_report_slot();
  return true;
}

template <typename Traits, typename Element>
cudaError_t run_fwd_sm90(const FwdParams& p, const DeviceLimits& dev, cudaStream_t stream) {
  static_assert(Traits::kSmemBytes <= kMaxSmemSm90, "shared memory");
  if (Traits::kSmemBytes > dev.max_smem_per_block) return cudaErrorNotSupported;
  Sm90Params k;
  if (!make_sm90_params<Traits>(p, k)) return cudaErrorNotSupported;
  if (k.num_tiles == 0) return cudaSuccess;
  auto kernel = flash_fwd_sm90_kernel<Traits, Element>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes);
  if (err != cudaSuccess) return err;
  const int grid = std::min(k.num_tiles, std::max(1, dev.sm_count));
  kernel<<<grid, kThreads, Traits::kSmemBytes, stream>>>(k);
  return cudaGetLastError();
}

}  // namespace sm90
}  // namespace flashattn
