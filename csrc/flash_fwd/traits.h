// Tile configurations of the portable (mma.sync) forward kernel, as named compile-time traits.
#pragma once

namespace flashattn {

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_>
struct FwdKernelTraits {
  static constexpr int kHeadDim = kHeadDim_;  // head dim the tile is built for (runtime d <= this)
  static constexpr int kBlockM = kBlockM_;    // query rows per thread block
  static constexpr int kBlockN = kBlockN_;    // key rows per main-loop step
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kNThreads = kNWarps * 32;

  // Each warp owns kWarpM query rows for the whole kernel: its softmax statistics never leave
  // registers and the epilogue needs no block-wide barrier.
  static constexpr int kWarpM = kBlockM / kNWarps;
  static constexpr int kMTiles = kWarpM / 16;  // m16n8k16 row tiles per warp
  static constexpr int kNTilesS = kBlockN / 8;  // n8 tiles of S = Q K^T per m-tile
  static constexpr int kNTilesO = kHeadDim / 8;  // n8 tiles of O per m-tile

  // Shared-memory rows are padded by 16 bytes. A row is then (kHeadDim/8 + 1) 16-byte units
  // long, an odd number when kHeadDim % 16 == 0, so the 8 row addresses of one ldmatrix phase
  // fall into 8 distinct bank groups: conflict-free without a swizzle.
  static constexpr int kSmemStride = kHeadDim + 8;
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte cp.async chunks per row

  // K and V are double-buffered (kernel.cuh): the next block loads while this one computes.
  static constexpr int kStages = 2;
  static constexpr int kSmemQ = kBlockM * kSmemStride;  // elements
  static constexpr int kSmemK = kStages * kBlockN * kSmemStride;
  static constexpr int kSmemV = kStages * kBlockN * kSmemStride;
  static constexpr int kStageBytes = kBlockN * kSmemStride * 2;
  static constexpr int kSmemBytes = (kSmemQ + kSmemK + kSmemV) * 2;

  static_assert(kHeadDim % 32 == 0 && kHeadDim <= 256, "instantiated head dims are multiples of 32");
  static_assert(kWarpM % 16 == 0 && kMTiles >= 1 && kMTiles <= 2, "each warp owns 16 or 32 rows");
  static_assert(kBlockN % 16 == 0, "P is fed to the PV product in k16 slices");
};

// Two variants per head dim: kLarge is the fastest config; kCompact fits the 99 KB per block of
// sm86/sm89 (the L4) where kLarge does not. The launcher picks at run time from the device limit.
enum class TileVariant : int { kLarge = 0, kCompact = 1 };

template <int kHeadDim, TileVariant kVariant>
struct FwdTileConfig;

#define FLASHATTN_TILE_CONFIG(D, V, BM, BN, NW) \
  template <>                                   \
  struct FwdTileConfig<D, TileVariant::V> {     \
    using Traits = FwdKernelTraits<D, BM, BN, NW>; \
  }

//                    head dim  variant    BlockM BlockN warps    smem (KB)
FLASHATTN_TILE_CONFIG(32,  kLarge,   128, 64,  8);  // 30.0 (4 warps: 12 B spill on sm80/89)
FLASHATTN_TILE_CONFIG(64,  kLarge,   128, 64,  4);  // 54.0
FLASHATTN_TILE_CONFIG(96,  kLarge,   128, 32,  4);  // 52.0
FLASHATTN_TILE_CONFIG(128, kLarge,   128, 32,  4);  // 68.0
FLASHATTN_TILE_CONFIG(160, kLarge,   128, 32,  8);  // 84.0
FLASHATTN_TILE_CONFIG(192, kLarge,   128, 64,  8);  // 150.0 (over sm89's 99 KB)
FLASHATTN_TILE_CONFIG(192, kCompact, 64,  32,  4);  // 75.0
FLASHATTN_TILE_CONFIG(256, kLarge,   128, 64,  8);  // 198.0 (over sm80's 163 KB)
FLASHATTN_TILE_CONFIG(256, kCompact, 64,  16,  4);  // 66.0

#undef FLASHATTN_TILE_CONFIG

// Head dims that have kernels; a runtime head dim is rounded up to the next one.
constexpr int kInstantiatedHeadDims[] = {32, 64, 96, 128, 160, 192, 256};

constexpr int round_up_head_dim(int d) {
  for (int h : kInstantiatedHeadDims)
    if (d <= h) return h;
  return -1;
}

}  // namespace flashattn
