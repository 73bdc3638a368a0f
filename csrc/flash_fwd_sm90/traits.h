// Tile configuration of the Hopper (sm_90a) forward kernel. Plain C++ (no CUDA), so shared-memory
// budgets and the selection logic can be checked on any machine.
//
// One CTA = 1 + kConsumerWGs warpgroups (384 threads with the shipped two consumers):
//   warpgroup 0: producer. One thread issues every TMA load (Q once per tile, K and V per key
//                block into a kStages-deep ring); the warpgroup shrinks to RegisterSplit::kProducer.
//   warpgroups 1..kConsumerWGs: consumers. Each owns 64 query rows of the tile (kBlockM = 64 per
//                consumer) and computes S = Q K^T (wgmma, both operands in shared memory), the
//                online softmax in registers, and O += P V (wgmma, P from registers, V in shared
//                memory). With ping-pong they take turns at the tensor cores in round-robin order.
//
// Shared memory holds every tile as 64-column (128-byte) chunks, TMA-loaded with the 128-byte
// swizzle: a [rows, D] tile is D/64 chunk planes of [rows][64] elements, plane c holding columns
// [64c, 64c + 64), each 128-byte row's 16-byte pieces XOR-permuted by (row % 8). That is exactly
// the canonical wgmma SWIZZLE_128B layout (K-major for Q and K, MN-major for V).
#pragma once

#include "../common/sm90/layout.h"

namespace flashattn {
namespace sm90 {

// Consumer warpgroups unless a config says otherwise (Sm90FwdTraits::kConsumerWGs).
constexpr int kConsumerWarpgroups = 2;
// Bytes of one slot of the dynamic schedule's tile ring (schedule.cuh): the tile index and its
// decoded coordinates, 4 ints.
constexpr int kSm90TileSlotBytes = 16;
// setmaxnreg budgets per warpgroup, by tile schedule (schedule.cuh) and consumer count:
// the producer 24, two consumers 240 each, three 160. The dynamic schedule's producer also runs the
// atomic and the tile ring; it reads the grid size at each tile so that ptxas does not keep it
// live (it spilled it at 24 registers), and keeps its rings as counts (smem.cuh PipeCount): then
// it fits 24 at every head dim with two consumers (the D=64 ones spilled 8 bytes at 24 before the
// counts, and ran 32 / 232 / 232, which cost the dynamic kernels 3-5% against the static ones on
// the same unmasked calls at D=64 and D=128: perf-notes "v16"). Three-consumer dynamic kernels
// keep 32 and 160 (3 x 160 is all the 512-thread launch leaves them either way), the lab's
// one-consumer ones 32 and 224.
// A lab config with one consumer runs two CTAs to an SM (Sm90FwdTraits::kCtasPerSm), each with
// half the register file: the producer's budget and 256 - it for the consumer.
constexpr int sm90_ctas_per_sm(int consumers) { return consumers == 1 ? 2 : 1; }

template <bool kDynamic, int kConsumers = kConsumerWarpgroups>
struct RegisterSplit {
  static constexpr int kCtasPerSm = sm90_ctas_per_sm(kConsumers);
  static constexpr bool kWideProducer = kDynamic && kConsumers != 2;
  static constexpr int kProducer = kWideProducer ? 32 : 24;  // setmaxnreg.dec
  static constexpr int kConsumer = kConsumers == 1   ? 256 - kProducer
                                   : kConsumers == 2 ? (kWideProducer ? 232 : 240)
                                                     : 160;  // setmaxnreg.inc
  // 128 threads x (24 + 240 + 240) = 64512, x (32 + 232 + 232) = 63488, x (32 + 3 x 160) = 65536;
  // one consumer: 2 CTAs x 128 x (24 + 232) = 65536.
  static_assert(kCtasPerSm * kWarpgroupThreads * (kProducer + kConsumers * kConsumer) <= 65536, "register file");
  // setmaxnreg.inc waits until the registers it asks for are free, and only what the launch
  // allocated is: 65536 / threads per thread (__launch_bounds__(threads, 1)), in steps of 8, i.e. 168
  // at 384 threads and 128 at 512. Asking for more hangs the consumers at their first instruction:
  // 32 + 240 + 240 (the whole register file, 1024 registers above the launch's 64512) did on the
  // H100 (perf-notes "v16").
  static constexpr int kLaunchRegs = 65536 / kCtasPerSm / ((1 + kConsumers) * kWarpgroupThreads) / 8 * 8;
  static_assert(kProducer + kConsumers * kConsumer <= (1 + kConsumers) * kLaunchRegs,
                "setmaxnreg budgets within the registers the launch allocates");
  static_assert(kConsumer % 8 == 0 && kProducer % 8 == 0, "setmaxnreg takes multiples of 8");
};

// Named barriers (0 is __syncthreads, 16 in all): the consumers' ping-pong turns use
// 1 .. kConsumerWGs (consumer.cuh), each consumer warpgroup's TMA-store epilogue the next ones
// (Sm90FwdTraits::kEpilogueBarrierBase + warpgroup, epilogue.cuh).
constexpr int kPingPongBarrierBase = 1;
// A ping-pong barrier joins two warpgroups: the one waiting for its turn and the one handing it on.
constexpr int kPingPongBarrierThreads = 2 * kWarpgroupThreads;

template <int kHeadDim_, int kBlockN_, int kStages_, bool kPingPong_, int kQStages_ = 1, bool kOTma_ = false,
          int kSoftmaxChains_ = 1, int kConsumerWGs_ = kConsumerWarpgroups, bool kLocal_ = kConsumerWGs_ == 2>
struct Sm90FwdTraits {
  static constexpr int kHeadDim = kHeadDim_;
  // Consumer warpgroups (64 query rows each). Three give every SM sub-partition's scheduler three
  // consumer warps to interleave instead of two (ncu at D=64: schedulers idle half their cycles on
  // latency stalls, perf-notes "ncu source counters"), at 160 registers per consumer thread.
  static constexpr int kConsumerWGs = kConsumerWGs_;
  static_assert(kConsumerWGs >= 1 && kConsumerWGs <= 3, "one to three consumer warpgroups");
  // CTAs resident per SM. One consumer (a lab config: 64-row tiles, nobody to take turns with) runs
  // two CTAs to an SM, so that one CTA's tile edges (its first S, its epilogue) overlap the other
  // CTA's GEMMs without a shared ping-pong section (__launch_bounds__, the grid, RegisterSplit).
  static constexpr int kCtasPerSm = sm90_ctas_per_sm(kConsumerWGs);
  static constexpr int kThreads = kWarpgroupThreads * (1 + kConsumerWGs);
  static constexpr int kConsumerThreads = kWarpgroupThreads * kConsumerWGs;
  static constexpr int kEpilogueBarrierBase = kPingPongBarrierBase + kConsumerWGs;
  static_assert(kEpilogueBarrierBase + kConsumerWGs <= 16, "named barriers");
  static constexpr int kBlockM = kRowsPerConsumer * kConsumerWGs;  // query rows per tile
  // Causal masking and local windows (FwdParams::window_left / window_right, csrc/common/mask.cuh).
  // false: the kernels take the window as compile-time -1/-1 and keep the plain key range [0, Sk)
  // and its code (dispatch.cu refuses masked calls for them): the three-consumer config that
  // serves calls without a mask (kNonCausal). The three-consumer long-keys config takes masks.
  static constexpr bool kLocal = kLocal_;
  static constexpr int kBlockN = kBlockN_;                   // keys per K/V block
  // The partial query tile first under a mask (Sm90Params::q_row_shift): the three-consumer masked
  // configs (of the shipped ones the long-keys config; also lab/sm90_lab.cu's variants), whose
  // 192-row tiles over 128-key blocks leave a partial tile at every power-of-two length and save a
  // key block on every other tile when shifted by 64 rows. Tiles that are a multiple of the
  // key block gain nothing from it (the same key blocks either way) and keep their code unchanged.
  static constexpr bool kPartialTileFirst = kLocal && kConsumerWGs == 3;
  static constexpr int kStages = kStages_;                   // K/V ring depth
  static constexpr bool kPingPong = kPingPong_;              // the consumers take turns at the GEMMs
  static_assert(kConsumerWGs > 1 || !kPingPong, "one consumer warpgroup has nobody to take turns with");
  // 64-column chunk planes; D=96's second plane is half used (TMA zero-fills columns 96..127 on
  // the loads, the O store clips them), its GEMMs never read that half: S = Q K^T takes D/16
  // k-steps and P V is N = D wide.
  static constexpr int kChunks = (kHeadDim + kChunkCols - 1) / kChunkCols;
  // What the FP8 traits (Sm90Fp8FwdTraits below) set otherwise: 16-bit elements, 64 per 128-byte
  // chunk row; O planes like Q's; k-steps of 16 (S = Q K^T over D, O += P V over the keys).
  static constexpr bool kFp8 = false;
  static constexpr int kSoftmaxMaxOffset = 0;  // P in [0, 1] (Sm90Softmax)
  // Past a tile's first key block, the exponentials against the row max held from the blocks before
  // (Sm90Softmax::update_held), moved only when a row's max rises by more than 2^kHoldLog2: P in
  // [0, 2^kHoldLog2]. -1: update() in every block. Measured (H200, 2026-12-04, perf-notes "The
  // forward's exponentials against the held row max"): D=128 +3.6-9.7% in every cell; D=64's
  // two-consumer config -0.4 / +1.4% (and its settle path made ptxas serialize its wgmma); the
  // three-consumer configs (160 registers) and D=256 (O alone 128) spilled with it.
  static constexpr int kHoldLog2 = (kHeadDim_ == 128 || kHeadDim_ == 96) && kConsumerWGs_ == 2 ? 8 : -1;
  static constexpr bool kStaticSnake = false;  // the static schedule's plain round-robin (schedule.cuh)
  // Where a key-block step converts P and rescales O (consumer.cuh): 0, P at the top of the next
  // step and O inside its ping-pong turn; 1, both once the step's P V has completed; 2, as 1 with
  // the wait for the next K block at the top of the step (FlashAttention-3's order: ptxas then
  // places the P V wait among the step's exponentials). Measured (sm90_lab variants, 2026-11-27):
  // 2 gains 2.7% at D=256 (up to 6%), is neutral at D=128 and order 1 loses 8% at D=64. Order 2
  // measured again after the dynamic schedule and the lean mask (2026-12-01, two A/B runs): on
  // D=64's two-consumer config (causal calls below kSm90LongKeysMin keys) +1.5-2.0% at S=512,
  // +1.0-1.5% at 1k, +0.2% at 2k; on the three-consumer D=64 configs -0.6..-1.6%; at D=128 +1-3.6%
  // from S <= 1k but -0.3..-1.8% from 4k keys, where the cells against FlashAttention-3 are.
  static constexpr int kStepOrder = kHeadDim >= 256 || (kHeadDim == 64 && kConsumerWGs == 2) ? 2 : 0;
  // At order > 0, whether P is converted before O's rescale: the conversions then share a basic
  // block with the exponentials and fill their gaps (FlashAttention-3's step); after rescale_o's
  // branch they ran alone once the last exponential had landed. Measured 2026-12-01 (H200, two A/B
  // runs): D=64's two-consumer config +1.4-2.3%; D=256 -4.3% at S=16k without a mask.
  static constexpr bool kConvertPFirst = kHeadDim == 64;
  static constexpr int kChunkElems = kChunkCols;
  static constexpr int kOChunks = kChunks;
  static constexpr int kQKSteps = kHeadDim / 16;
  static constexpr int kPVSteps = kBlockN / 16;

  static_assert((kHeadDim % 64 == 0 || kHeadDim == 96) && kHeadDim >= 64 && kHeadDim <= 256, "head dim 64, 96, 128, 192 or 256");
  static_assert(kBlockN % 16 == 0 && kBlockN >= 16 && kBlockN <= 256, "wgmma N and the P V k-steps");
  static_assert(kBlockN % 8 == 0, "whole swizzle atoms per K/V tile");

  // Bytes of one chunk plane and of whole tiles.
  static constexpr int kQChunkBytes = kBlockM * kChunkRowBytes;
  static constexpr int kKVChunkBytes = kBlockN * kChunkRowBytes;
  static constexpr int kQBytes = kQChunkBytes * kChunks;
  static constexpr int kKVBytes = kKVChunkBytes * kChunks;

  // Q buffers. With 2 the producer loads the next tile's Q while the consumers still read this
  // one's, so they start a tile without waiting for its Q (at S = 512 a tile is only 4 key blocks
  // and that wait is one of its fixed costs). Measured no gain (0.987-0.995, perf-notes "v6"): the
  // compiled configs keep one.
  static constexpr int kQStages = kQStages_;
  static_assert(kQStages == 1 || kQStages == 2, "one or two Q buffers");

  // The epilogue. false: O straight from the accumulator registers to global memory (4-byte stores,
  // half-used 32-byte sectors). true: each consumer warpgroup writes its normalized 64 rows into an
  // O tile in shared memory (the same swizzled chunk-plane layout as Q; 4-byte stores that the
  // swizzle makes bank-conflict free) and one thread TMA-stores it, so the warpgroup moves on to
  // the next tile without waiting for global stores. On for D=128 and D=256 (Sm90DefaultConfig).
  static constexpr bool kOTma = kOTma_;

  // Independent accumulators per row for the softmax's max and sum reductions (softmax.cuh): 1 is
  // one dependent chain through a key block. Alone within noise (perf-notes "v11"); the D=64
  // long-keys config uses 4.
  static constexpr int kSoftmaxChains = kSoftmaxChains_;

  // Shared-memory map, offsets from a 1024-byte-aligned base (the swizzle needs it).
  static constexpr int kOffQ = 0;
  static constexpr int kOffK = kOffQ + kQStages * kQBytes;
  static constexpr int kOffV = kOffK + kStages * kKVBytes;
  static constexpr int kOffO = kOffV + kStages * kKVBytes;
  // mbarriers (8 bytes each): q_full[Q], q_empty[Q], k_full[S], k_empty[S], v_full[S], v_empty[S],
  // and for the dynamic schedule tile_full[R], tile_empty[R]; then its R tile slots
  // (kTileSlotBytes each, schedule.cuh).
  static constexpr int kTileRing = 2;
  static constexpr int kTileSlotBytes = kSm90TileSlotBytes;
  static constexpr int kNumBarriers = 2 * kQStages + 4 * kStages + 2 * kTileRing;
  static constexpr int kTailBytes = 8 * kNumBarriers + kTileSlotBytes * kTileRing + kSwizzleAtomBytes;  // + alignment slack
  // O buffer of the TMA-store epilogue, in 64-column planes of all kBlockM rows (16 KB each at 128
  // rows): the whole tile when it fits (D=128), else two planes that the epilogue streams the tile
  // through (D=256 with 64-key blocks; an even plane count, see below), else one.
  static constexpr bool o_planes_fit(int n) { return kOffO + n * kQChunkBytes + kTailBytes <= kMaxSmemSm90; }
  static constexpr int kOBufPlanes =
      !kOTma ? 0 : o_planes_fit(kChunks) ? kChunks : (o_planes_fit(2) && kChunks % 2 == 0) ? 2 : 1;
  static constexpr int kOBytes = kOBufPlanes * kQChunkBytes;
  static constexpr int kOffBarriers = kOffO + kOBytes;
  static constexpr int kOffTileSlots = kOffBarriers + 8 * kNumBarriers;
  static constexpr int kSmemUsed = kOffTileSlots + kTileSlotBytes * kTileRing;
  // Dynamic shared memory is only 16-byte aligned: ask for 1024 more and align by hand.
  static constexpr int kSmemBytes = kSmemUsed + kSwizzleAtomBytes;

  // A split over the keys merged inside a thread-block cluster (one CTA per split,
  // epilogue.cuh merge_split_in_cluster): each CTA's O, normalized over its keys, in float32 (rows
  // padded by 8 floats: a warp's float2 stores then fill whole wavefronts) and its LSE, stashed over
  // the Q, K/V and O buffers, which no one reads any more by then; the mbarriers stay untouched.
  // kMergeBarrier: the consumers' named barrier before they stash.
  static constexpr int kStashStride = kHeadDim + 8;
  static constexpr int kStashLseOffset = kBlockM * kStashStride * 4;
  static constexpr bool kClusterMerge = kStashLseOffset + kBlockM * 4 <= kOffBarriers;
  static constexpr int kMergeBarrier = kEpilogueBarrierBase + kConsumerWGs;
  static_assert(kMergeBarrier < 16, "named barriers");
  // The packed flavour's V rows zeroed before its first P V (consumer.cuh zero_v_rows): the merge's
  // barrier, which only the static schedule's split uses (the packed flavour runs the dynamic one).
  static constexpr int kPackedZeroBarrier = kMergeBarrier;
  static_assert(kQChunkBytes % kSwizzleAtomBytes == 0 && kKVChunkBytes % kSwizzleAtomBytes == 0, "alignment");
  static_assert(!kOTma || o_planes_fit(1), "no shared memory left for even one O plane");
  // The streamed epilogue reuses a buffer kOBufPlanes store groups after its last use, also
  // across tiles, which holds when every tile uses the buffers the same whole number of times.
  static_assert(!kOTma || kChunks % (kOTma ? kOBufPlanes : 1) == 0, "O planes a multiple of the plane buffers");
  static_assert(kSmemBytes <= kMaxSmemSm90, "shared memory over the 227 KB per-block limit");
  // An SM's 228 KB hold kCtasPerSm CTAs, each with 1 KB the system reserves.
  static_assert(kCtasPerSm * (kSmemBytes + 1024) <= kMaxSmemSm90 + 1024, "kCtasPerSm CTAs' shared memory per SM");

  // Per-thread accumulator registers: S is m64 x kBlockN, O is m64 x kHeadDim, over 128 threads.
  static constexpr int kSRegs = kBlockN / 2;
  static constexpr int kORegs = kHeadDim / 2;
  static constexpr int kPRegs = kBlockN / 4;  // P packed two 16-bit values per register
};

// The FP8 forward (issue 29): q, k, v float8_e4m3fn, O bfloat16, two consumer warpgroups of 64
// rows, ping-pong, O through shared memory and TMA stores. The same kernel code as the 16-bit
// traits above (kFp8 switches the differences), with these layouts:
//   Q [128 rows, D] and K [kBlockN rows, D]: D/128 chunk planes of [rows][128] e4m3 (one 128-byte
//     swizzled row = 128 elements), K-major; a k32 step is +32 bytes, as a k16 step of 16-bit data.
//   V^T [D rows, kBlockN keys]: kBlockN/128 planes of [D][128 keys] (128-byte swizzle), or for a
//     block of 64 k keys that is not a multiple of 128, k planes of [D][64 keys] (64-byte swizzle),
//     K-major (8-bit wgmma has no transposed B): the binding's transpose kernel (fp8_transpose.cu)
//     writes V^T [B, Hk, D, Sk_pad] with the keys of every 32-key group permuted
//     (fp8_key_of_position) so that the accumulator layout of S converts to P's k32 A fragment in
//     registers with no shuffle.
//   O [128 rows, D] bfloat16: D/64 planes of [128][64], the 16-bit O layout.
// Head dims: multiples of 16 up to 128 run on kHeadDim 128, up to 256 on 256 (TMA zero-fills the
// missing columns of Q and K and the missing rows of V^T; the O store clips them).
template <int kHeadDim_, int kBlockN_, int kStages_, int kSoftmaxChains_ = 1>
struct Sm90Fp8FwdTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumerWGs = 2;
  static constexpr int kThreads = kWarpgroupThreads * (1 + kConsumerWGs);
  static constexpr int kConsumerThreads = kWarpgroupThreads * kConsumerWGs;
  static constexpr int kEpilogueBarrierBase = kPingPongBarrierBase + kConsumerWGs;
  static constexpr int kBlockM = kRowsPerConsumer * kConsumerWGs;
  static constexpr bool kLocal = true;
  static constexpr bool kPartialTileFirst = false;  // Sm90FwdTraits::kPartialTileFirst
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr bool kPingPong = true;
  static constexpr int kQStages = 1;
  static constexpr bool kOTma = true;
  static constexpr int kSoftmaxChains = kSoftmaxChains_;  // Sm90Softmax

  static constexpr bool kFp8 = true;
  static constexpr bool kClusterMerge = false;  // no split over the keys (the binding sets none)
  static constexpr int kSoftmaxMaxOffset = 8;  // P in [0, 256], normal e4m3 numbers (Sm90Softmax says why)
  static constexpr int kHoldLog2 = -1;  // e4m3's largest is 448: P has no room above 2^8
  static constexpr int kChunkElems = kChunkRowBytes;  // one byte per element
  static constexpr int kChunks = kHeadDim / kChunkElems;  // Q and K planes
  static constexpr int kOChunks = kHeadDim / kChunkCols;  // O planes (bfloat16, 64 columns each)
  static constexpr int kQKSteps = kHeadDim / 32;          // k32 steps of S = Q K^T
  static constexpr int kPVSteps = kBlockN / 32;           // k32 steps of O += P V
  static_assert(kHeadDim == 128 || kHeadDim == 256, "FP8 head dims 128 and 256 (smaller ones run on 128)");
  static_assert(kBlockN % 64 == 0 && kBlockN <= 256, "V^T planes of 64 or 128 keys; wgmma N <= 256");

  static constexpr int kQChunkBytes = kBlockM * kChunkRowBytes;
  static constexpr int kKVChunkBytes = kBlockN * kChunkRowBytes;
  static constexpr int kQBytes = kQChunkBytes * kChunks;
  static constexpr int kKVBytes = kKVChunkBytes * kChunks;  // K tile; the V^T tile is as large
  // Keys per V^T plane: one 128-byte swizzle row, or 64 (a 64-byte swizzle row) for blocks of
  // 192 keys, the block FlashAttention-3's D=128 FP8 tile is nearest (it takes 224).
  static constexpr int kVtPlaneKeys = kBlockN % 128 == 0 ? kChunkRowBytes : 64;
  static constexpr int kVtKSteps = kVtPlaneKeys / 32;  // k32 steps of P V per V^T plane
  static constexpr int kVtPlanes = kBlockN / kVtPlaneKeys;
  static constexpr int kVtPlaneBytes = kHeadDim * kVtPlaneKeys;
  static_assert(kVtPlanes * kVtPlaneBytes == kKVBytes, "V^T tile size");

  static constexpr int kOffQ = 0;
  static constexpr int kOffK = kOffQ + kQStages * kQBytes;
  static constexpr int kOffV = kOffK + kStages * kKVBytes;
  static constexpr int kOffO = kOffV + kStages * kKVBytes;
  static constexpr int kTileRing = 2;
  static constexpr int kTileSlotBytes = kSm90TileSlotBytes;
  static constexpr int kNumBarriers = 2 * kQStages + 4 * kStages + 2 * kTileRing;
  static constexpr int kTailBytes = 8 * kNumBarriers + kTileSlotBytes * kTileRing + kSwizzleAtomBytes;
  // O planes are kBlockM rows of 64 bfloat16 columns: kQChunkBytes each (epilogue.cuh).
  static constexpr bool o_planes_fit(int n) { return kOffO + n * kQChunkBytes + kTailBytes <= kMaxSmemSm90; }
  static constexpr int kOBufPlanes = o_planes_fit(kOChunks) ? kOChunks : (o_planes_fit(2) && kOChunks % 2 == 0) ? 2 : 1;
  static constexpr int kOBytes = kOBufPlanes * kQChunkBytes;
  static constexpr int kOffBarriers = kOffO + kOBytes;
  static constexpr int kOffTileSlots = kOffBarriers + 8 * kNumBarriers;
  static constexpr int kSmemUsed = kOffTileSlots + kTileSlotBytes * kTileRing;
  static constexpr int kSmemBytes = kSmemUsed + kSwizzleAtomBytes;
  static_assert(o_planes_fit(1), "no shared memory left for even one O plane");
  static_assert(kOChunks % kOBufPlanes == 0, "O planes a multiple of the plane buffers");
  static_assert(kSmemBytes <= kMaxSmemSm90, "shared memory over the 227 KB per-block limit");

  static constexpr int kSRegs = kBlockN / 2;
  static constexpr int kORegs = kHeadDim / 2;
  static constexpr int kPRegs = kBlockN / 8;  // P packed four e4m3 per register

  // Both tile schedules (schedule.cuh) at both head dims, as the 16-bit configs. D=256 holds 64 S +
  // 128 O + 16 P accumulator registers per consumer thread, so its dynamic kernel needs the 24 /
  // 240 / 240 split: it spilled (8 B in the producer, 16 B in the consumers) until the producer kept
  // its rings as counts (smem.cuh PipeCount), the dynamic schedule stopped carrying a key split and
  // the epilogue stored the LSE before O (2026-12-01). Before that D=256 ran the static schedule, in
  // snake order, for every call (balance 0.97 in lab/sm90_schedule_model.py's terms on
  // lab/fp8_time.py's causal shapes, against 0.997-0.999 for the dynamic one).
  // Static calls (no mask, or one wave of tiles): the snake order (schedule.cuh, static_next_tile),
  // the CTA with a round's longest tile takes the next round's shortest.
  static constexpr bool kStaticSnake = true;
  // Sm90FwdTraits says what it means. Order 2 measured 1-3% slower at D=256 (2026-11-27) and -1..+1% at
  // D=128 on 128-key blocks, -3..-6% on 192 with 4 chains (2026-11-30; docs/perf-notes.md), with P
  // converted after O's rescale. With P converted first (2026-12-01, H200): D=256 +2.0-4.0%, D=128
  // -6.5..-9.7%.
  static constexpr int kStepOrder = kHeadDim >= 256 ? 2 : 0;
  static constexpr bool kConvertPFirst = true;
};

// The FP8 configs by instantiated head dim, two K and V^T stages. D=128: 128 x 192 tiles (Q 16 KB,
// K and V^T 2 x 24 + 2 x 24, O 32 KB: 144 KB), V^T in 64-key planes, the softmax reductions in 4
// chains: +2..7% against 128 x 128 with one chain (192 keys alone: -3..+1%, 4 chains alone:
// +0.5..2%; docs/perf-notes.md "FP8 D=128 on 192-key blocks with four chains"); 256-key blocks
// spilled (144 B). D=256: 128 x 128 (32 + 64 + 64 + 64 KB = 224 KB + barriers, the whole O tile in
// shared memory), 4 chains as well: +1..3% without a mask, causal unchanged (the same section).
template <int kHeadDim>
struct Sm90Fp8Config;
template <>
struct Sm90Fp8Config<128> {
  using Traits = Sm90Fp8FwdTraits<128, 192, 2, 4>;
};
template <>
struct Sm90Fp8Config<256> {
  using Traits = Sm90Fp8FwdTraits<256, 128, 2, 4>;
};
constexpr int sm90_fp8_round_head_dim(int d) { return d <= 128 ? 128 : d <= 256 ? 256 : 0; }

// The key permutation of the FP8 P V (exact: P V sums over the keys, and P's columns and V^T's key
// positions are permuted alike). Position k of a 32-key group of the A fragment holds key
// fp8_key_of_position(k) of the group: the thread owning accumulator columns 2q, 2q+1 (+8, +16,
// +24) of a row holds fragment positions 4q..4q+3 (and 16+4q..) of that row, so
//   position 16g + 4q + i  <-  key 16g + 8 (i / 2) + 2q + (i % 2)      (g in 0..1, q, i in 0..3).
constexpr int fp8_key_of_position(int k) {
  return (k / 32) * 32 + ((k % 32) / 16) * 16 + 8 * ((k % 4) / 2) + 2 * ((k % 16) / 4) + (k % 2);
}

// The configs compiled into the extension, by head dim (what the launcher and the check tools use).
template <int kHeadDim>
struct Sm90DefaultConfig;
template <>
struct Sm90DefaultConfig<64> {
  // O through shared memory + TMA store, as D=128's: the next tile's O clear no longer waits for the
  // register stores to read their operands. Causal S=512 +3.2-3.6% against cuDNN in the same rounds,
  // 1k +1.1-1.3%, 2k -0.3..-2.4% (H200, 2026-12-02, perf-notes "D=64's default config with O by
  // TMA"); neutral when first tried on an H100 (0.997, 2026-11-23), before the tile's other parts shrank.
  using Traits = Sm90FwdTraits<64, 128, 2, true, 1, true>;
};

template <>
struct Sm90DefaultConfig<96> {
  // Head dims 72..96 (Phi-3's 96, Stable Diffusion 1.5's 80), which ran on D=128's kernel with a
  // quarter of its GEMM work on zero columns: D=128's tile and shared memory (two chunk planes, the
  // second half used), 6 k-steps of S = Q K^T instead of 8 and P V at N = 96; O is 48 registers.
  using Traits = Sm90FwdTraits<96, 128, 2, true, 1, true>;
};
template <>
struct Sm90DefaultConfig<128> {
  // O through shared memory + TMA store: +22% at S=512, +12% at 1k, +2-4% at long S in the lab's
  // alternating A/B (docs/perf-notes.md "v8").
  using Traits = Sm90FwdTraits<128, 128, 2, true, 1, true>;
};
template <>
struct Sm90DefaultConfig<192> {
  // Head dims 136..192 (192 = three 128-byte chunk planes), which ran on D=256's kernel before: a
  // quarter of its GEMM work on zero columns. 80-key blocks leave room for the whole 128 x 192 O tile
  // (3 planes, 48 KB) beside Q (48 KB) and two K/V stages (120 KB): the TMA-store epilogue without
  // streaming, as D=128's; S is 40 registers a thread, O 96.
  using Traits = Sm90FwdTraits<192, 80, 2, true, 1, true>;
};
template <>
struct Sm90DefaultConfig<256> {
  // 64-key blocks leave 32 KB for two O plane buffers that the TMA-store epilogue streams the
  // 128 x 256 tile through: +24% at S=512, +14% at 1k, +1-8% at long S against the 80-key register
  // epilogue (lab alternating A/B, geomean 1.079; the block-N change alone 1.006; perf-notes "v9").
  using Traits = Sm90FwdTraits<256, 64, 2, true, 1, true>;
};

// Which compiled config serves a call (dispatch.cu), besides Sm90DefaultConfig:
//   kNonCausal: calls without a causal mask. At D=64, three consumer warpgroups (192-row tiles):
//     +4.9-7.4% at every S from 512 to 16k against the two-warpgroup configs (also against the
//     long-keys one), but -13% causal at S <= 4k, where the coarser tiles mask more of the
//     diagonal (lab alternating A/B, perf-notes "v12"). O by TMA store as the default config's:
//     S=512 +1.3-3.1%, 1k +1.8-3.4%, 4k-16k within +-3% (H200, 2026-12-02, perf-notes "D=64's
//     non-causal config with O by TMA").
//   kLongKeys: causal calls with seqlen_k >= kSm90LongKeysMin. At D=64, three consumer warpgroups
//     (192 x 128 tiles, FlashAttention-3's D=64 causal tile) with the softmax reductions in 4
//     chains: against the 128 x 192 config that served from 4k before, +5.1% at 4k and +8.0% at
//     16k on the standard grid, +2.7% and +7.8% on the seed's split grids (B=1 H=1) at 4k and 8k.
//     At 2k it gained 2.7% on the standard grid but lost 23% on the seed's split grid (fewer,
//     taller tiles to split), and at S <= 1k 12%: so from 4k, as before (lab A/Bs, perf-notes
//     "Kernel by kernel against cuDNN"; the 128 x 192 config: "v11"). Its O stays in registers:
//     the TMA store lost 1.2-3.2% at 4k and 4.8-6.1% at 16k (H200, 2026-12-02).
// A head dim whose config of a kind is not distinct (kDistinct false) uses its default there, and
// has no instantiation of it (tools/gen_instantiations.py).
//   kSmallGrid: not a kind of call but of grid (dispatch.cu find_launcher): a D=64 call of at most
//     kSmallGridMaxKeys keys whose 64-row tiles fill at most half the SMs. One consumer warpgroup a CTA and
//     a tile of 64 rows: on such a grid every CTA is a latency chain on an SM of its own, and the
//     two-warpgroup tile's first softmax ran both warpgroups' exponentials on one SM's SFUs at
//     once; its rows on two SMs halve that chain. Its grids fit in one wave, so it has the static
//     schedule only (tools/gen_instantiations.py SM90_STATIC_ONLY).
enum class Sm90ConfigKind { kDefault, kLongKeys, kNonCausal, kSmallGrid };
constexpr int kSm90LongKeysMin = 4096;
// From this many keys a causal call takes the long-keys config also below kSm90LongKeysMin when its
// tiles of that config fill at least kSm90LongKeysGridHalfWaves half waves (dispatch.cu find_launcher).
constexpr int kSm90LongKeysFullGridMin = 1536;
constexpr int kSm90LongKeysGridHalfWaves = 3;
// Whether a grid of `long_keys_tiles` tiles of that config fills kSm90LongKeysGridHalfWaves half
// waves of `sm_count` SMs: dispatch.cu find_launcher's rule, and the CPU probe's (its test).
constexpr bool sm90_long_keys_tiles_fill_grid(long long long_keys_tiles, int sm_count) {
  return 2 * long_keys_tiles >= static_cast<long long>(kSm90LongKeysGridHalfWaves) * sm_count;
}

// A kind's primary template: not distinct, i.e. the head dim's default config.
template <int kHeadDim>
struct Sm90SameAsDefault {
  static constexpr bool kDistinct = false;
  using Traits = typename Sm90DefaultConfig<kHeadDim>::Traits;
};

template <int kHeadDim>
struct Sm90LongKeysConfig : Sm90SameAsDefault<kHeadDim> {};
template <>
struct Sm90LongKeysConfig<64> {
  static constexpr bool kDistinct = true;
  using Traits = Sm90FwdTraits<64, 128, 2, true, 1, false, 4, 3, true>;
};

template <int kHeadDim>
struct Sm90NonCausalConfig : Sm90SameAsDefault<kHeadDim> {};
template <>
struct Sm90NonCausalConfig<64> {
  static constexpr bool kDistinct = true;
  using Traits = Sm90FwdTraits<64, 128, 2, true, 1, true, 1, 3>;
};

template <int kHeadDim>
struct Sm90SmallGridConfig : Sm90SameAsDefault<kHeadDim> {};
template <>
struct Sm90SmallGridConfig<64> {
  static constexpr bool kDistinct = true;
  using Traits = Sm90FwdTraits<64, 128, 2, false, 1, false, 1, 1, true>;
};

// Head dims run by each instantiation: any multiple of 8 up to the instantiated one is served by
// the next instantiation up (TMA zero-fills the missing columns, the epilogue clips them).
constexpr int sm90_round_head_dim(int d) { return d <= 64 ? 64 : d <= 96 ? 96 : d <= 128 ? 128 : d <= 192 ? 192 : d <= 256 ? 256 : 0; }

// The config kind that serves (head dim, seqlen_k, causal): what the launcher picks (dispatch.cu)
// and what the schedule probe and model assume.
template <int kHeadDim>
constexpr Sm90ConfigKind sm90_config_kind(int seqlen_k, bool causal) {
  return !causal && Sm90NonCausalConfig<kHeadDim>::kDistinct                              ? Sm90ConfigKind::kNonCausal
         : causal && seqlen_k >= kSm90LongKeysMin && Sm90LongKeysConfig<kHeadDim>::kDistinct ? Sm90ConfigKind::kLongKeys
                                                                                             : Sm90ConfigKind::kDefault;
}
// Every instantiated head dim by name: a config made distinct for D=96 or D=192 later is then picked
// without another edit here (an unknown head dim falls to D=256's rule, as sm90_round_head_dim's 0 never
// reaches a launcher).
constexpr Sm90ConfigKind sm90_config_kind(int head_dim_instantiated, int seqlen_k, bool causal) {
  return head_dim_instantiated == 64    ? sm90_config_kind<64>(seqlen_k, causal)
         : head_dim_instantiated == 96  ? sm90_config_kind<96>(seqlen_k, causal)
         : head_dim_instantiated == 128 ? sm90_config_kind<128>(seqlen_k, causal)
         : head_dim_instantiated == 192 ? sm90_config_kind<192>(seqlen_k, causal)
                                        : sm90_config_kind<256>(seqlen_k, causal);
}

struct Sm90TileShape {
  int block_m, block_n;
  bool partial_tile_first;  // Sm90FwdTraits::kPartialTileFirst
};
template <typename Traits>
constexpr Sm90TileShape sm90_tile_shape_of() {
  return {Traits::kBlockM, Traits::kBlockN, Traits::kPartialTileFirst};
}
template <int kHeadDim>
constexpr Sm90TileShape sm90_tile_shape(int seqlen_k, bool causal) {
  switch (sm90_config_kind<kHeadDim>(seqlen_k, causal)) {
    case Sm90ConfigKind::kNonCausal:
      return sm90_tile_shape_of<typename Sm90NonCausalConfig<kHeadDim>::Traits>();
    case Sm90ConfigKind::kLongKeys:
      return sm90_tile_shape_of<typename Sm90LongKeysConfig<kHeadDim>::Traits>();
    default:
      return sm90_tile_shape_of<typename Sm90DefaultConfig<kHeadDim>::Traits>();
  }
}

}  // namespace sm90
}  // namespace flashattn
