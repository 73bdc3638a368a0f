// Which forward configs are compiled (csrc/flash_fwd/instantiations/registry.inc, generated) and which one
// a device gets. Plain C++ with no CUDA dependency, so the selection logic is checked on CPU
// (tools/print_configs.cpp, run by tools/check_resources.py in CI).
#pragma once

#include <initializer_list>

#include "traits.h"

namespace flashattn {

struct FwdConfigInfo {
  int head_dim;
  TileVariant variant;
  int block_m, block_n, warps, threads, smem_bytes;
};

#define FLASHATTN_FWD_INSTANCE(T, D, V)                                                   \
  FwdConfigInfo{D, TileVariant::V, FwdTileConfig<D, TileVariant::V>::Traits::kBlockM,      \
                FwdTileConfig<D, TileVariant::V>::Traits::kBlockN,                        \
                FwdTileConfig<D, TileVariant::V>::Traits::kNWarps,                        \
                FwdTileConfig<D, TileVariant::V>::Traits::kNThreads,                      \
                FwdTileConfig<D, TileVariant::V>::Traits::kSmemBytes},
// One entry per (dtype, head dim, variant); dtype does not change a config.
constexpr FwdConfigInfo kFwdConfigs[] = {
#include "instantiations/registry.inc"
};
#undef FLASHATTN_FWD_INSTANCE

constexpr const FwdConfigInfo* find_fwd_config(int head_dim, TileVariant variant) {
  for (const FwdConfigInfo& c : kFwdConfigs)
    if (c.head_dim == head_dim && c.variant == variant) return &c;
  return nullptr;
}

// kLarge when its shared memory fits the device's per-block limit, else kCompact; nullptr when
// neither fits (or the head dim is out of range).
constexpr const FwdConfigInfo* select_fwd_config(int head_dim, int max_smem_per_block) {
  const int d = round_up_head_dim(head_dim);
  for (TileVariant v : {TileVariant::kLarge, TileVariant::kCompact}) {
    const FwdConfigInfo* c = find_fwd_config(d, v);
    if (c != nullptr && c->smem_bytes <= max_smem_per_block) return c;
  }
  return nullptr;
}

}  // namespace flashattn
