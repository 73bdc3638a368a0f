// Picks the instantiation for (dtype, head dim, device) and launches it. Only declares the
// launcher template: the definitions are the explicit instantiations in csrc/instantiations/.
#include "api.h"

namespace flashattn {

template <typename Traits, typename Element>
cudaError_t run_fwd(const FwdParams& p, cudaStream_t stream);

namespace {

using LaunchFn = cudaError_t (*)(const FwdParams&, cudaStream_t);

struct FwdInstance {
  DType dtype;
  int head_dim;
  TileVariant variant;
  int smem_bytes;
  LaunchFn launch;
};

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<__half>() { return DType::kFloat16; }
template <>
constexpr DType dtype_of<__nv_bfloat16>() { return DType::kBFloat16; }

#define FLASHATTN_FWD_INSTANCE(T, D, V)                                                         \
  FwdInstance{dtype_of<T>(), D, TileVariant::V, FwdTileConfig<D, TileVariant::V>::Traits::kSmemBytes, \
              &run_fwd<FwdTileConfig<D, TileVariant::V>::Traits, T>},
constexpr FwdInstance kInstances[] = {
#include "../instantiations/registry.inc"
};
#undef FLASHATTN_FWD_INSTANCE

const FwdInstance* find_instance(DType dtype, int head_dim, TileVariant variant) {
  for (const FwdInstance& inst : kInstances)
    if (inst.dtype == dtype && inst.head_dim == head_dim && inst.variant == variant) return &inst;
  return nullptr;
}

}  // namespace

bool select_fwd_variant(int head_dim, const DeviceLimits& dev, TileVariant* variant, int* smem_bytes) {
  const int d = round_up_head_dim(head_dim);
  for (TileVariant v : {TileVariant::kLarge, TileVariant::kCompact}) {
    // Shared memory does not depend on dtype: look the config up through either.
    const FwdInstance* inst = find_instance(DType::kBFloat16, d, v);
    if (inst != nullptr && inst->smem_bytes <= dev.max_smem_per_block) {
      *variant = v;
      *smem_bytes = inst->smem_bytes;
      return true;
    }
  }
  return false;
}

cudaError_t flash_fwd(const FwdParams& p, const DeviceLimits& dev, cudaStream_t stream) {
  TileVariant variant;
  int smem_bytes;
  if (!select_fwd_variant(p.head_dim, dev, &variant, &smem_bytes)) return cudaErrorInvalidValue;
  const FwdInstance* inst = find_instance(p.dtype, round_up_head_dim(p.head_dim), variant);
  if (inst == nullptr) return cudaErrorInvalidValue;
  return inst->launch(p, stream);
}

}  // namespace flashattn
