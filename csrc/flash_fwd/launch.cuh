// One launcher per tile config and flavour (dense, or packed variable-length batches: kVarlen,
// kernel.cuh): grid shape, dynamic shared memory, the launch itself. Packed batches take the dense
// grid with seqlen_q the longest sequence's length.
#pragma once

#include <cuda_runtime.h>

#include "../common/kernel_attributes.h"
#include "../common/params.h"
#include "kernel.cuh"
#include "traits.h"

namespace flashattn {

template <typename Traits, typename Element, bool kVarlen>
cudaError_t run_fwd(const FwdParams& p, cudaStream_t stream) {
  constexpr auto kernel = flash_fwd_kernel<Traits, Element, kVarlen>;
  constexpr int kSmem = Traits::kSmemBytes;
  if constexpr (kSmem > 48 * 1024) {
    const cudaError_t err = set_max_dynamic_smem_once<kernel>(kSmem);
    if (err != cudaSuccess) return err;
  }
  const int num_m_blocks = (p.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;
  const long long grid = static_cast<long long>(num_m_blocks) * p.batch * p.heads_q;
  if (grid == 0) return cudaSuccess;
  if (grid > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  kernel<<<static_cast<unsigned>(grid), Traits::kNThreads, kSmem, stream>>>(p, num_m_blocks);
  return cudaGetLastError();
}

}  // namespace flashattn
