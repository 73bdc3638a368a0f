// Entry points of the Hopper backward: support check and instantiation choice. Host code only;
// the launchers are the explicit instantiations in instantiations/.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>

#include "../common/dtype_of.h"
#include "../common/sm90/tma_host.h"
#include "api.h"
#include "block.h"
#include "group_split.h"
#include "tail_split.h"
#include "tma_tensors.h"
#include "traits.h"
#include "wide_rule.h"

namespace flashattn {
namespace sm90 {

template <typename Traits, typename Element, bool kSoftcap, bool kPacked>
cudaError_t run_bwd_sm90(const BwdParams& p, const DeviceLimits& dev, cudaStream_t stream);
template <typename Traits, typename Element, bool kSoftcap, bool kPacked>
bool bwd_kernel_is_real();

namespace {

using LaunchFn = cudaError_t (*)(const BwdParams&, const DeviceLimits&, cudaStream_t);
using RealFn = bool (*)();

struct Sm90BwdLauncher {
  DType dtype;
  int head_dim;
  bool softcap;
  bool packed;
  bool wide;  // Sm90BwdConfig's kWide (traits.h), chosen by wide_config()
  int smem_bytes;
  LaunchFn launch;
  RealFn real;
};

#define FLASHATTN_BWD_SM90_INSTANCE(T, D, SOFTCAP, PACKED, WIDE)                                            \
  Sm90BwdLauncher{dtype_of<T>(),                                                                              \
                  D,                                                                                          \
                  SOFTCAP,                                                                                    \
                  PACKED,                                                                                     \
                  WIDE,                                                                                       \
                  Sm90BwdConfig<D, SOFTCAP, WIDE>::Traits::kSmemBytes,                                        \
                  &run_bwd_sm90<Sm90BwdConfig<D, SOFTCAP, WIDE>::Traits, T, SOFTCAP, PACKED>,                 \
                  &bwd_kernel_is_real<Sm90BwdConfig<D, SOFTCAP, WIDE>::Traits, T, SOFTCAP, PACKED>},
const Sm90BwdLauncher kLaunchers[] = {
#include "instantiations/registry.inc"
};
#undef FLASHATTN_BWD_SM90_INSTANCE
constexpr int kNumLaunchers = sizeof(kLaunchers) / sizeof(kLaunchers[0]);

static_assert(Sm90BwdTraits<64>::kBlockM == sm90_bwd_block_m(64) && Sm90BwdTraits<96>::kBlockM == sm90_bwd_block_m(96) &&
                  Sm90BwdTraits<128>::kBlockM == sm90_bwd_block_m(128) &&
                  Sm90BwdTraits<192>::kBlockM == sm90_bwd_block_m(192) && Sm90BwdTraits<256>::kBlockM == sm90_bwd_block_m(256),
              "flash_bwd_sm90_block_m() is the instantiations' query block");

// dq_accum's columns at instantiated head dim d: whole chunk planes (traits.h kDqTileFloats =
// kBlockM x this; D = 96's dQ^T fills two planes, the last 32 columns zeros).
constexpr int dq_tile_cols(int d) { return (d + kChunkCols - 1) / kChunkCols * kChunkCols; }
template <typename T>
constexpr bool dq_tile_sized() { return T::kDqTileFloats == T::kBlockM * dq_tile_cols(T::kHeadDim); }
static_assert(dq_tile_sized<Sm90BwdTraits<64>>() && dq_tile_sized<Sm90BwdTraits<96>>() &&
                  dq_tile_sized<Sm90BwdConfig<96, false, true>::Traits>() && dq_tile_sized<Sm90BwdTraits<128>>() &&
                  dq_tile_sized<Sm90BwdConfig<128, false, true>::Traits>() && dq_tile_sized<Sm90BwdTraits<192>>() &&
                  dq_tile_sized<Sm90BwdTraits<256>>(),
              "flash_bwd_sm90_dq_accum_floats() sizes the instantiations' dQ tiles");

// Query rows per step of the instantiation for (d, softcap, wide).
template <int D>
int config_block_m(bool softcap) {
  return softcap ? Sm90BwdConfig<D, true>::Traits::kBlockM : Sm90BwdConfig<D, false>::Traits::kBlockM;
}
int block_m_of(int d, bool softcap, bool wide) {
  static_assert(Sm90BwdConfig<128, false, true>::Traits::kBlockM == Sm90BwdConfig<128, true, true>::Traits::kBlockM &&
                    Sm90BwdConfig<96, false, true>::Traits::kBlockM == Sm90BwdConfig<128, false, true>::Traits::kBlockM,
                "one wide tile with and without a softcap, at D = 96 and 128");
  if (wide) return Sm90BwdConfig<128, false, true>::Traits::kBlockM;
  return d == 64    ? config_block_m<64>(softcap)
         : d == 96  ? config_block_m<96>(softcap)
         : d == 128 ? config_block_m<128>(softcap)
         : d == 192 ? config_block_m<192>(softcap)
                    : config_block_m<256>(softcap);
}

// The instantiated head dim that runs a call's head dim (smaller dims run zero-padded on the next
// one up: TMA reads columns past head_dim as zeros, the epilogues drop them).
int instantiated_head_dim(int head_dim) {
  return head_dim <= 64 ? 64 : head_dim <= 96 ? 96 : head_dim <= 128 ? 128 : head_dim <= 192 ? 192 : 256;
}

// The wide config (traits.h Sm90BwdConfig<128 or 96, softcap, true>): dense D = 72..128 calls, the
// mask as wide_rule.h says. FLASHATTN_BWD_WIDE is read at every such
// call, like FLASHATTN_BWD_REVERSE (lab switches for side-by-side rounds in one process); the
// binding sizes dq_accum and the tickets from the same answer.
bool wide_config(const BwdParams& p) {
  const int d = instantiated_head_dim(p.head_dim);
  if ((d != 96 && d != 128) || p.cu_seqlens_q != nullptr) return false;
  const char* v = std::getenv("FLASHATTN_BWD_WIDE");
  const int mode = v == nullptr || *v == '\0' ? 2 : std::atoi(v);
  return bwd_wide_rule(mode, p.causal, p.window_left, p.window_right, p.seqlen_q, p.seqlen_k);
}
int block_n(int d) {
  static_assert(Sm90BwdTraits<192>::kBlockN == Sm90BwdTraits<256>::kBlockN, "one key block in the roles form");
  return d > 128 ? Sm90BwdTraits<256>::kBlockN : Sm90BwdTraits<128>::kBlockN;
}

// Whether instantiation i holds real sm_90a code for the device, asked once per process.
bool launcher_available(int i) {
  static std::atomic<int> cache[kNumLaunchers] = {};  // 0 unknown, 1 yes, 2 no
  int v = cache[i].load(std::memory_order_relaxed);
  if (v == 0) {
    v = kLaunchers[i].real() ? 1 : 2;
    cache[i].store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

// The tile of a call's config (wide_config's answer does not depend on the group split or the
// tail plan, which both read it).
struct CallTile {
  int d, bn, bm;
};
CallTile call_tile_of(const BwdParams& p) {
  const int d = instantiated_head_dim(p.head_dim);
  return CallTile{d, block_n(d), block_m_of(d, p.softcap != 0.f, wide_config(p))};
}

// group_split.h's dispatch model for a dense call: the key blocks' query blocks as bwd_block counts
// them in the call's tile. raised: bwd_group_split_raised (the default for masked calls), else
// bwd_group_split_model (=m).
int group_split_by_model(const BwdParams& p, const DeviceLimits& dev, const bool raised, const int waves) {
  const CallTile t = call_tile_of(p);
  const int d = t.d, bn = t.bn, bm = t.bm;
  const KeyWindow w = make_key_window(p.seqlen_k, p.causal_offset, p.window_left, p.window_right);
  const auto steps_of = [&](int n) {
    const int n0 = n * bn, n1 = n0 + bn < p.seqlen_k ? n0 + bn : p.seqlen_k;
    const QueryBlocks qb = query_blocks(w, n0, n1, p.seqlen_q, bm);
    return qb.m_end - qb.m_begin;
  };
  BwdSplitGrid g;
  g.group = p.heads_q / p.heads_kv;
  g.num_n_blocks = (p.seqlen_k + bn - 1) / bn;
  g.pairs = static_cast<long long>(p.batch) * p.heads_kv;
  g.lpt = p.causal;  // launch.cuh bwd_lpt_heads: the grouped order under a causal mask (default mode)
  g.lpt_budget = bwd_lpt_budget_bytes();
  g.head_bytes = 2ll * 2 * p.seqlen_q * d;
  g.sm_count = dev.sm_count;
  if (!raised) return bwd_group_split_model(g, p.has_mask(), steps_of);

  // The model walks every unit (a few ms at its largest grid): its answer is kept per shape.
  using Key = std::array<long long, 14>;
  const Key key = {d, bn, bm, p.seqlen_q, p.seqlen_k, p.causal_offset, p.window_left, p.window_right,
                   g.pairs, g.group, p.causal, g.lpt_budget, g.sm_count, waves};
  static std::mutex mu;
  static std::map<Key, int> known;
  {
    const std::lock_guard<std::mutex> lock(mu);
    if (const auto it = known.find(key); it != known.end()) return it->second;
  }
  const int split = bwd_group_split_raised(g, steps_of, waves);
  const std::lock_guard<std::mutex> lock(mu);
  if (known.size() >= 4096) known.clear();  // a bound for calls of ever new shapes
  known.emplace(key, split);
  return split;
}

// How many CTAs share a GQA group's query heads (BwdParams::group_split), for dense calls in the
// default mode (the split's dK/dV sums are float atomics): group_split.h's wave rule, raised by its
// dispatch model under a mask (bwd_group_split_raised).
// FLASHATTN_BWD_GROUP_SPLIT=<n> forces n (a divisor of the group; 1 = none), =w<n> sets the waves
// masked calls want, =r<n> the wave rule alone with n waves, =m the dispatch model alone (lab
// switches read at every GQA call).
int group_split_of(const BwdParams& p, const DeviceLimits& dev, const bool deterministic) {
  const int group = p.heads_q / p.heads_kv;
  if (group <= 1 || p.cu_seqlens_q != nullptr || deterministic) return 1;
  int waves = kBwdSplitMaskedWaves;
  bool raise = true;
  if (const char* v = std::getenv("FLASHATTN_BWD_GROUP_SPLIT"); v != nullptr && *v != '\0') {
    if (*v == 'm') return group_split_by_model(p, dev, false, waves);
    if (*v == 'w' || *v == 'r') {
      waves = std::atoi(v + 1);
      raise = *v == 'w';
    } else {
      const int n = std::atoi(v);
      return n >= 1 && group % n == 0 ? n : 1;
    }
  }
  const int bn = block_n(instantiated_head_dim(p.head_dim));
  const long long ctas = (static_cast<long long>(p.seqlen_k) + bn - 1) / bn * p.batch * p.heads_kv;
  const int rule = bwd_group_split(group, ctas, p.has_mask(), dev.sm_count, waves);
  // Only a split below the whole group can be raised: the others skip the model and its cache.
  if (raise && p.has_mask() && rule < group) return group_split_by_model(p, dev, true, waves);
  return rule;
}

// The split of the grid's last wave (BwdParams::tail_split, tail_units): tail_split.h's rules (one
// without a mask, one with), for dense calls in the default mode, after the group split is set.
// FLASHATTN_BWD_TAIL=0 turns it off, =<n> splits the last wave's units (the last full wave when
// the grid is whole waves) into n pieces (at most their steps): lab and test switches read at
// every such call.
BwdTailPlan tail_plan_of(const BwdParams& p, const DeviceLimits& dev, const bool deterministic) {
  const BwdTailPlan none{0, 1};
  if (deterministic || p.cu_seqlens_q != nullptr || dev.sm_count < 2) return none;
  const CallTile t = call_tile_of(p);
  const long long units = (static_cast<long long>(p.seqlen_k) + t.bn - 1) / t.bn * p.batch * p.heads_kv * p.group_split;
  const long long steps =
      (static_cast<long long>(p.seqlen_q) + t.bm - 1) / t.bm * (p.heads_q / p.heads_kv / p.group_split);
  if (units < 1 || steps < 2 || steps > 0x7fffffffLL || bwd_tail_grid(units, 0, 1) > 0x7fffffffLL) return none;
  if (const char* v = std::getenv("FLASHATTN_BWD_TAIL"); v != nullptr && *v != '\0') {
    const int n = std::atoi(v);
    if (n <= 1) return none;
    const long long r = units % dev.sm_count == 0 ? dev.sm_count : units % dev.sm_count;
    return BwdTailPlan{static_cast<int>(r), static_cast<int>(n < steps ? n : steps)};
  }
  const BwdTailPlan plan = p.has_mask() ? bwd_tail_plan_masked(units, static_cast<int>(steps), dev.sm_count)
                                        : bwd_tail_plan(units, static_cast<int>(steps), dev.sm_count);
  // The pieces' grid must stay an int.
  return bwd_tail_grid(units, plan.units, plan.split) > 0x7fffffffLL ? none : plan;
}

bool aligned16(const void* ptr, int64_t batch_stride, int64_t row_stride, int64_t head_stride) {
  return ptr != nullptr && reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && batch_stride % 8 == 0 &&
         row_stride % 8 == 0 && head_stride % 8 == 0;
}

int supported_launcher(const BwdParams& p, const DeviceLimits& dev) {
  if (dev.cc_major != 9 || dev.cc_minor != 0) return -1;
  if (p.head_dim < 8 || p.head_dim > 256 || p.head_dim % 8 != 0) return -1;
  if (p.batch < 1 || p.seqlen_q < 1 || p.seqlen_k < 1 || p.heads_q < 1 || p.heads_kv < 1) return -1;
  if (p.heads_q % p.heads_kv != 0) return -1;
  if (!aligned16(p.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride) ||
      !aligned16(p.k, p.k_batch_stride, p.k_row_stride, p.k_head_stride) ||
      !aligned16(p.v, p.v_batch_stride, p.v_row_stride, p.v_head_stride) ||
      !aligned16(p.dout, p.do_batch_stride, p.do_row_stride, p.do_head_stride))
    return -1;
  // q, dout, k and v are read by TMA (positive strides: a broadcast dout is copied by the binding),
  // dk and dv written by it.
  const BwdTmaTensors t = bwd_tma_tensors(p);
  if (!tma_tensor_ok(t.q) || !tma_tensor_ok(t.dout) || !tma_tensor_ok(t.k) || !tma_tensor_ok(t.v) ||
      !tma_tensor_ok(t.dk) || !tma_tensor_ok(t.dv))
    return -1;
  const int d = instantiated_head_dim(p.head_dim);
  const bool packed = p.cu_seqlens_q != nullptr;
  const bool wide = wide_config(p);
  // Boxes of 64 columns x block_m (Q, dO) or 64 (K, V) rows larger than a tensor need a driver
  // that encodes them.
  if ((p.head_dim < kChunkCols || t.q.seqlen < block_m_of(d, p.softcap != 0.f, wide) || t.k.seqlen < 64) &&
      !small_tensor_boxes_ok(p.q))
    return -1;
  for (int i = 0; i < kNumLaunchers; ++i) {
    const Sm90BwdLauncher& l = kLaunchers[i];
    if (l.dtype != p.dtype || l.head_dim != d || l.softcap != (p.softcap != 0.f) || l.packed != packed ||
        l.wide != wide)
      continue;
    if (l.smem_bytes > dev.max_smem_per_block) return -1;
    const int64_t n_blocks = (static_cast<int64_t>(p.seqlen_k) + block_n(d) - 1) / block_n(d);
    if (n_blocks * p.batch * p.heads_kv > 0x7fffffffLL) return -1;
    return launcher_available(i) ? i : -1;
  }
  return -1;
}

}  // namespace
}  // namespace sm90

int flash_bwd_sm90_block_m(const BwdParams& p) {
  return sm90::block_m_of(sm90::instantiated_head_dim(p.head_dim), p.softcap != 0.f, sm90::wide_config(p));
}

int64_t flash_bwd_sm90_dq_accum_floats(const BwdParams& p) {
  const int block_m = flash_bwd_sm90_block_m(p);
  const int d = sm90::instantiated_head_dim(p.head_dim);
  const int64_t tile = static_cast<int64_t>(block_m) * sm90::dq_tile_cols(d);  // kDqTileFloats
  if (p.cu_seqlens_q != nullptr)  // packed: [Hq, ceil(total_q / block_m) + B tiles] (block.h)
    return static_cast<int64_t>(p.heads_q) * ((static_cast<int64_t>(p.total_q) + block_m - 1) / block_m + p.batch) * tile;
  const int64_t m_blocks = (static_cast<int64_t>(p.seqlen_q) + block_m - 1) / block_m;
  return static_cast<int64_t>(p.batch) * p.heads_q * m_blocks * tile;
}

int flash_bwd_sm90_group_split(const BwdParams& p, const DeviceLimits& dev, const bool deterministic) {
  return sm90::group_split_of(p, dev, deterministic);
}

void flash_bwd_sm90_plan_tail(BwdParams& p, const DeviceLimits& dev, const bool deterministic) {
  const sm90::BwdTailPlan plan = sm90::tail_plan_of(p, dev, deterministic);  // {0, 1}: none
  p.tail_split = plan.split;
  p.tail_units = plan.units;
}

int64_t flash_bwd_sm90_dkv_accum_floats(const BwdParams& p) {
  const int64_t d = sm90::instantiated_head_dim(p.head_dim);
  if (p.group_split > 1) return 2 * static_cast<int64_t>(p.batch) * p.heads_kv * p.seqlen_k * d;
  if (p.tail_split > 1) return 2 * static_cast<int64_t>(p.tail_units) * sm90::block_n(static_cast<int>(d)) * d;
  return 0;
}

bool flash_bwd_sm90_supported(const BwdParams& p, const DeviceLimits& dev) {
  return sm90::supported_launcher(p, dev) >= 0;
}

cudaError_t flash_bwd_sm90(const BwdParams& p, const DeviceLimits& dev, cudaStream_t stream) {
  const int i = sm90::supported_launcher(p, dev);
  if (i < 0) return cudaErrorNotSupported;
  return sm90::kLaunchers[i].launch(p, dev, stream);
}

}  // namespace flashattn
