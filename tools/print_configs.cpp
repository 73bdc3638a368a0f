// Prints, as JSON, every compiled forward and backward config and the one each target
// architecture's shared-memory limit selects for every head dim. Plain C++ (no CUDA): runs on CPU
// in CI.
#include <cstdio>

#include "flash_bwd/registry.h"
#include "flash_fwd/registry.h"

using namespace flashattn;

int main() {
  struct Arch { const char* name; int smem_limit; };
  // Opt-in shared memory per block (CUDA programming guide, compute capabilities table).
  const Arch archs[] = {{"sm_80", 163 * 1024}, {"sm_86", 99 * 1024}, {"sm_89", 99 * 1024}, {"sm_90a", 227 * 1024}};
  std::printf("{\n  \"configs\": [\n");
  const int n = sizeof(kFwdConfigs) / sizeof(kFwdConfigs[0]);
  for (int i = 0; i < n; ++i) {
    const FwdConfigInfo& c = kFwdConfigs[i];
    std::printf("    {\"head_dim\": %d, \"variant\": \"%s\", \"block_m\": %d, \"block_n\": %d, \"warps\": %d, "
                "\"threads\": %d, \"smem_bytes\": %d}%s\n",
                c.head_dim, c.variant == TileVariant::kLarge ? "large" : "compact", c.block_m, c.block_n, c.warps,
                c.threads, c.smem_bytes, i + 1 < n ? "," : "");
  }
  std::printf("  ],\n  \"bwd_configs\": [\n");
  const int nb = sizeof(kBwdConfigs) / sizeof(kBwdConfigs[0]);
  for (int i = 0; i < nb; ++i) {
    const BwdConfigInfo& c = kBwdConfigs[i];
    std::printf("    {\"head_dim\": %d, \"variant\": \"%s\", \"block_m\": %d, \"block_n\": %d, \"warps\": %d, "
                "\"threads\": %d, \"stages\": %d, \"smem_bytes\": %d}%s\n",
                c.head_dim, c.variant == BwdTileVariant::kLarge ? "large" : "compact", c.block_m, c.block_n, c.warps,
                c.threads, c.stages, c.smem_bytes, i + 1 < nb ? "," : "");
  }
  std::printf("  ],\n  \"selection\": {\n");
  for (int a = 0; a < 4; ++a) {
    std::printf("    \"%s\": {\"smem_limit\": %d, \"by_head_dim\": {", archs[a].name, archs[a].smem_limit);
    for (int d = 8; d <= 256; d += 8) {
      const FwdConfigInfo* c = select_fwd_config(d, archs[a].smem_limit);
      if (c == nullptr)
        std::printf("\"%d\": null", d);
      else
        std::printf("\"%d\": {\"head_dim\": %d, \"variant\": \"%s\", \"smem_bytes\": %d}", d, c->head_dim,
                    c->variant == TileVariant::kLarge ? "large" : "compact", c->smem_bytes);
      std::printf(d < 256 ? ", " : "");
    }
    std::printf("}, \"bwd_by_head_dim\": {");
    for (int d = 8; d <= 256; d += 8) {
      const BwdConfigInfo* c = select_bwd_config(d, archs[a].smem_limit);
      if (c == nullptr)
        std::printf("\"%d\": null", d);
      else
        std::printf("\"%d\": {\"head_dim\": %d, \"variant\": \"%s\", \"smem_bytes\": %d}", d, c->head_dim,
                    c->variant == BwdTileVariant::kLarge ? "large" : "compact", c->smem_bytes);
      std::printf(d < 256 ? ", " : "");
    }
    // Calls with a local window or a softcap (kernels of their own, on the configs picked here).
    std::printf("}, \"bwd_window_by_head_dim\": {");
    for (int d = 8; d <= 256; d += 8) {
      const BwdConfigInfo* c = select_bwd_config(d, archs[a].smem_limit, true);
      if (c == nullptr)
        std::printf("\"%d\": null", d);
      else
        std::printf("\"%d\": {\"head_dim\": %d, \"variant\": \"%s\", \"smem_bytes\": %d, \"block_m\": %d, "
                    "\"block_n\": %d, \"warps\": %d, \"stages\": %d}", d, c->head_dim,
                    c->variant == BwdTileVariant::kLarge ? "large" : "compact", c->smem_bytes, c->block_m, c->block_n,
                    c->warps, c->stages);
      std::printf(d < 256 ? ", " : "");
    }
    std::printf("}}%s\n", a < 3 ? "," : "");
  }
  std::printf("  }\n}\n");
  return 0;
}
