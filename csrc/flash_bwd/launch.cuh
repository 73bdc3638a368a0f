// One launcher per tile config: the three kernels of the backward pass, in stream order.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "convert.cuh"
#include "mainloop.cuh"
#include "params.h"
#include "preprocess.cuh"
#include "registry.h"
#include "traits.h"
#include "varlen.cuh"

namespace flashattn {

template <typename Traits, typename Element>
cudaError_t run_bwd(const BwdParams& p, cudaStream_t stream) {
  // Packed batches (varlen.cuh): the preprocess and the dQ conversion run their dense kernels on
  // the packed rows seen as one batch; the main kernel has a flavour of its own.
  const bool varlen = p.cu_seqlens_q != nullptr;
  const BwdParams rows = varlen ? bwd_packed_rows(p) : p;
  cudaError_t err = launch_bwd_preprocess<Element>(rows, stream);
  if (err != cudaSuccess) return err;

  // Packed, the grid is sized by the bounds: seqlen_k is max_seqlen_k, batch the sequence count.
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
  auto launch_flavour = [&](auto varlen_flag) {
    constexpr bool kVarlen = decltype(varlen_flag)::value;
    if (bwd_needs_window_kernel(p)) {
      // Only the configs dispatch.cu picks for such calls carry the window/softcap kernels.
      if constexpr (bwd_has_window_kernels<Traits>())
        return p.softcap > 0.f ? launch(flash_bwd_kernel<Traits, Element, kVarlen, true, true>)
                               : launch(flash_bwd_kernel<Traits, Element, kVarlen, true, false>);
      else
        return cudaErrorInvalidValue;
    }
    return launch(flash_bwd_kernel<Traits, Element, kVarlen, false, false>);
  };
  err = varlen ? launch_flavour(std::true_type{}) : launch_flavour(std::false_type{});
  if (err != cudaSuccess) return err;
  return launch_bwd_convert_dq<Element>(rows, stream);
}

}  // namespace flashattn
