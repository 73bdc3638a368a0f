// Picks the instantiation for (dtype, head dim, device) and launches it. Only declares the
// launcher template: the definitions are the explicit instantiations in csrc/flash_fwd/instantiations/.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../common/dtype_of.h"
#include "api.h"
#include "registry.h"

namespace flashattn {

template <typename Traits, typename Element>
cudaError_t run_fwd(const FwdParams& p, cudaStream_t stream);

namespace {

using LaunchFn = cudaError_t (*)(const FwdParams&, cudaStream_t);

struct FwdLauncher {
  DType dtype;
  int head_dim;
  TileVariant variant;
  LaunchFn launch;
};

#define FLASHATTN_FWD_INSTANCE(T, D, V) \
  FwdLauncher{dtype_of<T>(), D, TileVariant::V, &run_fwd<FwdTileConfig<D, TileVariant::V>::Traits, T>},
constexpr FwdLauncher kLaunchers[] = {
#include "instantiations/registry.inc"
};
#undef FLASHATTN_FWD_INSTANCE

}  // namespace

cudaError_t flash_fwd(const FwdParams& p, const DeviceLimits& dev, cudaStream_t stream) {
  const FwdConfigInfo* config = select_fwd_config(p.head_dim, dev.max_smem_per_block);
  if (config == nullptr) return cudaErrorInvalidValue;
  for (const FwdLauncher& l : kLaunchers)
    if (l.dtype == p.dtype && l.head_dim == config->head_dim && l.variant == config->variant) return l.launch(p, stream);
  return cudaErrorInvalidValue;
}

}  // namespace flashattn
