// One launcher per tile config: the three kernels of the backward pass, in stream order.
#pragma once

#include <cuda_runtime.h>

#include "convert.cuh"
#include "mainloop.cuh"
#include "params.h"
#include "preprocess.cuh"
#include "traits.h"

namespace flashattn {

template <typename Traits, typename Element>
cudaError_t run_bwd(const BwdParams& p, cudaStream_t stream) {
  cudaError_t err = launch_bwd_preprocess<Element>(p, stream);
  if (err != cudaSuccess) return err;

  auto kernel = flash_bwd_kernel<Traits, Element>;
  constexpr int kSmem = Traits::kSmemBytes;
  if constexpr (kSmem > 48 * 1024) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (err != cudaSuccess) return err;
  }
  const int num_n_blocks = (p.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
  const long long grid = static_cast<long long>(num_n_blocks) * p.batch * p.heads_kv;
  if (grid > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  if (grid > 0) {
    kernel<<<static_cast<unsigned>(grid), Traits::kNThreads, kSmem, stream>>>(p, num_n_blocks);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return launch_bwd_convert_dq<Element>(p, stream);
}

}  // namespace flashattn
