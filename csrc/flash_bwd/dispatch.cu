// Picks the backward instantiation for (dtype, head dim, device) and launches it. Only declares
// the launcher template: the definitions are the explicit instantiations in instantiations/.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../common/dtype_of.h"
#include "api.h"
#include "registry.h"

namespace flashattn {

template <typename Traits, typename Element>
cudaError_t run_bwd(const BwdParams& p, cudaStream_t stream);
template <typename Traits, typename Element>
cudaError_t run_bwd_varlen(const BwdParams& p, cudaStream_t stream);

namespace {

using LaunchFn = cudaError_t (*)(const BwdParams&, cudaStream_t);

struct BwdLauncher {
  DType dtype;
  int head_dim;
  BwdTileVariant variant;
  LaunchFn launch;         // dense batches
  LaunchFn launch_varlen;  // packed variable-length batches (BwdParams::cu_seqlens_q set); null where none
};

// The packed flavour exists on the configs the compact route picks (registry.h), instantiated in
// instantiations/bwd_varlen_*.cu; the others have none (and no reference to one, which would not link).
template <typename Traits, typename T>
constexpr LaunchFn varlen_launcher() {
  if constexpr (bwd_has_window_kernels<Traits>())
    return &run_bwd_varlen<Traits, T>;
  else
    return nullptr;
}

#define FLASHATTN_BWD_INSTANCE(T, D, V)                                                              \
  BwdLauncher{dtype_of<T>(), D, BwdTileVariant::V, &run_bwd<BwdTileConfig<D, BwdTileVariant::V>::Traits, T>, \
              varlen_launcher<BwdTileConfig<D, BwdTileVariant::V>::Traits, T>()},
constexpr BwdLauncher kLaunchers[] = {
#include "instantiations/registry.inc"
};
#undef FLASHATTN_BWD_INSTANCE

}  // namespace

int flash_bwd_block_m(const BwdParams& p, const DeviceLimits& dev) {
  const BwdConfigInfo* config = select_bwd_config(p.head_dim, dev.max_smem_per_block, bwd_takes_compact_route(p));
  return config == nullptr ? 0 : config->block_m;
}

cudaError_t flash_bwd(const BwdParams& p, const DeviceLimits& dev, cudaStream_t stream) {
  const BwdConfigInfo* config = select_bwd_config(p.head_dim, dev.max_smem_per_block, bwd_takes_compact_route(p));
  if (config == nullptr) return cudaErrorInvalidValue;
  for (const BwdLauncher& l : kLaunchers)
    if (l.dtype == p.dtype && l.head_dim == config->head_dim && l.variant == config->variant) {
      if (p.cu_seqlens_q == nullptr) return l.launch(p, stream);
      return l.launch_varlen != nullptr ? l.launch_varlen(p, stream) : cudaErrorInvalidValue;
    }
  return cudaErrorInvalidValue;
}

}  // namespace flashattn
