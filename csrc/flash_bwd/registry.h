// Which backward configs are compiled (instantiations/registry.inc, generated) and which one a
// device gets. Plain C++ with no CUDA dependency, so the selection logic is checked on CPU
// (tools/print_configs.cpp, run by tools/check_resources.py in CI).
#pragma once

#include <initializer_list>

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
// neither fits (or the head dim is out of range).
constexpr const BwdConfigInfo* select_bwd_config(int head_dim, int max_smem_per_block) {
  const int d = round_up_bwd_head_dim(head_dim);
  for (BwdTileVariant v : {BwdTileVariant::kLarge, BwdTileVariant::kCompact}) {
    const BwdConfigInfo* c = find_bwd_config(d, v);
    if (c != nullptr && c->smem_bytes <= max_smem_per_block) return c;
  }
  return nullptr;
}

}  // namespace flashattn
