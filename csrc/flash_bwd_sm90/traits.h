// Tile configuration of the Hopper (sm_90a) backward kernel (api.h says which calls run it).
// Plain C++ (no CUDA), so the shared-memory budget can be checked anywhere.
//
// One CTA = 3 warpgroups (384 threads) for one (batch, K/V head, block of kBlockN keys):
//   warpgroup 0, the producer (24 registers a thread after setmaxnreg):
//     warp 0  TMA loads: K and V once, then Q and dO per step into a kStages-deep ring;
//     warp 1  the dQ writer (D <= 128): per step, one bulk reduce-add (cp.reduce.async.bulk
//             .add.f32) of the two consumers' float32 dQ tiles from shared memory into dq_accum;
//     warps 2, 3  lse and dpsum of each step's query rows into the same ring (plain loads).
//     In the D = 256 form, warp 1 adds each step's dQ from that step's own Q/dO stage instead
//     (below), and it is this warp that frees the stage.
//   warpgroups 1 and 2, the consumers (240 registers), in one of two forms:
//   - D <= 128 (mainloop.cuh), kBlockN = 128: consumer wg = warpgroup - 1 owns keys
//     [64 wg, 64 wg + 64) of the block (the wgmma M = 64 of the key-side GEMMs) and walks the
//     query blocks (kBlockM = 64 rows, 128 at D = 64, 80 in the wide config at D = 128) of every
//     query head of the GQA group.
//   - D = 256 (mainloop_roles.cuh), kBlockN = 64: dK and dV of m64 x 256 would take 256 registers
//     a thread, so the warpgroups split D for the key-side GEMMs (dK, dV and dQ of columns
//     [128 wg, 128 wg + 128)) and split the score GEMMs by role: warpgroup 0 computes S^T and P,
//     warpgroup 1 dP^T and dS (each m64 n64 k256, the widest N the 64-query step allows: two
//     warpgroups that each computed half the queries would run m64 n32 GEMMs, bound by the
//     shared-memory reads of the common A operand). P^T and dS^T meet in shared memory. The
//     64 KB float32 dQ tile of the D <= 128 form does not fit beside two stages of Q and dO, so
//     each warpgroup writes its half of dQ (32 KB) over the columns of Q and dO it alone reads
//     after the score GEMMs, [128 wg, 128 wg + 128) of the step's stage (16 KB of each), and the
//     dQ writer adds it with bulk reduce-adds. (Vector reductions from registers, the earlier
//     form, moved 64 KB a step through the load/store unit and held the next GEMMs on their
//     source registers: ncu put a fifth of the consumers' stall samples there.)
//   - D = 192, the same roles form (head dims 136..192): each warpgroup's 96 columns are one chunk
//     plane and half of the third (roles_col below), and its 48 KB dQ tile fits beside two stages,
//     so dQ goes through the shared tile and the writer of the D <= 128 form.
//
// Shared memory holds every 16-bit tile as 64-column (128-byte) chunk planes with the 128-byte
// swizzle (../common/sm90/layout.h), exactly as the forward and as TMA's SWIZZLE_128B writes a
// box of [rows, 64]: a [rows, D] tile is D/64 planes of [rows][64] elements, the 16-byte pieces of
// each 128-byte row XOR-permuted by (row % 8). One physical layout, two descriptors:
//   K  [keys][D]     K-major A of S^T = K Q^T          MN-major B of dQ = dS K
//   V  [keys][D]     K-major A of dP^T = V dO^T
//   Q  [queries][D]  K-major B of S^T = K Q^T          MN-major B of dK += dS^T Q
//   dO [queries][D]  K-major B of dP^T = V dO^T        MN-major B of dV += P^T dO
//   dS^T [keys][queries] (one plane: kBlockM = 64 queries = one 128-byte row), two buffers
//                    MN-major A of dQ = dS K (M = queries contiguous, K = keys);
//                    K-major A of dK += dS^T Q in the D = 256 form
//   P^T  [keys][queries] (D = 256 form only), two buffers: K-major A of dV += P^T dO
// and (D <= 128) one float32 dQ tile [kBlockM x kHeadDim] in the accumulator order (dq_tile_offset below),
// which is also the order of a query block in dq_accum on this path.
#pragma once

#include "../common/sm90/layout.h"

namespace flashattn {
namespace sm90 {

// How the two warpgroups split dQ = dS K ([kBlockM queries] x [D], k = the 128 keys):
//   kSplitD:       (kBlockM = 64) warpgroup wg computes columns [wg D/2, wg D/2 + D/2) over all
//                  128 keys (wgmma N = D/2);
//   kSplitQueries: (kBlockM = 128) warpgroup wg computes query rows [64 wg, 64 wg + 64), all D
//                  columns, over all 128 keys (N = D).
// Either way a warpgroup reads both warpgroups' dS^T rows, so both must have written theirs (a
// 256-thread barrier).
//   kSplitKeys:    warpgroup wg computes all D columns over its own 64 keys; kept for the
//                  descriptor checks (lab/sm90_bwd_desc_check.cu), the kernel does not run it.
//   kTransposed:   (D = 128, kBlockM = 80) dQ^T = K^T dS^T: warpgroup wg computes D columns
//                  [64 wg, 64 wg + 64) (wgmma M = 64, A = K read MN-major) for all kBlockM queries
//                  (N = kBlockM, which need not be a multiple of 64), over all 128 keys; dS is
//                  stored [queries][keys] (K-major B, a plane per warpgroup's 64 keys, written
//                  transposed from the S^T accumulators by stmatrix .trans).
enum class Sm90BwdDqSplit : int { kSplitD = 0, kSplitKeys = 1, kSplitQueries = 2, kTransposed = 3 };

// D = 64 walks 128 queries per step: its GEMMs are half as deep, so twice the rows per step halve
// the per-step costs (barriers, waits, the dQ tile handoff) per FLOP, in the same registers.
constexpr int sm90_bwd_block_m(int head_dim) { return head_dim <= 64 ? 128 : 64; }
// D = 96 (two chunk planes, the second half used) transposes dQ as the wide config does: split by
// columns, warpgroup 1's 48 would start inside a swizzle atom and run on into the next, which an
// MN-major operand cannot; dQ^T's M = 64 columns a warpgroup keeps to whole planes (the upper 32 of
// the second zeros, as TMA loads them).
constexpr Sm90BwdDqSplit sm90_bwd_dq_split(int head_dim) {
  return head_dim <= 64 ? Sm90BwdDqSplit::kSplitQueries
         : head_dim == 96 ? Sm90BwdDqSplit::kTransposed
                          : Sm90BwdDqSplit::kSplitD;
}

template <int kHeadDim_, Sm90BwdDqSplit kDqSplit_ = sm90_bwd_dq_split(kHeadDim_), int kBlockM_ = sm90_bwd_block_m(kHeadDim_)>
struct Sm90BwdTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr Sm90BwdDqSplit kDqSplit = kDqSplit_;
  // The roles form (traits.h's header, D = 192 and 256): score GEMMs split by role, P^T through
  // shared memory, each warpgroup's key-side GEMMs over its own kAccN columns (roles_col below).
  static constexpr bool kRoles = kHeadDim > 128;
  // Where the roles form puts a step's dQ: at D = 256 over the stage's Q/dO columns (no room for a
  // tile of its own, the dQ writer frees the stage), at D = 192 in the shared dQ tile of the
  // D <= 128 form (48 KB fit beside two stages: the consumers free the stage themselves).
  static constexpr bool kDqInStage = kRoles && kHeadDim == 256;
  static constexpr int kConsumerWGs = 2;
  static constexpr int kConsumerThreads = kWarpgroupThreads * kConsumerWGs;
  static constexpr int kThreads = kWarpgroupThreads * (1 + kConsumerWGs);
  static constexpr int kProducerRegs = 24;   // setmaxnreg of the producer warpgroup
  static constexpr int kConsumerRegs = 240;  // and of the consumers
  // setmaxnreg only moves registers within the CTA's launch allocation (65536 / kThreads a thread,
  // in steps of 8): a consumer's .inc that asks for more than the producer's .dec freed waits forever.
  static_assert(kProducerRegs + kConsumerWGs * kConsumerRegs <= (1 + kConsumerWGs) * (65536 / kThreads / 8 * 8),
                "setmaxnreg: the consumers' increase must come from the producer's decrease");
  // Keys per CTA: 64 per warpgroup, or one 64-key block shared by both in the D = 256 form.
  static constexpr int kBlockN = kRoles ? kRowsPerConsumer : kRowsPerConsumer * kConsumerWGs;
  static constexpr int kBlockM = kBlockM_;  // queries per step (the N of S^T, the K of dV/dK)
  static constexpr int kStages = 2;   // Q, dO, lse, dpsum ring: the next step loads during this one
  static constexpr int kDsStages = 2;  // dS^T buffers: a consumer writes step t+1's while the other may still read step t's
  // Chunk planes: D = 96's second is half used (TMA loads its columns past D as zeros).
  static constexpr int kChunks = (kHeadDim + kChunkCols - 1) / kChunkCols;

  static_assert(kHeadDim == 64 || kHeadDim == 96 || kHeadDim == 128 || kHeadDim == 192 || kHeadDim == 256,
                "head dims 64, 96, 128, 192 and 256 (smaller dims run on the next one up)");
  static_assert(!kRoles || (kDqSplit == Sm90BwdDqSplit::kSplitD && kBlockM == 64), "the roles form splits D");
  static constexpr bool kDqTransposed = kDqSplit == Sm90BwdDqSplit::kTransposed;
  static_assert(kDqTransposed || kBlockM == 64 || kBlockM == 128,
                "dS^T rows are one or two 128-byte swizzle rows of queries");
  static_assert(kDqSplit != Sm90BwdDqSplit::kSplitQueries || kBlockM == 2 * kRowsPerConsumer, "a query half per warpgroup");
  static_assert(kDqSplit == Sm90BwdDqSplit::kSplitQueries || kDqTransposed || kBlockM == 64,
                "64-query steps split D or keys");
  static_assert(!kDqTransposed || (kChunks * kChunkCols == kRowsPerConsumer * kConsumerWGs && kBlockM % 16 == 0 &&
                                   kBlockM <= 96),
                "dQ^T: a 64-column M per warpgroup (a chunk plane), N = kBlockM in k16 steps of dV/dK");

  // wgmma N of the dQ GEMM and its k-steps.
  static constexpr int kDqN = kDqTransposed ? kBlockM : kDqSplit == Sm90BwdDqSplit::kSplitD ? kHeadDim / 2 : kHeadDim;
  static constexpr int kDqKSteps = (kDqSplit == Sm90BwdDqSplit::kSplitKeys ? kRowsPerConsumer : kBlockN) / 16;
  // wgmma N of dV += P^T dO and dK += dS^T Q: all of D, or a warpgroup's half in the roles form.
  static constexpr int kAccN = kRoles ? kHeadDim / 2 : kHeadDim;

  // The roles form's column c < kAccN of warpgroup wg (its dK, dV and dQ accumulators' n index):
  // at D = 256 column 128 wg + c (planes 2 wg, 2 wg + 1); at D = 192 plane wg whole, then half wg of
  // plane 2 (columns 128 + 32 wg ..): a warpgroup's 96 columns as one MN-major operand of one
  // swizzle atom and half of the next (descriptors.h roles_b), the two halves of plane 2 apart.
  // kSharedPlane: a warpgroup's columns are not whole planes (D = 192), so plane 2 is both's.
  static constexpr bool kSharedPlane = kRoles && kAccN % kChunkCols != 0;
  static constexpr int roles_col(int wg, int c) {
    return kSharedPlane ? (c < kChunkCols ? kChunkCols * wg + c : 2 * kChunkCols + 32 * wg + (c - kChunkCols))
                        : kAccN * wg + c;
  }

  // Bytes of one chunk plane and of whole tiles.
  static constexpr int kKVPlaneBytes = kBlockN * kChunkRowBytes;  // 16 KB (8 KB in the D = 256 form)
  static constexpr int kQPlaneBytes = kBlockM * kChunkRowBytes;   // 8 or 16 KB
  static constexpr int kKVBytes = kKVPlaneBytes * kChunks;
  static constexpr int kQBytes = kQPlaneBytes * kChunks;
  // dS^T [kBlockN keys][64 queries] planes, or (kTransposed) dS [kBlockM queries][64 keys] planes.
  static constexpr int kDSPlaneBytes = (kDqTransposed ? kBlockM : kBlockN) * kChunkRowBytes;
  static constexpr int kDSBytes = kDSPlaneBytes * ((kDqTransposed ? kBlockN : kBlockM) / kChunkCols);
  static constexpr int kPBytes = kRoles ? kDSBytes : 0;             // P^T, as dS^T
  // One query block of dq_accum: kBlockM x the planes' columns (D = 96: dQ^T's 128 rows, the last
  // 32 zeros; the convert kernel writes D of them).
  static constexpr int kDqTileFloats = kBlockM * kChunks * kChunkCols;
  static constexpr int kDqBytes = kDqInStage ? 0 : kDqTileFloats * 4;  // the shared dQ tile

  // Barriers (8 bytes each): full/empty per stage, K/V loaded, dQ tile written / read, and in the
  // D = 256 form dQ written into a stage, per stage.
  static constexpr int kNumBarriers = 2 * kStages + 3 + (kDqInStage ? kStages : 0);
  // The D = 256 form's dQ in a stage: each warpgroup's half (32 KB, dq_accum's tile order) as two
  // 16 KB pieces, over its own 128 columns (two planes) of Q, then of dO.
  static constexpr int kDqPieceBytes = 2 * kQPlaneBytes;
  static_assert(!kDqInStage || (kChunks == 4 && 2 * kDqPieceBytes * 2 == kDqTileFloats * 4),
                "dQ halves fill the column halves");
  static_assert(!kRoles || kHeadDim == 256 || (kHeadDim == 192 && kChunks == 3), "the roles form's column maps");

  // Shared-memory map, offsets from a 1024-byte-aligned base (the swizzle needs it).
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kOffK + kKVBytes;
  static constexpr int kOffQ = kOffV + kKVBytes;
  static constexpr int kOffDO = kOffQ + kStages * kQBytes;
  static constexpr int kOffDS = kOffDO + kStages * kQBytes;
  static constexpr int kOffP = kOffDS + kDsStages * kDSBytes;
  static constexpr int kOffDq = kOffP + kDsStages * kPBytes;
  static constexpr int kOffLse = kOffDq + kDqBytes;                  // float [kStages][kBlockM]
  static constexpr int kOffDpsum = kOffLse + kStages * kBlockM * 4;  // float [kStages][kBlockM]
  static constexpr int kOffBar = kOffDpsum + kStages * kBlockM * 4;
  static constexpr int kOffSeq = kOffBar + 8 * kNumBarriers;  // packed batches: the sequence's Sq, Sk (int)
  static constexpr int kSmemUsed = kOffSeq + 8;
  // Dynamic shared memory is only 16-byte aligned: ask for 1024 more and align by hand.
  static constexpr int kSmemBytes = kSmemUsed + kSwizzleAtomBytes;
  static_assert(kSmemBytes <= kMaxSmemSm90, "shared memory over the 227 KB per-block limit");
  static_assert(kQPlaneBytes % kSwizzleAtomBytes == 0 && kKVPlaneBytes % kSwizzleAtomBytes == 0, "alignment");
  static_assert(kOffDq % 128 == 0, "bulk copies need 16-byte aligned sources");

  // Transaction bytes of one step's TMA loads (Q and dO, every plane, out-of-bounds zeros included).
  static constexpr int kStepTxBytes = 2 * kQBytes;

  // Per-thread accumulator registers (m64nN over 128 threads: N/2 floats).
  static constexpr int kSRegs = kBlockM / 2;    // S^T, dP^T: m64 (keys) x n = kBlockM (queries)
  static constexpr int kAccRegs = kAccN / 2;     // dK, dV: m64 (keys) x n = kAccN
  static constexpr int kDqRegs = kDqN / 2;       // dQ: m64 (queries) x n = kDqN
  static constexpr int kPVSteps = kBlockM / 16;  // k-steps of dV += P^T dO and dK += dS^T Q

  // Float index, inside one query block of dq_accum (and the shared dQ tile), of dQ accumulator
  // value 4 j + v of thread wtid = 32 warp + lane of consumer wg (v = 2 h + e: row 16 warp +
  // lane / 4 + 8 h and column 8 j + 2 (lane % 4) + e of that warpgroup's m64 x kDqN part): each
  // thread's 4 values of an n8 slice are one float4, and the float4s of a slice lie in thread
  // order, so a warp's 16-byte stores are conflict-free and the tile is one contiguous block for
  // the bulk reduce-add.
  static constexpr int dq_tile_offset(int wg, int j, int wtid, int v) {
    return ((wg * (kDqRegs / 4) + j) * kWarpgroupThreads + wtid) * 4 + v;
  }
  // The dQ column of warpgroup wg's accumulator column c where dQ is split by columns (kSplitD):
  // its half of D, or the roles form's column map.
  static constexpr int dq_split_col(int wg, int c) { return kRoles ? roles_col(wg, c) : kDqN * wg + c; }
  // The same position from a (row, column) of the block (row < kBlockM, column < D); the dQ
  // convert kernel reads dq_accum this way.
  // (kTransposed: the accumulator's rows are D columns, its columns the queries.)
  static constexpr int dq_tile_offset_rc(int row, int col) {
    if (kDqTransposed) {
      const int r = col % kRowsPerConsumer, c = row;
      return dq_tile_offset(col / kRowsPerConsumer, c / 8, 32 * (r / 16) + 4 * (r % 8) + (c % 8) / 2,
                            2 * ((r % 16) / 8) + c % 2);
    }
    const bool split_d = kDqSplit == Sm90BwdDqSplit::kSplitD;
    if (kSharedPlane) {  // roles_col's inverse
      const int plane = col / kChunkCols;
      const int wg = plane < 2 ? plane : (col - 2 * kChunkCols) / 32;
      const int c = plane < 2 ? col % kChunkCols : kChunkCols + (col - 2 * kChunkCols) % 32;
      return dq_tile_offset(wg, c / 8, 32 * (row / 16) + 4 * (row % 8) + (c % 8) / 2, 2 * ((row % 16) / 8) + c % 2);
    }
    const int wg = split_d ? col / kDqN : row / kRowsPerConsumer;
    const int c = split_d ? col % kDqN : col;
    const int r = split_d ? row : row % kRowsPerConsumer;
    return dq_tile_offset(wg, c / 8, 32 * (r / 16) + 4 * (r % 8) + (c % 8) / 2, 2 * ((r % 16) / 8) + c % 2);
  }
};

// The tile configuration of each instantiation: (head dim, softcap, wide). With a softcap, D = 64
// keeps its 128-query steps (mainloop.cuh computes P and dS in one pass there to stay within the
// registers; 64-query steps cost 1.32-1.41x the dense call).
// kWide (D = 128, dense calls with no mask, a causal one or a wide window: dispatch.cu's
// wide_config): 80-query steps with dQ transposed, FlashAttention-3's tile for non-causal calls:
// the per-step fixed costs (barriers, waits, fences) spread over 25% more work (measured:
// docs/perf-notes.md, "Backward v16", causal calls included). Narrow windows keep 64-query steps,
// and so do packed batches. With a softcap it runs the one-pass form (mainloop.cuh; the two-pass
// one spilled 84 B at 80 rows).
template <int kHeadDim, bool kSoftcap, bool kWide = false>
struct Sm90BwdConfig {
  static_assert(!kWide, "the wide config exists for D = 96 and 128");
  using Traits = Sm90BwdTraits<kHeadDim>;
};
template <bool kSoftcap>
struct Sm90BwdConfig<128, kSoftcap, true> {
  using Traits = Sm90BwdTraits<128, Sm90BwdDqSplit::kTransposed, 80>;
};
// D = 96 (head dims 72..96): D = 128's two configs with the second chunk plane half used, dQ
// transposed in both (sm90_bwd_dq_split).
template <bool kSoftcap>
struct Sm90BwdConfig<96, kSoftcap, true> {
  using Traits = Sm90BwdTraits<96, Sm90BwdDqSplit::kTransposed, 80>;
};

}  // namespace sm90
}  // namespace flashattn
