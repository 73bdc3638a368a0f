// One launcher per tile config: the three kernels of the backward pass, in stream order.
#pragma once

#include <cuda_runtime.h>

#include "convert.cuh"
#include "mainloop.cuh"
#include "params.h"
#include "preprocess.cuh"
#include "registry.h"
#include "traits.h"

namespace flashattn {

template <typename Traits, typename Element>
cudaError_t run_bwd(const BwdParams& p, cudaStream_t stream) {
  cudaError_t err = launch_bwd_preprocess<Element>(p, stream);
  if (err != cudaSuccess) return err;

  const int num_n_blocks = (p.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
  const long long grid = static_cast<long long>(num_n_blocks) * p.batch * p.heads_kv;
  if (grid > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  auto launch = [&](auto kernel) {
    constexpr int kSmem = Traits::kSmemBytes;
    if constexpr (kSmem > 48 * 1024) {
      const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
      if (e != cudaSuccess) return e;
    }
    if (grid > 0) kernel<<<static_cast<unsigned>(grid), Traits::kNThreads, kSmem, stream>>>(p, num_n_blocks);
    return cudaGetLastError();
  };
  if (bwd_needs_window_kernel(p)) {
    // Only the configs dispatch.cu picks for such calls carry the window/softcap kernels.
    if constexpr (bwd_has_window_kernels<Traits>())
      err = p.softcap > 0.f ? launch(flash_bwd_kernel<Traits, Element, true, true>)
                            : launch(flash_bwd_kernel<Traits, Element, true, false>);
    else
      err = cudaErrorInvalidValue;
  } else {
    err = launch(flash_bwd_kernel<Traits, Element, false, false>);
  }
  if (err != cudaSuccess) return err;
  return launch_bwd_convert_dq<Element>(p, stream);
}

}  // namespace flashattn
