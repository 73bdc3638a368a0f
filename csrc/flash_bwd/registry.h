// Which backward configs are compiled (instantiations/registry.inc, generated) and which one a
// device gets. Plain C++ with no CUDA dependency, so the selection logic is checked on CPU
// (tools/print_configs.cpp, run by tools/check_resources.py in CI).
#pragma once

#include <initializer_list>

#include "../common/params.h"
#include "traits.h"

namespace flashattn {

struct BwdConfigInfo {
  int head_dim;
  BwdTileVariant variant;
  int block_n, block_m, warps, threads, stages, smem_bytes;
};

#define FLASHATTN_BWD_INSTANCE(T, D, V)                                                          \
  BwdConfigInfo{D,                                                                             \
                BwdTileVariant::V,                                                             \
                BwdTileConfig<D, BwdTileVariant::V>::Traits::kBlockN,                           \
                BwdTileConfig<D, BwdTileVariant::V>::Traits::kBlockM,                           \
                BwdTileConfig<D, BwdTileVariant::V>::Traits::kNWarps,                           \
                BwdTileConfig<D, BwdTileVariant::V>::Traits::kNThreads,                         \
                BwdTileConfig<D, BwdTileVariant::V>::Traits::kStages,                           \
                BwdTileConfig<D, BwdTileVariant::V>::Traits::kSmemBytes},
// One entry per (dtype, head dim, variant); dtype does not change a config.
constexpr BwdConfigInfo kBwdConfigs[] = {
#include "instantiations/registry.inc"
};
#undef FLASHATTN_BWD_INSTANCE

constexpr const BwdConfigInfo* find_bwd_config(int head_dim, BwdTileVariant variant) {
  for (const BwdConfigInfo& c : kBwdConfigs)
    if (c.head_dim == head_dim && c.variant == variant) return &c;
  return nullptr;
}

// kLarge when its shared memory fits the device's per-block limit, else kCompact; nullptr when
// neither fits (or the head dim is out of range). With `window` (a local window or a softcap, or a
// packed batch: bwd_takes_compact_route), kCompact first: the large tiles of D = 64 and 128 sit at
// the register limit, where the general mask, the softcap and a packed batch's per-sequence
// geometry spill, so only the configs picked here carry those kernels (bwd_has_window_kernels).
constexpr const BwdConfigInfo* select_bwd_config(int head_dim, int max_smem_per_block, bool window = false) {
  const int d = round_up_bwd_head_dim(head_dim);
  const BwdTileVariant large_first[] = {BwdTileVariant::kLarge, BwdTileVariant::kCompact};
  const BwdTileVariant compact_first[] = {BwdTileVariant::kCompact, BwdTileVariant::kLarge};
  for (BwdTileVariant v : window ? compact_first : large_first) {
    const BwdConfigInfo* c = find_bwd_config(d, v);
    if (c != nullptr && c->smem_bytes <= max_smem_per_block) return c;
  }
  return nullptr;
}

// Whether the call needs the window/softcap kernels: a local window beyond causal masking, or a
// softcap (FwdParams::set_mask / set_softcap filled them).
inline bool bwd_needs_window_kernel(const FwdParams& p) { return p.has_window() || p.softcap > 0.f; }

// Whether the call runs on the configs select_bwd_config(.., window = true) picks: the window/softcap
// kernels, and every packed variable-length batch (its flavour of the main kernel exists only there).
inline bool bwd_takes_compact_route(const FwdParams& p) {
  return bwd_needs_window_kernel(p) || p.cu_seqlens_q != nullptr;
}

// Whether the config with these traits is one select_bwd_config(.., window = true) can pick: a
// kCompact one, or the only config of its head dim. Those carry the window/softcap kernels and the
// packed-batch flavour (tools/gen_instantiations.py generates the latter's files for them alone).
template <typename Traits>
constexpr bool bwd_has_window_kernels() {
  const BwdConfigInfo* compact = find_bwd_config(Traits::kHeadDim, BwdTileVariant::kCompact);
  if (compact == nullptr) return true;
  return compact->block_n == Traits::kBlockN && compact->block_m == Traits::kBlockM &&
         compact->warps == Traits::kNWarps && compact->stages == Traits::kStages &&
         compact->smem_bytes == Traits::kSmemBytes;
}

}  // namespace flashattn
