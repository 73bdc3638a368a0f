// Launcher of the Hopper backward (lab prototype): the portable backward's preprocess (dpsum) and
// convert (dQ) kernels around the sm_90a main kernel, in stream order, on the same BwdParams, so
// it can later sit behind the existing backward op. The caller zeroes dq_accum first, as for
// run_bwd. No deterministic mode (p.dq_semaphore must be null).
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
  if (p.dq_semaphore != nullptr) return cudaErrorNotSupported;
  if (p.head_dim > Traits::kHeadDim || p.head_dim % 8 != 0) return cudaErrorInvalidValue;
  const long long rows = static_cast<long long>(p.batch) * p.heads_q * p.seqlen_q;
  if (rows > 0) {
    const long long grid = (rows + kBwdPreprocessWarps - 1) / kBwdPreprocessWarps;
    if (grid > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    flash_bwd_preprocess_kernel<Element><<<static_cast<unsigned>(grid), kBwdPreprocessWarps * 32, 0, stream>>>(p);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }

  auto kernel = flash_bwd_sm90_kernel<Traits, Element>;
  constexpr int kSmem = Traits::kSmemBytes;
  {
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (err != cudaSuccess) return err;
  }
  const int num_n_blocks = (p.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
  const long long grid = static_cast<long long>(num_n_blocks) * p.batch * p.heads_kv;
  if (grid > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  if (grid > 0) {
    kernel<<<static_cast<unsigned>(grid), Traits::kThreads, kSmem, stream>>>(p, num_n_blocks);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }

  if (rows > 0) {
    const long long chunks = rows * (p.head_dim / 8);
    const long long cgrid = (chunks + kBwdConvertThreads - 1) / kBwdConvertThreads;
    if (cgrid > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    flash_bwd_convert_dq_kernel<Element><<<static_cast<unsigned>(cgrid), kBwdConvertThreads, 0, stream>>>(p);
    return cudaGetLastError();
  }
  return cudaSuccess;
}

}  // namespace sm90
}  // namespace flashattn
