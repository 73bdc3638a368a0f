// Entry points of the FP8 Hopper forward (api.h, "FP8 forward"): support check and instantiation
// choice. Host code only: the kernels are in instantiations/fwd_sm90_fp8_*.cu (registry_fp8.inc),
// the V transpose in fp8_transpose.cu.
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>

#include "api.h"
#include "launch_decl.h"
#include "tile_scheduler.h"
#include "tma_tensors.h"
#include "traits.h"

namespace flashattn {
namespace sm90 {

namespace {

using Fp8LaunchFn = cudaError_t (*)(const FwdParams&, const Fp8FwdArgs&, const DeviceLimits&, cudaStream_t);
using RealFn = bool (*)();

struct Sm90Fp8Launcher {
  int head_dim;
  int block_m, block_n;
  int smem_bytes;
  Fp8LaunchFn launch_static;
  Fp8LaunchFn launch_dynamic;  // needs FwdParams::tile_counter
  RealFn real_static;
  RealFn real_dynamic;
};

#define FLASHATTN_FWD_SM90_FP8_INSTANCE(CONFIG, D)                                                              \
  Sm90Fp8Launcher{D,                                                                                            \
                  CONFIG<D>::Traits::kBlockM,                                                                   \
                  CONFIG<D>::Traits::kBlockN,                                                                   \
                  CONFIG<D>::Traits::kSmemBytes,                                                                \
                  &run_fwd_sm90_fp8<CONFIG<D>::Traits, false>,                                                  \
                  &run_fwd_sm90_fp8<CONFIG<D>::Traits, true>,                                                   \
                  &fp8_kernel_is_real<CONFIG<D>::Traits, false>,                                                \
                  &fp8_kernel_is_real<CONFIG<D>::Traits, true>},
constexpr Sm90Fp8Launcher kFp8Launchers[] = {
#include "instantiations/registry_fp8.inc"
};
#undef FLASHATTN_FWD_SM90_FP8_INSTANCE
constexpr int kNumFp8Launchers = sizeof(kFp8Launchers) / sizeof(kFp8Launchers[0]);

constexpr bool fp8_has_launcher(int d) {
  for (const Sm90Fp8Launcher& l : kFp8Launchers)
    if (l.head_dim == d) return true;
  return false;
}
static_assert(fp8_has_launcher(128) && fp8_has_launcher(256),
              "sm90_fp8_round_head_dim() picks a head dim with no FP8 instantiation: see tools/gen_instantiations.py");

int find_fp8_launcher(const FwdParams& p) {
  const int d = sm90_fp8_round_head_dim(p.head_dim);
  for (int i = 0; i < kNumFp8Launchers; ++i)
    if (kFp8Launchers[i].head_dim == d) return i;
  return -1;
}

bool fp8_launcher_available(int i) {
  static std::atomic<int> cache[kNumFp8Launchers] = {};  // 0 unknown, 1 yes, 2 no
  int v = cache[i].load(std::memory_order_relaxed);
  if (v == 0) {
    v = kFp8Launchers[i].real_static() && kFp8Launchers[i].real_dynamic() ? 1 : 2;
    cache[i].store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

int fp8_supported_launcher(const FwdParams& p, const DeviceLimits& dev) {
  if (dev.cc_major != 9 || dev.cc_minor != 0) return -1;
  if (p.dtype != DType::kFloat8E4M3) return -1;
  if (p.head_dim < 16 || p.head_dim > 256 || p.head_dim % 16 != 0) return -1;
  if (p.batch < 1 || p.seqlen_q < 1 || p.seqlen_k < 1 || p.heads_q < 1 || p.heads_kv < 1) return -1;
  if (p.heads_q % p.heads_kv != 0) return -1;
  if (!std::isfinite(p.softmax_scale) || !std::isfinite(p.scale_log2)) return -1;
  if (p.softcap > 0.f || p.num_splits > 1 || p.cu_seqlens_q != nullptr) return -1;
  if (p.o == nullptr || p.lse == nullptr) return -1;
  const int i = find_fp8_launcher(p);
  if (i < 0 || kFp8Launchers[i].smem_bytes > dev.max_smem_per_block) return -1;
  const int64_t m_blocks = (static_cast<int64_t>(p.seqlen_q) + kFp8Launchers[i].block_m - 1) / kFp8Launchers[i].block_m;
  if (m_blocks * p.batch * p.heads_q >= (int64_t(1) << 31)) return -1;
  const FwdTmaTensors t = fwd_tma_tensors(p);
  if (!tma_tensor_ok_u8(t.q) || !tma_tensor_ok_u8(t.k) || !tma_tensor_ok_u8(t.v)) return -1;
  if (!tma_tensor_ok(t.o)) return -1;  // bfloat16 O through TMA stores
  // Boxes larger than the tensor (a head dim below the instantiated one: Q/K columns, V^T rows; or
  // sequences shorter than a tile):
  // as the 16-bit path, only where the driver encodes them.
  if ((p.head_dim != kFp8Launchers[i].head_dim || p.seqlen_q < kFp8Launchers[i].block_m || p.seqlen_k < 256) &&
      !small_tensor_boxes_ok(p.q))
    return -1;
  return fp8_launcher_available(i) ? i : -1;
}

}  // namespace
}  // namespace sm90

bool flash_fwd_sm90_fp8_supported(const FwdParams& p, const DeviceLimits& dev) {
  return sm90::fp8_supported_launcher(p, dev) >= 0;
}

bool flash_fwd_sm90_fp8_wants_tile_counter(const FwdParams& p, const DeviceLimits& dev) {
  if (dev.cc_major != 9 || dev.cc_minor != 0) return false;
  const int i = sm90::find_fp8_launcher(p);
  return i >= 0 && sm90::dynamic_schedule_pays(p.causal || p.has_window(), p.seqlen_q,
                                              static_cast<long long>(p.batch) * p.heads_q,
                                              sm90::kFp8Launchers[i].block_m, dev.sm_count);
}

cudaError_t flash_fwd_sm90_fp8(const FwdParams& p, const Fp8FwdArgs& x, const DeviceLimits& dev, cudaStream_t stream) {
  const int i = sm90::fp8_supported_launcher(p, dev);
  if (i < 0) return cudaErrorNotSupported;
  if (x.vt == nullptr || x.vt_keys != flash_fwd_sm90_fp8_vt_keys(p.seqlen_k)) return cudaErrorInvalidValue;
  const sm90::Sm90Fp8Launcher& l = sm90::kFp8Launchers[i];
  return p.tile_counter != nullptr ? l.launch_dynamic(p, x, dev, stream) : l.launch_static(p, x, dev, stream);
}

}  // namespace flashattn
