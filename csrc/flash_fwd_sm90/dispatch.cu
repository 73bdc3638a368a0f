// Entry points of the Hopper forward path: support check and instantiation choice (the host-side
// TMA descriptor encoding is ../common/sm90/tma_host.cu). Compiles no kernel (the instantiations are in instantiations/), and is
// arch-independent host code.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "../common/dtype_of.h"
#include "../common/split_combine.cuh"
#include "api.h"
#include "launch_decl.h"
#include "split_rule.h"
#include "tile_scheduler.h"
#include "tma_tensors.h"
#include "traits.h"

namespace flashattn {
namespace sm90 {

namespace {

using LaunchFn = cudaError_t (*)(const FwdParams&, const DeviceLimits&, cudaStream_t);
using RealFn = bool (*)();
using ClustersFn = int (*)(int);

struct Sm90Launcher {
  DType dtype;
  int head_dim;
  Sm90ConfigKind kind;  // which calls it serves (traits.h sm90_config_kind)
  int block_m;          // query rows per tile
  int block_n;          // keys per key block
  int smem_bytes;
  bool o_tma;  // O leaves through a TMA store (traits kOTma): O must be TMA-describable too
  bool local;  // applies causal masking / a local window (traits kLocal)
  bool cluster_merge;  // a split over the keys can merge in a cluster (traits kClusterMerge)
  LaunchFn launch_static;
  LaunchFn launch_dynamic;  // needs FwdParams::tile_counter; null for a config of one-wave grids
  RealFn real_static;
  RealFn real_dynamic;      // null where launch_dynamic is
  ClustersFn max_clusters;  // clusters of n CTAs of the static kernel resident at once
};

// registry.inc (tools/gen_instantiations.py) holds one call per config, whose two schedules it
// writes as two files; FLASHATTN_FWD_SM90_STATIC_INSTANCE, a config of one-wave grids (kSmallGrid),
// whose static schedule alone it writes: the dynamic one only pays past one wave.
#define FLASHATTN_FWD_SM90_LAUNCHER(CONFIG, KIND, T, D, LAUNCH_DYNAMIC, REAL_DYNAMIC) \
  Sm90Launcher{dtype_of<T>(),                                                           \
               D,                                                                       \
               Sm90ConfigKind::KIND,                                                    \
               CONFIG<D>::Traits::kBlockM,                                              \
               CONFIG<D>::Traits::kBlockN,                                              \
               CONFIG<D>::Traits::kSmemBytes,                                           \
               CONFIG<D>::Traits::kOTma,                                                \
               CONFIG<D>::Traits::kLocal,                                               \
               CONFIG<D>::Traits::kClusterMerge,                                        \
               &run_fwd_sm90<CONFIG<D>::Traits, T, false>,                              \
               LAUNCH_DYNAMIC,                                                          \
               &kernel_is_real<CONFIG<D>::Traits, T, false>,                            \
               REAL_DYNAMIC,                                                            \
               &max_active_clusters<CONFIG<D>::Traits, T>},
#define FLASHATTN_FWD_SM90_INSTANCE(CONFIG, KIND, T, D)                                  \
  FLASHATTN_FWD_SM90_LAUNCHER(CONFIG, KIND, T, D, (&run_fwd_sm90<CONFIG<D>::Traits, T, true>), \
                              (&kernel_is_real<CONFIG<D>::Traits, T, true>))
#define FLASHATTN_FWD_SM90_STATIC_INSTANCE(CONFIG, KIND, T, D) \
  FLASHATTN_FWD_SM90_LAUNCHER(CONFIG, KIND, T, D, nullptr, nullptr)
constexpr Sm90Launcher kLaunchers[] = {
#include "instantiations/registry.inc"
};
#undef FLASHATTN_FWD_SM90_STATIC_INSTANCE
#undef FLASHATTN_FWD_SM90_INSTANCE
#undef FLASHATTN_FWD_SM90_LAUNCHER
constexpr int kNumLaunchers = sizeof(kLaunchers) / sizeof(kLaunchers[0]);
// Only the small-grid config goes without a dynamic kernel: every other config serves grids of
// more than one wave, where causal masking wants the dynamic schedule.
constexpr bool dynamic_kernels_where_needed() {
  for (const Sm90Launcher& l : kLaunchers)
    if ((l.launch_dynamic == nullptr) != (l.kind == Sm90ConfigKind::kSmallGrid) ||
        (l.real_dynamic == nullptr) != (l.launch_dynamic == nullptr))
      return false;
  return true;
}
static_assert(dynamic_kernels_where_needed(), "a config without its dynamic kernel, or a small-grid one with it");

// The row of `table` (the dense or the packed launchers) for (dtype, head dim, kind), or -1.
template <typename Launcher, int N>
constexpr int row_of(const Launcher (&table)[N], DType dtype, int head_dim, Sm90ConfigKind kind) {
  for (int i = 0; i < N; ++i)
    if (table[i].dtype == dtype && table[i].head_dim == head_dim && table[i].kind == kind) return i;
  return -1;
}
// The instantiation of (dtype, head dim, kind), or -1.
constexpr int launcher_of(DType dtype, int head_dim, Sm90ConfigKind kind) {
  return row_of(kLaunchers, dtype, head_dim, kind);
}
constexpr bool has_launcher(DType dtype, int head_dim, Sm90ConfigKind kind) {
  return launcher_of(dtype, head_dim, kind) >= 0;
}
// Every kind sm90_config_kind() (or find_launcher's small-grid rule) can pick for head dim D has its
// row in each dtype: the generator lists the long-keys, non-causal and small-grid configs only for
// the head dims where traits.h makes them distinct, and a config made distinct later must not fall
// back to no launcher at all.
template <int D>
constexpr bool launchers_cover() {
  for (DType t : {DType::kFloat16, DType::kBFloat16}) {
    if (!has_launcher(t, D, Sm90ConfigKind::kDefault)) return false;
    if (Sm90LongKeysConfig<D>::kDistinct && !has_launcher(t, D, Sm90ConfigKind::kLongKeys)) return false;
    if (Sm90NonCausalConfig<D>::kDistinct && !has_launcher(t, D, Sm90ConfigKind::kNonCausal)) return false;
    if (Sm90SmallGridConfig<D>::kDistinct && !has_launcher(t, D, Sm90ConfigKind::kSmallGrid)) return false;
  }
  return true;
}
static_assert(launchers_cover<64>() && launchers_cover<96>() && launchers_cover<128>() && launchers_cover<192>() &&
                  launchers_cover<256>(),
              "a config sm90_config_kind() picks has no instantiation: add it to tools/gen_instantiations.py");

// Query blocks of `p` in tiles of block_m rows (per batch and head).
int64_t query_blocks(const FwdParams& p, int block_m) {
  return (static_cast<int64_t>(p.seqlen_q) + block_m - 1) / block_m;
}

// The one-consumer config (traits.h kSmallGrid) serves a D <= 64 call of at most kSmallGridMaxKeys
// keys whose 64-row tiles fill at most half the SMs: each CTA then has an SM to itself, and its
// chain (setup, first S, softmax, P V, epilogue) is one warpgroup's, without a second warpgroup's
// exponentials on the same SFUs (B=1 H=1 S=96-256 1.14-1.30x faster, perf-notes "Small grids on
// one consumer warpgroup a CTA"). Past two key blocks the split plan shares its tiles' keys out as
// it does the other configs' (384-768 keys +14-20%, 1k +2-12%; 2k mixed and 4k -6%: hence 1024).
// FLASHATTN_FWD_SMALL_GRID (lab/fwd_split_time.py --small-grid, the tests): 0 turns the config off,
// a number sets the key bound; read only for these grids.
constexpr int kSmallGridMaxKeys = 1024;
int small_grid_launcher(const FwdParams& p, const DeviceLimits& dev, int d) {
  const int i = launcher_of(p.dtype, d, Sm90ConfigKind::kSmallGrid);
  if (i < 0) return -1;
  const int64_t tiles = query_blocks(p, kLaunchers[i].block_m) * p.batch * p.heads_q;
  if (2 * tiles > dev.sm_count) return -1;
  const char* env = std::getenv("FLASHATTN_FWD_SMALL_GRID");
  const long long max_keys = env != nullptr && *env != '\0' ? std::atoll(env) : kSmallGridMaxKeys;
  return p.seqlen_k <= max_keys ? i : -1;
}

// The instantiation that serves `p`: sm90_config_kind()'s, except on small grids and on causal D=64
// grids of 1.5 waves or more from 1536 keys.
int find_launcher(const FwdParams& p, const DeviceLimits& dev) {
  const int d = sm90_round_head_dim(p.head_dim);
  const int small = small_grid_launcher(p, dev, d);
  if (small >= 0) return small;
  // A local window is banded like causal masking: the causal configs (and their schedule) serve it.
  const Sm90ConfigKind kind = sm90_config_kind(d, p.seqlen_k, p.causal || p.has_window());
  // The long-keys config's taller tiles pay from 2048 keys on a causal grid of many waves (D=64,
  // H200, 2026-12-02, B*S = 16k H = 32 against the default config: 2k +2.9-4.8%, 3k +10.2-10.9%),
  // but not on a grid of 2.7 waves (B=2 H=16 2k: -1.6..-2.8%) nor on the seed's split grids (2k
  // -23% when it served every call from 2k): hence from 8 waves at first. With the partial query
  // tile first, from 1536 keys (H200, 2026-12-03, the bound at 512 against 2048 on full grids: 1.5k
  // +3.8-6.0%, 1k -0.6..-2.4%, 768 -3..-5%, 512 -9..-11%) and from 1.5 waves (the same day, against
  // the default config: 1.5k on 1.9 waves +5.6%, 2k on 2.7 / 5.3 waves +2.2 / +6.5%, 3k on 3.9 waves
  // +7.2%, but 2k on 1.3 waves -6.1%, whose 176 tiles leave a second wave a third full): perf-notes
  // "The long-keys rule from 1.5 waves".
  if (kind == Sm90ConfigKind::kDefault && p.causal && !p.has_window() && p.seqlen_k >= kSm90LongKeysFullGridMin) {
    const int j = launcher_of(p.dtype, d, Sm90ConfigKind::kLongKeys);
    if (j >= 0 &&
        sm90_long_keys_tiles_fill_grid(query_blocks(p, kLaunchers[j].block_m) * p.batch * p.heads_q, dev.sm_count))
      return j;
  }
  const int i = launcher_of(p.dtype, d, kind);
  // The non-causal config's taller tiles (192 rows, three consumer warpgroups) pay in throughput,
  // once the SMs are full. A grid of them that fills at most half the SMs (what the split over the
  // keys serves) is a latency chain instead, and the default config's 128-row tiles of two
  // warpgroups are shorter chains and more CTAs: B=1 H=1 D=64, H200, kernel us 192 -> 128 rows,
  // unsplit S=256 7.3 -> 6.3 (0.89x -> 1.02x SDPA's), S=2048 27.1 -> 22.9, S=8192 92.7 -> 79.0;
  // with the split S=512 8.3 -> 7.2, S=1024 8.8 -> 7.4, S=8192 53.8 -> 45.2, S=4096 18.3 -> 18.4
  // (perf-notes "Small grids on the default config").
  if (kind == Sm90ConfigKind::kNonCausal && i >= 0) {
    const int64_t tiles = query_blocks(p, kLaunchers[i].block_m) * p.batch * p.heads_q;
    if (2 * tiles <= dev.sm_count) return launcher_of(p.dtype, d, Sm90ConfigKind::kDefault);
  }
  return i;
}

// The packed flavour's launchers (registry_packed.inc): one per config, the dynamic schedule.
struct Sm90PackedLauncher {
  DType dtype;
  int head_dim;
  Sm90ConfigKind kind;
  int block_m;
  int smem_bytes;
  bool o_tma;
  LaunchFn launch;  // needs FwdParams::tile_counter
  RealFn real;
};
#define FLASHATTN_FWD_SM90_PACKED_INSTANCE(CONFIG, KIND, T, D)           \
  Sm90PackedLauncher{dtype_of<T>(),                                       \
                     D,                                                   \
                     Sm90ConfigKind::KIND,                                \
                     CONFIG<D>::Traits::kBlockM,                          \
                     CONFIG<D>::Traits::kSmemBytes,                       \
                     CONFIG<D>::Traits::kOTma,                            \
                     &run_fwd_sm90_packed<CONFIG<D>::Traits, T>,          \
                     &packed_kernel_is_real<CONFIG<D>::Traits, T>},
constexpr Sm90PackedLauncher kPackedLaunchers[] = {
#include "instantiations/registry_packed.inc"
};
#undef FLASHATTN_FWD_SM90_PACKED_INSTANCE
constexpr int kNumPackedLaunchers = sizeof(kPackedLaunchers) / sizeof(kPackedLaunchers[0]);
// One per 16-bit config that sm90_config_kind() picks; the small-grid one serves dense calls only.
constexpr int dense_only_launchers() {
  int n = 0;
  for (const Sm90Launcher& l : kLaunchers) n += l.kind == Sm90ConfigKind::kSmallGrid;
  return n;
}
static_assert(kNumPackedLaunchers == kNumLaunchers - dense_only_launchers(), "one packed launcher per 16-bit config");

// `ask()`'s answer, asked once per process and kept in `slot` (0 unknown, 1 yes, 2 no).
template <typename Ask>
bool asked_once(std::atomic<int>& slot, Ask&& ask) {
  int v = slot.load(std::memory_order_relaxed);
  if (v == 0) {
    v = ask() ? 1 : 2;
    slot.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

// Whether instantiation i holds real sm_90a code for the device, asked once per process.
bool launcher_available(int i) {
  static std::atomic<int> cache[kNumLaunchers] = {};
  return asked_once(cache[i], [i] {
    return kLaunchers[i].real_static() && (kLaunchers[i].real_dynamic == nullptr || kLaunchers[i].real_dynamic());
  });
}

// Whether TMA describes a call's tensors `t` as a config of `block_m`-row tiles loads them: q, k and v,
// o too where it leaves by a TMA store, and a box taller or wider than its tensor (Q's box is the
// tile's block M rows, 128 or 192; K/V's at most 256; 64 columns) where the driver encodes one.
bool tma_maps_ok(const FwdTmaTensors& t, bool o_tma, int block_m) {
  if (!tma_tensor_ok(t.q) || !tma_tensor_ok(t.k) || !tma_tensor_ok(t.v)) return false;
  if (o_tma && !tma_tensor_ok(t.o)) return false;
  return (t.q.head_dim >= kChunkCols && t.q.seqlen >= block_m && t.k.seqlen >= 256) || small_tensor_boxes_ok(t.q.ptr);
}

// What every 16-bit Hopper kernel (dense or packed) asks of a call besides its tensors' maps: an
// H100/H200, float16 or bfloat16, a head dim it instantiates, a query-head group, a finite scale, and
// o / lse where the register epilogue's 4-byte stores can write them.
bool sm90_call_ok(const FwdParams& p, const DeviceLimits& dev) {
  if (dev.cc_major != 9 || dev.cc_minor != 0) return false;
  if (p.dtype != DType::kBFloat16 && p.dtype != DType::kFloat16) return false;
  if (p.head_dim < 8 || p.head_dim > 256 || p.head_dim % 8 != 0) return false;
  if (p.heads_q < 1 || p.heads_kv < 1 || p.heads_q % p.heads_kv != 0) return false;
  if (!std::isfinite(p.softmax_scale) || !std::isfinite(p.scale_log2)) return false;
  if (p.o == nullptr || p.lse == nullptr || reinterpret_cast<uintptr_t>(p.o) % 4 != 0) return false;
  return p.o_row_stride % 2 == 0 && p.o_head_stride % 2 == 0 && p.o_batch_stride % 2 == 0;
}

// The launcher that serves `p` on this device, or -1 when the Hopper path cannot run it (what
// flash_fwd_sm90_supported() answers; flash_fwd_sm90() launches the one it returns).
int supported_launcher(const FwdParams& p, const DeviceLimits& dev) {
  if (!sm90_call_ok(p, dev)) return -1;
  if (p.cu_seqlens_q != nullptr || p.cu_seqlens_k != nullptr) return -1;  // packed: supported_packed_launcher
  if (p.batch < 1 || p.seqlen_q < 1 || p.seqlen_k < 1) return -1;
  const int i = find_launcher(p, dev);
  if (i < 0 || kLaunchers[i].smem_bytes > dev.max_smem_per_block) return -1;
  if (!kLaunchers[i].local && (p.window_left >= 0 || p.window_right >= 0)) return -1;  // never: find_launcher
  const int64_t m_blocks = query_blocks(p, kLaunchers[i].block_m);
  if (m_blocks * p.batch * p.heads_q >= (int64_t(1) << 31)) return -1;
  if (!tma_maps_ok(fwd_tma_tensors(p), kLaunchers[i].o_tma, kLaunchers[i].block_m)) return -1;
  return launcher_available(i) ? i : -1;
}

// The packed config kind for `p`: sm90_config_kind() on the caller's bounds, and the long-keys
// config for a causal D=64 call from kSm90LongKeysFullGridMin keys whose tiles of one sequence of
// the bounds, over the heads, fill the grid as find_launcher's rule asks of a dense call (its taller
// tiles with each sequence's partial tile first, packed.cuh). A function of the caller's bounds
// (FwdParams::bound_q / bound_k, not seqlen_q / seqlen_k: those are clamped to the packed rows) and
// the heads only, never of the batch or its lengths: a sequence's result does not depend on its
// neighbours (the packed tests compare each sequence with a packed call of it alone under the same
// bounds, bitwise).
Sm90ConfigKind packed_config_kind(const FwdParams& p, const DeviceLimits& dev, int d) {
  const Sm90ConfigKind kind = sm90_config_kind(d, p.bound_k, p.causal || p.has_window());
  if (kind == Sm90ConfigKind::kDefault && p.causal && !p.has_window() && p.bound_k >= kSm90LongKeysFullGridMin) {
    const int j = row_of(kPackedLaunchers, p.dtype, d, Sm90ConfigKind::kLongKeys);
    if (j >= 0) {
      const int block_m = kPackedLaunchers[j].block_m;
      const int64_t tiles = (int64_t{p.bound_q} + block_m - 1) / block_m * p.heads_q;
      if (sm90_long_keys_tiles_fill_grid(tiles, dev.sm_count)) return Sm90ConfigKind::kLongKeys;
    }
  }
  return kind;
}

// The packed launcher that serves `p` (a packed batch) on this device, or -1: the dense rules on the
// packed rows (the maps describe [1, total, H, D]), the config of packed_config_kind (no small-grid
// rule: a packed batch's tiles vary), the dynamic schedule.
int supported_packed_launcher(const FwdParams& p, const DeviceLimits& dev) {
  if (!sm90_call_ok(p, dev)) return -1;
  if (p.cu_seqlens_q == nullptr || p.cu_seqlens_k == nullptr || p.num_splits > 1) return -1;
  if (p.batch < 1 || p.seqlen_q < 0 || p.seqlen_k < 0 || p.total_q < 1 || p.total_k < 1) return -1;
  const int d = sm90_round_head_dim(p.head_dim);
  const Sm90ConfigKind kind = packed_config_kind(p, dev, d);
  const int i = row_of(kPackedLaunchers, p.dtype, d, kind);
  if (i < 0 || kPackedLaunchers[i].smem_bytes > dev.max_smem_per_block) return -1;
  const int64_t m_blocks = query_blocks(p, kPackedLaunchers[i].block_m);
  if (m_blocks * p.batch * p.heads_q >= (int64_t(1) << 31)) return -1;
  if (!tma_maps_ok(fwd_packed_tma_tensors(p), kPackedLaunchers[i].o_tma, kPackedLaunchers[i].block_m)) return -1;
  static std::atomic<int> cache[kNumPackedLaunchers] = {};
  return asked_once(cache[i], kPackedLaunchers[i].real) ? i : -1;
}

// Whether the CTAs of every query tile of launcher i, `splits` to a tile, fit as clusters in one
// wave: one tile per CTA, the SMs hold every CTA, and the GPCs every cluster at once (a cluster's
// CTAs share one GPC, and GPCs have 16-18 SMs: 8-CTA clusters leave SMs over).
bool clusters_fit(int i, int64_t tiles, int splits, const DeviceLimits& dev) {
  if (splits < 2 || splits > kMaxClusterSplits || !kLaunchers[i].cluster_merge) return false;
  if (tiles * splits > dev.sm_count) return false;
  // Asked once per instantiation and cluster size (the occupancy query costs microseconds); one
  // kind of GPU per process is assumed, as everywhere a launcher caches a device property.
  static std::atomic<int> cache[kNumLaunchers][kMaxClusterSplits + 1] = {};  // value + 1; 0 unknown
  int fit = cache[i][splits].load(std::memory_order_relaxed) - 1;
  if (fit < 0) {
    fit = kLaunchers[i].max_clusters(splits);
    cache[i][splits].store(fit + 1, std::memory_order_relaxed);
  }
  return tiles <= fit;
}

}  // namespace
}  // namespace sm90

bool flash_fwd_sm90_supported(const FwdParams& p, const DeviceLimits& dev) {
  return sm90::supported_launcher(p, dev) >= 0;
}

bool flash_fwd_sm90_prefers_portable(const FwdParams& p, const DeviceLimits& dev) {
  constexpr int kTinyRows = 64;  // measured at S 32, 64 (faster) and 128 (even): lab/fwd_split_time.py
  return p.cu_seqlens_q == nullptr && p.seqlen_q <= kTinyRows && p.seqlen_k <= kTinyRows && p.head_dim <= 64 &&
         2 * static_cast<int64_t>(p.batch) * p.heads_q <= dev.sm_count;
}

Sm90FwdPlan flash_fwd_sm90_plan(const FwdParams& p, const DeviceLimits& dev) {
  Sm90FwdPlan plan;
  const int i = sm90::supported_launcher(p, dev);
  if (i < 0) return plan;
  plan.launcher = i;
  const sm90::Sm90Launcher& l = sm90::kLaunchers[i];
  const bool banded = p.causal || p.has_window();
  plan.tile_counter = l.launch_dynamic != nullptr &&
                      sm90::dynamic_schedule_pays(banded, p.seqlen_q, static_cast<long long>(p.batch) * p.heads_q,
                                                  l.block_m, dev.sm_count);
  if (dev.sm_count < 2) return plan;
  // The small-grid config at two key blocks or fewer: nothing to split (split_rule asks for at
  // least 3 splits), and a forced count is not taken either. Past two blocks (a key bound set by
  // FLASHATTN_FWD_SMALL_GRID) the rule splits its 64-row tiles like any other.
  if (l.kind == sm90::Sm90ConfigKind::kSmallGrid && p.seqlen_k <= 2 * l.block_n) return plan;
  const int64_t m_blocks = sm90::query_blocks(p, l.block_m);
  const int64_t tiles = m_blocks * p.batch * p.heads_q;
  if (tiles < 1 || 2 * tiles > dev.sm_count) return plan;  // split_rule's answer too, without the reads below
  // The longest tile's key blocks (the last query block under a causal mask, the band of a window).
  const KeyBlocks r = sm90::block_range(static_cast<int>(m_blocks - 1), l.block_m, l.block_n, p.seqlen_q, p.seqlen_k,
                                        p.causal_offset, l.local ? p.window_left : -1, l.local ? p.window_right : -1);
  // FLASHATTN_FWD_SPLITS=<n> and FLASHATTN_FWD_SPLIT_MERGE=combine (lab/fwd_split_time.py,
  // lab/split_call_time.py, the tests): read only for these small grids, at every call (the tests
  // change them within a process).
  const char* forced = std::getenv("FLASHATTN_FWD_SPLITS");
  const char* merge = std::getenv("FLASHATTN_FWD_SPLIT_MERGE");
  const sm90::SplitChoice c = sm90::split_rule(
      sm90::SplitGrid{tiles, r.count(), dev.sm_count, kMaxKeySplits},
      forced != nullptr && *forced != '\0' ? std::max<int64_t>(0, std::atoll(forced)) : -1,
      merge != nullptr && std::strcmp(merge, "combine") == 0, [&](int s) { return sm90::clusters_fit(i, tiles, s, dev); });
  plan.split.num_splits = c.num_splits;
  plan.split.in_cluster = c.in_cluster;
  return plan;
}

bool flash_fwd_sm90_varlen_supported(const FwdParams& p, const DeviceLimits& dev) {
  return sm90::supported_packed_launcher(p, dev) >= 0;
}

cudaError_t flash_fwd_sm90_varlen(const FwdParams& p, const DeviceLimits& dev, cudaStream_t stream) {
  const int i = sm90::supported_packed_launcher(p, dev);
  if (i < 0) return cudaErrorNotSupported;
  return sm90::kPackedLaunchers[i].launch(p, dev, stream);
}

cudaError_t flash_fwd_sm90(const FwdParams& p, const Sm90FwdPlan& plan, const DeviceLimits& dev, cudaStream_t stream) {
  if (plan.launcher < 0) return cudaErrorNotSupported;
  if (plan.launcher >= sm90::kNumLaunchers) return cudaErrorInvalidValue;
  const sm90::Sm90Launcher& l = sm90::kLaunchers[plan.launcher];
  // A split call runs the static schedule: its tiles fit in one wave (as a small-grid call's do,
  // whose config has no dynamic kernel).
  const bool dynamic = p.tile_counter != nullptr && p.num_splits <= 1 && l.launch_dynamic != nullptr;
  return dynamic ? l.launch_dynamic(p, dev, stream) : l.launch_static(p, dev, stream);
}

}  // namespace flashattn
