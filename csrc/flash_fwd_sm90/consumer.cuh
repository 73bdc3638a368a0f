// A consumer warpgroup of the Hopper forward kernel: 64 query rows of each tile (kBlockM rows).
//
// Per tile, key blocks n = last .. first (block_range: the blocks inside the causal mask / local
// window; the edge blocks apply the mask), with the softmax of block n overlapped with the P V
// product of block n+1 (FlashAttention-3's intra-warpgroup pipelining):
//
//   S = Q K[last]^T; wait; softmax -> P                         (first block)
//   for n = last-1 .. first:
//     convert P to 16-bit A fragments
//     issue S = Q K[n]^T                                        (wgmma group A)
//     O *= rescale(previous softmax); issue O += P V[n+1]       (wgmma group B, P from registers)
//     wait for A -> release K[n]; softmax(S) -> rescale         (runs while B is in flight)
//     wait for K[n-1] to land (n > first) / release Q (n = first)
//     wait for B -> release V[n+1]
//   convert P; O *= rescale; O += P V[first]; wait -> release V[first]
//   normalize, store O and LSE
//
// With kPingPong the consumer warpgroups also take turns issuing their GEMMs, in round-robin order
// (named barriers 1 .. kConsumerWGs): each "issue" section above is entered with bar.sync on its
// own barrier and left with bar.arrive on the next warpgroup's, so one warpgroup's softmax runs
// while another's GEMMs use the tensor cores. All run identical section counts per tile (the
// tile's key block count + 1); the last warpgroup pre-arrives once on warpgroup 0's barrier at the start
// and warpgroup 0 absorbs that arrival at the end.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../common/ptx.cuh"
#include "../common/sm90/ptx.cuh"
#include "../common/sm90/wgmma_fp8_ops.cuh"
#include "../common/sm90/wgmma_ops.cuh"
#include "epilogue.cuh"
#include "kernel_params.h"
#include "schedule.cuh"
#include "smem.cuh"
#include "softmax.cuh"
#include "tile_scheduler.h"
#include "traits.h"

namespace flashattn {
namespace sm90 {

#if defined(FLASHATTN_SM90A_ENABLED)

template <typename Traits>
__device__ __forceinline__ void pingpong_enter(int wg) {
  if constexpr (Traits::kPingPong) named_barrier_sync(kPingPongBarrierBase + wg, kPingPongBarrierThreads);
}
template <typename Traits>
__device__ __forceinline__ void pingpong_leave(int wg) {
  if constexpr (Traits::kPingPong) {
    // The next warpgroup in round-robin order (spelled 1 - wg for two: the shipped kernels' code).
    const int next = Traits::kConsumerWGs == 2 ? 1 - wg : (wg + 1 == Traits::kConsumerWGs ? 0 : wg + 1);
    named_barrier_arrive(kPingPongBarrierBase + next, kPingPongBarrierThreads);
  }
}

// The packed flavour: rows [kept, kBlockN) of V stage `stage` to zero (the next sequence's rows, see
// packed.cuh), once the stage has landed, every consumer thread a share of 16-byte stores; the
// stores are made visible to the async proxy (wgmma's reads) and the consumers meet at a named
// barrier before any of them reads the stage. Zeroing whole 128-byte rows of each plane leaves the
// swizzle (a permutation within a row) out of it. Called by every consumer warpgroup at the same
// point of the tile (after its first S, outside the ping-pong sections), so the barrier cannot
// wait on a warpgroup that waits for a turn.
template <typename Traits>
__device__ __forceinline__ void zero_v_rows(const SmemMap<Traits>& sm, int stage, uint32_t phase, int kept) {
  static_assert(!Traits::kFp8, "the packed flavour is 16-bit (V^T's keys are columns)");
  constexpr int kPieces = kChunkRowBytes / 16;  // 16-byte pieces of a plane row
  sm.wait(sm.v_full(stage), phase, kTagConsumerVFull);
  const int per_plane = (Traits::kBlockN - kept) * kPieces;
  const int tid = static_cast<int>(threadIdx.x) - kWarpgroupThreads;  // consumer threads: [0, kConsumerThreads)
  for (int i = tid; i < per_plane * Traits::kChunks; i += Traits::kConsumerThreads) {
    const int c = i / per_plane;
    st_shared_zero_v4(sm.v(stage) + c * Traits::kKVChunkBytes + kept * kChunkRowBytes + (i - c * per_plane) * 16);
  }
  fence_proxy_async();
  named_barrier_sync(Traits::kPackedZeroBarrier, Traits::kConsumerThreads);
}

// Params: Sm90Params, or Sm90Fp8Params for the FP8 traits (Traits::kFp8: Element __nv_fp8_e4m3,
// O bfloat16, the descale factors read per tile; see traits.h for the layouts).
template <typename Traits, typename Element, bool kDynamic, typename Params>
__device__ __forceinline__ void consumer_loop(const Params& params, const SmemMap<Traits>& sm, const int wg) {
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kSRegs = Traits::kSRegs;
  constexpr int kORegs = Traits::kORegs;
  constexpr int kPV_K = Traits::kPVSteps;  // k-steps of O += P V (16 keys, FP8: 32)
  constexpr int kQK_K = Traits::kQKSteps;  // k-steps of S = Q K^T (32 bytes of a chunk row each)
  constexpr bool kFp8 = Traits::kFp8;
  using OutElement = typename std::conditional<kFp8, __nv_bfloat16, Element>::type;
  using MmaQK = WgmmaSS<Element, kBlockN>;
  using MmaPV = WgmmaRS<Element, kHeadDim>;
  using Softmax = Sm90Softmax<kSRegs, Traits::kSoftmaxChains, Traits::kSoftmaxMaxOffset>;

  const int tid = threadIdx.x % 128;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int row_in_tile = wg * 64 + warp * 16 + lane / 4;  // this thread's rows: +0 and +8
  const int col_in_quad = 2 * (lane % 4);

  // Descriptor bases (verified against CuTe by lab/sm90_desc_check.cu): Q rows of this
  // warpgroup and stage 0 of K and V; k-steps and stages are byte offsets on top.
  const uint64_t desc_q = make_smem_desc_sw128(sm.q(0) + wg * 64 * kChunkRowBytes, 16u, 1024u);
  const uint64_t desc_k = make_smem_desc_sw128(sm.k(0), 16u, 1024u);
  // V: MN-major (16-bit, read with imm-trans-b); V^T: K-major like K (FP8), 128- or 64-byte rows.
  uint64_t desc_v;
  if constexpr (!kFp8)
    desc_v = make_smem_desc_sw128(sm.v(0), Traits::kChunks > 1 ? Traits::kKVChunkBytes : 0u, 1024u);
  else if constexpr (Traits::kVtPlaneKeys == 64)
    desc_v = make_smem_desc_sw64(sm.v(0));
  else
    desc_v = make_smem_desc_sw128(sm.v(0), 16u, 1024u);

  // The stage's descriptors first, then each k-step's as a constant offset on them: one add per
  // wgmma, as FlashAttention-3 issues them (the stage offset folded into every k-step's address
  // cost a shift and a 64-bit add per wgmma, between wgmma issues).
  auto gemm_qk = [&](float (&s)[kSRegs], int stage, uint32_t q_stage_off) {
    const uint64_t dq = desc_advance(desc_q, q_stage_off);
    const uint64_t dk = desc_advance(desc_k, stage * Traits::kKVBytes);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kQK_K; ++kk) {
      const uint32_t k_off = (kk / 4) * Traits::kKVChunkBytes + (kk % 4) * 32;
      const uint32_t q_off = (kk / 4) * Traits::kQChunkBytes + (kk % 4) * 32;
      MmaQK::mma(s, desc_advance(dq, q_off), desc_advance(dk, k_off), kk > 0 ? 1 : 0);
    }
    wgmma_commit();
  };
  auto gemm_pv = [&](float (&o)[kORegs], uint32_t (&p)[kPV_K][4], int stage) {
    const uint64_t dv = desc_advance(desc_v, stage * Traits::kKVBytes);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kPV_K; ++kk) {
      uint32_t v_off;
      if constexpr (kFp8)
        v_off = (kk / Traits::kVtKSteps) * Traits::kVtPlaneBytes + (kk % Traits::kVtKSteps) * 32;  // 32 keys = 32 B
      else
        v_off = kk * 16 * kChunkRowBytes;  // 16 keys = 16 rows of V
      MmaPV::mma(o, p[kk], desc_advance(dv, v_off), 1);
    }
    wgmma_commit();
  };

  constexpr bool kHeld = Traits::kHoldLog2 >= 0;

  PipeState<Traits::kStages> kst, vst;
  PipeState<Traits::kQStages> qst;
  float scale_log2 = params.scale_log2;
  // With a positive scale (every real call) the scale is folded into the exponent: max over raw
  // scores, then p = exp2(s * scale_log2 - max) is one FFMA per element instead of an FMUL here
  // and an FADD there. Zero or negative scales (max(scale * s) is then not scale * max(s)) keep
  // the scores pre-multiplied, and the softmax multiplies by 1. So does the logit softcap, whose
  // capped scores tanh(s * softcap_scale) * softcap_log2 are already in log2 units. Uniform
  // across the CTA.
  //
  // The decisions live in registers (opaque): left to the compiler, they were re-derived
  // from the parameter bank in every key block, a constant load and two compares between each
  // S = Q K^T and its softmax (ncu source counters, D=128 causal S=4k: ~3% of the samples).
  uint32_t score_mode = 0;  // kSoftcap | kFoldScale
  float softmax_scale_log2 = 1.f;
  constexpr uint32_t kSoftcap = 1, kFoldScale = 2;
  auto decide = [&](float scale) {
    const bool capped = params.softcap_log2 != 0.f;
    const bool fold = !capped && scale > 0.f;
    score_mode = opaque((capped ? kSoftcap : 0u) | (fold ? kFoldScale : 0u));
    softmax_scale_log2 = opaque(fold ? scale : 1.f);
  };
  decide(scale_log2);
  float o_scale = 1.f;  // FP8: v_descale of the tile's KV head

  if (Traits::kPingPong && wg == Traits::kConsumerWGs - 1)
    named_barrier_arrive(kPingPongBarrierBase + 0, kPingPongBarrierThreads);

  constexpr bool kPacked = kIsPacked<Params>;
  using ScheduleParams = ScheduleParamsOf<Params>;
  ConsumerSchedule<Traits, kDynamic, ScheduleParams> sched{params, sm};
  for (int t = sched.first(); t < params.num_tiles; t = sched.next(t)) {
    const TileWorkOf<ScheduleParams> st = sched.work;
    const TileCoord& tc = st.coord;
    const KeyBlocks& r = st.blocks;
    if constexpr (kPacked) {
      if (!st.template has_rows<Traits>()) continue;  // past its sequence's queries: nothing to store
    }
    // Sequence index of this thread's first row (tile_rows: the tiles after the first may start early).
    int tile_row0 = tc.m_block * kBlockM;
    if constexpr (Traits::kPartialTileFirst && kPacked)
      tile_row0 = packed_tile_rows<Traits>(st.seq, tc.m_block).first;
    else if constexpr (Traits::kPartialTileFirst)
      tile_row0 = tile_rows(tc.m_block, kBlockM, params.seqlen_q, q_row_shift<Traits>(params)).first;
    const int row0 = tile_row0 + row_in_tile;
    if constexpr (kFp8) {
      // Per (batch, KV head): q_descale * k_descale joins the softmax scale (uniform over the CTA,
      // so the fold decision stays uniform), v_descale scales O with the row-sum normalization.
      const int d = tc.batch * params.heads_kv + tc.head_q / params.q_per_kv;
      scale_log2 = params.scale_log2 * (params.q_descale[d] * params.k_descale[d]);
      decide(scale_log2);
      o_scale = params.v_descale[d];
    }

    float o[kORegs];
#pragma unroll
    for (int i = 0; i < kORegs; ++i) o[i] = 0.f;
    Softmax softmax;
    softmax.init();

    if (r.count() > 0) {
      // Keys [lo[h], hi[h]) are visible to row row0 + 8 h (csrc/common/mask.cuh). Computed once per
      // tile: recomputing them in the masked branch instead spilled the D=64 long-keys config.
      int lo[2], hi[2];
      {
        int seqlen_k = params.seqlen_k, causal_offset = params.causal_offset;
        if constexpr (kPacked) {
          seqlen_k = st.seq.seqlen_k;
          causal_offset = st.seq.causal_offset;
        }
        const KeyWindow window = make_key_window(seqlen_k, causal_offset, Traits::kLocal ? params.window_left : -1,
                                                 Traits::kLocal ? params.window_right : -1);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          lo[h] = window.lo(row0 + 8 * h);
          hi[h] = window.hi(row0 + 8 * h);
        }
      }
      // Unless the scale is folded into the softmax, scores to log2 units first (so that a zero or
      // negative scale is exact and masked entries stay -inf), or through the softcap; then, in
      // the blocks that need it (the tile's edge blocks), masked entries to -inf.
      auto scale_and_mask = [&](float (&s)[kSRegs], int n, bool masked) {
        const bool softcap = score_mode & kSoftcap;
        const bool fold_scale = score_mode & kFoldScale;
        if (softcap) {
#pragma unroll
          for (int i = 0; i < kSRegs; ++i) s[i] = tanh_approx(s[i] * params.softcap_scale) * params.softcap_log2;
        }
        if (!fold_scale && !softcap) {
#pragma unroll
          for (int i = 0; i < kSRegs; ++i) s[i] *= scale_log2;
        }
        if (masked) {
          // Against limits relative to this thread's first column of the block, so that each entry is
          // one compare with an immediate; the window's left limit only where it cuts this block
          // for one of the thread's rows (never without a window: lo = 0): a causal block's entries
          // then cost a compare and a select each.
          const int base = n * kBlockN + col_in_quad;
          const int hi_rel[2] = {hi[0] - base, hi[1] - base};
          if (lo[0] <= base && lo[1] <= base) {
#pragma unroll
            for (int j = 0; j < kSRegs / 4; ++j)
#pragma unroll
              for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int e = 0; e < 2; ++e)
                  if (8 * j + e >= hi_rel[h]) s[4 * j + 2 * h + e] = -INFINITY;
          } else {
            const int lo_rel[2] = {lo[0] - base, lo[1] - base};
#pragma unroll
            for (int j = 0; j < kSRegs / 4; ++j)
#pragma unroll
              for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int e = 0; e < 2; ++e)
                  if (8 * j + e < lo_rel[h] || 8 * j + e >= hi_rel[h]) s[4 * j + 2 * h + e] = -INFINITY;
          }
        }
      };
      // scale_and_mask's arithmetic for one score: row h, key base + 8 slice + e (base: the block's
      // first key + col_in_quad), masked or not (update_held's refill, on the recomputed scores).
      auto scale_and_mask_one = [&](float x, int slice, int h, int e, int base, bool masked) {
        const bool softcap = score_mode & kSoftcap;
        const bool fold_scale = score_mode & kFoldScale;
        if (softcap) x = tanh_approx(x * params.softcap_scale) * params.softcap_log2;
        if (!fold_scale && !softcap) x *= scale_log2;
        const int key = base + 8 * slice + e;
        return masked && (key < lo[h] || key >= hi[h]) ? -INFINITY : x;
      };
      // P in the A-operand register layout of k-step kk (keys 16 kk .. 16 kk + 15): the
      // accumulator values of n8-slices 2 kk and 2 kk + 1, packed to 16 bits.
      // FP8: the k32 A fragment of keys 32 kk .. 32 kk + 31 holds, per thread, positions 4q..4q+3 and
      // 16+4q..16+4q+3 (q = lane % 4) of rows r and r + 8, four e4m3 per register, the lowest
      // position in the lowest byte; the accumulator gives the thread columns 2q, 2q+1 of each
      // n8-slice. Register j gets the slices' values as they are, and V^T's key positions are
      // permuted to match (traits.h, fp8_key_of_position): no shuffle, no byte permute.
      auto convert_p = [&](const float (&s)[kSRegs], uint32_t (&p)[kPV_K][4]) {
#pragma unroll
        for (int kk = 0; kk < kPV_K; ++kk) {
          if constexpr (kFp8) {
            p[kk][0] = pack4_e4m3(s[16 * kk + 0], s[16 * kk + 1], s[16 * kk + 4], s[16 * kk + 5]);
            p[kk][1] = pack4_e4m3(s[16 * kk + 2], s[16 * kk + 3], s[16 * kk + 6], s[16 * kk + 7]);
            p[kk][2] = pack4_e4m3(s[16 * kk + 8], s[16 * kk + 9], s[16 * kk + 12], s[16 * kk + 13]);
            p[kk][3] = pack4_e4m3(s[16 * kk + 10], s[16 * kk + 11], s[16 * kk + 14], s[16 * kk + 15]);
          } else {
            p[kk][0] = pack2<Element>(s[8 * kk + 0], s[8 * kk + 1]);
            p[kk][1] = pack2<Element>(s[8 * kk + 2], s[8 * kk + 3]);
            p[kk][2] = pack2<Element>(s[8 * kk + 4], s[8 * kk + 5]);
            p[kk][3] = pack2<Element>(s[8 * kk + 6], s[8 * kk + 7]);
          }
        }
      };

      float s[kSRegs];
      uint32_t p[kPV_K][4];
      float rescale[2];

      sm.wait(sm.q_full(qst.index), qst.phase, kTagConsumerQFull);
      const uint32_t q_stage_off = qst.index * Traits::kQBytes;

      // First (highest) key block: S, softmax, P.
      int n = r.n_end - 1;
      sm.wait(sm.k_full(kst.index), kst.phase, kTagConsumerKFull);
      pingpong_enter<Traits>(wg);
      gemm_qk(s, kst.index, q_stage_off);
      pingpong_leave<Traits>(wg);
      wgmma_wait<0>();
      reg_fence(s);
      mbar_arrive(sm.k_empty(kst.index));
      kst.advance();
      if (r.count() == 1) mbar_arrive(sm.q_empty(qst.index));
      scale_and_mask(s, n, r.masked(n));
      softmax.update(s, rescale, softmax_scale_log2);  // rescale is 0 here and O is still 0
      if constexpr (kPacked) {
        // The first V block is the only one that can run past the sequence's keys (the walk starts at
        // the highest block); its rows past them hold the next sequence's values, which P's zeros
        // there would turn into NaN where they are inf or NaN.
        const int kept = st.seq.seqlen_k - n * kBlockN;
        if (kept < kBlockN) zero_v_rows<Traits>(sm, vst.index, vst.phase, kept);
      }
      constexpr int kOrder = Traits::kStepOrder;
      if constexpr (kOrder > 0) convert_p(s, p);  // no P V in flight yet
      if (kOrder < 2 && r.count() > 1) sm.wait(sm.k_full(kst.index), kst.phase, kTagConsumerKFull);

      for (n = r.n_end - 2; n >= r.n_begin; --n) {
        // Order 0: K[n] has landed (waited at the end of the previous step), and P of the previous
        // block is converted only now, once the P V that read the old P registers has completed.
        // Orders 1 and 2 converted it at the end of the previous step; order 2 waits for K[n] here.
        if constexpr (kOrder == 0) convert_p(s, p);
        if constexpr (kOrder == 2) sm.wait(sm.k_full(kst.index), kst.phase, kTagConsumerKFull);
        pingpong_enter<Traits>(wg);
        gemm_qk(s, kst.index, q_stage_off);
        if constexpr (kOrder == 0) rescale_o(o, rescale);
        sm.wait(sm.v_full(vst.index), vst.phase, kTagConsumerVFull);
        gemm_pv(o, p, vst.index);
        pingpong_leave<Traits>(wg);

        wgmma_wait<1>();  // S = Q K[n]^T done; O += P V[n+1] may still run
        reg_fence(s);
        // kHeld: the softmax's common case here; otherwise it is settled once P V[n+1] has completed
        // (its registers are then free), and K[n] and (at the first block) Q are released after it:
        // its refill may read them.
        bool held_done = true;
        typename Softmax::HeldRest held_rest;
        const int k_stage = kst.index;
        // update_held's rarest path (a row's max rose past 2^120 within the tile, so its held
        // exponentials may have overflowed): the rows `rows` (h = 0, 1) of this thread get their
        // scores again, raw S = Q K[n]^T by mma.sync from the swizzled tiles (K[n] is not released
        // yet) through scale_and_mask's arithmetic; the other rows keep their registers
        // (mma.sync's sums are not wgmma's bit for bit). mma m16n8 slice j's accumulators are the
        // wgmma fragment's values 4 j .. 4 j + 3 (softmax.cuh's layout); the 128-byte swizzle XORs
        // a row's 16-byte chunk index with the row mod 8 (planes 1024-byte aligned, this warp's
        // rows a multiple of 8 into them). Warp-collective.
        auto refill = [&](float (&s)[kSRegs], const bool (&rows)[2]) {
          if constexpr (!kFp8) {
            // Opaque: left visible, ptxas computed the refill's masked flag once an element in every
            // step, in the common case's path (~180 instructions a step: D=128 -10..-15%).
            const bool masked = opaque(static_cast<uint32_t>(r.masked(n))) != 0u;
            const int base = static_cast<int>(opaque(static_cast<uint32_t>(n * kBlockN + col_in_quad)));
            const int m = lane / 8, r8 = lane % 8;
            const uint32_t q_row =
                sm.q(0) + q_stage_off + (wg * 64 + warp * 16 + (m % 2) * 8 + r8) * kChunkRowBytes;
            const uint32_t k_row = sm.k(k_stage) + ((m / 2) * 8 + r8) * kChunkRowBytes;
#pragma unroll
            for (int jj = 0; jj < kBlockN / 16; ++jj) {
              float c[2][4] = {};
#pragma unroll
              for (int kk = 0; kk < kQK_K; ++kk) {
                const int plane = kk / 4, chunk = (kk % 4) * 2;
                uint32_t a[4], b[4];
                ldmatrix_x4(a, q_row + plane * Traits::kQChunkBytes + (((chunk + m / 2) ^ r8) * 16));
                ldmatrix_x4(b, k_row + plane * Traits::kKVChunkBytes + jj * 16 * kChunkRowBytes +
                                   (((chunk + m % 2) ^ r8) * 16));
                mma_m16n8k16<Element>(c[0], a, b[0], b[1]);
                mma_m16n8k16<Element>(c[1], a, b[2], b[3]);
              }
#pragma unroll
              for (int t = 0; t < 2; ++t)
#pragma unroll
                for (int i = 0; i < 4; ++i)
                  s[8 * jj + 4 * t + i] = rows[i / 2] ? scale_and_mask_one(c[t][i], 2 * jj + t, i / 2, i % 2, base, masked)
                                                      : s[8 * jj + 4 * t + i];
            }
          }
        };
        if constexpr (kHeld) {
          scale_and_mask(s, n, r.masked(n));
          held_done = softmax.template update_held<Traits::kHoldLog2>(s, rescale, softmax_scale_log2, held_rest);
          if (held_done) mbar_arrive(sm.k_empty(k_stage));
          kst.advance();
        } else {
          mbar_arrive(sm.k_empty(kst.index));
          kst.advance();
          scale_and_mask(s, n, r.masked(n));
          softmax.update(s, rescale, softmax_scale_log2);
        }

        // Orders 0 and 1 wait for the next K block here, not at the top of the next step: the spin
        // loop ends the basic block, and ptxas does not hoist the wgmma wait below across it (in
        // one block with the softmax it moved the wait, and the V release after it, above the whole
        // softmax at order 0, which then no longer overlapped with P V). Order 2 leaves the softmax,
        // the wait and the rescale in one block, and ptxas hoists the wait above the softmax (none of
        // D=64's 64 exponentials before it, 5 of D=256's 32: lab/sass_loop_mix.py --waits); order 2
        // measured faster all the same (D=256 +2.7%, D=64's two consumers +1.5-2% at S=512) for its
        // shorter ping-pong turn.
        if (n > r.n_begin) {
          if constexpr (kOrder < 2) sm.wait(sm.k_full(kst.index), kst.phase, kTagConsumerKFull);
        } else if (held_done) {
          mbar_arrive(sm.q_empty(qst.index));  // the tile's last read of Q was S = Q K[first]^T
        }

        wgmma_wait<0>();  // O += P V[n+1] done: P and V[n+1] are free
        reg_fence(o);
#pragma unroll
        for (int kk = 0; kk < kPV_K; ++kk) reg_fence(p[kk]);
        mbar_arrive(sm.v_empty(vst.index));
        vst.advance();
        if constexpr (kHeld) {
          if (!held_done) {
            softmax.template settle<Traits::kHoldLog2>(s, rescale, softmax_scale_log2, held_rest, refill);
            mbar_arrive(sm.k_empty(k_stage));
            if (n == r.n_begin) mbar_arrive(sm.q_empty(qst.index));
          }
        }
        if constexpr (kOrder > 0 && Traits::kConvertPFirst) {
          convert_p(s, p);
          rescale_o(o, rescale);  // to block n's maximum, before P[n] V[n] accumulates onto it
        } else if constexpr (kOrder > 0) {
          rescale_o(o, rescale);
          convert_p(s, p);
        }
      }

      // Last P V.
      if constexpr (kOrder == 0) {
        convert_p(s, p);
        rescale_o(o, rescale);
      }
      sm.wait(sm.v_full(vst.index), vst.phase, kTagConsumerVFull);
      pingpong_enter<Traits>(wg);
      gemm_pv(o, p, vst.index);
      pingpong_leave<Traits>(wg);
      wgmma_wait<0>();
      reg_fence(o);
#pragma unroll
      for (int kk = 0; kk < kPV_K; ++kk) reg_fence(p[kk]);
      mbar_arrive(sm.v_empty(vst.index));
      vst.advance();
      qst.advance();
    }

    // Tiles with no visible key (no key block) come here directly: O = 0, LSE = -inf.
    float lse[2];
    softmax.finalize(o, lse, o_scale);
    if (!kFp8 && !kDynamic && params.num_splits > 1) {  // the FP8 path and the dynamic schedule run no split
      if constexpr (!kFp8 && !kDynamic && Traits::kClusterMerge) {
        if (params.o_accum == nullptr) {  // the splits merge in their cluster (kernel.cuh)
          // Every consumer warpgroup of this CTA is past its key blocks: the Q, K and V buffers
          // that the stash covers are no longer read (and the producer loads nothing more).
          named_barrier_sync(Traits::kMergeBarrier, Traits::kConsumerThreads);
          stash_o_partial<Traits>(sm.base, o, lse, row_in_tile, col_in_quad, lane % 4 == 0);
          continue;  // one tile per CTA in this mode
        }
      }
      store_o_partial(params, o, lse, st.split, tc.batch, tc.head_q, row0, col_in_quad, lane % 4 == 0);
    } else if constexpr (kPacked) {
      // The sequence read again (an L1 hit: its start read it) rather than held through the key
      // blocks: the D=64 two-consumer kernel, at 240 registers, spilled with its rows kept.
      store_o_packed<Traits, OutElement>(params, packed_seq(params, tc.batch), sm.o(), o, lse, tc.head_q, tc.m_block,
                                         wg, row0, col_in_quad, lane % 4 == 0);
    } else if constexpr (!Traits::kPartialTileFirst) {
      // Unshifted tiles, spelled as before the shift: the other configs' PTX stays bit-for-bit.
      if constexpr (Traits::kOTma)
        store_o_tma<Traits, OutElement>(params, sm.o(), o, lse, tc.batch, tc.head_q, tc.m_block * kBlockM, wg, row0,
                                        lane % 4 == 0);
      else
        store_o_lse<OutElement>(params, o, lse, tc.batch, tc.head_q, row0, col_in_quad, lane % 4 == 0);
    } else {
      // A shifted first tile's last rows are the next tile's: it stores from registers, bounded by
      // the rows it owns (the O map bounds at seqlen_q only). The condition is uniform over the CTA.
      // The shipped long-keys config stores from registers always; the TMA branch serves the
      // three-consumer masked variants with kOTma that lab/sm90_lab.cu compiles.
      const TileRows rows = tile_rows(tc.m_block, kBlockM, params.seqlen_q, q_row_shift<Traits>(params));
      bool stored = false;
      if constexpr (Traits::kOTma) {
        if (tc.m_block > 0 || params.q_row_shift == 0) {
          store_o_tma<Traits, OutElement>(params, sm.o(), o, lse, tc.batch, tc.head_q, rows.first, wg, row0,
                                          lane % 4 == 0);
          stored = true;
        }
      }
      if (!stored) store_o_lse<OutElement>(params, o, lse, tc.batch, tc.head_q, row0, col_in_quad, lane % 4 == 0, rows.end);
    }
  }
  // The CTA's shared memory must outlive the last TMA store's reads (and the kernel its writes).
  if constexpr (Traits::kOTma) {
    if (threadIdx.x % 128 == 0) bulk_wait_group_0();
  }

  // The last warpgroup's initial arrival on warpgroup 0's barrier is one more than warpgroup 0's
  // syncs on it during the tiles: this sync takes it, so every arrival is matched.
  if (Traits::kPingPong && wg == 0) named_barrier_sync(kPingPongBarrierBase + 0, kPingPongBarrierThreads);
}

#endif  // FLASHATTN_SM90A_ENABLED

}  // namespace sm90
}  // namespace flashattn
