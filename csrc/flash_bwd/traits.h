// Tile configurations of the portable (mma.sync) backward kernel, as named compile-time traits.
//
// One thread block owns kBlockN keys of one (batch, K/V head) and walks the query blocks of every
// query head of its group (mainloop.cuh). Each step runs three matrix phases, each with its own
// warp layout over its output tile:
//   A: S^T = K Q^T and dP^T = V dO^T, [kBlockN x kBlockM]  -> P^T, dS^T to shared memory
//   B: dV += P^T dO and dK += dS^T Q,  [kBlockN x D]        (accumulators live across the loop)
//   C: dQ  = dS K,                     [kBlockM x D]        (added to a float32 buffer)
#pragma once

namespace flashattn {

template <int kHeadDim_, int kBlockN_, int kBlockM_, int kNWarps_, int kAWarpsN_, int kBWarpsN_, int kCWarpsM_,
          int kStages_, bool kSwizzleQdO_ = false, int kBWarpsNSm90_ = kBWarpsN_>
struct BwdKernelTraits {
  static constexpr int kHeadDim = kHeadDim_;  // head dim the tile is built for (runtime d <= this)
  static constexpr int kBlockN = kBlockN_;    // keys per thread block
  static constexpr int kBlockM = kBlockM_;    // queries per main-loop step
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kNThreads = kNWarps * 32;
  static constexpr int kStages = kStages_;    // Q/dO buffers: 2 = the next step loads during this one

  // Phase A: warps tile S^T as kAWarpsN (keys) x kAWarpsM (queries).
  static constexpr int kAWarpsN = kAWarpsN_;
  static constexpr int kAWarpsM = kNWarps / kAWarpsN;
  static constexpr int kAMTiles = kBlockN / kAWarpsN / 16;  // m16 tiles (keys) per warp
  static constexpr int kANTiles = kBlockM / kAWarpsM / 8;   // n8 tiles (queries) per warp
  // Phase A's k-steps unrolled two at a time where the warp tile is 2+ m16 tiles of keys at D=128
  // (FlashAttention-2's 4 x 2 layout there): fully unrolled, ptxas loaded the next k-steps'
  // fragments early and spilled 44 B at 255 registers; two at a time it fits.
  static constexpr int kAKUnroll = (kHeadDim == 128 && kAMTiles >= 2) ? 2 : kHeadDim / 16;
  // Phase B: warps tile dK/dV as kBWarpsN (keys) x kBWarpsD (head dim). sm90 may take its own
  // split (kBWarpsNSm90_): more warps over the keys load each P^T/dS^T fragment fewer times (the
  // kernel waits on the shared-memory instruction queue there) but hold more dO/Q fragments, which
  // spilled on sm_80/sm_89 at D=64. Only the warps' roles change: the shared memory is the same.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  static constexpr int kBWarpsN = kBWarpsN_;
#else
  static constexpr int kBWarpsN = kBWarpsNSm90_;
#endif
  static constexpr int kBWarpsD = kNWarps / kBWarpsN;
  static constexpr int kBMTiles = kBlockN / kBWarpsN / 16;
  static constexpr int kBNTiles = kHeadDim / kBWarpsD / 8;
  // Phase C: warps tile dQ as kCWarpsM (queries) x kCWarpsD (head dim).
  static constexpr int kCWarpsM = kCWarpsM_;
  static constexpr int kCWarpsD = kNWarps / kCWarpsM;
  static constexpr int kCMTiles = kBlockM / kCWarpsM / 16;
  static constexpr int kCChunks = kHeadDim >= 256 ? 2 : 1;  // head-dim chunks computed one after another
  static constexpr int kCNTiles = kHeadDim / kCChunks / kCWarpsD / 8;
  // dQ partials reach dq_accum as float4 reductions on sm90 (lane pairs swap halves of a tile,
  // mainloop.cuh) rather than float2 ones.
  static constexpr bool kDqVec4 = false;
  // One stage: the next step's Q/dO load starts before phase C (behind a barrier) rather than
  // after it (mainloop.cuh).
  static constexpr bool kLoadBeforeDq = true;

  // K, V rows padded by 16 bytes: an odd number of 16-byte units per row (kHeadDim and kBlockM
  // are multiples of 16), so the 8 row addresses of an ldmatrix phase hit 8 distinct bank groups,
  // plain or transposed. Q, dO rows (copied every step) the same, or (kSwizzleQdO) dense, whole
  // 128-byte lines with their chunks XOR-swizzled by row (../common/swizzle.h): conflict-free the
  // same way, and their cp.async rows fill whole lines (a padded row straddles one more). P^T and
  // dS^T rows stay padded (written by st.shared, never copied).
  // Swizzling takes a few registers (the XORs of the Q/dO addresses): on sm_80 the D=64 large
  // tile spilled with it (36 B) where sm_89 and sm_90a fit it, so sm_80's code keeps padded rows.
  // The shared memory requested (kSmemBytes) is the padded layout's either way: the host and every
  // target agree on it.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
  static constexpr bool kSwizzleQdO = false;
#else
  static constexpr bool kSwizzleQdO = kSwizzleQdO_;
#endif
  // The epilogue's head and batch derived again from the block index rather than kept in registers
  // across the loop: the swizzled D=128 tile spilled the head otherwise (4 B); at D=64 the same
  // change gave a schedule 8% slower (perf-notes, 2026-11-30), so it is this tile's alone.
  static constexpr bool kEpilogueIndexAgain = kSwizzleQdO && kHeadDim == 128;
  // The last kDqDefer of an unmasked step's 16 dQ reductions carried past the next step's first
  // barrier (mainloop.cuh): the swizzled tiles on sm90, as many as fit without a spill (D=64: 4
  // spilled 8 B; D=128: 8 spilled 12 B; sm_89's D=64 spilled 36 B with 2, so sm_89 keeps none).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  static constexpr int kDqDefer = 0;
#else
  static constexpr int kDqDefer = !kSwizzleQdO ? 0 : kHeadDim == 128 ? 4 : 2;
#endif
  // One-stage tiles load the next step's Q/dO after the barrier that ends phase B; kPlanQdoEarly
  // works out where each thread reads (mainloop.cuh plan_q_do) before phase B instead, under its
  // matrix work: every one-stage tile but D=256's large one, which measured 2-4% slower with it
  // (the D=64 large tile +1-2%; perf-notes, 2026-11-30). The compact tiles take it also because
  // without it ptxas squeezed sm_89's D=256 window kernels into 128 registers and spilled.
  static constexpr bool kPlanQdoEarly = kStages == 1 && kLoadBeforeDq && !(kHeadDim == 256 && kBlockM == 64);
  static constexpr int kSmemStride = kHeadDim + 8;                           // K, V rows
  static constexpr int kQStride = kSwizzleQdO ? kHeadDim : kHeadDim + 8;   // Q, dO rows
  static constexpr int kPStride = kBlockM + 8;      // P^T, dS^T rows (one key each)
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte cp.async chunks per row

  // Shared memory, in elements of the input dtype, then floats (lse, dpsum per query row).
  static constexpr int kSmemK = kBlockN * kSmemStride;
  static constexpr int kSmemV = kSmemK;
  static constexpr int kSmemQStage = kBlockM * kQStride;
  static constexpr int kSmemQ = kStages * kSmemQStage;
  static constexpr int kSmemDO = kSmemQ;
  static constexpr int kSmemP = kBlockN * kPStride;
  static constexpr int kSmemDS = kSmemP;
  static constexpr int kSmemQPadded = kStages * kBlockM * (kHeadDim + 8);  // >= kSmemQ
  static constexpr int kSmemElements = kSmemK + kSmemV + 2 * kSmemQPadded + kSmemP + kSmemDS;
  static constexpr int kSmemBytes = kSmemElements * 2 + 2 * kStages * kBlockM * 4;

  static_assert(kHeadDim % 32 == 0 && kHeadDim <= 256, "instantiated head dims are multiples of 32");
  static_assert(kNWarps % kAWarpsN == 0 && kNWarps % kBWarpsN == 0 && kNWarps % kCWarpsM == 0, "warp layouts");
  static_assert(kAMTiles >= 1 && kBlockN % (kAWarpsN * 16) == 0, "phase A: whole m16 tiles of keys per warp");
  static_assert((kANTiles == 1 || kANTiles % 2 == 0) && kBlockM % (kAWarpsM * 8) == 0,
                "phase A: Q/dO fragments come as one n8 tile or in n8 pairs");
  static_assert(kBMTiles >= 1 && kBlockN % (kBWarpsN * 16) == 0, "phase B: whole m16 tiles of keys per warp");
  static_assert(kBNTiles % 2 == 0 && kHeadDim % (kBWarpsD * 16) == 0, "phase B: dO/Q fragments come in n8 pairs");
  static_assert(kCMTiles >= 1 && kBlockM % (kCWarpsM * 16) == 0, "phase C: whole m16 tiles of queries per warp");
  static_assert(kCNTiles % 2 == 0 && kHeadDim % (kCChunks * kCWarpsD * 16) == 0, "phase C: K fragments come in n8 pairs");
  static_assert(kBlockM <= kNThreads, "one thread per query row loads lse and dpsum");
  static_assert(kStages == 1 || kStages == 2, "one or two Q/dO stages");
  // Swizzled Q/dO: a lane's ldmatrix rows keep one value mod 8 (row offsets are multiples of 8),
  // and every compile-time column offset (k16 steps in phase A, n8 pairs of a warp's head-dim
  // slice in phase B) leaves the lane's own chunk bits alone: a power of two n8 tiles per warp.
  static_assert(!kSwizzleQdO || (kHeadDim % 64 == 0 && (kBNTiles & (kBNTiles - 1)) == 0 &&
                                 (kNThreads / kChunksPerRow) % 8 == 0),
                "swizzled Q/dO rows: whole 128-byte lines, a power of two n8 tiles per warp in phase B");
};

// Two variants per head dim, as in the forward: kLarge the fastest, kCompact fits the 99 KB per
// block of sm86/sm89 (the L4) where kLarge does not. The launcher picks from the device limit.
enum class BwdTileVariant : int { kLarge = 0, kCompact = 1 };

template <int kHeadDim, BwdTileVariant kVariant>
struct BwdTileConfig;

#define FLASHATTN_BWD_TILE_CONFIG(D, V, BN, BM, NW, AN, BN_, BN90, CM, ST, SW)  \
  template <>                                                                   \
  struct BwdTileConfig<D, BwdTileVariant::V> {                                  \
    using Traits = BwdKernelTraits<D, BN, BM, NW, AN, BN_, CM, ST, SW, BN90>;    \
  }

//                        head dim variant  BlockN BlockM warps A-keys B-keys (sm90) C-queries stages swizzle  smem (KB)
FLASHATTN_BWD_TILE_CONFIG(32,  kLarge,   128, 64,  8, 4, 4, 4, 4, 2, false);    //  77.0
FLASHATTN_BWD_TILE_CONFIG(64,  kLarge,   128, 128, 8, 2, 2, 4, 4, 1, true);     // 141.0 (over sm89's 99 KB)
FLASHATTN_BWD_TILE_CONFIG(64,  kCompact, 128, 64,  8, 4, 4, 4, 4, 1, false);    //  90.5
FLASHATTN_BWD_TILE_CONFIG(96,  kLarge,   64,  64,  8, 4, 4, 4, 4, 2, false);    //  97.0
FLASHATTN_BWD_TILE_CONFIG(128, kLarge,   128, 64,  8, 4, 4, 4, 2, 2, true);     // 176.5 (over sm80's 163 KB)
FLASHATTN_BWD_TILE_CONFIG(128, kCompact, 64,  64,  8, 4, 4, 4, 4, 1, false);    //  86.5
FLASHATTN_BWD_TILE_CONFIG(160, kLarge,   64,  64,  8, 4, 4, 4, 4, 2, false);    // 144.5 (over sm89's 99 KB)
FLASHATTN_BWD_TILE_CONFIG(160, kCompact, 32,  64,  4, 2, 2, 2, 4, 1, false);    //  72.5
FLASHATTN_BWD_TILE_CONFIG(192, kLarge,   32,  64,  8, 2, 2, 2, 4, 2, false);    // 135.0 (over sm89's 99 KB)
FLASHATTN_BWD_TILE_CONFIG(192, kCompact, 32,  64,  8, 2, 2, 2, 4, 1, false);    //  84.5
FLASHATTN_BWD_TILE_CONFIG(256, kLarge,   64,  64,  8, 2, 2, 2, 4, 1, false);    // 150.5 (over sm89's 99 KB)
FLASHATTN_BWD_TILE_CONFIG(256, kCompact, 32,  32,  8, 2, 2, 2, 2, 1, false);    //  71.2

#undef FLASHATTN_BWD_TILE_CONFIG

// Head dims with backward kernels; a runtime head dim is rounded up to the next one (zero padding).
constexpr int kBwdHeadDims[] = {32, 64, 96, 128, 160, 192, 256};

constexpr int round_up_bwd_head_dim(int d) {
  for (int h : kBwdHeadDims)
    if (d <= h) return h;
  return -1;
}

}  // namespace flashattn
