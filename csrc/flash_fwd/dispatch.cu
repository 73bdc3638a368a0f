// Picks the instantiation for (dtype, head dim, device, flavour) and launches it. Only declares the
// launcher template: the definitions are the explicit instantiations in csrc/flash_fwd/instantiations/
// (fwd_*.cu dense, fwd_varlen_*.cu packed batches: every config in both flavours).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../common/dtype_of.h"
#include "api.h"
#include "registry.h"

namespace flashattn {

template <typename Traits, typename Element, bool kVarlen>
cudaError_t run_fwd(const FwdParams& p, cudaStream_t stream);

namespace {

using LaunchFn = cudaError_t (*)(const FwdParams&, cudaStream_t);

struct FwdLauncher {
  DType dtype;
  int head_dim;
  TileVariant variant;
  LaunchFn launch;         // dense batches
  LaunchFn launch_varlen;  // packed variable-length batches
};

// Every config in both flavours (tools/gen_instantiations.py writes the two files together).
#define FLASHATTN_FWD_INSTANCE(T, D, V)                                                 \
  FwdLauncher{dtype_of<T>(), D, TileVariant::V,                                         \
              &run_fwd<FwdTileConfig<D, TileVariant::V>::Traits, T, /*kVarlen=*/false>, \
              &run_fwd<FwdTileConfig<D, TileVariant::V>::Traits, T, /*kVarlen=*/true>},
constexpr FwdLauncher kLaunchers[] = {
#include "instantiations/registry.inc"
};
#undef FLASHATTN_FWD_INSTANCE

const FwdLauncher* find_launcher(const FwdParams& p, const DeviceLimits& dev) {
  const FwdConfigInfo* config = select_fwd_config(p.head_dim, dev.max_smem_per_block);
  if (config == nullptr) return nullptr;
  for (const FwdLauncher& l : kLaunchers)
    if (l.dtype == p.dtype && l.head_dim == config->head_dim && l.variant == config->variant) return &l;
  return nullptr;
}

}  // namespace

// Each entry point takes one layout only: the dense kernel would read a packed batch as dense
// [B, S, H, D] tensors, and the packed one a dense batch's null cu_seqlens.
cudaError_t flash_fwd(const FwdParams& p, const DeviceLimits& dev, cudaStream_t stream) {
  const FwdLauncher* l = find_launcher(p, dev);
  if (l == nullptr || p.cu_seqlens_q != nullptr) return cudaErrorInvalidValue;
  return l->launch(p, stream);
}

cudaError_t flash_fwd_varlen(const FwdParams& p, const DeviceLimits& dev, cudaStream_t stream) {
  const FwdLauncher* l = find_launcher(p, dev);
  if (l == nullptr || p.cu_seqlens_q == nullptr || p.cu_seqlens_k == nullptr) return cudaErrorInvalidValue;
  return l->launch_varlen(p, stream);
}

}  // namespace flashattn
