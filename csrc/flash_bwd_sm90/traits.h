// Tile configuration of the Hopper (sm_90a) backward kernel (api.h says which calls run it).
// Plain C++ (no CUDA), so the shared-memory budget can be checked anywhere.
//
// One CTA = kConsumerWGs = 2 warpgroups (256 threads), all of them computing; loads are cp.async
// from every thread (no producer warp yet). The CTA owns kBlockN = 128 keys of one (batch, K/V
// head); warpgroup wg owns keys [64 wg, 64 wg + 64) of them (the wgmma M = 64 of the key-side
// GEMMs). It walks the query blocks (kBlockM = 64 rows) of every query head of the GQA group.
//
// Shared memory holds every tile as 64-column (128-byte) chunk planes with the 128-byte swizzle,
// exactly as the forward (../flash_fwd_sm90/traits.h): a [rows, D] tile is D/64 planes of
// [rows][64] elements, the 16-byte pieces of each 128-byte row XOR-permuted by (row % 8). One
// physical layout, two descriptors:
//   K  [keys][D]     K-major A of S^T = K Q^T          MN-major B of dQ = dS K
//   V  [keys][D]     K-major A of dP^T = V dO^T
//   Q  [queries][D]  K-major B of S^T = K Q^T          MN-major B of dK += dS^T Q
//   dO [queries][D]  K-major B of dP^T = V dO^T        MN-major B of dV += P^T dO
//   dS^T [keys][queries] (one plane: kBlockM = 64 queries = one 128-byte row)
//                    MN-major A of dQ = dS K (M = queries contiguous, K = keys)
#pragma once

#include "../flash_fwd_sm90/traits.h"

namespace flashattn {
namespace sm90 {

// How the two warpgroups split dQ = dS K ([64 queries] x [D], k = the 128 keys):
//   kSplitD:    warpgroup wg computes columns [wg D/2, wg D/2 + D/2) over all 128 keys (wgmma
//               N = D/2); reads both warpgroups' dS^T rows, so both must have written theirs (a
//               256-thread barrier). One float atomic per dQ element per key block.
//   kSplitKeys: warpgroup wg computes all D columns over its own 64 keys (N = D); reads only its
//               own dS^T rows (a 128-thread barrier), but adds twice as many atomics.
enum class Sm90BwdDqSplit : int { kSplitD = 0, kSplitKeys = 1 };

template <int kHeadDim_, Sm90BwdDqSplit kDqSplit_ = Sm90BwdDqSplit::kSplitD>
struct Sm90BwdTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr Sm90BwdDqSplit kDqSplit = kDqSplit_;
  static constexpr int kConsumerWGs = 2;
  static constexpr int kThreads = kWarpgroupThreads * kConsumerWGs;
  static constexpr int kBlockN = kRowsPerConsumer * kConsumerWGs;  // keys per CTA (64 per warpgroup)
  static constexpr int kBlockM = 64;  // queries per step (the N of S^T, the K of dV/dK)
  static constexpr int kStages = 2;   // Q, dO, lse, dpsum buffers: the next step loads during this one
  static constexpr int kChunks = kHeadDim / kChunkCols;

  static_assert(kHeadDim == 64 || kHeadDim == 128, "head dims 64 and 128 (smaller dims run on the next one up)");
  static_assert(kBlockM == kChunkCols, "dS^T rows are one 128-byte swizzle row of queries");

  // wgmma N of the dQ GEMM and its k-steps.
  static constexpr int kDqN = kDqSplit == Sm90BwdDqSplit::kSplitD ? kHeadDim / 2 : kHeadDim;
  static constexpr int kDqKSteps = (kDqSplit == Sm90BwdDqSplit::kSplitD ? kBlockN : kRowsPerConsumer) / 16;

  // Bytes of one chunk plane and of whole tiles.
  static constexpr int kKVPlaneBytes = kBlockN * kChunkRowBytes;  // 16 KB
  static constexpr int kQPlaneBytes = kBlockM * kChunkRowBytes;   // 8 KB
  static constexpr int kKVBytes = kKVPlaneBytes * kChunks;
  static constexpr int kQBytes = kQPlaneBytes * kChunks;
  static constexpr int kDSBytes = kBlockN * kChunkRowBytes;  // dS^T [128 keys][64 queries]

  // Shared-memory map, offsets from a 1024-byte-aligned base (the swizzle needs it).
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kOffK + kKVBytes;
  static constexpr int kOffQ = kOffV + kKVBytes;
  static constexpr int kOffDO = kOffQ + kStages * kQBytes;
  static constexpr int kOffDS = kOffDO + kStages * kQBytes;
  static constexpr int kOffLse = kOffDS + kDSBytes;              // float [kStages][kBlockM]
  static constexpr int kOffDpsum = kOffLse + kStages * kBlockM * 4;  // float [kStages][kBlockM]
  static constexpr int kSmemUsed = kOffDpsum + kStages * kBlockM * 4;
  // Dynamic shared memory is only 16-byte aligned: ask for 1024 more and align by hand.
  static constexpr int kSmemBytes = kSmemUsed + kSwizzleAtomBytes;
  static_assert(kSmemBytes <= kMaxSmemSm90, "shared memory over the 227 KB per-block limit");
  static_assert(kQPlaneBytes % kSwizzleAtomBytes == 0 && kKVPlaneBytes % kSwizzleAtomBytes == 0, "alignment");

  // Per-thread accumulator registers (m64nN over 128 threads: N/2 floats).
  static constexpr int kSRegs = kBlockM / 2;    // S^T, dP^T: m64 (keys) x n64 (queries)
  static constexpr int kAccRegs = kHeadDim / 2;  // dK, dV: m64 (keys) x n = D
  static constexpr int kDqRegs = kDqN / 2;       // dQ: m64 (queries) x n = kDqN
  static constexpr int kPVSteps = kBlockM / 16;  // k-steps of dV += P^T dO and dK += dS^T Q
};

}  // namespace sm90
}  // namespace flashattn
