// One launcher per tile config and flavour (dense, packed): the three kernels of the backward
// pass, in stream order.
#pragma once

#include <cuda_runtime.h>

#include "../common/bwd_params.h"
#include "../common/bwd_preprocess.cuh"
#include "../common/kernel_attributes.h"
#include "convert.cuh"
#include "mainloop.cuh"
#include "registry.h"
#include "traits.h"
#include "varlen.cuh"

namespace flashattn {

// kVarlen: packed variable-length batches (varlen.cuh). The preprocess and the dQ conversion run
// their dense kernels on the packed rows seen as one batch; the main kernel has a flavour of its
// own, instantiated only by run_bwd_varlen, in translation units of its own
// (instantiations/bwd_varlen_*.cu), so that the dense ones compile exactly as before, and only on
// the configs the compact route picks (registry.h: bwd_takes_compact_route).
template <typename Traits, typename Element, bool kVarlen>
cudaError_t run_bwd_flavour(const BwdParams& p, cudaStream_t stream) {
  static_assert(!kVarlen || bwd_has_window_kernels<Traits>(), "packed batches take the compact route");
  const BwdParams rows = kVarlen ? bwd_packed_rows(p) : p;
  cudaError_t err = launch_bwd_preprocess<Element>(rows, stream);
  if (err != cudaSuccess) return err;

  // Packed, the grid is sized by the bounds: seqlen_k is max_seqlen_k, batch the sequence count.
  const int num_n_blocks = (p.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
  const long long grid = static_cast<long long>(num_n_blocks) * p.batch * p.heads_kv;
  if (grid > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  auto launch = [&](auto ref) {
    constexpr auto kernel = decltype(ref)::value;
    constexpr int kSmem = Traits::kSmemBytes;
    if constexpr (kSmem > 48 * 1024) {
      const cudaError_t e = set_max_dynamic_smem_once<kernel>(kSmem);
      if (e != cudaSuccess) return e;
    }
    if (grid > 0) kernel<<<static_cast<unsigned>(grid), Traits::kNThreads, kSmem, stream>>>(p, num_n_blocks);
    return cudaGetLastError();
  };
  if (bwd_needs_window_kernel(p)) {
    // Only the configs dispatch.cu picks for such calls carry the window/softcap kernels.
    if constexpr (bwd_has_window_kernels<Traits>())
      err = p.softcap > 0.f ? launch(KernelRef<flash_bwd_kernel<Traits, Element, kVarlen, true, true>>{})
                            : launch(KernelRef<flash_bwd_kernel<Traits, Element, kVarlen, true, false>>{});
    else
      err = cudaErrorInvalidValue;
  } else {
    err = launch(KernelRef<flash_bwd_kernel<Traits, Element, kVarlen, false, false>>{});
  }
  if (err != cudaSuccess) return err;
  return launch_bwd_convert_dq<Element>(rows, stream);
}

template <typename Traits, typename Element>
cudaError_t run_bwd(const BwdParams& p, cudaStream_t stream) {
  return run_bwd_flavour<Traits, Element, false>(p, stream);
}

template <typename Traits, typename Element>
cudaError_t run_bwd_varlen(const BwdParams& p, cudaStream_t stream) {
  return run_bwd_flavour<Traits, Element, true>(p, stream);
}

}  // namespace flashattn
