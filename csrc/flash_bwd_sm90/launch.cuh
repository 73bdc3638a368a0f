// Launcher of the Hopper backward: the portable backward's preprocess (dpsum) and convert (dQ)
// kernels around the sm_90a main kernel, in stream order, on the same BwdParams. The caller
// zeroes dq_accum (and dq_semaphore, sized with kBlockM = 64 query rows, when set) first, as for
// the portable run_bwd.
#pragma once

#include <cuda_runtime.h>

#include "../flash_bwd/convert.cuh"
#include "../flash_bwd/params.h"
#include "../flash_bwd/preprocess.cuh"
#include "kernel.cuh"
#include "traits.h"

namespace flashattn {
namespace sm90 {

template <typename Traits, typename Element>
cudaError_t run_bwd_sm90(const BwdParams& p, cudaStream_t stream) {
  if (p.head_dim > Traits::kHeadDim || p.head_dim % 8 != 0) return cudaErrorInvalidValue;
  cudaError_t err = launch_bwd_preprocess<Element>(p, stream);
  if (err != cudaSuccess) return err;

  auto kernel = flash_bwd_sm90_kernel<Traits, Element>;
  constexpr int kSmem = Traits::kSmemBytes;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (err != cudaSuccess) return err;
  const int num_n_blocks = (p.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
  const long long grid = static_cast<long long>(num_n_blocks) * p.batch * p.heads_kv;
  if (grid > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  if (grid > 0) {
    kernel<<<static_cast<unsigned>(grid), Traits::kThreads, kSmem, stream>>>(p, num_n_blocks);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return launch_bwd_convert_dq<Element>(p, stream);
}

// Whether this build holds the real sm_90a main kernel (the other device passes compile a stub
// that traps, kernel.cuh).
template <typename Traits, typename Element>
bool bwd_kernel_is_real() {
  return sm90_kernel_is_real(flash_bwd_sm90_kernel<Traits, Element>);
}

}  // namespace sm90
}  // namespace flashattn
