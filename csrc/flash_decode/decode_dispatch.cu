// Host side of the decoding path: picks the instantiation for (dtype, head dim), plans the
// splits, launches the append, split and combine kernels. The split-kernel launchers are only
// declared here; their definitions are the explicit instantiations in instantiations/.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <initializer_list>

#include "../common/dtype_of.h"
#include "decode_api.h"
#include "decode_combine.cuh"
#include "decode_traits.h"

namespace flashattn {

template <typename Traits, typename Element>
cudaError_t run_decode_split(const DecodeParams& p, cudaStream_t stream);
template <typename Traits, typename Element>
cudaError_t decode_ctas_per_sm(int* ctas, bool paged);

namespace {

struct DecodeLauncher {
  DType dtype;
  int head_dim;
  DecodeVariant variant;
  int block_n;
  cudaError_t (*launch)(const DecodeParams&, cudaStream_t);
  cudaError_t (*ctas_per_sm)(int*, bool);
};

#define FLASHATTN_DECODE_INSTANCE(T, D, V)                                               \
  DecodeLauncher{dtype_of<T>(),                                                          \
                 D,                                                                      \
                 DecodeVariant::V,                                                       \
                 DecodeTileConfig<D, DecodeVariant::V>::Traits::kBlockN,                 \
                 &run_decode_split<DecodeTileConfig<D, DecodeVariant::V>::Traits, T>,    \
                 &decode_ctas_per_sm<DecodeTileConfig<D, DecodeVariant::V>::Traits, T>},
constexpr DecodeLauncher kDecodeLaunchers[] = {
#include "instantiations/registry.inc"
};
#undef FLASHATTN_DECODE_INSTANCE

constexpr bool has_launcher(DType dtype, int head_dim, DecodeVariant variant) {
  for (const DecodeLauncher& l : kDecodeLaunchers)
    if (l.dtype == dtype && l.head_dim == head_dim && l.variant == variant) return true;
  return false;
}
// Every config the planner can pick (kPortable; kHopper, kHopperSplit and kHopperStream where the
// head dim has them) is instantiated in each dtype (tools/gen_instantiations.py, DECODE_HEAD_DIMS).
constexpr bool launchers_cover() {
  for (int d : kDecodeHeadDims)
    for (DType t : {DType::kFloat16, DType::kBFloat16})
      if (!has_launcher(t, d, DecodeVariant::kPortable) ||
          (decode_hopper_smem(d) > 0 && !has_launcher(t, d, DecodeVariant::kHopper)) ||
          (decode_hopper_split_smem(d) > 0 && !has_launcher(t, d, DecodeVariant::kHopperSplit)) ||
          (decode_hopper_stream_smem(d) > 0 && !has_launcher(t, d, DecodeVariant::kHopperStream)))
        return false;
  return true;
}
static_assert(launchers_cover(), "a config the planner picks has no instantiation: add it to tools/gen_instantiations.py");

const DecodeLauncher* find_launcher(DType dtype, int head_dim, DecodeVariant variant) {
  const int d = decode_round_head_dim(head_dim);
  for (const DecodeLauncher& l : kDecodeLaunchers)
    if (l.dtype == dtype && l.head_dim == d && l.variant == variant) return &l;
  return nullptr;
}

bool paging_ok(const DecodeParams& p) {
  return p.block_table == nullptr ||
         (p.page_size > 0 && p.page_size % kDecodeMinPageSize == 0 && p.num_pages > 0 && p.block_table_batch_stride >= 0);
}

bool params_ok(const DecodeParams& p) {
  return p.batch >= 0 && p.heads_kv > 0 && p.heads_q >= p.heads_kv && p.heads_q % p.heads_kv == 0 &&
         p.seqlen_q >= 0 && p.seqlen_k_max >= 0 && p.seqlen_new >= 0 && p.seqlen_new <= p.seqlen_k_max && paging_ok(p);
}

}  // namespace

cudaError_t flash_decode_plan(const DecodeParams& p, const DeviceLimits& dev, int requested_splits, DecodeParams* plan) {
  const int kernel_head_dim = decode_round_head_dim(p.head_dim);
  DecodeVariant variant = decode_pick_variant(kernel_head_dim, dev.cc_major, dev.max_smem_per_block);
  const DecodeLauncher* l = find_launcher(p.dtype, p.head_dim, variant);
  if (l == nullptr || !params_ok(p) || requested_splits < 0) return cudaErrorInvalidValue;
  const int group = p.heads_q / p.heads_kv;
  const int64_t rows = static_cast<int64_t>(p.seqlen_q) * group;
  const int64_t m_blocks = (rows + kDecodeBlockM - 1) / kDecodeBlockM;
  if (m_blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
  const bool paged = p.block_table != nullptr;
  int ctas = 1;
  cudaError_t err = l->ctas_per_sm(&ctas, paged);
  if (err != cudaSuccess) return err;
  // Planned for the keys a tile can need: under a window, a few splits of the window rather than
  // many mostly-empty splits of the whole cache.
  const int64_t keys = p.keys_needed();
  int splits = decode_plan_splits(requested_splits, m_blocks, p.batch, p.heads_kv, keys, l->block_n, dev.sm_count, ctas);
  if (variant == DecodeVariant::kHopper && requested_splits == 0 &&
      decode_prefer_split_config(kernel_head_dim, dev.max_smem_per_block, splits)) {
    const DecodeLauncher* ls = find_launcher(p.dtype, p.head_dim, DecodeVariant::kHopperSplit);
    if (ls == nullptr) return cudaErrorInvalidValue;
    err = ls->ctas_per_sm(&ctas, paged);
    if (err != cudaSuccess) return err;
    variant = DecodeVariant::kHopperSplit;
    splits = decode_plan_splits(0, m_blocks, p.batch, p.heads_kv, keys, ls->block_n, dev.sm_count, ctas);
  } else if (variant == DecodeVariant::kHopper && requested_splits <= 1 &&
             decode_prefer_stream_config(kernel_head_dim, dev.max_smem_per_block, splits)) {
    // Unsplit, as planned (or requested): the same one split on two CTAs per SM.
    if (find_launcher(p.dtype, p.head_dim, DecodeVariant::kHopperStream) == nullptr) return cudaErrorInvalidValue;
    variant = DecodeVariant::kHopperStream;
  }
  plan->num_m_blocks = static_cast<int>(m_blocks < 1 ? 1 : m_blocks);
  plan->kernel_variant = static_cast<int>(variant);
  plan->num_splits = splits;
  return cudaSuccess;
}

int64_t flash_decode_oaccum_numel(const DecodeParams& p) {
  if (p.num_splits <= 1) return 0;
  return static_cast<int64_t>(p.num_splits) * p.batch * p.heads_q * p.seqlen_q * p.head_dim;
}

int64_t flash_decode_lseaccum_numel(const DecodeParams& p) {
  if (p.num_splits <= 1) return 0;
  return static_cast<int64_t>(p.num_splits) * p.batch * p.heads_q * p.seqlen_q;
}

cudaError_t kvcache_append(const DecodeParams& p, cudaStream_t stream) {
  // Only what the copy needs (the query side may be empty).
  if (p.batch < 0 || p.heads_kv <= 0 || p.seqlen_new < 0 || p.seqlen_new > p.seqlen_k_max || p.head_dim % 8 != 0 ||
      !paging_ok(p))
    return cudaErrorInvalidValue;
  if (p.k_new == nullptr || p.v_new == nullptr) return p.k_new == p.v_new ? cudaSuccess : cudaErrorInvalidValue;
  const int64_t total = static_cast<int64_t>(p.batch) * p.seqlen_new * p.heads_kv * (p.head_dim / 8);
  if (total == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(blocks < 65536 ? blocks : 65536);  // grid-stride loop past that
  if (p.block_table != nullptr)
    kvcache_append_kernel<true><<<grid, kThreads, 0, stream>>>(p);
  else
    kvcache_append_kernel<false><<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t flash_decode(const DecodeParams& p_in, cudaStream_t stream) {
  // seqused_k: the kernels' seqlen_k(b) = min(cache_len(b) + seqlen_new, Sk_max) with cache_len =
  // seqused_k and nothing appended is exactly seqused_k[b], clamped. The append, a launch of its
  // own, has already used the real cache_seqlens.
  DecodeParams p = p_in;
  if (p.seqused_k != nullptr) {
    p.cache_seqlens = p.seqused_k;
    p.cache_seqlen = 0;
    p.seqlen_new = 0;
  }
  const DecodeLauncher* l = find_launcher(p.dtype, p.head_dim, static_cast<DecodeVariant>(p.kernel_variant));
  if (l == nullptr || !params_ok(p) || p.num_splits < 1 || p.num_splits > kDecodeMaxSplits || p.num_m_blocks < 1)
    return cudaErrorInvalidValue;
  if (p.num_splits > 1 && (p.o_accum == nullptr || p.lse_accum == nullptr)) return cudaErrorInvalidValue;
  const int64_t rows_all = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
  if (rows_all == 0) return cudaSuccess;
  cudaError_t err = l->launch(p, stream);
  if (err != cudaSuccess || p.num_splits == 1) return err;
  // Programmatic dependent launch for the sm90 configs (kHopper, kHopperSplit: always an sm90+
  // device): the combine grid is scheduled while the split grid still runs
  // (../common/split_combine.cuh); it matters at B=1, where the whole call is tens of microseconds.
  const bool programmatic = p.kernel_variant != static_cast<int>(DecodeVariant::kPortable);
  const SplitCombineParams c = split_combine_params(p, p.o_accum, p.lse_accum, p.num_splits);
  return p.dtype == DType::kBFloat16 ? launch_split_combine<__nv_bfloat16>(c, stream, programmatic)
                                     : launch_split_combine<__half>(c, stream, programmatic);
}

}  // namespace flashattn
