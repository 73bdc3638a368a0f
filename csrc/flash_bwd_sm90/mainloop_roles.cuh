// The consumers of the Hopper backward at D = 256 and D = 192 (traits.h: the kRoles form). The
// producer warpgroup is mainloop.cuh's (TMA of K/V once and Q/dO per step, lse/dpsum by two warps),
// its dQ writer at D = 256 the form's own (bwd_sm90_dq_writer_roles: dQ from the step's stage), at
// D = 192 the D <= 128 form's (dQ through the shared tile). The text below is D = 256's; D = 192
// reads 96 columns a warpgroup (traits.h roles_col) where it says 128.
//
// One CTA per (batch, K/V head, block of 64 keys). dK and dV of 64 keys x 256 columns take 256
// registers a thread in one warpgroup, so each warpgroup keeps the columns [128 wg, 128 wg + 128)
// of both (128 registers). The score GEMMs are split by role instead of by queries, which keeps
// their N at 64 (at N = 32 both warpgroups would read the common A operand, K or V, from shared
// memory for half the work each, and those reads would bound the GEMMs):
//
//   warpgroup 0 (scores)                          warpgroup 1 (gradients of the scores)
//   wait full[stage]                               wait full[stage]
//   S^T = K Q^T       m64 n64 k256 SS              (dpsum read)
//   wait for it; arrive S_DONE                     sync S_DONE
//   P^T = exp2(S^T scale_log2 - lse log2e),        dP^T = V dO^T    m64 n64 k256 SS
//     masked; P^T (16-bit) -> shared pt[t % 2];
//   fence.proxy.async; arrive P_READY              sync P_READY
//   sync SCORES (its own 128 threads)              dS^T = P^T (dP^T - dpsum), P^T read back
//   dV_wg += P^T dO_wg   (SS, A K-major,             from shared memory (the 16-bit values the
//                        B MN-major, N = 128)        dV GEMM uses); -> shared ds[t % 2];
//                                                  fence.proxy.async
//   sync DS_READY                                  sync DS_READY
//                                                  dV_wg += P^T dO_wg
//   then both: dK_wg += dS^T Q_wg (SS, N = 128); dQ_wg = dS K_wg (SS, both MN-major, N = 128,
//   k = the 64 keys); wait for all three; dQ_wg (float32) over this warpgroup's columns of the
//   step's Q and dO (traits.h); arrive DQ_READY[stage]. The dQ writer (producer warp 1) adds the
//   tile to dq_accum with bulk reduce-adds (cp.reduce.async.bulk) and frees the stage.
//
// The score GEMMs run one after the other, S^T first: it heads the step's critical path (S^T, the
// exponentials, P^T, dS^T); issued together, the two GEMMs shared the tensor cores and both ended
// after two GEMM times, the exponentials after that. Now the exponentials run under the dP^T
// GEMM. Warpgroup 0 issues its dV GEMM before it waits for dS^T, so the tensor cores work while
// warpgroup 1 computes dS. S_DONE cannot run a step ahead: warpgroup 0 passes DS_READY of step t,
// which warpgroup 1 reaches after S_DONE of step t, before it arrives at S_DONE of step t + 1.
// Buffer reuse: warpgroup 0 writes pt[t % 2] at step t after passing DS_READY of step t - 1,
// which warpgroup 1 reaches only after its GEMMs of step t - 2 (the last readers of that buffer)
// completed; warpgroup 1 writes ds[t % 2] after P_READY of step t, which warpgroup 0 reaches
// after its GEMMs of step t - 1 completed. P_READY is arrived at by warpgroup 0 only after
// DS_READY of the previous step, so its arrivals never run a step ahead.
//
// Deterministic mode (dq_semaphore set): the writer adds a query block's tile in mainloop.cuh's
// order (key blocks in descending order, one ticket a key block).
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
#include "descriptors.h"
#include "kernel_params.h"
#include "mainloop.cuh"
#include "traits.h"

namespace flashattn {
namespace sm90 {

#if defined(FLASHATTN_SM90A_ENABLED)

// Named barriers of the roles form (0 is __syncthreads; mainloop.cuh's form uses 1, the packed
// batches' zeroing 6).
constexpr int kBwdPReadyBarrier = 2;   // both warpgroups: P^T of this step is in shared memory
constexpr int kBwdDsReadyBarrier = 3;  // both warpgroups: dS^T of this step is in shared memory
constexpr int kBwdScoresBarrier = 4;   // warpgroup 0 alone: its P^T rows, before its dV GEMM
constexpr int kBwdSDoneBarrier = 5;    // both warpgroups: S^T of this step is complete
// (7, 8 and 9 are mainloop.cuh's epilogue barriers.)

template <typename Traits, typename Element, bool kSoftcap, bool kPacked>
__device__ __forceinline__ void bwd_sm90_consumer_roles(const Sm90BwdParams& kp, const BwdSmem<Traits>& sm,
                                                        const BwdBlock& blk, const int wg, const int wtid) {
  static_assert(Traits::kRoles && Traits::kBlockN == 64 && Traits::kBlockM == 64, "the roles form");
  const BwdParams& p = kp.p;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kSRegs = Traits::kSRegs;      // 32: m64 (keys) x n64 (queries)
  constexpr int kAccRegs = Traits::kAccRegs;  // 64 (48): m64 (keys) x n128 (n96), this warpgroup's columns
  constexpr int kDqRegs = Traits::kDqRegs;    // 64 (48): m64 (queries) x n128 (n96)
  constexpr int kPVSteps = Traits::kPVSteps;  // 4: k = 64 queries
  using MmaScore = WgmmaSS<Element, kBlockM>;
  using MmaAcc = WgmmaSSTransB<Element, Traits::kAccN>;
  using MmaDq = WgmmaSSTrans<Element, Traits::kDqN>;
  using Descs = Sm90BwdDescs<Traits>;

  const int warp = wtid / 32;
  const int lane = wtid % 32;
  const int n0 = blk.n0;
  const bool scores = wg == 0;  // warp-uniform role

  float dv[kAccRegs];
  float dk[kAccRegs];
#pragma unroll
  for (int i = 0; i < kAccRegs; ++i) dv[i] = dk[i] = 0.f;

  // Accumulator layout (m64nN): value 4 j + 2 h + e of this thread is row 16 warp + lane/4 + 8 h,
  // column 8 j + 2 (lane % 4) + e.
  const int acc_row = 16 * warp + lane / 4;
  const int acc_col = 2 * (lane % 4);

  // Descriptor bases (lower words; stages and k-steps are byte offsets on top).
  const uint32_t desc_sa = desc_lo(Descs::score_a(scores ? sm.k() : sm.v(), 0));
  const uint32_t desc_sb = desc_lo(Descs::score_b(scores ? sm.q(0) : sm.dout(0)));
  const uint32_t desc_pt = desc_lo(Descs::pds_a(sm.pt(0)));
  const uint32_t desc_dst = desc_lo(Descs::pds_a(sm.ds(0)));
  const uint32_t desc_do_mn = desc_lo(Descs::acc_b_half(sm.dout(0), wg));
  const uint32_t desc_q_mn = desc_lo(Descs::acc_b_half(sm.q(0), wg));
  const uint32_t desc_ds_mn = desc_lo(Descs::dq_a(sm.ds(0), wg));
  const uint32_t desc_k_mn = desc_lo(Descs::dq_b(sm.k(), wg));

  const float scale_log2 = p.scale_log2;
  constexpr float kLog2e = 1.4426950408889634f;
  const float inv_softcap_log2 = kSoftcap ? 1.f / p.softcap_log2 : 0.f;
  const BwdBlockMask mask = bwd_block_mask<Traits, kPacked>(p, blk);
  // Key row 8 h of this thread sees queries [qmin[h], qmax[h]].
  int qmin[2], qmax[2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
    bwd_key_queries(mask.window, n0 + acc_row + 8 * h, seqlen_k_of<kPacked>(p, blk), qmin[h], qmax[h]);

  bwd_consumer_wait_kv<Traits, kPacked>(sm, blk, mask.keys_partial);

  auto step = [&](const int t, auto masked) {
    constexpr bool kMasked = decltype(masked)::value;
    const int m0 = blk.m0(t, kBlockM);
    const int stage = t % Traits::kStages;
    const uint32_t q_off = stage * Traits::kQBytes;
    const uint32_t buf_off = (t % Traits::kDsStages) * Traits::kDSBytes;
    const uint32_t pt_tile = sm.pt(0) + buf_off;
    const uint32_t ds_tile = sm.ds(0) + buf_off;
    const uint32_t sa_lo = opaque(desc_sa), sb_lo = opaque(desc_sb);

    bwd_consumer_wait_step<Traits, kPacked, kMasked>(p, sm, stage, t, m0);

    // This thread's row statistics (columns 8 j + acc_col + e): lse for the scores, read while
    // the GEMM runs; dpsum for their gradients, read while S^T's GEMM runs.
    float stat[kSRegs / 4][2];
    const uint32_t stat_s = (scores ? sm.lse(stage) : sm.dpsum(stage)) + acc_col * 4;
    auto load_stats = [&] {
#pragma unroll
      for (int j = 0; j < kSRegs / 4; ++j)
        asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(stat[j][0]), "=f"(stat[j][1]) : "r"(stat_s + j * 32));
    };
    if (!scores) {
      load_stats();
      named_barrier_sync(kBwdSDoneBarrier, Traits::kConsumerThreads);
    }

    // ---- S^T = K Q^T (warpgroup 0), then dP^T = V dO^T (warpgroup 1).
    float acc[kSRegs];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk)
      MmaScore::mma(acc, desc_from_lo(sa_lo, Descs::score_a_step(kk)), desc_from_lo(sb_lo, q_off + Descs::score_b_step(kk)),
                    kk > 0 ? 1 : 0);
    wgmma_commit();
    if (scores) load_stats();
    wgmma_wait<0>();
    reg_fence(acc);
    if (scores) named_barrier_arrive(kBwdSDoneBarrier, Traits::kConsumerThreads);

    if (scores) {
      // ---- P^T = exp2(S^T scale_log2 - lse log2e); a row that sees no key has lse = -inf and
      // gets P = 0 (its lse taken as +inf).
      const int q_end = loop_seqlen_q<kPacked>(p, sm) - m0;
#pragma unroll
      for (int j = 0; j < kSRegs / 4; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) stat[j][e] = stat[j][e] == -INFINITY ? INFINITY : stat[j][e] * kLog2e;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float pv[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            // Softcap: the forward's capped score, with the same tanh_approx (mainloop.cuh).
            pv[e] = kSoftcap ? ex2(tanh_approx(acc[4 * j + 2 * h + e] * p.softcap_scale) * p.softcap_log2 - stat[j][e])
                             : ex2(acc[4 * j + 2 * h + e] * scale_log2 - stat[j][e]);
            if constexpr (kMasked) {
              const int col = 8 * j + acc_col + e;
              if (col >= q_end || m0 + col < qmin[h] || m0 + col > qmax[h]) pv[e] = 0.f;
            }
          }
          st_shared_b32(pt_tile + Descs::ds_offset(acc_row + 8 * h, 8 * j + acc_col), pack2<Element>(pv[0], pv[1]));
        }
      }
      fence_proxy_async();
      named_barrier_arrive(kBwdPReadyBarrier, Traits::kConsumerThreads);
      named_barrier_sync(kBwdScoresBarrier, kWarpgroupThreads);
    } else {
      // ---- dS^T = P^T (dP^T - dpsum), with P^T as stored (the values the dV GEMM multiplies).
      // Masked and out-of-range entries have P = 0, and dP = 0 there too (zero-filled rows).
      // Softcap: times 1 - t^2, recovered from P and lse (softmax_math.cuh; P as stored, 16-bit:
      // t to ~1e-4 at c = 30, below the 16-bit rounding of dS itself).
      [[maybe_unused]] float lse2[kSoftcap ? kSRegs / 4 : 1][2];
      if constexpr (kSoftcap) {
#pragma unroll
        for (int j = 0; j < kSRegs / 4; ++j) {
          asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];"
                       : "=f"(lse2[j][0]), "=f"(lse2[j][1])
                       : "r"(sm.lse(stage) + acc_col * 4 + j * 32));
#pragma unroll
          for (int e = 0; e < 2; ++e) lse2[j][e] = lse2[j][e] == -INFINITY ? INFINITY : lse2[j][e] * kLog2e;
        }
      }
      named_barrier_sync(kBwdPReadyBarrier, Traits::kConsumerThreads);
#pragma unroll
      for (int j = 0; j < kSRegs / 4; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t off = Descs::ds_offset(acc_row + 8 * h, 8 * j + acc_col);
          uint32_t pr;
          asm volatile("ld.shared.b32 %0, [%1];" : "=r"(pr) : "r"(pt_tile + off));
          const float2 pf = unpack2<Element>(pr);
          float g0 = 1.f, g1 = 1.f;
          if constexpr (kSoftcap) {
            g0 = softcap_grad_from_p(pf.x, lse2[j][0], inv_softcap_log2);
            g1 = softcap_grad_from_p(pf.y, lse2[j][1], inv_softcap_log2);
          }
          st_shared_b32(ds_tile + off, pack2<Element>(pf.x * (acc[4 * j + 2 * h] - stat[j][0]) * g0,
                                                      pf.y * (acc[4 * j + 2 * h + 1] - stat[j][1]) * g1));
        }
      fence_proxy_async();
    }

    // ---- dV_wg += P^T dO_wg (warpgroup 0 before it waits for dS^T).
    const uint32_t pt_lo = opaque(desc_pt), do_lo = opaque(desc_do_mn);
    auto mma_dv = [&] {
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kPVSteps; ++kk)
        MmaAcc::mma(dv, desc_from_lo(pt_lo, buf_off + Descs::pds_a_step(kk)),
                    desc_from_lo(do_lo, q_off + Descs::acc_b_step(kk)), 1);
    };
    if (scores) mma_dv();
    named_barrier_sync(kBwdDsReadyBarrier, Traits::kConsumerThreads);
    if (!scores) mma_dv();

    // ---- dK_wg += dS^T Q_wg (same commit group as dV), then dQ_wg = dS K_wg.
    const uint32_t dst_lo = opaque(desc_dst), q_lo = opaque(desc_q_mn);
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk)
      MmaAcc::mma(dk, desc_from_lo(dst_lo, buf_off + Descs::pds_a_step(kk)),
                  desc_from_lo(q_lo, q_off + Descs::acc_b_step(kk)), 1);
    wgmma_commit();
    float dq[kDqRegs];
    const uint32_t dsmn_lo = opaque(desc_ds_mn), kmn_lo = opaque(desc_k_mn);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Traits::kDqKSteps; ++kk)
      MmaDq::mma(dq, desc_from_lo(dsmn_lo, buf_off + Descs::dq_step(kk)), desc_from_lo(kmn_lo, Descs::dq_step(kk)),
                 kk > 0 ? 1 : 0);
    wgmma_commit();

    if constexpr (!Traits::kDqInStage) {
      // ---- D = 192: the stage is free once dV and dK are complete (the score GEMMs of both
      // warpgroups read it before DS_READY; lse and dpsum are in registers); dQ_wg goes to the
      // shared dQ tile (traits.h's order), once the writer has read the previous step's, and the
      // writer (mainloop.cuh's bwd_sm90_dq_writer) adds it as it does for D <= 128.
      wgmma_wait<1>();
      reg_fence(dv);
      reg_fence(dk);
      mbar_arrive(sm.empty(stage));
      wgmma_wait<0>();
      reg_fence(dq);
      bwd_sm90_store_dq_tile<Traits>(sm, wg, wtid, t, dq);
      return;
    }
    wgmma_wait<0>();
    reg_fence(dv);
    reg_fence(dk);
    reg_fence(dq);

    // ---- dQ_wg over this warpgroup's columns of the stage's Q, then dO (traits.h): float4 j of
    // dq_accum's tile order, 16 a thread, contiguous in thread order (conflict-free). Every GEMM
    // that reads those columns is complete: this warpgroup's own, and the score GEMMs of both
    // (warpgroup 1 passed S_DONE, warpgroup 0 DS_READY). The writer adds them and frees the stage.
    const uint32_t piece_q = sm.q(stage) + wg * Traits::kDqPieceBytes;
    const uint32_t piece_do = sm.dout(stage) + wg * Traits::kDqPieceBytes;
#pragma unroll
    for (int j = 0; j < kDqRegs / 4; ++j) {
      const uint32_t addr = (j < kDqRegs / 8 ? piece_q : piece_do) + 16 * ((j % (kDqRegs / 8)) * kWarpgroupThreads + wtid);
      asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(dq[4 * j]), "f"(dq[4 * j + 1]),
                   "f"(dq[4 * j + 2]), "f"(dq[4 * j + 3])
                   : "memory");
    }
    fence_proxy_async();
    mbar_arrive(sm.dq_ready(stage));
  };

  bwd_consumer_walk<Traits, kPacked>(p, sm, blk, mask, step);

  // The epilogue stages dK and dV in the Q/dO ring: at D = 256 wait until the writer has read the
  // last dQ (it reads in step order, so every earlier one too).
  if (Traits::kDqInStage && blk.steps > 0) {
    const int last = blk.steps - 1;
    mbar_wait(sm.empty(last % Traits::kStages), (last / Traits::kStages) & 1);
  }

  // ---- Epilogue: all 64 key rows, this warpgroup's columns. (A CTA with no step writes zeros.)
  bwd_sm90_store_dkv<Traits, Element, kPacked>(kp, sm, blk, wg, wtid, dk, dv, 0);
}

#endif  // FLASHATTN_SM90A_ENABLED

}  // namespace sm90
}  // namespace flashattn
