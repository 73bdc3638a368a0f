// The split-KV decode kernel's tile configs side by side, without torch: for the decode-kv grid's
// shapes (bf16, D=128, GQA 32:8, Sq=1, full caches), every variant below against what the library
// runs on sm90 (kHopperSplit wherever kHopper's plan splits the keys, kHopperStream where it does
// not; DECODE_LAB_HEADS and DECODE_LAB_SHAPES pick other heads and shapes), each with
// its own split plan (its own block N and CTAs per SM through the shipped heuristic, times a factor
// for the -x2 variants) and the library's combine, replayed from CUDA
// graphs in alternating samples so clock drift hits both alike, and checked against the baseline's
// output. Bandwidth = K/V bytes read / time (above the DRAM's where the caches sit in L2).
//
//   bash lab/decode_lab.sh          (on a GPU machine; ~1 min; DECODE_LAB_ONLY=stream-,read- for some rows)
//
// The read-* rows are probes, not configs: kernels that only read the K/V bytes (per head as the
// split kernel, or whole rows of all heads in the cache's sequential order; by cp.async or by bulk
// copies, or TMA), so the bandwidth rows show what the copy alone reaches next to the kernels.
//
// What it is for: the small shapes, whose K/V stay in L2 between replays, are latency-bound (a
// split holds one to four key blocks), the large ones bandwidth-bound; more blocks in flight
// (stages), shorter key steps or more CTAs per SM are the candidates, and only a measurement decides.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/sm90/ptx.cuh"
#include "common/sm90/tma_host.h"
#include "flash_decode/decode_combine.cuh"
#include "flash_decode/decode_launch.cuh"
#include "flash_decode/decode_traits.h"

using namespace flashattn;

#define CK(x)                                                                                     \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      std::printf("CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x); \
      std::exit(2);                                                                               \
    }                                                                                             \
  } while (0)

using T = __nv_bfloat16;

__global__ void fill_random(T* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2bfloat16((static_cast<float>(h & 0xffff) / 65535.f - 0.5f) * 4.f);
  }
}

struct Shape {
  int b, sk;
};

struct Buffers {
  T *q, *k, *v, *o;
  float *lse, *o_accum, *lse_accum;
};

static DeviceLimits g_dev;

// One config: plan (its own block N and occupancy), split kernel, combine kernel.
template <typename Traits_, int kSplitFactor = 1>
struct Config {
  using Traits = Traits_;
  // The shipped heuristic's split count for this config (times kSplitFactor, clamped as a request).
  static DecodeParams plan(DecodeParams p) {
    int ctas = 1;
    CK((decode_ctas_per_sm<Traits, T>(&ctas)));
    p.num_splits = decode_plan_splits(0, p.num_m_blocks, p.batch, p.heads_kv, p.seqlen_k_max, Traits::kBlockN,
                                      g_dev.sm_count, ctas);
    if (kSplitFactor > 1)
      p.num_splits = decode_plan_splits(p.num_splits * kSplitFactor, p.num_m_blocks, p.batch, p.heads_kv,
                                        p.seqlen_k_max, Traits::kBlockN, g_dev.sm_count, ctas);
    return p;
  }
  // The combine as the library launches it on sm90: programmatically dependent on the split grid.
  static void run(const DecodeParams& p, cudaStream_t stream) {
    CK((run_decode_split<Traits, T>(p, stream)));
    if (p.num_splits > 1)
      CK((launch_split_combine<T>(split_combine_params(p, p.o_accum, p.lse_accum, p.num_splits), stream, g_dev.cc_major >= 9)));
  }
};

// The baseline: what the library runs on an sm90 GPU, kHopper's plan, then kHopperSplit with its
// own plan where that plan splits the keys, kHopperStream where it does not (flash_decode_plan,
// decode_prefer_split_config, decode_prefer_stream_config).
struct Library {
  using Hopper = DecodeTileConfig<128, DecodeVariant::kHopper>::Traits;
  using Split = DecodeTileConfig<128, DecodeVariant::kHopperSplit>::Traits;
  using Stream = DecodeTileConfig<128, DecodeVariant::kHopperStream>::Traits;
  static DecodeParams plan(DecodeParams p) {
    p = Config<Hopper>::plan(p);
    p.kernel_variant = static_cast<int>(DecodeVariant::kHopper);
    if (decode_prefer_split_config(128, g_dev.max_smem_per_block, p.num_splits)) {
      p = Config<Split>::plan(p);
      p.kernel_variant = static_cast<int>(DecodeVariant::kHopperSplit);
    } else if (decode_prefer_stream_config(128, g_dev.max_smem_per_block, p.num_splits)) {
      p.kernel_variant = static_cast<int>(DecodeVariant::kHopperStream);
    }
    return p;
  }
  static void run(const DecodeParams& p, cudaStream_t stream) {
    if (p.kernel_variant == static_cast<int>(DecodeVariant::kHopperSplit))
      Config<Split>::run(p, stream);
    else if (p.kernel_variant == static_cast<int>(DecodeVariant::kHopperStream))
      Config<Stream>::run(p, stream);
    else
      Config<Hopper>::run(p, stream);
  }
};

// A config under test in place of the library's wherever `Where` picks a call from the library's
// plan (`Traits` runs it with that plan); the library's own plan and configs everywhere else.
template <typename Where, typename Traits_>
struct InPlaceOf {
  using Traits = Traits_;
  static constexpr int kThisConfig = 100;  // a kernel_variant value no library config uses
  static DecodeParams plan(DecodeParams p) {
    DecodeParams q = Library::plan(p);
    if (Where::take(q)) q.kernel_variant = kThisConfig;
    return q;
  }
  static void run(const DecodeParams& p, cudaStream_t stream) {
    if (p.kernel_variant == kThisConfig)
      Config<Traits>::run(p, stream);
    else
      Library::run(p, stream);
  }
};

// The calls whose keys the library leaves unsplit (kHopper's plan: one split).
struct UnsplitGrids {
  static bool take(const DecodeParams& q) { return q.num_splits == 1; }
};
// The calls the library runs on its config kVariant.
template <DecodeVariant kVariant>
struct LibraryConfig {
  static bool take(const DecodeParams& q) { return q.kernel_variant == static_cast<int>(kVariant); }
};

// A rule under test: `Traits` with one split on the unsplit grids, the library elsewhere.
template <typename Traits>
using UnsplitRule = InPlaceOf<UnsplitGrids, Traits>;
// `Traits` wherever the library's plan runs kReplaced, with the same plan.
template <DecodeVariant kReplaced, typename Traits>
using Replace = InPlaceOf<LibraryConfig<kReplaced>, Traits>;

// ---- Read probes: the bytes the split kernel streams, read and nothing else --------------------
// Where the bandwidth rows' 4.2-4.3 TB/s (H200) come from: the copy or the kernel around it
// (measured 2026-11-29, docs/perf-notes.md "Decode: what caps the copy"; the kernel forms with
// bulk copies they led to are in the tree at commit d37265d, not adopted). One
// CTA per (batch, KV head) as the split kernel's unsplit grid, 128 threads, a 3-stage ring of
// 64-key K and V stages (32 KB a step, 96 KB a CTA: two per SM), each stage consumed by one 4-byte
// shared load a thread. kAllHeads: each CTA reads 1/Hk of its batch's keys for all heads (whole
// Hk x D rows, contiguous) instead of one head's D columns of every key (256-byte pieces, Hk x D
// apart): the same bytes and grid in the cache's most sequential order. kCopy: kProbeBulk, one
// cp.async.bulk per contiguous piece (256 B, or a 2 KB row of all heads) on a stage's mbarrier;
// kProbeCp, 16-byte cp.async chunks per thread, as the split kernel; kProbeMix, K by the one and V
// by the other (are the two paths' caps independent?); kProbeTma, per head only: TMA tensor copies,
// two 64-key x 64-column boxes (128-byte swizzle) of K and two of V a stage, four instructions
// where the bulk form issues 128 (FlashAttention-3's decode loads K/V this way).
// kProbeTmaRow: one box of whole 256-byte rows (64 keys x 128 columns, no swizzle) for K and one
// for V: does splitting rows into two 128-byte boxes cost? kStages: the ring (3: 96 KB, two CTAs
// per SM; 5: 160 KB, one CTA with four stages in flight). kDst: per head, the shared-memory
// bytes a row takes (256: dense; 272: the kernel's padded rows, 16 bytes past a 128-byte line).
// kHint: cp.async's L2 prefetch size, or kProbeTmaRow's L2 promotion (the library's maps: 256).
enum ProbeCopy : int { kProbeCp = 0, kProbeBulk = 1, kProbeMix = 2, kProbeTma = 3, kProbeTmaRow = 4 };
template <bool kAllHeads, int kCopy, int kStages = 3, int kDst = 256, int kHint = 256>
__global__ void __launch_bounds__(128)
    read_probe_kernel(const DecodeParams p, unsigned* sink, const __grid_constant__ CUtensorMap tmap_k,
                      const __grid_constant__ CUtensorMap tmap_v) {
  static_assert(!(kAllHeads && kCopy == kProbeTma), "the TMA probe reads per head");
  constexpr bool kTma = kCopy == kProbeTma || kCopy == kProbeTmaRow;
  constexpr bool kBulk = kCopy != kProbeCp;                          // K by bulk copies (or TMA)
  constexpr bool kBulkV = kCopy == kProbeBulk;                       // V too
  constexpr bool kCpAsync = kCopy == kProbeCp || kCopy == kProbeMix;  // V (or both) by cp.async
  constexpr int kThreads = 128, kStageBytes = 64 * 256;  // one of K or V, per stage
  extern __shared__ __align__(1024) unsigned char smem[];  // 1024: the TMA probe's 128-byte swizzle
  static_assert(kDst == 256 || (!kAllHeads && (kCopy == kProbeCp || kCopy == kProbeBulk)), "padded rows: per head");
  constexpr int kStageSmem = kStageBytes / 256 * kDst;  // one of K or V, per stage, in shared memory
  const uint32_t ring = smem_addr(smem), bars = ring + 2 * kStages * kStageSmem;
  const int tid = threadIdx.x;
  const int batch = blockIdx.x / p.heads_kv, head = blockIdx.x % p.heads_kv;
  const int64_t row_bytes = p.k_row_stride * 2;  // Hk x D x 2
  // A step's piece i of K (or V): piece_bytes contiguous bytes at piece_src(step, i).
  const int piece_bytes = kAllHeads ? static_cast<int>(row_bytes) : p.head_dim * 2;
  const int pieces = kStageBytes / piece_bytes;
  const int keys_per_cta = kAllHeads ? p.seqlen_k_max / p.heads_kv : p.seqlen_k_max;
  const int steps = keys_per_cta / pieces;
  const int64_t key_base = kAllHeads ? int64_t(head) * keys_per_cta : 0;
  const unsigned char* k0 = static_cast<const unsigned char*>(p.k_cache) + batch * p.k_batch_stride * 2 +
                            (kAllHeads ? 0 : head * p.k_head_stride * 2);
  const unsigned char* v0 = static_cast<const unsigned char*>(p.v_cache) + batch * p.v_batch_stride * 2 +
                            (kAllHeads ? 0 : head * p.v_head_stride * 2);
  auto load = [&](int step, int stage) {
    const int64_t key0 = key_base + int64_t(step) * pieces;
    const uint32_t dk = ring + stage * 2 * kStageSmem, dv = dk + kStageSmem;
    const int dst_bytes = kAllHeads ? piece_bytes : kDst;  // shared-memory bytes a piece takes
    if constexpr (kTma) {
      const uint32_t bar = bars + 8 * stage;
      if (tid == 0) {
        sm90::mbar_arrive_expect_tx(bar, 2 * kStageBytes);
#if defined(FLASHATTN_SM90A_ENABLED)  // the TMA wrappers exist in the sm_90a device pass only
        if constexpr (kCopy == kProbeTmaRow) {
          sm90::tma_load_4d(dk, &tmap_k, bar, 0, int(key0), head, batch);
          sm90::tma_load_4d(dv, &tmap_v, bar, 0, int(key0), head, batch);
        } else {
          for (int half = 0; half < 2; ++half) {  // 64 columns (128 bytes) a box
            sm90::tma_load_4d(dk + half * (kStageBytes / 2), &tmap_k, bar, half * 64, int(key0), head, batch);
            sm90::tma_load_4d(dv + half * (kStageBytes / 2), &tmap_v, bar, half * 64, int(key0), head, batch);
          }
        }
#endif
      }
    } else if constexpr (kBulk) {
      const uint32_t bar = bars + 8 * stage;
      constexpr int kParts = kBulkV ? 2 : 1;
      if (tid == 0) sm90::mbar_arrive_expect_tx(bar, kParts * kStageBytes);
      for (int i = tid; i < kParts * pieces; i += kThreads) {
        const bool is_v = i >= pieces;
        const int j = is_v ? i - pieces : i;
        sm90::bulk_copy_g2s((is_v ? dv : dk) + j * dst_bytes, (is_v ? v0 : k0) + (key0 + j) * row_bytes, piece_bytes, bar);
      }
    }
    if constexpr (kCpAsync) {
      const int chunks = piece_bytes / 16;
      for (int c = tid; c < pieces * chunks; c += kThreads) {
        const int j = c / chunks, off = (c - j * chunks) * 16;
        if constexpr (!kBulk) cp_async_16_l2<kHint>(dk + j * dst_bytes + off, k0 + (key0 + j) * row_bytes + off, true);
        cp_async_16_l2<kHint>(dv + j * dst_bytes + off, v0 + (key0 + j) * row_bytes + off, true);
      }
      cp_async_commit();
    }
  };
  if constexpr (kBulk) {
    if (tid == 0) {
      for (int s = 0; s < kStages; ++s) sm90::mbar_init(bars + 8 * s, 1);
      sm90::fence_barrier_init();
    }
    __syncthreads();
  }
  for (int s = 0; s < kStages - 1; ++s)
    if (s < steps) load(s, s);
    else if constexpr (kCpAsync) cp_async_commit();
  unsigned acc = 0;
  uint32_t phase = 0;
  for (int step = 0; step < steps; ++step) {
    const int stage = step % kStages;
    if constexpr (kBulk) sm90::mbar_wait(bars + 8 * stage, phase);
    if constexpr (kCpAsync) cp_async_wait<kStages - 2>();
    __syncthreads();
    if (step + kStages - 1 < steps) load(step + kStages - 1, (step + kStages - 1) % kStages);
    else if constexpr (kCpAsync) cp_async_commit();
    const unsigned* st = reinterpret_cast<const unsigned*>(smem + stage * 2 * kStageSmem);
    acc ^= st[tid * 4] ^ st[kStageSmem / 4 + tid * 4];
    if (stage == kStages - 1) phase ^= 1u;
  }
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;  // keeps the loads; (almost) never taken
}

static unsigned* g_sink = nullptr;

// A [B, S, H, D=128] bf16 tensor's map with box 128 columns x 64 rows and no swizzle (whole rows),
// for kProbeTmaRow, L2 promotion `l2` bytes (0, 128, 256); the library's encode_tma_4d makes
// 64-column boxes with the 128-byte swizzle and 256-byte promotion.
static bool encode_whole_rows(CUtensorMap* map, const sm90::TmaTensor& t, int l2) {
  const sm90::EncodeTiledFn encode = sm90::encode_tiled_fn();
  if (encode == nullptr) return false;
  const cuuint64_t dims[4] = {cuuint64_t(t.head_dim), cuuint64_t(t.seqlen), cuuint64_t(t.heads), cuuint64_t(t.batch)};
  const cuuint64_t strides[3] = {cuuint64_t(t.row_stride * 2), cuuint64_t(t.head_stride * 2), cuuint64_t(t.batch_stride * 2)};
  const cuuint32_t box[4] = {128, 64, 1, 1}, elem[4] = {1, 1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(t.ptr), dims, strides, box, elem,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                l2 == 256   ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B
                : l2 == 128 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
                            : CU_TENSOR_MAP_L2_PROMOTION_NONE,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <bool kAllHeads, int kCopy, int kStages = 3, int kDst = 256, int kHint = 256>
struct ReadProbe {
  static constexpr int kSmem = 2 * kStages * 64 * kDst + 64;
  struct Traits {  // what the table shows: 64-key steps, its shared memory
    static constexpr int kBlockN = 64, kSmemBytes = kSmem;
  };
  static DecodeParams plan(DecodeParams p) { return p; }
  static void run(const DecodeParams& p, cudaStream_t stream) {
    auto kernel = read_probe_kernel<kAllHeads, kCopy, kStages, kDst, kHint>;
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    alignas(64) CUtensorMap tk{}, tv{};
    if constexpr (kCopy == kProbeTma || kCopy == kProbeTmaRow) {
      const sm90::TmaTensor k{p.k_cache, p.batch, p.seqlen_k_max, p.heads_kv, p.head_dim,
                              p.k_batch_stride, p.k_row_stride, p.k_head_stride};
      sm90::TmaTensor v = k;
      v.ptr = p.v_cache, v.batch_stride = p.v_batch_stride, v.row_stride = p.v_row_stride, v.head_stride = p.v_head_stride;
      const bool ok = kCopy == kProbeTma ? sm90::encode_tma_4d(&tk, k, true, 64) && sm90::encode_tma_4d(&tv, v, true, 64)
                                         : encode_whole_rows(&tk, k, kHint) && encode_whole_rows(&tv, v, kHint);
      if (!ok) {
        std::printf("read-head-tma: the driver did not encode the tensor maps\n");
        std::exit(1);
      }
    }
    kernel<<<p.batch * p.heads_kv, 128, kSmem, stream>>>(p, g_sink, tk, tv);
    CK(cudaGetLastError());
  }
};

struct Variant {
  const char* name;
  DecodeParams (*plan)(DecodeParams);
  void (*run)(const DecodeParams&, cudaStream_t);
  int block_n, smem;
};

// A Variant row from a policy (plan + run) and the config it times (Policy::Traits).
template <typename Policy>
Variant variant(const char* name) {
  using T = typename Policy::Traits;
  return Variant{name, &Policy::plan, &Policy::run, T::kBlockN, T::kSmemBytes};
}

#define VARIANT(NAME, W, ST, PF, X) variant<Config<DecodeKernelTraits<128, W, ST, PF>, X>>(NAME)
// WN = 32: each warp takes 32 keys of a step (two k16 slices of P V), so 128-key steps need only
// four warps (cuDNN's decode tile is 16 x 128 keys over four warps, two CTAs per SM).
#define VARIANT_WN(NAME, W, ST, PF, WN) variant<Config<DecodeKernelTraits<128, W, ST, PF, WN>>>(NAME)
#define RULE(NAME, W, ST, PF, WN) variant<UnsplitRule<DecodeKernelTraits<128, W, ST, PF, WN>>>(NAME)

static const Variant kDefault{"library", &Library::plan, &Library::run, 0, Library::Hopper::kSmemBytes};
static const Variant kVariants[] = {
    VARIANT("w8-s2-p256", 8, 2, 256, 1),     // kHopper everywhere
    VARIANT("w4-s4-p256", 4, 4, 256, 1),     // kHopperSplit everywhere
    VARIANT("w4-s4-p256-x2", 4, 4, 256, 2),  // twice the splits: two waves of shorter CTAs
    VARIANT("w4-s3-p256", 4, 3, 256, 1),     // two CTAs per SM, two blocks in flight each
    VARIANT("w4-s3-p256-x2", 4, 3, 256, 2),
    VARIANT("w4-s4", 4, 4, 0, 1),            // kHopperSplit without the L2 prefetch hint
    VARIANT("w4-s5-p256", 4, 5, 256, 1),     // deeper rings: four and five blocks in flight
    VARIANT("w4-s6-p256", 4, 6, 256, 1),
    VARIANT_WN("w4n32-s2-p256", 4, 2, 256, 32),  // kHopper's 128-key steps on four warps
    VARIANT_WN("w2n32-s3-p256", 2, 3, 256, 32),  // 64-key steps on two warps, 109 KB: two CTAs per SM
    VARIANT_WN("w4n32-s3-p256", 4, 3, 256, 32),  // 128-key steps, two in flight, 209 KB
    VARIANT("w4-s2-p256", 4, 2, 256, 1),     // 73 KB: three CTAs per SM, one block in flight each
    // Unsplit grids (kHopper's plan: one split) on another config; split grids as the library runs
    // them. rule-w8-s2-p256: kHopper itself, the library before kHopperStream.
    RULE("rule-w8-s2-p256", 8, 2, 256, 16),
    RULE("rule-w4-s2-p256", 4, 2, 256, 16),
    RULE("rule-w2n32-s3-p256", 2, 3, 256, 32),
    RULE("rule-w4-s4-p256", 4, 4, 256, 16),
    // kHopperStream and kHopperSplit as they were before their rows were swizzled (padded rows, the
    // 256-byte L2 prefetch hint: the library until 2026-11-29), and padded with the hint at 128
    // bytes or none (the read probes: the 256-byte hint caps a full grid at ~4.25 TB/s on an H200,
    // 4.6 without); swizzled with the 256-byte hint.
    variant<Replace<DecodeVariant::kHopperStream, DecodeKernelTraits<128, 4, 3, 256>>>("stream-pad-l2-256"),
    variant<Replace<DecodeVariant::kHopperStream, DecodeKernelTraits<128, 4, 3, 128>>>("stream-pad-l2-128"),
    variant<Replace<DecodeVariant::kHopperStream, DecodeKernelTraits<128, 4, 3, 0>>>("stream-pad-l2-0"),
    variant<Replace<DecodeVariant::kHopperSplit, DecodeKernelTraits<128, 4, 4, 256>>>("split-pad-l2-256"),
    variant<Replace<DecodeVariant::kHopperSplit, DecodeKernelTraits<128, 4, 4, 128>>>("split-pad-l2-128"),
    variant<Replace<DecodeVariant::kHopperSplit, DecodeKernelTraits<128, 4, 4, 0>>>("split-pad-l2-0"),
    variant<Replace<DecodeVariant::kHopperStream, DecodeSwizzleTraits<DecodeKernelTraits<128, 4, 3, 256>>>>(
        "stream-sw-l2-256"),
    // Read probes (no output: their "rel diff" is not checked): the bytes alone, as the kernel
    // reads them (per head, cp.async or bulk) and in the cache's sequential order (all heads).
    variant<ReadProbe<false, kProbeCp>>("read-head-cp"),
    variant<ReadProbe<false, kProbeBulk>>("read-head-bulk"),
    variant<ReadProbe<false, kProbeMix>>("read-head-mix"),
    variant<ReadProbe<false, kProbeTma>>("read-head-tma"),
    variant<ReadProbe<false, kProbeTmaRow>>("read-head-tmarow"),
    variant<ReadProbe<false, kProbeTmaRow, 3, 256, 128>>("read-head-tmarow-l2-128"),
    variant<ReadProbe<false, kProbeTmaRow, 3, 256, 0>>("read-head-tmarow-l2-0"),
    variant<ReadProbe<false, kProbeTma, 5>>("read-head-tma-s5"),
    variant<ReadProbe<false, kProbeBulk, 5>>("read-head-bulk-s5"),
    variant<ReadProbe<false, kProbeCp, 5>>("read-head-cp-s5"),
    variant<ReadProbe<false, kProbeBulk, 3, 272>>("read-head-bulk-pad"),
    variant<ReadProbe<false, kProbeCp, 3, 272>>("read-head-cp-pad"),
    variant<ReadProbe<false, kProbeCp, 3, 256, 128>>("read-head-cp-l2-128"),
    variant<ReadProbe<false, kProbeCp, 3, 256, 0>>("read-head-cp-l2-0"),
    // The kernel's padded rows with the 128-byte hint: if this reads 4.6 TB/s as the dense rows do,
    // the ~10% between kHopperStream at 128 bytes (4.1-4.26) and the copy is the kernel around it.
    variant<ReadProbe<false, kProbeCp, 3, 272, 128>>("read-head-cp-pad-l2-128"),
    variant<ReadProbe<true, kProbeCp>>("read-rows-cp"),
    variant<ReadProbe<true, kProbeBulk>>("read-rows-bulk"),
    variant<ReadProbe<true, kProbeMix>>("read-rows-mix"),
};

static bool is_read_probe(const Variant& v) { return std::strncmp(v.name, "read-", 5) == 0; }

// `reps` calls of a config captured in one CUDA graph: kernel time without the host's launches,
// as the decode-kv-graph benchmark measures it (with the partials and K/V as warm in L2 as there).
static cudaGraphExec_t capture(const Variant& v, const DecodeParams& p, cudaStream_t stream, int reps) {
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int r = 0; r < reps; ++r) v.run(p, stream);
  CK(cudaStreamEndCapture(stream, &g));
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  CK(cudaGraphDestroy(g));
  return exec;
}

// Median of 11 samples of `reps` graph-replayed calls each, alternating the two configs.
static void time_pair(const Variant& a, const DecodeParams& pa, const Variant& b, const DecodeParams& pb, double* ta,
                      double* tb) {
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const int reps = 20;
  cudaGraphExec_t ga = capture(a, pa, stream, reps), gb = capture(b, pb, stream, reps);
  for (int i = 0; i < 2; ++i) {
    CK(cudaGraphLaunch(ga, stream));
    CK(cudaGraphLaunch(gb, stream));
  }
  CK(cudaStreamSynchronize(stream));
  std::vector<double> sa, sb;
  for (int s = 0; s < 11; ++s) {
    for (int which = 0; which < 2; ++which) {
      const bool first = (which == 0) == (s % 2 == 0);  // alternate who goes first
      CK(cudaEventRecord(e0, stream));
      CK(cudaGraphLaunch(first ? ga : gb, stream));
      CK(cudaEventRecord(e1, stream));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      (first ? sa : sb).push_back(ms * 1e3 / reps);  // us per call
    }
  }
  CK(cudaGetLastError());
  std::sort(sa.begin(), sa.end());
  std::sort(sb.begin(), sb.end());
  *ta = sa[sa.size() / 2];
  *tb = sb[sb.size() / 2];
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGraphExecDestroy(ga);
  cudaGraphExecDestroy(gb);
  cudaStreamDestroy(stream);
}

static double rel_diff(const T* x, const T* y, int64_t n) {
  std::vector<T> hx(n), hy(n);
  CK(cudaMemcpy(hx.data(), x, n * sizeof(T), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hy.data(), y, n * sizeof(T), cudaMemcpyDeviceToHost));
  double d2 = 0, r2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = __bfloat162float(hx[i]), b = __bfloat162float(hy[i]);
    if (!std::isfinite(a)) return INFINITY;
    d2 += (a - b) * (a - b);
    r2 += b * b;
  }
  return std::sqrt(d2 / std::max(r2, 1e-30));
}

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  g_dev.sm_count = prop.multiProcessorCount;
  g_dev.max_smem_per_block = static_cast<int>(prop.sharedMemPerBlockOptin);
  g_dev.cc_major = prop.major;
  g_dev.cc_minor = prop.minor;
  std::printf("device: %s, %d SMs, %zu B smem opt-in\n", prop.name, prop.multiProcessorCount,
              prop.sharedMemPerBlockOptin);
  CK(cudaMalloc(&g_sink, 1 << 20));
  // DECODE_LAB_COMBINE_CARVEOUT=1: the combine kernels prefer the largest shared-memory carveout, as
  // the split kernels do (decode_launch.cuh), so that an SM switching between the two need not
  // repartition its L1 (a guess at part of the small calls' fixed cost, to A/B across two runs:
  // compare the "dflt us" columns).
  if (const char* e = std::getenv("DECODE_LAB_COMBINE_CARVEOUT"); e != nullptr && e[0] == '1') {
    CK(cudaFuncSetAttribute(split_combine_kernel<T, 1>, cudaFuncAttributePreferredSharedMemoryCarveout,
                            cudaSharedmemCarveoutMaxShared));
    CK(cudaFuncSetAttribute(split_combine_kernel<T, kCombineWarps>, cudaFuncAttributePreferredSharedMemoryCarveout,
                            cudaSharedmemCarveoutMaxShared));
    CK(cudaFuncSetAttribute(split_combine_kernel<T, 16>, cudaFuncAttributePreferredSharedMemoryCarveout,
                            cudaSharedmemCarveoutMaxShared));
    std::printf("combine kernels: largest shared-memory carveout preferred\n");
  }

  // DECODE_LAB_HEADS="Hq:Hk" (default 32:8); DECODE_LAB_SHAPES="B:Sk,B:Sk,..." in place of the
  // decode-kv grid's small (L2-resident when replayed) and bandwidth-bound shapes.
  int hq = 32, hk = 8;
  // DECODE_LAB_D=72..128 (a multiple of 8; default 128): the head dim, on the D=128 configs (columns
  // past it zero); DECODE_LAB_RAGGED=1: batch b's cache holds Sk - (97 b mod min(Sk, 1000)) keys, so
  // the last key block of most rows is partial (GB/s still counts whole caches). Both are there to
  // check the configs' tails and narrow head dims against the library's, not to time them.
  int d = 128;
  if (const char* e = std::getenv("DECODE_LAB_D"); e != nullptr && (std::sscanf(e, "%d", &d) != 1 || d <= 64 ||
                                                                     d > 128 || d % 8 != 0)) {
    std::printf("DECODE_LAB_D: expected a multiple of 8 in (64, 128], got %s\n", e);
    return 2;
  }
  const bool ragged = std::getenv("DECODE_LAB_RAGGED") != nullptr && std::getenv("DECODE_LAB_RAGGED")[0] == '1';
  if (const char* e = std::getenv("DECODE_LAB_HEADS"); e != nullptr && std::sscanf(e, "%d:%d", &hq, &hk) != 2) {
    std::printf("DECODE_LAB_HEADS: expected Hq:Hk, got %s\n", e);
    return 2;
  }
  std::vector<Shape> shapes = {{1, 1024}, {1, 4096}, {8, 1024}, {1, 16384}, {8, 4096}, {64, 1024}, {1, 131072}, {8, 131072}, {64, 32768}};
  if (const char* e = std::getenv("DECODE_LAB_SHAPES"); e != nullptr) {
    shapes.clear();
    for (const char* c = e; *c != '\0';) {
      Shape sh{};
      int used = 0;
      if (std::sscanf(c, "%d:%d%n", &sh.b, &sh.sk, &used) != 2) {
        std::printf("DECODE_LAB_SHAPES: expected B:Sk,..., got %s\n", e);
        return 2;
      }
      shapes.push_back(sh);
      c += used;
      if (*c == ',') ++c;
    }
  }
  // DECODE_LAB_ONLY="prefix,prefix,...": only the variants whose names start with one of them.
  const char* only = std::getenv("DECODE_LAB_ONLY");
  auto selected = [only](const Variant& v) {
    if (only == nullptr || only[0] == '\0') return true;
    for (const char* c = only; *c != '\0';) {
      const char* end = std::strchr(c, ',');
      const size_t n = end ? size_t(end - c) : std::strlen(c);
      if (n > 0 && std::strncmp(v.name, c, n) == 0) return true;
      c += n + (end ? 1 : 0);
    }
    return false;
  };
  std::printf("heads %d:%d, D=%d, bf16%s\n", hq, hk, d, ragged ? ", ragged cache lengths" : "");
  int failures = 0;
  std::printf("%-10s %3s %7s %6s %6s %8s %8s %9s %9s %9s %7s %9s\n", "variant", "B", "Sk", "splits", "dflt", "us", "dflt us",
              "GB/s", "dflt GB/s", "speedup", "smem KB", "rel diff");
  for (const Shape& sh : shapes) {
    const int64_t nq = int64_t(sh.b) * hq * d, nkv = int64_t(sh.b) * sh.sk * hk * d;
    Buffers buf{};
    CK(cudaMalloc(&buf.q, nq * sizeof(T)));
    CK(cudaMalloc(&buf.k, nkv * sizeof(T)));
    CK(cudaMalloc(&buf.v, nkv * sizeof(T)));
    T* o_ref;
    CK(cudaMalloc(&buf.o, nq * sizeof(T)));
    CK(cudaMalloc(&o_ref, nq * sizeof(T)));
    CK(cudaMalloc(&buf.lse, int64_t(sh.b) * hq * sizeof(float)));
    CK(cudaMalloc(&buf.o_accum, int64_t(kDecodeMaxSplits) * nq * sizeof(float)));
    CK(cudaMalloc(&buf.lse_accum, int64_t(kDecodeMaxSplits) * sh.b * hq * sizeof(float)));
    fill_random<<<1024, 256>>>(buf.q, nq, 1);
    fill_random<<<4096, 256>>>(buf.k, nkv, 2);
    fill_random<<<4096, 256>>>(buf.v, nkv, 3);

    DecodeParams p;  // q [B,1,Hq,D], caches [B,Sk,Hk,D], o [B,1,Hq,D], contiguous
    p.q = buf.q;
    p.k_cache = buf.k;
    p.v_cache = buf.v;
    p.lse = buf.lse;
    p.o_accum = buf.o_accum;
    p.lse_accum = buf.lse_accum;
    // Lengths in device memory, as flash_attn_with_kvcache takes them (cache_seqlens): every CTA
    // reads its batch's length before it can place its first key block, a latency the calls pay.
    std::vector<int> lens(sh.b, sh.sk);
    if (ragged)
      for (int b = 0; b < sh.b; ++b) {
        lens[b] = sh.sk - (97 * b) % std::min(sh.sk, 1000);
        // Entries past a cache's length are NaN: a kernel that reads them into its sums shows it.
        const int64_t off = (int64_t(b) * sh.sk + lens[b]) * hk * d, n = int64_t(sh.sk - lens[b]) * hk * d;
        CK(cudaMemset(buf.k + off, 0xff, n * sizeof(T)));
        CK(cudaMemset(buf.v + off, 0xff, n * sizeof(T)));
      }
    int* d_lens;
    CK(cudaMalloc(&d_lens, sh.b * sizeof(int)));
    CK(cudaMemcpy(d_lens, lens.data(), sh.b * sizeof(int), cudaMemcpyHostToDevice));
    p.cache_seqlens = d_lens;
    p.q_batch_stride = int64_t(hq) * d, p.q_row_stride = int64_t(hq) * d, p.q_head_stride = d;
    p.k_batch_stride = int64_t(sh.sk) * hk * d, p.k_row_stride = int64_t(hk) * d, p.k_head_stride = d;
    p.v_batch_stride = p.k_batch_stride, p.v_row_stride = p.k_row_stride, p.v_head_stride = d;
    p.o_batch_stride = int64_t(hq) * d, p.o_row_stride = int64_t(hq) * d, p.o_head_stride = d;
    p.batch = sh.b, p.heads_q = hq, p.heads_kv = hk, p.seqlen_q = 1, p.seqlen_k_max = sh.sk, p.head_dim = d;
    p.set_scale(1.f / std::sqrt(float(d)));
    p.dtype = DType::kBFloat16;
    p.num_m_blocks = (hq / hk + kDecodeBlockM - 1) / kDecodeBlockM;

    DecodeParams pd = kDefault.plan(p);
    pd.o = o_ref;
    kDefault.run(pd, 0);
    CK(cudaDeviceSynchronize());
    const double bytes = 2.0 * nkv * sizeof(T);
    for (const Variant& v : kVariants) {
      if (!selected(v)) continue;
      if (v.smem > g_dev.max_smem_per_block) {
        std::printf("%-8s skipped: %d B shared memory over this GPU's %d\n", v.name, v.smem, g_dev.max_smem_per_block);
        continue;
      }
      if (is_read_probe(v) && (d != 128 || ragged)) continue;  // the probes read whole D=128 caches
      DecodeParams pv = v.plan(p);
      pv.o = buf.o;
      CK(cudaMemset(buf.o, 0xff, nq * sizeof(T)));  // NaN: an unwritten output shows up
      v.run(pv, 0);
      CK(cudaDeviceSynchronize());
      const bool probe = is_read_probe(v);
      const double diff = probe ? 0.0 : rel_diff(buf.o, o_ref, nq);
      const bool ok = probe || diff <= 1e-2;
      if (!ok) ++failures;
      double tv, td;
      time_pair(v, pv, kDefault, pd, &tv, &td);
      std::printf("%-10s %3d %7d %6d %6d %8.2f %8.2f %9.0f %9.0f %9.3f %7.1f %9.1e%s\n", v.name, sh.b, sh.sk,
                  pv.num_splits, pd.num_splits, tv, td, bytes / (tv * 1e-6) / 1e9, bytes / (td * 1e-6) / 1e9, td / tv,
                  v.smem / 1024.0, diff, ok ? "" : "  FAIL");
      std::fflush(stdout);
    }
    cudaFree(d_lens), cudaFree(buf.q), cudaFree(buf.k), cudaFree(buf.v), cudaFree(buf.o), cudaFree(o_ref), cudaFree(buf.lse);
    cudaFree(buf.o_accum), cudaFree(buf.lse_accum);
  }
  std::printf("speedup = default time / variant time (> 1: the variant is faster). %s\n", failures ? "SOME VARIANTS DISAGREE WITH THE DEFAULT" : "all variants agree with the default");
  return failures ? 1 : 0;
}
