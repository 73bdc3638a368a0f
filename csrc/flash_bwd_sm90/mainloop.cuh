// The Hopper backward kernel's roles (sm_90a, wgmma, TMA): FlashAttention-2/3's structure on the
// portable kernel's contract (../flash_bwd/mainloop.cuh: same BwdParams, same preprocess (dpsum)
// kernel, same masking rules). traits.h has the tiles and the shared-memory map.
//
// One CTA per (batch, K/V head, block of kBlockN = 128 keys); K and V stay in shared memory; the
// CTA walks the query blocks (64 rows) of every query head of its GQA group, so dK and dV are
// summed over the group in registers. Step t = one query block of one head.
//
// Producer warp 0 (loads), per step: wait until stage t % kStages is free (empty barrier), TMA
//   Q and dO into it (lane 0, with the transaction bytes); warps 2 and 3 load lse and dpsum into
//   the same stage (every lane arrives on the stage's full barrier after its stores).
// Consumers (warpgroup wg owns keys [64 wg, 64 wg + 64)), per step:
//   wait full[stage]
//   S^T  = K_wg Q^T            SS wgmma, m64 (keys) n64 (queries) k = D, both K-major  (group 1)
//   dP^T = V_wg dO^T           same                                                    (group 2)
//   wait group 1: P^T = exp2(S^T scale_log2 - lse log2e)  (masked: 0; lse = -inf: 0)
//   wait group 2: dS^T = P^T (dP^T - dpsum)
//   dV += P^T dO, dK += dS^T Q RS wgmma, A = P^T / dS^T from registers (the accumulator layout
//                              packed to 16 bits is the A-fragment layout, as the forward's P),
//                              B = dO / Q as MN-major B (same smem tile, other descriptor)  (group 3)
//   dS^T (16-bit) -> shared buffer t % 2; fence.proxy.async
//   consumer barrier (both warpgroups' dS^T rows written)
//   dQ = dS K                  SS wgmma, A = dS^T as MN-major A, B = K as MN-major B; warpgroup wg
//                              computes columns [wg D/2, wg D/2 + D/2) over all 128 keys  (group 4)
//   wait group 3: arrive empty[stage]; wait group 4
//   wait dq_empty (the writer has read the previous tile); dQ -> shared float32 tile;
//   fence.proxy.async; arrive dq_full
// The wide config (traits.h kTransposed: D = 128, 80-query steps, dense calls with no mask, a
//   causal one or a wide window)
//   stores dS [queries][keys] by stmatrix .trans instead of dS^T, and computes
//   dQ^T = K^T dS^T    SS wgmma, A = K as MN-major A (warpgroup wg: D columns [64 wg, 64 wg + 64)),
//                      B = dS as K-major B, N = 80 queries, k = all 128 keys              (group 4)
//   the tile order of its dQ tile following the transposed accumulator (traits.h dq_tile_offset_rc).
// Producer warp 1 (dQ writer), per step: wait dq_full, one bulk reduce-add of the 32 KB tile into
//   the query block's slot of dq_accum, wait until it has been read, arrive dq_empty.
//
// The dS^T buffers alternate: a warpgroup writes buffer t % 2 at step t, after passing the
// consumer barrier of step t-1, which the other warpgroup reached only after its dQ of step t-2
// (the last reader of that buffer) had completed. So one consumer barrier per step orders every
// reuse of the dS^T buffers.
//
// softmax_scale is applied once at the end: dK in the epilogue below, dQ in the convert kernel.
// Deterministic mode (dq_semaphore set, [B, Hq, ceil(Sq / kBlockM)]): the writer adds a query
// block's tile after the key blocks above its own that see the block have added theirs (a ticket
// per query block, counted down from the last such key block), so the float sums run in one
// order; the consumers do not wait for it.
#pragma once

#include <cmath>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "../common/bwd_params.h"
#include "../common/mask.cuh"
#include "../common/ptx.cuh"
#include "../common/sm90/ptx.cuh"
#include "../common/sm90/wgmma_ops.cuh"
#include "../common/softmax_math.cuh"
#include "block.h"
#include "descriptors.h"
#include "kernel_params.h"
#include "traits.h"

namespace flashattn {
namespace sm90 {

#if defined(FLASHATTN_SM90A_ENABLED)

// Named barriers of the two consumer warpgroups (0 is __syncthreads; 2-5 are
// mainloop_roles.cuh's, 7-9 the epilogue's below).
constexpr int kBwdDsBarrier = 1;
constexpr int kBwdZeroBarrier = 6;  // packed batches: a tile's rows past the sequence zeroed

// Shared-memory addresses of the tiles and barriers (traits.h's map from the aligned base).
template <typename Traits>
struct BwdSmem {
  uint32_t base;
  __device__ uint32_t k() const { return base + Traits::kOffK; }
  __device__ uint32_t v() const { return base + Traits::kOffV; }
  __device__ uint32_t q(int stage) const { return base + Traits::kOffQ + stage * Traits::kQBytes; }
  __device__ uint32_t dout(int stage) const { return base + Traits::kOffDO + stage * Traits::kQBytes; }
  __device__ uint32_t ds(int buf) const { return base + Traits::kOffDS + buf * Traits::kDSBytes; }
  __device__ uint32_t pt(int buf) const { return base + Traits::kOffP + buf * Traits::kPBytes; }
  __device__ uint32_t dq() const { return base + Traits::kOffDq; }
  __device__ uint32_t lse(int stage) const { return base + Traits::kOffLse + stage * Traits::kBlockM * 4; }
  __device__ uint32_t dpsum(int stage) const { return base + Traits::kOffDpsum + stage * Traits::kBlockM * 4; }
  __device__ uint32_t full(int stage) const { return base + Traits::kOffBar + 8 * stage; }
  __device__ uint32_t empty(int stage) const { return base + Traits::kOffBar + 8 * (Traits::kStages + stage); }
  __device__ uint32_t kv_full() const { return base + Traits::kOffBar + 8 * (2 * Traits::kStages); }
  __device__ uint32_t dq_full() const { return base + Traits::kOffBar + 8 * (2 * Traits::kStages + 1); }
  __device__ uint32_t dq_empty() const { return base + Traits::kOffBar + 8 * (2 * Traits::kStages + 2); }
  // D = 256 form: this stage's dQ written over its Q/dO column halves (traits.h).
  __device__ uint32_t dq_ready(int stage) const { return base + Traits::kOffBar + 8 * (2 * Traits::kStages + 3 + stage); }
  __device__ uint32_t seq() const { return base + Traits::kOffSeq; }
};

// The sequence lengths inside the consumers' step loop. Packed batches: from shared memory, where
// the load warp put them before releasing K and V (kv_full), re-read at each use: held in registers
// through the loop, the softcap kernel at D = 128 spilled. Dense: the kernel's parameters.
template <bool kPacked, typename Traits>
__device__ __forceinline__ int loop_seqlen_q(const BwdParams& p, const BwdSmem<Traits>& sm) {
  if constexpr (kPacked) {
    int v;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(sm.seq()));
    return v;
  } else {
    return p.seqlen_q;
  }
}
template <bool kPacked, typename Traits>
__device__ __forceinline__ int loop_seqlen_k(const BwdParams& p, const BwdSmem<Traits>& sm) {
  if constexpr (kPacked) {
    int v;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(sm.seq() + 4));
    return v;
  } else {
    return p.seqlen_k;
  }
}

// ---- Producer warp 0: TMA loads of K and V once, then Q and dO per step. (Packed batches: rows
// of the packed tensors from the sequence's first row, batch coordinate 0.)
template <typename Traits, bool kPacked>
__device__ __forceinline__ void bwd_sm90_load(const Sm90BwdParams& kp, const BwdSmem<Traits>& sm, const BwdBlock& blk,
                                              int lane) {
  constexpr int kBlockM = Traits::kBlockM;
  if (blk.steps == 0) return;
  const int batch = kPacked ? 0 : blk.batch;
  const int k_row0 = kPacked ? blk.seq.k_row0 : 0;
  const int q_row0 = kPacked ? blk.seq.q_row0 : 0;
  if (lane == 0) {
    prefetch_tmap(&kp.tma_q);
    prefetch_tmap(&kp.tma_do);
    if constexpr (kPacked)  // released to the consumers by the arrive below (loop_seqlen_q)
      asm volatile("st.shared.v2.b32 [%0], {%1, %2};" ::"r"(sm.seq()), "r"(blk.seq.seqlen_q), "r"(blk.seq.seqlen_k)
                   : "memory");
    mbar_arrive_expect_tx(sm.kv_full(), 2 * Traits::kKVBytes);
#pragma unroll
    for (int c = 0; c < Traits::kChunks; ++c)
#pragma unroll
      for (int h = 0; h < Traits::kBlockN / 64; ++h) {
        const uint32_t off = c * Traits::kKVPlaneBytes + h * 64 * kChunkRowBytes;
        tma_load_4d(sm.k() + off, &kp.tma_k, sm.kv_full(), c * kChunkCols, k_row0 + blk.n0 + 64 * h, blk.head_kv, batch);
        tma_load_4d(sm.v() + off, &kp.tma_v, sm.kv_full(), c * kChunkCols, k_row0 + blk.n0 + 64 * h, blk.head_kv, batch);
      }
  }
  for (int t = 0; t < blk.steps; ++t) {
    const int stage = t % Traits::kStages;
    if (t >= Traits::kStages) mbar_wait(sm.empty(stage), ((t / Traits::kStages) + 1) & 1);
    const int hq = blk.head_q(t);
    const int m0 = blk.m0(t, kBlockM);
    if (lane == 0) {
      mbar_arrive_expect_tx(sm.full(stage), Traits::kStepTxBytes);
#pragma unroll
      for (int c = 0; c < Traits::kChunks; ++c) {
        tma_load_4d(sm.q(stage) + c * Traits::kQPlaneBytes, &kp.tma_q, sm.full(stage), c * kChunkCols, q_row0 + m0, hq,
                    batch);
        tma_load_4d(sm.dout(stage) + c * Traits::kQPlaneBytes, &kp.tma_do, sm.full(stage), c * kChunkCols, q_row0 + m0,
                    hq, batch);
      }
    }
  }
}

// ---- Producer warps 2 and 3: lse (warp 2) or dpsum (warp 3) of each step's query rows, 0 past
// Sq (those rows' P is masked to 0). Each lane's arrive on the stage's full barrier releases its
// own stores. Apart from the TMA warp, so that the copies are issued without waiting on these loads.
// Packed batches: [Hq, total_q], from the sequence's first row.
template <typename Traits, bool kPacked>
__device__ __forceinline__ void bwd_sm90_load_row_stats(const Sm90BwdParams& kp, const BwdSmem<Traits>& sm,
                                                        const BwdBlock& blk, const int lane, const bool dpsum) {
  const BwdParams& p = kp.p;
  constexpr int kBlockM = Traits::kBlockM;
  const float* src = dpsum ? p.dpsum : p.lse;
  for (int t = 0; t < blk.steps; ++t) {
    const int stage = t % Traits::kStages;
    if (t >= Traits::kStages) mbar_wait(sm.empty(stage), ((t / Traits::kStages) + 1) & 1);
    const int m0 = blk.m0(t, kBlockM);
    const float* rows = kPacked ? src + static_cast<int64_t>(blk.head_q(t)) * p.total_q + blk.seq.q_row0 + m0
                                : src + (static_cast<int64_t>(blk.batch) * p.heads_q + blk.head_q(t)) * p.seqlen_q + m0;
    const int seqlen_q = seqlen_q_of<kPacked>(p, blk);
    const uint32_t dst = (dpsum ? sm.dpsum(stage) : sm.lse(stage)) + 4 * lane;
    // kBlockM = 80: the last of the three rounds has 16 rows (the test folds away for 64 and 128).
    constexpr int kRounds = (kBlockM + 31) / 32;
    float v[kRounds];
#pragma unroll
    for (int i = 0; i < kRounds; ++i)
      v[i] = (kBlockM % 32 == 0 || lane + 32 * i < kBlockM) && m0 + lane + 32 * i < seqlen_q ? rows[lane + 32 * i] : 0.f;
#pragma unroll
    for (int i = 0; i < kRounds; ++i)
      if (kBlockM % 32 == 0 || lane + 32 * i < kBlockM)
        asm volatile("st.shared.f32 [%0], %1;" ::"r"(dst + 128 * i), "f"(v[i]) : "memory");
    mbar_arrive(sm.full(stage));
  }
}

// ---- Producer warp 1: the dQ writer. One lane issues a bulk reduce-add per step.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(dst), "r"(src),
               "r"(bytes)
               : "memory");
}

// The dQ writer's order in deterministic mode (dq_semaphore set): waits until the key blocks above
// this one that see query block m_block have added their tiles, and returns its ticket (nullptr
// without the mode). The key blocks that see it are [n_begin, n_end) of key_blocks() (exactly
// those whose query_blocks() range holds it: mask.cuh); they add in descending order, the last
// first. That is the order in which they reach it: key block n starts at its own first visible
// query block, so under a causal mask the later key blocks arrive first and the first one last
// (ascending order made every key block wait for block 0's walk down the whole diagonal: 1.6-2.4x
// the default's time). It is also the launch order in this mode (bwd_block), so the awaited CTAs
// are running. Without a mask the walks may be rotated instead, each key block adding in the order
// its walk reaches the block (block.h: bwd_det_ticket).
// The tickets are [B, Hq, num_m_blocks] (query block m of sequence b, packed batches too).
template <typename Traits, bool kPacked>
__device__ __forceinline__ int* dq_ticket_wait(const BwdParams& p, const BwdBlock& blk, const int m_block,
                                               const int64_t ticket_index) {
  if (p.dq_semaphore == nullptr) return nullptr;
  const int m0 = m_block * Traits::kBlockM;
  const int seqlen_k = seqlen_k_of<kPacked>(p, blk);
  const KeyBlocks kb = key_blocks(make_key_window(seqlen_k, causal_offset_of<kPacked>(p, blk), p.window_left,
                                                  p.window_right),
                                  m0, min(m0 + Traits::kBlockM, seqlen_q_of<kPacked>(p, blk)), Traits::kBlockN);
  int* ticket = p.dq_semaphore + ticket_index;
  const int expected = bwd_det_ticket(blk.rotated, blk.n_block, m_block, kb.n_end);
  while (*reinterpret_cast<volatile int*>(ticket) != expected) {
  }
  __threadfence();
  return ticket;
}

// After the bulk additions of a tile: in deterministic mode, wait until they are performed (not
// only read) and move the ticket on; else wait until their shared-memory source has been read.
__device__ __forceinline__ void dq_ticket_done(int* ticket) {
  if (ticket != nullptr) {
    bulk_wait_group_0();  // the additions are done, not only the tile read
    asm volatile("fence.proxy.async.global;" ::: "memory");
    __threadfence();
    atomicAdd(ticket, 1);
  } else {
    bulk_wait_group_read<0>();
  }
}

// Step t's query block: its deterministic ticket ([B, Hq, num_m_blocks]) and its dq_accum tile
// (the same index, or in a packed batch the sequence's tiles of its query head: block.h).
struct DqTileIndex {
  int64_t ticket, tile;
};
template <bool kPacked>
__device__ __forceinline__ DqTileIndex dq_tile_index(const Sm90BwdParams& kp, const BwdBlock& blk, const int t) {
  const int m_block = blk.m_block(t);
  const int64_t ticket = (static_cast<int64_t>(blk.batch) * kp.p.heads_q + blk.head_q(t)) * kp.num_m_blocks + m_block;
  if constexpr (kPacked)
    return {ticket, static_cast<int64_t>(blk.head_q(t)) * kp.dq_blocks_per_head + blk.dq_block0 + m_block};
  else
    return {ticket, ticket};
}

template <typename Traits, bool kPacked>
__device__ __forceinline__ void bwd_sm90_dq_writer(const Sm90BwdParams& kp, const BwdSmem<Traits>& sm,
                                                   const BwdBlock& blk, int lane) {
  const BwdParams& p = kp.p;
  if (lane != 0) return;
  for (int t = 0; t < blk.steps; ++t) {
    const int m_block = blk.m_block(t);
    const DqTileIndex ix = dq_tile_index<kPacked>(kp, blk, t);
    const int64_t tile = ix.tile;
    mbar_wait(sm.dq_full(), t & 1);
    int* ticket = dq_ticket_wait<Traits, kPacked>(p, blk, m_block, ix.ticket);
    bulk_reduce_add_f32(p.dq_accum + tile * Traits::kDqTileFloats, sm.dq(), Traits::kDqBytes);
    bulk_commit_group();
    dq_ticket_done(ticket);
    mbar_arrive(sm.dq_empty());
  }
  bulk_wait_group_0();  // no bulk operation may outlive the CTA's shared memory
}

// The D = 256 form's writer (traits.h): step t's dQ lies in stage t % kStages, each warpgroup's
// half as a 16 KB piece over its columns of Q and one over its columns of dO; once they are read,
// this warp frees the stage for the next loads (the consumers no longer read it by then).
template <typename Traits, bool kPacked>
__device__ __forceinline__ void bwd_sm90_dq_writer_roles(const Sm90BwdParams& kp, const BwdSmem<Traits>& sm,
                                                         const BwdBlock& blk, int lane) {
  const BwdParams& p = kp.p;
  constexpr int kPiece = Traits::kDqPieceBytes;
  if (lane != 0) return;
  for (int t = 0; t < blk.steps; ++t) {
    const int stage = t % Traits::kStages;
    const int m_block = blk.m_block(t);
    const DqTileIndex ix = dq_tile_index<kPacked>(kp, blk, t);
    const int64_t tile = ix.tile;
    mbar_wait(sm.dq_ready(stage), (t / Traits::kStages) & 1);
    int* ticket = dq_ticket_wait<Traits, kPacked>(p, blk, m_block, ix.ticket);
    float* dst = p.dq_accum + tile * Traits::kDqTileFloats;
#pragma unroll
    for (int wg = 0; wg < 2; ++wg) {
      bulk_reduce_add_f32(dst + (2 * wg) * (kPiece / 4), sm.q(stage) + wg * kPiece, kPiece);
      bulk_reduce_add_f32(dst + (2 * wg + 1) * (kPiece / 4), sm.dout(stage) + wg * kPiece, kPiece);
    }
    bulk_commit_group();
    dq_ticket_done(ticket);
    mbar_arrive(sm.empty(stage));
  }
  bulk_wait_group_0();  // no bulk operation may outlive the CTA's shared memory
}

// Accumulator (m64 x n, kRegs = n/2 per thread) packed to 16-bit A fragments of the k16 steps
// (the forward's convert_p): k-step kk is n8-slices 2 kk and 2 kk + 1.
template <typename Element, int kRegs>
__device__ __forceinline__ void acc_to_a_frags(const float (&acc)[kRegs], uint32_t (&a)[kRegs / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < kRegs / 8; ++kk) {
    a[kk][0] = pack2<Element>(acc[8 * kk + 0], acc[8 * kk + 1]);
    a[kk][1] = pack2<Element>(acc[8 * kk + 2], acc[8 * kk + 3]);
    a[kk][2] = pack2<Element>(acc[8 * kk + 4], acc[8 * kk + 5]);
    a[kk][3] = pack2<Element>(acc[8 * kk + 6], acc[8 * kk + 7]);
  }
}

// ---- Packed batches (block.h): rows [valid, rows) of two tiles of kChunks chunk planes
// (`plane_bytes` apart, 128 bytes a row: a whole row is zeroed without regard to the swizzle) set
// to zero by the consumers, ctid = their thread index 0..255, before any GEMM reads the tiles.
// Those rows hold the next sequence's values (TMA reads on through the packed rows); zero, they
// give P = 0 and dS = 0 there and add exact zeros to every product, as TMA's zero fill past a dense
// tensor's end does.
// The consumers' thread index 0..255, from threadIdx (no register held through the loop for it).
__device__ __forceinline__ int consumer_tid() { return static_cast<int>(threadIdx.x) - kWarpgroupThreads; }

template <typename Traits>
__device__ __forceinline__ void bwd_sm90_zero_tail(const uint32_t a, const uint32_t b, const int plane_bytes,
                                                   const int rows, const int valid, const int ctid) {
  const int per_plane = (rows - valid) * (kChunkRowBytes / 16);
  for (int i = ctid; i < per_plane * Traits::kChunks; i += Traits::kConsumerThreads) {
    const int c = i / per_plane;
    const uint32_t off = static_cast<uint32_t>(c * plane_bytes + valid * kChunkRowBytes + (i - c * per_plane) * 16);
    asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(a + off), "r"(0u) : "memory");
    asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(b + off), "r"(0u) : "memory");
  }
  fence_proxy_async();
  named_barrier_sync(kBwdZeroBarrier, Traits::kConsumerThreads);
}

// ---- The consumers' epilogue (both forms): this warpgroup's part of dK (times softmax_scale) and
// dV, rows [row0, row0 + 64) of the key block and its columns (BwdAccCols below), staged in the
// Q/dO ring (free once both warpgroups are past their last step) in the TMA box layout, then
// written by TMA stores, which clip rows past Sk and columns past head_dim. Direct 4-byte stores
// from the accumulators (8 rows x 16 bytes a warp instruction, each with its own 64-bit address)
// took a quarter of the consumers' time at 8 steps a CTA (S = 512). Packed batches: TMA stores
// would run on into the next sequence's rows, so a partial block's rows (none for a key block past
// its sequence) are copied out of the staged tile by the warpgroup's threads, 16 bytes each.
constexpr int kBwdEpilogueBarrier = 7;  // both warpgroups; + 1 + wg: one warpgroup

// The epilogue of a CTA that shares its key block with others (a split GQA group, BwdParams::
// group_split > 1, or a piece of the split last wave, BwdBlock::tail >= 0): this warpgroup's part
// of dK and dV, rows [row0, row0 + 64) and columns col_of(c) (c < 2 kRegs) of the key block, added
// into dkv_accum by two-float reductions (a column pair per value pair of the accumulator); rows
// past Sk are skipped. dkv_accum is [2][B][Hk][Sk][kHeadDim] with a group split, else
// [2][tail_units][kBlockN][kHeadDim]. Once per CTA: 64 reductions a thread. dK's softmax_scale is
// applied once to the sum, by the convert kernel, as the unsplit epilogue applies it once.
template <typename Traits, int kRegs, typename ColOf>
__device__ __forceinline__ void bwd_sm90_add_dkv(const BwdParams& p, const BwdBlock& blk, const int wtid,
                                                 const float (&dk)[kRegs], const float (&dv)[kRegs], const int row0,
                                                 ColOf col_of) {
  const int warp = wtid / 32;
  const int lane = wtid % 32;
  const bool per_head = p.group_split > 1;
  const int64_t plane = per_head ? static_cast<int64_t>(p.batch) * p.heads_kv * p.seqlen_k * Traits::kHeadDim
                                 : static_cast<int64_t>(p.tail_units) * Traits::kBlockN * Traits::kHeadDim;
  // The key block's first row.
  float* const base =
      per_head ? p.dkv_accum + ((static_cast<int64_t>(blk.batch) * p.heads_kv + blk.head_kv) * p.seqlen_k + blk.n0) *
                                   Traits::kHeadDim
               : p.dkv_accum + static_cast<int64_t>(blk.tail) * Traits::kBlockN * Traits::kHeadDim;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 16 * warp + lane / 4 + 8 * h;
    if (blk.n0 + row >= p.seqlen_k) continue;
    float* const r = base + static_cast<int64_t>(row) * Traits::kHeadDim + 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < kRegs / 4; ++j) {
      asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(r + col_of(8 * j)), "f"(dk[4 * j + 2 * h]),
                   "f"(dk[4 * j + 2 * h + 1])
                   : "memory");
      asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(r + plane + col_of(8 * j)), "f"(dv[4 * j + 2 * h]),
                   "f"(dv[4 * j + 2 * h + 1])
                   : "memory");
    }
  }
}

// The tile column of a warpgroup's accumulator column c (a multiple of 8: an n8 slice's first):
// c itself where a warpgroup holds all columns (mainloop.cuh's form), traits.h's roles_col in the
// roles form.
template <typename Traits>
struct BwdAccCols {
  int wg;
  __device__ __forceinline__ int operator()(const int c) const { return Traits::kRoles ? Traits::roles_col(wg, c) : c; }
  // Whether this warpgroup stores plane `c` of the staged dK/dV tile: every plane of its own rows
  // in mainloop.cuh's form; the planes of its columns in the roles form, plane 2 at D = 192 (half
  // of each warpgroup's) by warpgroup 0.
  __device__ __forceinline__ bool stores_plane(const int c) const {
    if (!Traits::kRoles) return true;
    if (Traits::kSharedPlane) return c < 2 ? c == wg : wg == 0;
    return c * kChunkCols / Traits::kAccN == wg;
  }
};

template <typename Traits, typename Element, bool kPacked, int kRegs>
__device__ __forceinline__ void bwd_sm90_store_dkv(const Sm90BwdParams& kp, const BwdSmem<Traits>& sm, const BwdBlock& blk,
                                                   const int wg, const int wtid, const float (&dk)[kRegs],
                                                   const float (&dv)[kRegs], const int row0) {
  static_assert(2 * Traits::kKVBytes <= 2 * Traits::kStages * Traits::kQBytes, "dK and dV fit in the Q/dO ring");
  static_assert((2 * kRegs) % kChunkCols == 0 || Traits::kHeadDim == 96 || Traits::kSharedPlane,
                "whole 64-column planes per warpgroup, or D = 96's and D = 192's plane and a half");
  const BwdAccCols<Traits> col_of{wg};
  if (!kPacked && (kp.p.group_split > 1 || blk.tail >= 0)) {  // uniform: both warpgroups take this path
    bwd_sm90_add_dkv<Traits>(kp.p, blk, wtid, dk, dv, row0, col_of);
    return;
  }
  const int warp = wtid / 32;
  const int lane = wtid % 32;
  const int acc_row = 16 * warp + lane / 4;
  const int acc_col = 2 * (lane % 4);
  const uint32_t dk_s = sm.q(0);
  const uint32_t dv_s = sm.q(0) + Traits::kKVBytes;
  const float scale = kp.p.softmax_scale;
  named_barrier_sync(kBwdEpilogueBarrier, Traits::kConsumerThreads);  // Q and dO read by both
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + acc_row + 8 * h;
#pragma unroll
    for (int j = 0; j < kRegs / 4; ++j) {
      const int col = col_of(8 * j) + acc_col;
      const uint32_t off = static_cast<uint32_t>(col / kChunkCols) * Traits::kKVPlaneBytes + row * kChunkRowBytes +
                           ((static_cast<uint32_t>((col % kChunkCols) / 8) ^ static_cast<uint32_t>(row % 8)) * 16u) +
                           static_cast<uint32_t>(col % 8) * 2u;
      st_shared_b32(dk_s + off, pack2<Element>(dk[4 * j + 2 * h] * scale, dk[4 * j + 2 * h + 1] * scale));
      st_shared_b32(dv_s + off, pack2<Element>(dv[4 * j + 2 * h], dv[4 * j + 2 * h + 1]));
    }
  }
  fence_proxy_async();
  if constexpr (Traits::kSharedPlane)  // plane 2 holds half of each warpgroup's columns: both write first
    named_barrier_sync(kBwdEpilogueBarrier, Traits::kConsumerThreads);
  else
    named_barrier_sync(kBwdEpilogueBarrier + 1 + wg, kWarpgroupThreads);
  // The sequence read again (the batch index made opaque, so the compiler cannot reuse the first
  // read): kept from the block's start, its rows took a register through the whole loop, which
  // the softcap kernel at D = 128 spilled.
  const BwdSeq seq = kPacked ? bwd_seq(kp.p, static_cast<int>(opaque(static_cast<uint32_t>(blk.batch)))) : blk.seq;
  if constexpr (kPacked) {
    const BwdParams& p = kp.p;
    const int valid = seq.seqlen_k - (blk.n0 + row0);  // rows of this warpgroup's part in the sequence
    if (valid < kRowsPerConsumer) {
      constexpr int kPieces = 2 * kRegs / 8;  // 16-byte pieces of a row of this part
      const int64_t row_base = static_cast<int64_t>(seq.k_row0) + blk.n0 + row0;
      Element* dk = static_cast<Element*>(p.dk) + row_base * p.dk_row_stride + blk.head_kv * p.dk_head_stride;
      Element* dv = static_cast<Element*>(p.dv) + row_base * p.dv_row_stride + blk.head_kv * p.dv_head_stride;
      for (int i = wtid; i < (valid > 0 ? valid : 0) * kPieces; i += kWarpgroupThreads) {
        const int r = i / kPieces;
        const int col = col_of(8 * (i % kPieces));
        if (col >= p.head_dim) continue;
        const int row = row0 + r;
        const uint32_t off = static_cast<uint32_t>(col / kChunkCols) * Traits::kKVPlaneBytes + row * kChunkRowBytes +
                             ((static_cast<uint32_t>((col % kChunkCols) / 8) ^ static_cast<uint32_t>(row % 8)) * 16u);
        uint4 vk, vv;
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(vk.x), "=r"(vk.y), "=r"(vk.z), "=r"(vk.w) : "r"(dk_s + off));
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(vv.x), "=r"(vv.y), "=r"(vv.z), "=r"(vv.w) : "r"(dv_s + off));
        *reinterpret_cast<uint4*>(dk + r * p.dk_row_stride + col) = vk;
        *reinterpret_cast<uint4*>(dv + r * p.dv_row_stride + col) = vv;
      }
      return;
    }
  }
  if (wtid == 0) {
#pragma unroll
    for (int c = 0; c < Traits::kChunks; ++c) {
      if (!col_of.stores_plane(c)) continue;
      const uint32_t off = static_cast<uint32_t>(c) * Traits::kKVPlaneBytes + static_cast<uint32_t>(row0) * kChunkRowBytes;
      if constexpr (kPacked) {
        tma_store_4d(&kp.tma_dk, dk_s + off, c * kChunkCols, seq.k_row0 + blk.n0 + row0, blk.head_kv, 0);
        tma_store_4d(&kp.tma_dv, dv_s + off, c * kChunkCols, seq.k_row0 + blk.n0 + row0, blk.head_kv, 0);
      } else {
        tma_store_4d(&kp.tma_dk, dk_s + off, c * kChunkCols, blk.n0 + row0, blk.head_kv, blk.batch);
        tma_store_4d(&kp.tma_dv, dv_s + off, c * kChunkCols, blk.n0 + row0, blk.head_kv, blk.batch);
      }
    }
    bulk_commit_group();
    bulk_wait_group_read<0>();  // the shared source outlives the stores' reads
  }
}

// ---- A step's dQ (this warpgroup's accumulators) -> the shared float32 tile (traits.h's order: one
// float4 per n8 slice, thread order, conflict-free), once the writer has read the previous step's;
// then the writer's signal. mainloop.cuh's form and the roles form at D = 192.
template <typename Traits, int kRegs>
__device__ __forceinline__ void bwd_sm90_store_dq_tile(const BwdSmem<Traits>& sm, const int wg, const int wtid,
                                                       const int t, const float (&dq)[kRegs]) {
  if (t > 0) mbar_wait(sm.dq_empty(), (t - 1) & 1);
#pragma unroll
  for (int j = 0; j < kRegs / 4; ++j) {
    const uint32_t addr = sm.dq() + 4 * Traits::dq_tile_offset(wg, j, wtid, 0);
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(dq[4 * j]), "f"(dq[4 * j + 1]),
                 "f"(dq[4 * j + 2]), "f"(dq[4 * j + 3])
                 : "memory");
  }
  fence_proxy_async();
  mbar_arrive(sm.dq_full());
}

// ---- What both consumer forms (bwd_sm90_consumer below, mainloop_roles.cuh's at D = 192 and 256) derive
// alike from their block: its mask, the wait for K/V, each step's wait for its Q/dO stage, and the
// walk that picks a step's masked or unmasked code.
struct BwdBlockMask {
  KeyWindow window;
  bool keys_partial;  // the block's keys run past Sk: every step masked
  bool has_mask;      // causal or a local window
};
template <typename Traits, bool kPacked>
__device__ __forceinline__ BwdBlockMask bwd_block_mask(const BwdParams& p, const BwdBlock& blk) {
  BwdBlockMask m;
  m.keys_partial = blk.n0 + Traits::kBlockN > seqlen_k_of<kPacked>(p, blk);
  m.window = make_key_window(seqlen_k_of<kPacked>(p, blk), causal_offset_of<kPacked>(p, blk), p.window_left,
                             p.window_right);
  m.has_mask = m.window.has_lo || m.window.has_hi;
  return m;
}

// Key `key` is visible to the queries [qmin, qmax] (none when key >= seqlen_k): mask.cuh's
// lo(i) <= key < hi(i) solved for the query i.
__device__ __forceinline__ void bwd_key_queries(const KeyWindow& window, const int key, const int seqlen_k, int& qmin,
                                                int& qmax) {
  qmin = key >= seqlen_k ? INT_MAX : window.has_hi ? key - window.hi_shift + 1 : INT_MIN;
  qmax = window.has_lo ? key - window.lo_shift : INT_MAX;
}

// K and V landed (a block with no step has none to wait for); a packed sequence's keys past its
// end zeroed.
template <typename Traits, bool kPacked>
__device__ __forceinline__ void bwd_consumer_wait_kv(const BwdSmem<Traits>& sm, const BwdBlock& blk,
                                                     const bool keys_partial) {
  if (blk.steps > 0) mbar_wait(sm.kv_full(), 0);
  if constexpr (kPacked) {
    if (blk.steps > 0 && keys_partial)
      bwd_sm90_zero_tail<Traits>(sm.k(), sm.v(), Traits::kKVPlaneBytes, Traits::kBlockN, blk.seq.seqlen_k - blk.n0,
                                 consumer_tid());
  }
}

// Step t's Q/dO stage landed; a packed sequence's query rows past its end zeroed (masked steps:
// only they hold a tile's last rows).
template <typename Traits, bool kPacked, bool kMasked>
__device__ __forceinline__ void bwd_consumer_wait_step(const BwdParams& p, const BwdSmem<Traits>& sm, const int stage,
                                                       const int t, const int m0) {
  mbar_wait(sm.full(stage), (t / Traits::kStages) & 1);
  if constexpr (kPacked && kMasked) {
    const int seqlen_q = loop_seqlen_q<kPacked>(p, sm);
    if (m0 + Traits::kBlockM > seqlen_q)
      bwd_sm90_zero_tail<Traits>(sm.q(stage), sm.dout(stage), Traits::kQPlaneBytes, Traits::kBlockM, seqlen_q - m0,
                                 consumer_tid());
  }
}

// The block's steps, step(t, std::true_type) where the per-element mask runs (as the forward's
// would: query blocks that straddle the diagonal or a window edge, key_blocks().masked(), and the
// tail blocks of Sq and Sk), step(t, std::false_type) elsewhere.
template <typename Traits, bool kPacked, typename Step>
__device__ __forceinline__ void bwd_consumer_walk(const BwdParams& p, const BwdSmem<Traits>& sm, const BwdBlock& blk,
                                                  const BwdBlockMask& mask, Step&& step) {
  for (int t = 0; t < blk.steps; ++t) {
    const int m0 = blk.m0(t, Traits::kBlockM);
    const bool masked =
        mask.keys_partial || m0 + Traits::kBlockM > loop_seqlen_q<kPacked>(p, sm) ||
        (mask.has_mask && key_blocks(mask.window, m0, m0 + Traits::kBlockM, Traits::kBlockN).masked(blk.n_block));
    if (masked)
      step(t, std::true_type{});
    else
      step(t, std::false_type{});
  }
}

// ---- Consumers.
template <typename Traits, typename Element, bool kSoftcap, bool kPacked>
__device__ __forceinline__ void bwd_sm90_consumer(const Sm90BwdParams& kp, const BwdSmem<Traits>& sm, const BwdBlock& blk,
                                                  const int wg, const int wtid) {
  const BwdParams& p = kp.p;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kSRegs = Traits::kSRegs;
  constexpr int kAccRegs = Traits::kAccRegs;
  constexpr int kDqRegs = Traits::kDqRegs;
  constexpr int kPVSteps = Traits::kPVSteps;
  static_assert(Traits::kDqSplit != Sm90BwdDqSplit::kSplitKeys, "the kernel splits dQ by columns or query rows");
  using MmaScore = WgmmaSS<Element, kBlockM>;         // S^T, dP^T: n = kBlockM queries
  using MmaAcc = WgmmaRS<Element, kHeadDim>;          // dV, dK: n = D
  constexpr bool kDqT = Traits::kDqTransposed;
  // dQ = dS K, or dQ^T = K^T dS^T (kTransposed: A = K MN-major, B = dS K-major).
  using MmaDq = std::conditional_t<kDqT, WgmmaSSTransA<Element, Traits::kDqN>, WgmmaSSTrans<Element, Traits::kDqN>>;

  const int warp = wtid / 32;
  const int lane = wtid % 32;
  const int n0 = blk.n0;

  float dv[kAccRegs];
  float dk[kAccRegs];
#pragma unroll
  for (int i = 0; i < kAccRegs; ++i) dv[i] = dk[i] = 0.f;

  // Accumulator layout (m64nN, ../flash_fwd_sm90/softmax.cuh): value 4 j + 2 h + e of this thread
  // is row 16 warp + lane/4 + 8 h, column 8 j + 2 (lane % 4) + e.
  const int acc_row = 16 * warp + lane / 4;  // + 8 h
  const int acc_col = 2 * (lane % 4);        // + 8 j + e

  // Descriptor bases (descriptors.h, checked against CuTe by lab/sm90_bwd_desc_check.cu), lower
  // 32 bits only; stages and k-steps are byte offsets on top (desc_from_lo).
  using Descs = Sm90BwdDescs<Traits>;
  const uint32_t desc_k = desc_lo(Descs::score_a(sm.k(), wg));
  const uint32_t desc_v = desc_lo(Descs::score_a(sm.v(), wg));
  const uint32_t desc_q = desc_lo(Descs::score_b(sm.q(0)));
  const uint32_t desc_do = desc_lo(Descs::score_b(sm.dout(0)));
  const uint32_t desc_q_mn = desc_lo(Descs::acc_b(sm.q(0)));
  const uint32_t desc_do_mn = desc_lo(Descs::acc_b(sm.dout(0)));
  const uint32_t desc_ds = desc_lo(kDqT ? Descs::dqt_b(sm.ds(0)) : Descs::dq_a(sm.ds(0), wg));
  const uint32_t desc_k_mn = desc_lo(kDqT ? Descs::dqt_a(sm.k(), wg) : Descs::dq_b(sm.k(), wg));

  // Where this thread writes its dS^T values: row (key) 64 wg + acc_row + 8 h, column (query)
  // 8 j + acc_col, pairs of columns as one 32-bit store (the swizzle keeps the 8 rows of a warp's
  // store on distinct banks).
  const int ds_row0 = wg * 64 + acc_row;

  const float scale_log2 = p.scale_log2;
  constexpr float kLog2e = 1.4426950408889634f;
  const float inv_softcap_log2 = kSoftcap ? 1.f / p.softcap_log2 : 0.f;
  const BwdBlockMask mask = bwd_block_mask<Traits, kPacked>(p, blk);
  const KeyWindow& window = mask.window;
  bwd_consumer_wait_kv<Traits, kPacked>(sm, blk, mask.keys_partial);

  auto step = [&](const int t, auto masked) {
    constexpr bool kMasked = decltype(masked)::value;
    const int m0 = blk.m0(t, kBlockM);
    const int stage = t % Traits::kStages;
    const uint32_t q_off = stage * Traits::kQBytes;
    const uint32_t ds_off = (t % Traits::kDsStages) * Traits::kDSBytes;
    // The descriptors of this step, from copies the compiler cannot see as loop-invariant: else it
    // hoists every (operand, k-step) descriptor out of the loop and keeps them all in registers
    // (ptxas then spilled at D = 128). Recomputing them is one IADD each.
    const uint32_t dk_lo = opaque(desc_k), dv_lo = opaque(desc_v), dq_lo = opaque(desc_q), ddo_lo = opaque(desc_do);

    bwd_consumer_wait_step<Traits, kPacked, kMasked>(p, sm, stage, t, m0);

    // ---- S^T = K_wg Q^T and dP^T = V_wg dO^T (two commit groups).
    float s[kSRegs];
    float dp[kSRegs];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk)
      MmaScore::mma(s, desc_from_lo(dk_lo, Descs::score_a_step(kk)),
                    desc_from_lo(dq_lo, q_off + Descs::score_b_step(kk)), kk > 0 ? 1 : 0);
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk)
      MmaScore::mma(dp, desc_from_lo(dv_lo, Descs::score_a_step(kk)),
                    desc_from_lo(ddo_lo, q_off + Descs::score_b_step(kk)), kk > 0 ? 1 : 0);
    wgmma_commit();

    // ---- P^T = exp2(S^T scale_log2 - lse log2e). A row that sees no key has lse = -inf and must
    // get P = 0: its lse is taken as +inf (exp2(s - inf) = 0), not -inf (NaN). The row statistics
    // are read kAhead slices ahead of their use, the first ones while the GEMMs run (waiting on
    // their shared-memory latency stalled the first exponentials); all of them at once would hold
    // kSRegs / 2 more registers across the GEMMs, which spilled the 128-query steps.
    constexpr int kSlices = kSRegs / 4;
    constexpr int kAhead = 4;
    const uint32_t lse_s = sm.lse(stage) + acc_col * 4;
    const uint32_t dpsum_s = sm.dpsum(stage) + acc_col * 4;
    float lse2[kSlices][2], dps[kSlices][2];
    auto load2 = [](float (&v)[2], uint32_t addr) {
      asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v[0]), "=f"(v[1]) : "r"(addr));
    };
#pragma unroll
    for (int j = 0; j < kAhead; ++j) load2(lse2[j], lse_s + j * 32);
    // The softcap on 128-query steps (D = 64) and 80-query ones (D = 128, the wide config) computes
    // P and dS in one pass once both GEMMs are done, and applies the mask afterwards as selects: P
    // computed under the dP GEMM with 1 - t^2 kept to dS (the two-pass form below) spilled 112-196 B
    // at 128 rows and 84 B at 80, and the 64-query steps that avoided it cost 1.32-1.41x the dense
    // call at D = 64 (docs/perf-notes.md, 2026-11-28).
    constexpr bool kOnePass = kSoftcap && kBlockM != 64;
    if constexpr (kOnePass) {
      // The tanh of every score under the dP GEMM, in place (no register more): the pass after it
      // then has one SFU operation a score, not a tanh-to-ex2 chain with nothing to overlap.
      wgmma_wait<1>();
      reg_fence(s);
#pragma unroll
      for (int i = 0; i < kSRegs; ++i) s[i] = tanh_approx(s[i] * p.softcap_scale);
      reg_fence(s);
      wgmma_wait<0>();
      reg_fence(dp);
    } else {
      wgmma_wait<1>();
      reg_fence(s);
    }
    // Key row 8 h of this thread is visible to queries [qmin[h], qmax[h]].
    int qmin[2], qmax[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
      bwd_key_queries(window, n0 + wg * 64 + acc_row + 8 * h, loop_seqlen_k<kPacked>(p, sm), qmin[h], qmax[h]);
    const int q_end = loop_seqlen_q<kPacked>(p, sm) - m0;  // in-block query columns < q_end exist
    // Softcap: tanh's derivative 1 - t^2 of each score, kept from here to dS as two float16 a
    // register (relative error 2^-11). Recovering it from the 16-bit P and lse instead
    // (softcap_grad_from_p) costs a third SFU operation a score, lg2, which bound D = 64 on the SFU;
    // the packed D = 128 kernel still does, as the 16 registers spilled it (48 B).
    constexpr bool kKeepGrad = kSoftcap && !kOnePass && !(kPacked && kHeadDim == 128);
    [[maybe_unused]] uint32_t grad_t[kKeepGrad ? kSRegs / 2 : 1];
#pragma unroll
    for (int j = 0; j < kSlices; ++j) {
      if (j + kAhead < kSlices) load2(lse2[j + kAhead], lse_s + (j + kAhead) * 32);
      if (kOnePass) load2(dps[j], dpsum_s + j * 32);
      else if (j >= kSlices - kAhead) load2(dps[j - (kSlices - kAhead)], dpsum_s + (j - (kSlices - kAhead)) * 32);
#pragma unroll
      for (int e = 0; e < 2; ++e) lse2[j][e] = lse2[j][e] == -INFINITY ? INFINITY : lse2[j][e] * kLog2e;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        [[maybe_unused]] float g[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          // Softcap c: the forward's score in log2 units is tanh(s softcap_scale) softcap_log2,
          // with the same tanh_approx, so that P matches the saved lse.
          float pv;
          if constexpr (kSoftcap) {
            const float t = kOnePass ? s[4 * j + 2 * h + e] : tanh_approx(s[4 * j + 2 * h + e] * p.softcap_scale);
            pv = ex2(t * p.softcap_log2 - lse2[j][e]);
            if constexpr (kKeepGrad || kOnePass) g[e] = fmaf(-t, t, 1.f);
          } else {
            pv = ex2(s[4 * j + 2 * h + e] * scale_log2 - lse2[j][e]);
          }
          if constexpr (kMasked && !kOnePass) {
            const int col = 8 * j + acc_col + e;
            if (col >= q_end || m0 + col < qmin[h] || m0 + col > qmax[h]) pv = 0.f;
          }
          s[4 * j + 2 * h + e] = pv;
        }
        if constexpr (kKeepGrad) grad_t[2 * j + h] = pack2<__half>(g[0], g[1]);
        if constexpr (kOnePass) {  // dS^T = P^T (dP^T - dpsum) (1 - t^2), as below
          dp[4 * j + 2 * h] = s[4 * j + 2 * h] * g[0] * (dp[4 * j + 2 * h] - dps[j][0]);
          dp[4 * j + 2 * h + 1] = s[4 * j + 2 * h + 1] * g[1] * (dp[4 * j + 2 * h + 1] - dps[j][1]);
        }
      }
    }
    if constexpr (kOnePass && kMasked) {
      // Scores outside the mask held finite or infinite P and dS values: selects, not products.
#pragma unroll
      for (int j = 0; j < kSlices; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = 8 * j + acc_col + e;
            const bool out = (col >= q_end) | (m0 + col < qmin[h]) | (m0 + col > qmax[h]);
            s[4 * j + 2 * h + e] = out ? 0.f : s[4 * j + 2 * h + e];
            dp[4 * j + 2 * h + e] = out ? 0.f : dp[4 * j + 2 * h + e];
          }
    }
    // ---- dS^T = P^T (dP^T - dpsum) (the one-pass form did it above).
    if constexpr (!kOnePass) {
      wgmma_wait<0>();
      reg_fence(dp);
#pragma unroll
      for (int j = 0; j < kSlices; ++j) {
        if (j + kAhead < kSlices) load2(dps[j + kAhead], dpsum_s + (j + kAhead) * 32);
        // dL/ds = P (dP - dpsum) (1 - t^2) softmax_scale with a softcap (softmax_scale at the end, as
        // without one).
        if constexpr (kKeepGrad) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float2 g = unpack2<__half>(grad_t[2 * j + h]);
            dp[4 * j + 2 * h] = s[4 * j + 2 * h] * (dp[4 * j + 2 * h] - dps[j][0]) * g.x;
            dp[4 * j + 2 * h + 1] = s[4 * j + 2 * h + 1] * (dp[4 * j + 2 * h + 1] - dps[j][1]) * g.y;
          }
        } else if constexpr (kSoftcap) {
          float l[2];
          load2(l, lse_s + j * 32);
#pragma unroll
          for (int e = 0; e < 2; ++e) l[e] = l[e] == -INFINITY ? INFINITY : l[e] * kLog2e;
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float pv = s[4 * j + 2 * h + e];
              dp[4 * j + 2 * h + e] = pv * (dp[4 * j + 2 * h + e] - dps[j][e]) * softcap_grad_from_p(pv, l[e], inv_softcap_log2);
            }
        } else {
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 2; ++e) dp[4 * j + 2 * h + e] = s[4 * j + 2 * h + e] * (dp[4 * j + 2 * h + e] - dps[j][e]);
        }
      }
    }

    // ---- dV += P^T dO, dK += dS^T Q (one commit group).
    uint32_t pa[kPVSteps][4], dsa[kPVSteps][4];
    acc_to_a_frags<Element>(s, pa);
    acc_to_a_frags<Element>(dp, dsa);
    const uint32_t dqmn_lo = opaque(desc_q_mn), ddomn_lo = opaque(desc_do_mn);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk)
      MmaAcc::mma(dv, pa[kk], desc_from_lo(ddomn_lo, q_off + Descs::acc_b_step(kk)), 1);
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk)
      MmaAcc::mma(dk, dsa[kk], desc_from_lo(dqmn_lo, q_off + Descs::acc_b_step(kk)), 1);
    wgmma_commit();

    // ---- dS^T to shared memory (the same 16-bit values as the dK fragments), then dQ = dS K.
    // kTransposed: dS [queries][keys], fragment dsa[g] by one stmatrix .trans (the 16 queries of
    // fragment g are 16 rows further than g - 1's, the swizzle phase the same).
    if constexpr (kDqT) {
      const uint32_t ds_t = sm.ds(0) + ds_off + Descs::ds_t_addr(wg, warp, 0, lane);
#pragma unroll
      for (int g = 0; g < kPVSteps; ++g)
        stmatrix_x4_trans(ds_t + g * 16 * kChunkRowBytes, dsa[g][0], dsa[g][1], dsa[g][2], dsa[g][3]);
    } else {
#pragma unroll
      for (int j = 0; j < kSRegs / 4; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          st_shared_b32(sm.ds(0) + ds_off + Descs::ds_offset(ds_row0 + 8 * h, 8 * j + acc_col), dsa[j / 2][2 * (j % 2) + h]);
        }
    }
    fence_proxy_async();
    // The dQ GEMM is issued behind dV/dK before waiting for them, so the tensor cores go from one
    // to the other without draining (waiting first left them idle through the barrier).
    named_barrier_sync(kBwdDsBarrier, Traits::kConsumerThreads);

    float dq[kDqRegs];
    const uint32_t dds_lo = opaque(desc_ds), dkmn_lo = opaque(desc_k_mn);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Traits::kDqKSteps; ++kk) {
      if constexpr (kDqT)
        MmaDq::mma(dq, desc_from_lo(dkmn_lo, Descs::dqt_a_step(kk)), desc_from_lo(dds_lo, ds_off + Descs::dqt_b_step(kk)),
                   kk > 0 ? 1 : 0);
      else
        MmaDq::mma(dq, desc_from_lo(dds_lo, ds_off + Descs::dq_step(kk)), desc_from_lo(dkmn_lo, Descs::dq_step(kk)),
                   kk > 0 ? 1 : 0);
    }
    wgmma_commit();
    wgmma_wait<1>();
    reg_fence(dv);
    reg_fence(dk);
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk) {
      reg_fence(pa[kk]);
      reg_fence(dsa[kk]);
    }
    // Q, dO, lse and dpsum of this stage are read (dV/dK complete, lse/dpsum in registers).
    mbar_arrive(sm.empty(stage));
    wgmma_wait<0>();
    reg_fence(dq);

    bwd_sm90_store_dq_tile<Traits>(sm, wg, wtid, t, dq);
  };

  bwd_consumer_walk<Traits, kPacked>(p, sm, blk, mask, step);

  // ---- Epilogue: warpgroup wg's 64 key rows, all columns. (A CTA with no step, e.g. keys no
  // query sees under causal masking, writes zeros.)
  bwd_sm90_store_dkv<Traits, Element, kPacked>(kp, sm, blk, wg, wtid, dk, dv, 64 * wg);
}

#endif  // FLASHATTN_SM90A_ENABLED

}  // namespace sm90
}  // namespace flashattn
