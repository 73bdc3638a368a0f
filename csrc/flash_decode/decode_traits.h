// Tile configurations of the split-KV decoding kernel, and the host-side choice of the number of
// splits. Plain C++ (constexpr, no CUDA), so the heuristic is checked on CPU
// (tests/kernels/test_kvcache.py compiles a tiny program against this header).
//
// Layout of one thread block (CTA) of the split kernel, csrc/flash_decode/decode_kernel.cuh:
//   * rows: the Sq * (Hq/Hk) query rows that share one KV head are packed into one 16-row tile
//     (row R <-> query i = R / group, head hk*group + R % group), so each K/V byte a CTA streams
//     serves every query head of its group: the GQA group is read once per split, not once per head;
//   * keys: each of the kNWarps warps owns a kWarpN-key slice (16 or 32) of every kBlockN-key step
//     (kBlockN = kWarpN * kNWarps) with its own online-softmax state; the warps are merged once, at
//     the end, through shared memory. No warp ever waits on another inside the loop except at the
//     one barrier per step that guards the shared-memory ring;
//   * K/V stream through a kStages-deep ring of shared-memory stages filled by 16-byte cp.async.
#pragma once

#include <cstdint>

#include "../common/swizzle.h"

namespace flashattn {

// Packed query rows per CTA (one m16 tile); the planner's query-tile count uses it too.
constexpr int kDecodeBlockM = 16;

// Paged caches: page sizes are multiples of this. Key tiles start at multiples of 16 too, so every
// aligned 16-row group of a tile lies inside one page: the split kernel reads the block table once
// per group, and no tile needs pages as large as itself (kBlockN is 32 to 128).
constexpr int kDecodeMinPageSize = 16;

// Walks the aligned 16-row groups of a key tile, from the group of key key0 (a multiple of 16),
// through a paged cache's table: the group's entry in the sequence's table row (page_idx) and its
// first row inside that page (row_base). One division at the start; next() advances without one.
// Plain constexpr, so the split kernel and the CPU check of the mapping run this same code.
struct DecodePageCursor {
  int groups_per_page;
  int page_idx;
  int group_in_page;

  constexpr DecodePageCursor(int key0, int page_size)
      : groups_per_page(page_size / kDecodeMinPageSize),
        page_idx(key0 / kDecodeMinPageSize / (page_size / kDecodeMinPageSize)),
        group_in_page(key0 / kDecodeMinPageSize - page_idx * (page_size / kDecodeMinPageSize)) {}
  constexpr int row_base() const { return group_in_page * kDecodeMinPageSize; }
  constexpr void next() {
    if (++group_in_page == groups_per_page) {
      group_in_page = 0;
      ++page_idx;
    }
  }
};

template <int kHeadDim_, int kNWarps_, int kStages_, int kL2Prefetch_ = 0, int kWarpN_ = 16>
struct DecodeKernelTraits {
  static constexpr int kHeadDim = kHeadDim_;  // head dim the tile is built for (runtime d <= this)
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kNThreads = kNWarps * 32;
  static constexpr int kStages = kStages_;
  // L2 prefetch hint of the K/V copies in bytes (0: none; ../common/ptx.cuh cp_async_16_l2).
  static constexpr int kL2Prefetch = kL2Prefetch_;

  static constexpr int kBlockM = kDecodeBlockM;  // packed query rows per CTA: one m16 tile
  // Keys per warp per step: 16 (two n8 tiles of S, one k16 slice of P V) or 32 (four tiles, two
  // slices: 128-key steps from four warps).
  static constexpr int kWarpN = kWarpN_;
  static constexpr int kKSlices = kWarpN / 16;  // k16 slices of P V per warp and step
  static constexpr int kBlockN = kWarpN * kNWarps;  // keys per step (one shared-memory stage)
  static constexpr int kNTilesS = kWarpN / 8;
  static constexpr int kNTilesO = kHeadDim / 8;

  // 16-byte padded rows: (kHeadDim/8 + 1) 16-byte units, odd when kHeadDim % 16 == 0, so the 8
  // row addresses of one ldmatrix phase hit 8 distinct bank groups (as in the forward kernel).
  static constexpr int kSmemStride = kHeadDim + 8;  // elements
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks per row
  static constexpr int kRowsPerPass = kNThreads / kChunksPerRow;  // K/V rows one cp.async pass covers
  static constexpr int kPasses = kBlockN / kRowsPerPass;

  // K/V rows: padded as above, or dense with 16-byte chunks XOR-swizzled within each 128-byte line
  // (DecodeSwizzleTraits).
  static constexpr bool kSwizzle = false;
  static constexpr int kKVStride = kSmemStride;  // elements
  static constexpr int kStageBytes = kBlockN * kSmemStride * 2;  // one stage of K (or of V)
  static constexpr int kSmemQBytes = kBlockM * kSmemStride * 2;
  static constexpr int kSmemKVBytes = 2 * kStages * kStageBytes;
  // After the loop the K/V ring is reused for each warp's fp32 O tile; rows padded by 8 floats,
  // which makes the float2 accumulator stores conflict-free (rows land 8 banks apart).
  static constexpr int kOStride = kHeadDim + 8;  // floats
  static constexpr int kSmemOBytes = kNWarps * kBlockM * kOStride * 4;
  static constexpr int kSmemRingBytes = kSmemKVBytes > kSmemOBytes ? kSmemKVBytes : kSmemOBytes;
  // Per-warp row max / row sum / merge weight, and the row LSE.
  static constexpr int kSmemStatsBytes = (3 * kNWarps * kBlockM + kBlockM) * 4;
  static constexpr int kSmemBytes = kSmemQBytes + kSmemRingBytes + kSmemStatsBytes;

  static_assert(kHeadDim % 32 == 0 && kHeadDim <= 256, "head dims are multiples of 32 up to 256");
  static_assert(kBlockM == 16, "the kernel's fragment code holds exactly one m16 tile per warp");
  static_assert(kWarpN == 16 || kWarpN == 32, "one or two k16 slices of keys per warp");
  static_assert(kNThreads % kChunksPerRow == 0 && kRowsPerPass >= 1, "a pass covers whole rows");
  static_assert(kBlockN % kRowsPerPass == 0, "a stage is a whole number of passes");
  static_assert(kDecodeMinPageSize % kRowsPerPass == 0 && kBlockN % kDecodeMinPageSize == 0,
                "the passes of a stage tile whole 16-row groups, each inside one page");
  static_assert(kStages >= 2, "at least double buffering");
  static_assert(kSmemQBytes % 128 == 0 && kSmemRingBytes % 16 == 0, "16-byte aligned regions");
};

// A config's K/V rows dense (kHeadDim elements, no padding) with 16-byte chunk c of row r stored at
// chunk swizzled_chunk_128b(c, r) (../common/swizzle.h): the 8 rows of an ldmatrix phase still hit
// 8 distinct bank groups, and a cp.async row fills whole 128-byte lines where a padded row
// straddles one more (on an H200 the padded rows' copies read ~4% less: docs/perf-notes.md
// "Decode: what caps the copy").
template <typename Base>
struct DecodeSwizzleTraits : Base {
  static constexpr bool kSwizzle = true;
  static constexpr int kKVStride = Base::kHeadDim;
  static constexpr int kStageBytes = Base::kBlockN * kKVStride * 2;
  static constexpr int kSmemKVBytes = 2 * Base::kStages * kStageBytes;
  static constexpr int kSmemRingBytes = kSmemKVBytes > Base::kSmemOBytes ? kSmemKVBytes : Base::kSmemOBytes;
  static constexpr int kSmemBytes = Base::kSmemQBytes + kSmemRingBytes + Base::kSmemStatsBytes;
  static_assert(Base::kChunksPerRow % 8 == 0, "whole 128-byte lines a row");
  static_assert(Base::kRowsPerPass % 8 == 0, "a thread's rows share their swizzle (row mod 8)");
  static_assert(kSmemRingBytes % 128 == 0, "stages start on 128-byte lines");
};

// Four kinds of config. kPortable, one per head dim, every one under the 99 KB per block of
// sm86/sm89, so a single instantiation serves sm80, sm89 and sm90: on the H100 (228 KB per SM)
// they run 3, 3 and 2 CTAs per SM, i.e. 96-110 KB of K/V in flight per SM at steady state, far
// above the ~25 KB/us * ~1.5 us latency that 3.3 TB/s over 132 SMs needs. Three sm90 configs for
// D = 128 (docs/perf-notes.md "Decode under graph replay", "Decode: what caps the copy"):
//   kHopper        8 warps, 128-key steps, 2 stages, one CTA per SM, padded rows, a 256-byte L2
//                  prefetch hint (+1.2-1.7% on the H100's bandwidth-bound shapes): the planner's
//                  first plan, and what runs a requested split count;
//   kHopperSplit   4 warps, 64-key steps, 4 stages: three blocks in flight, wherever kHopper's plan
//                  splits the keys (small batches: a split's CTA streams a few blocks, latency-bound,
//                  often from L2): +3-16%;
//   kHopperStream  4 warps, 64-key steps, 3 stages: two CTAs per SM, wherever kHopper's plan leaves
//                  the keys unsplit (the large grids: B >= 16 at GQA 32:8). On an H200 (4.8 TB/s)
//                  kHopper's one CTA per SM read 3.8 TB/s and this config 4.2-4.3: +5-17% on every
//                  unsplit grid measured; on an H100 within -0.6..+2.1%.
// kHopperSplit and kHopperStream keep their K/V rows dense and swizzled (DecodeSwizzleTraits) and
// hint 128 bytes of L2 prefetch: on an H200 the 256-byte hint caps a full grid's cp.async reads at
// ~4.25 TB/s where 128 bytes read 4.55, and padded rows cost ~4% more; together +4-11% over the
// padded 256-byte configs on the decode grid (lab/decode_lab.cu keeps those as *-pad-l2-256).
// Their 101-134 KB fit sm80's 163 KB too, but they were measured only on sm90, so the planner picks
// them there only (decode_pick_variant, decode_prefer_split_config, decode_prefer_stream_config).
enum class DecodeVariant : int { kPortable = 0, kHopper = 1, kHopperSplit = 2, kHopperStream = 3 };

template <int kHeadDim, DecodeVariant kVariant = DecodeVariant::kPortable>
struct DecodeTileConfig;

#define FLASHATTN_DECODE_CONFIG(D, V, ...)                    \
  template <>                                                 \
  struct DecodeTileConfig<D, DecodeVariant::V> {              \
    using Traits = __VA_ARGS__;                               \
  }

// head dim, variant, traits (head dim, warps, stages, L2 prefetch bytes)      BlockN   smem (bytes)
FLASHATTN_DECODE_CONFIG(64, kPortable, DecodeKernelTraits<64, 4, 3, 0>);          //  64   58432 (57.1 KB)
FLASHATTN_DECODE_CONFIG(128, kPortable, DecodeKernelTraits<128, 4, 2, 0>);        //  64   74816 (73.1 KB)
FLASHATTN_DECODE_CONFIG(256, kPortable, DecodeKernelTraits<256, 2, 2, 0>);        //  32   76480 (74.7 KB)
FLASHATTN_DECODE_CONFIG(128, kHopper, DecodeKernelTraits<128, 8, 2, 256>);        // 128  145216 (141.8 KB)
FLASHATTN_DECODE_CONFIG(128, kHopperSplit,
                        DecodeSwizzleTraits<DecodeKernelTraits<128, 4, 4, 128>>); //  64  136256 (133.1 KB)
FLASHATTN_DECODE_CONFIG(128, kHopperStream,
                        DecodeSwizzleTraits<DecodeKernelTraits<128, 4, 3, 128>>); //  64  103488 (101.1 KB)

#undef FLASHATTN_DECODE_CONFIG

// Shared memory of the kHopper (kHopperSplit) config for a kernel head dim; 0 where there is none.
constexpr int decode_hopper_smem(int kernel_head_dim) {
  return kernel_head_dim == 128 ? DecodeTileConfig<128, DecodeVariant::kHopper>::Traits::kSmemBytes : 0;
}
constexpr int decode_hopper_split_smem(int kernel_head_dim) {
  return kernel_head_dim == 128 ? DecodeTileConfig<128, DecodeVariant::kHopperSplit>::Traits::kSmemBytes : 0;
}
constexpr int decode_hopper_stream_smem(int kernel_head_dim) {
  return kernel_head_dim == 128 ? DecodeTileConfig<128, DecodeVariant::kHopperStream>::Traits::kSmemBytes : 0;
}

// The config the planner starts from: kHopper where the head dim has one, the GPU is sm90 or newer
// and its per-block opt-in shared memory holds it; kPortable everywhere else.
constexpr DecodeVariant decode_pick_variant(int kernel_head_dim, int cc_major, int max_smem_per_block) {
  const int smem = decode_hopper_smem(kernel_head_dim);
  return smem > 0 && cc_major >= 9 && smem <= max_smem_per_block ? DecodeVariant::kHopper : DecodeVariant::kPortable;
}

// After planning kHopper's splits itself (the heuristic's, none requested): whether to run
// kHopperSplit instead (and plan again with its block N). Yes wherever that plan splits the keys:
// the splits' CTAs are short and latency-bound; three blocks in flight beat one, and 64-key blocks
// allow twice the splits where kHopper's ran out of blocks (B=1 Sk=1k: 16 CTAs per KV head, not 8).
constexpr bool decode_prefer_split_config(int kernel_head_dim, int max_smem_per_block, int splits) {
  const int smem = decode_hopper_split_smem(kernel_head_dim);
  return smem > 0 && smem <= max_smem_per_block && splits > 1;
}

// After kHopper's plan: whether to run kHopperStream instead, with the same single split. Yes
// wherever that plan leaves the keys unsplit: each CTA then streams its whole cache, bandwidth-bound,
// and two CTAs per SM keep more of it in flight than one (the grid is large: the plan splits any
// grid that fills less than 80% of the SMs' slots).
constexpr bool decode_prefer_stream_config(int kernel_head_dim, int max_smem_per_block, int splits) {
  const int smem = decode_hopper_stream_smem(kernel_head_dim);
  return smem > 0 && smem <= max_smem_per_block && splits == 1;
}

constexpr int kDecodeHeadDims[] = {64, 128, 256};

// Kernel head dim for a runtime head dim (multiples of 8 in [8, 256]); -1 when out of range.
constexpr int decode_round_head_dim(int d) {
  if (d < 8 || d > 256 || d % 8 != 0) return -1;
  for (int h : kDecodeHeadDims)
    if (d <= h) return h;
  return -1;
}

// Upper bound on splits: bounds the partial buffers and the combine kernel's per-row work.
constexpr int kDecodeMaxSplits = 128;

constexpr int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Fraction of `slots` concurrent CTA slots that `ctas` CTAs keep busy, over whole waves.
constexpr double wave_efficiency(int64_t ctas, int64_t slots) {
  return static_cast<double>(ctas) / static_cast<double>(ceil_div64(ctas, slots) * slots);
}

// Splits the planner uses when the caller passes num_splits = 0.
//   tiles       = batch * heads_kv * num_m_blocks (CTAs without splitting)
//   n_blocks    = key blocks (kBlockN keys) of the longest sequence, Sk_max
//   slots       = sm_count * ctas_per_sm (CTAs resident at once)
// No split when the unsplit grid already fills the GPU well (>= 80% of its waves busy). Else the
// candidates are the split counts s that leave no split empty on the longest sequence (the kernel
// gives each split ceil(n_blocks / s) blocks: s is a candidate iff ceil(n_blocks / that) == s);
// among them the fewest splits whose wave efficiency is within 5% of the best candidate's. The
// kernel is bandwidth-bound and a CTA's fixed cost (Q tile, a 16 x D fp32 partial) is small, so a
// split may be as short as one key block.
constexpr bool decode_split_candidate(int64_t s, int64_t n_blocks) {
  return ceil_div64(n_blocks, ceil_div64(n_blocks, s)) == s;
}

constexpr int decode_num_splits_heuristic(int64_t tiles, int64_t n_blocks, int sm_count, int ctas_per_sm) {
  if (tiles <= 0 || n_blocks <= 1) return 1;
  const int64_t slots = static_cast<int64_t>(sm_count > 0 ? sm_count : 1) * (ctas_per_sm > 0 ? ctas_per_sm : 1);
  if (wave_efficiency(tiles, slots) >= 0.8) return 1;
  const int64_t max_splits = n_blocks < kDecodeMaxSplits ? n_blocks : kDecodeMaxSplits;
  double best = 0.0;
  for (int64_t s = 1; s <= max_splits; ++s) {
    if (!decode_split_candidate(s, n_blocks)) continue;
    const double e = wave_efficiency(tiles * s, slots);
    if (e > best) best = e;
  }
  for (int64_t s = 1; s <= max_splits; ++s) {
    if (decode_split_candidate(s, n_blocks) && wave_efficiency(tiles * s, slots) >= 0.95 * best) return static_cast<int>(s);
  }
  return 1;  // unreachable: the best candidate qualifies
}

// Splits actually launched: the caller's num_splits (> 0) or the heuristic (0), then clamped to
// [1, min(kDecodeMaxSplits, n_blocks)] (more splits than key blocks would only add empty CTAs).
constexpr int decode_num_splits(int requested, int64_t tiles, int64_t n_blocks, int sm_count, int ctas_per_sm) {
  int s = requested > 0 ? requested : decode_num_splits_heuristic(tiles, n_blocks, sm_count, ctas_per_sm);
  const int64_t cap = n_blocks < kDecodeMaxSplits ? (n_blocks > 1 ? n_blocks : 1) : kDecodeMaxSplits;
  if (s > cap) s = static_cast<int>(cap);
  return s < 1 ? 1 : s;
}

// The planner's split count for a launch (flash_decode_plan; lab/decode_lab.cu plans its
// variants with it too): query tiles = num_m_blocks * batch * heads_kv, key blocks of the longest
// sequence with the config's block N, then decode_num_splits.
constexpr int decode_plan_splits(int requested, int64_t num_m_blocks, int64_t batch, int64_t heads_kv,
                                 int64_t seqlen_k_max, int block_n, int sm_count, int ctas_per_sm) {
  const int64_t tiles = num_m_blocks * batch * heads_kv;
  const int64_t n_blocks = (seqlen_k_max + block_n - 1) / block_n;
  return tiles == 0 ? 1 : decode_num_splits(requested, tiles, n_blocks, sm_count, ctas_per_sm);
}

}  // namespace flashattn
