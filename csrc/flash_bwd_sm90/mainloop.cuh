// The Hopper backward kernel's main loop (sm_90a, wgmma): FlashAttention-2/3's structure on the
// portable kernel's contract (../flash_bwd/mainloop.cuh: same BwdParams, same preprocess (dpsum)
// and convert (dQ) kernels, same masking rules).
//
// One CTA per (batch, K/V head, block of kBlockN = 128 keys); K and V stay in shared memory; the
// CTA walks the query blocks (64 rows) of every query head of its GQA group, so dK and dV are
// summed over the group in registers. Two warpgroups, warpgroup wg owning keys [64 wg, 64 wg + 64).
// Per step (one query block of one head; Q, dO, lse, dpsum double-buffered, the next step's loads
// in flight during this one):
//
//   wait for this step's cp.async; fence.proxy.async; barrier A
//   issue the next step's loads (into the other buffer: every thread passed barrier A after its
//     last wgmma of the previous step completed, so nothing reads that buffer any more)
//   S^T  = K_wg Q^T            SS wgmma, m64 (keys) n64 (queries) k = D, both K-major  (group 1)
//   dP^T = V_wg dO^T           same                                                    (group 2)
//   wait group 1: P^T = exp2(S^T scale_log2 - lse log2e)  (masked: 0; lse = -inf: 0)
//   wait group 2: dS^T = P^T (dP^T - dpsum)
//   dV += P^T dO, dK += dS^T Q RS wgmma, A = P^T / dS^T from registers (the accumulator layout
//                              packed to 16 bits is the A-fragment layout, as the forward's P),
//                              B = dO / Q as MN-major B (same smem tile, other descriptor)  (group 3)
//   dS^T (16-bit) -> shared memory [keys][queries]; fence.proxy.async; wait group 3 (frees the
//     P^T/dS^T fragments before the dQ accumulator is live: no spill at D = 128); barrier B
//   dQ = dS K                  SS wgmma, A = dS^T as MN-major A (imm-trans-a), B = K as MN-major
//                              B (imm-trans-b); split between the warpgroups (traits.h)  (group 4)
//   wait all; dQ -> dq_accum (float4 red.global.add)
//
// Barrier B (dS^T written before it is read) and barrier A of the next step (every dQ wgmma of
// this step has completed, wait_group 0, before the next step overwrites dS^T) are the only
// cross-warpgroup orderings of the dS buffer.
//
// softmax_scale is applied once at the end: dK in the epilogue below, dQ in the convert kernel.
// Deterministic mode (dq_semaphore set, [B, Hq, ceil(Sq / 64)]): the dQ partials of a query block
// are added in key-block order, as in the portable kernel; otherwise in whatever order the key
// blocks finish.
#pragma once

#include <cmath>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "../common/softmax_math.cuh"
#include "../flash_bwd/mainloop.cuh"  // atomic_add_tile_rows (float4 dQ reductions)
#include "../flash_bwd/params.h"
#include "../flash_fwd/ptx.cuh"
#include "../flash_fwd_sm90/ptx.cuh"
#include "../flash_fwd_sm90/wgmma_ops.cuh"
#include "descriptors.h"
#include "load.cuh"
#include "traits.h"

namespace flashattn {
namespace sm90 {

#if defined(FLASHATTN_SM90A_ENABLED)

// Named barriers (0 is __syncthreads): one per warpgroup for the kSplitKeys dS handoff.
constexpr int kBwdDsBarrierBase = 1;

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

// The value of x, opaque to the compiler (not hoisted out of a loop, not folded).
__device__ __forceinline__ uint32_t opaque(uint32_t x) {
  asm volatile("mov.b32 %0, %0;" : "+r"(x));
  return x;
}

template <typename Traits, typename Element>
__device__ __forceinline__ void bwd_sm90_mainloop(const BwdParams& p, const uint32_t base, const int num_n_blocks) {
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kSRegs = Traits::kSRegs;
  constexpr int kAccRegs = Traits::kAccRegs;
  constexpr int kDqRegs = Traits::kDqRegs;
  constexpr int kPVSteps = Traits::kPVSteps;
  constexpr bool kSplitD = Traits::kDqSplit == Sm90BwdDqSplit::kSplitD;
  using MmaScore = WgmmaSS<Element, kBlockM>;         // S^T, dP^T: n = 64 queries
  using MmaAcc = WgmmaRS<Element, kHeadDim>;          // dV, dK: n = D
  using MmaDq = WgmmaSSTrans<Element, Traits::kDqN>;  // dQ

  const uint32_t sK = base + Traits::kOffK;
  const uint32_t sV = base + Traits::kOffV;
  const uint32_t sQ = base + Traits::kOffQ;
  const uint32_t sDO = base + Traits::kOffDO;
  const uint32_t sDS = base + Traits::kOffDS;
  const uint32_t sLse = base + Traits::kOffLse;
  const uint32_t sDpsum = base + Traits::kOffDpsum;

  const int tid = threadIdx.x;
  const int wg = __shfl_sync(0xffffffffu, tid / kWarpgroupThreads, 0);
  const int wtid = tid % kWarpgroupThreads;
  const int warp = wtid / 32;
  const int lane = tid % 32;

  // Key blocks vary fastest (neighbouring CTAs share their Q/dO reads in L2), as in the portable kernel.
  const int n_block = static_cast<int>(blockIdx.x % num_n_blocks);
  const int bh = static_cast<int>(blockIdx.x / num_n_blocks);
  const int head_kv = bh % p.heads_kv;
  const int batch = bh / p.heads_kv;
  const int group = p.heads_q / p.heads_kv;
  const int n0 = n_block * kBlockN;

  // Query blocks that see a key of this block: rows i with i + causal_offset >= n0.
  int m_begin = 0;
  if (p.causal) m_begin = max(0, n0 - p.causal_offset) / kBlockM;
  const int m_end = (p.seqlen_q + kBlockM - 1) / kBlockM;
  const int m_steps = max(0, m_end - m_begin);
  const int steps = m_steps * group;

  const Element* k_gmem = static_cast<const Element*>(p.k) + batch * p.k_batch_stride + head_kv * p.k_head_stride;
  const Element* v_gmem = static_cast<const Element*>(p.v) + batch * p.v_batch_stride + head_kv * p.v_head_stride;

  // Step t is query block m_begin + t % m_steps of query head head_kv * group + t / m_steps.
  auto load_step = [&](int t) {
    const int hq = head_kv * group + t / m_steps;
    const int m0 = (m_begin + t % m_steps) * kBlockM;
    const int stage = t % 2;
    // (pointers formed here, not kept across the loop: fewer live registers)
    const Element* q_batch = static_cast<const Element*>(p.q) + batch * p.q_batch_stride;
    const Element* do_batch = static_cast<const Element*>(p.dout) + batch * p.do_batch_stride;
    load_tile_sw128<kBlockM, kHeadDim, Traits::kThreads>(
        sQ + stage * Traits::kQBytes, q_batch + hq * p.q_head_stride + m0 * p.q_row_stride, p.q_row_stride,
        p.seqlen_q - m0, p.head_dim, tid);
    load_tile_sw128<kBlockM, kHeadDim, Traits::kThreads>(
        sDO + stage * Traits::kQBytes, do_batch + hq * p.do_head_stride + m0 * p.do_row_stride, p.do_row_stride,
        p.seqlen_q - m0, p.head_dim, tid);
    if (tid < 2 * kBlockM) {
      const int r = tid % kBlockM;
      const int64_t row = (static_cast<int64_t>(batch) * p.heads_q + hq) * p.seqlen_q + m0 + r;
      const bool ok = m0 + r < p.seqlen_q;
      const float* src = tid < kBlockM ? p.lse : p.dpsum;
      const uint32_t dst = (tid < kBlockM ? sLse : sDpsum) + (stage * kBlockM + r) * 4;
      cp_async_4_zfill(dst, ok ? src + row : src, ok);
    }
  };

  if (steps > 0) {
    load_tile_sw128<kBlockN, kHeadDim, Traits::kThreads>(sK, k_gmem + n0 * p.k_row_stride, p.k_row_stride,
                                                         p.seqlen_k - n0, p.head_dim, tid);
    load_tile_sw128<kBlockN, kHeadDim, Traits::kThreads>(sV, v_gmem + n0 * p.v_row_stride, p.v_row_stride,
                                                         p.seqlen_k - n0, p.head_dim, tid);
    load_step(0);
  }
  cp_async_commit();

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
  const uint32_t desc_k = desc_lo(Descs::score_a(sK, wg));
  const uint32_t desc_v = desc_lo(Descs::score_a(sV, wg));
  const uint32_t desc_q = desc_lo(Descs::score_b(sQ));
  const uint32_t desc_do = desc_lo(Descs::score_b(sDO));
  const uint32_t desc_q_mn = desc_lo(Descs::acc_b(sQ));
  const uint32_t desc_do_mn = desc_lo(Descs::acc_b(sDO));
  const uint32_t desc_ds = desc_lo(Descs::dq_a(sDS, wg));
  const uint32_t desc_k_mn = desc_lo(Descs::dq_b(sK, wg));

  // Where this thread writes its dS^T values: row (key) 64 wg + acc_row + 8 h, column (query)
  // 8 j + acc_col, pairs of columns as one 32-bit store (the swizzle keeps the 8 rows of a warp's
  // store on distinct banks).
  const int ds_row0 = wg * 64 + acc_row;

  const float scale_log2 = p.scale_log2;
  constexpr float kLog2e = 1.4426950408889634f;
  const bool keys_partial = n0 + kBlockN > p.seqlen_k;

  auto step = [&](const int t, auto masked) {
    constexpr bool kMasked = decltype(masked)::value;
    const int hq = head_kv * group + t / m_steps;
    const int m0 = (m_begin + t % m_steps) * kBlockM;
    const int stage = t % 2;
    const uint32_t q_off = stage * Traits::kQBytes;
    // The descriptors of this step, from copies the compiler cannot see as loop-invariant: else it
    // hoists every (operand, k-step) descriptor out of the loop and keeps them all in registers
    // (ptxas then spilled at D = 128). Recomputing them is one IADD each.
    const uint32_t dk_lo = opaque(desc_k), dv_lo = opaque(desc_v), dq_lo = opaque(desc_q), ddo_lo = opaque(desc_do);

    // This step's tiles have landed (each thread its own copies), are visible to the async proxy
    // (wgmma), and every thread has completed the previous step (barrier A).
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
    if (t + 1 < steps) load_step(t + 1);
    cp_async_commit();

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
    // get P = 0: its lse is taken as +inf (exp2(s - inf) = 0), not -inf (NaN).
    wgmma_wait<1>();
    reg_fence(s);
    // Key row 8 h of this thread is visible to queries [qmin[h], Sq) (none when past Sk).
    int qmin[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int key = n0 + wg * 64 + acc_row + 8 * h;
      qmin[h] = key >= p.seqlen_k ? INT_MAX : p.causal ? key - p.causal_offset : INT_MIN;
    }
    const int q_end = p.seqlen_q - m0;  // in-block query columns < q_end exist
    const uint32_t lse_s = sLse + (stage * kBlockM + acc_col) * 4;
    const uint32_t dpsum_s = sDpsum + (stage * kBlockM + acc_col) * 4;
#pragma unroll
    for (int j = 0; j < kSRegs / 4; ++j) {
      float lse2[2];
      asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(lse2[0]), "=f"(lse2[1]) : "r"(lse_s + j * 32));
#pragma unroll
      for (int e = 0; e < 2; ++e) lse2[e] = lse2[e] == -INFINITY ? INFINITY : lse2[e] * kLog2e;
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float pv = ex2(s[4 * j + 2 * h + e] * scale_log2 - lse2[e]);
          if constexpr (kMasked) {
            const int col = 8 * j + acc_col + e;
            if (col >= q_end || m0 + col < qmin[h]) pv = 0.f;
          }
          s[4 * j + 2 * h + e] = pv;
        }
    }
    // ---- dS^T = P^T (dP^T - dpsum).
    wgmma_wait<0>();
    reg_fence(dp);
#pragma unroll
    for (int j = 0; j < kSRegs / 4; ++j) {
      float dps[2];
      asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(dps[0]), "=f"(dps[1]) : "r"(dpsum_s + j * 32));
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int e = 0; e < 2; ++e) dp[4 * j + 2 * h + e] = s[4 * j + 2 * h + e] * (dp[4 * j + 2 * h + e] - dps[e]);
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
#pragma unroll
    for (int j = 0; j < kSRegs / 4; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        st_shared_b32(sDS + Descs::ds_offset(ds_row0 + 8 * h, 8 * j + acc_col), dsa[j / 2][2 * (j % 2) + h]);
      }
    fence_proxy_async();
    wgmma_wait<0>();
    reg_fence(dv);
    reg_fence(dk);
#pragma unroll
    for (int kk = 0; kk < kPVSteps; ++kk) {
      reg_fence(pa[kk]);
      reg_fence(dsa[kk]);
    }
    if constexpr (kSplitD)
      named_barrier_sync(kBwdDsBarrierBase, Traits::kThreads);
    else
      named_barrier_sync(kBwdDsBarrierBase + 1 + wg, kWarpgroupThreads);

    float dq[kDqRegs];
    const uint32_t dds_lo = opaque(desc_ds), dkmn_lo = opaque(desc_k_mn);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Traits::kDqKSteps; ++kk)
      MmaDq::mma(dq, desc_from_lo(dds_lo, Descs::dq_step(kk)), desc_from_lo(dkmn_lo, Descs::dq_step(kk)),
                 kk > 0 ? 1 : 0);
    wgmma_commit();
    wgmma_wait<0>();
    reg_fence(dq);

    // Deterministic mode: wait until key blocks 0..n_block-1 have added their share of this query
    // block (each of them sees it: m_begin grows with n_block), so the float sums happen in one
    // fixed order. Thread 0 watches the ticket; the barrier holds the others until it moved.
    int* ticket = nullptr;
    if (p.dq_semaphore != nullptr) {
      ticket = p.dq_semaphore + (static_cast<int64_t>(batch) * p.heads_q + hq) * ((p.seqlen_q + kBlockM - 1) / kBlockM) +
               m0 / kBlockM;
      if (tid == 0) {
        while (*reinterpret_cast<volatile int*>(ticket) != n_block) {
        }
        __threadfence();
      }
      __syncthreads();
    }

    // ---- dQ -> dq_accum [B, Hq, Sq, head_dim] (float4 reductions, rows past Sq dropped).
    float* dq_rows = p.dq_accum + (static_cast<int64_t>(batch) * p.heads_q + hq) * p.seqlen_q * p.head_dim;
    const int row = m0 + acc_row;
    const int col_base = kSplitD ? wg * (kHeadDim / 2) : 0;
#pragma unroll
    for (int j = 0; j < kDqRegs / 4; ++j) {
      const int col0 = col_base + 8 * j;
      if (col0 >= p.head_dim) continue;  // head_dim is a multiple of 8: an n8 slice is in or out
      float* dst0 = dq_rows + static_cast<int64_t>(row) * p.head_dim + col0 + acc_col;
      float* r0 = row < p.seqlen_q ? dst0 : nullptr;
      float* r8 = row + 8 < p.seqlen_q ? dst0 + 8 * p.head_dim : nullptr;
      const float v4[4] = {dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]};
      atomic_add_tile_rows(r0, r8, v4, lane);
    }
    if (ticket != nullptr) {
      // Every thread's reductions are visible before the next key block may start its own.
      __threadfence();
      __syncthreads();
      if (tid == 0) atomicAdd(ticket, 1);
    }
  };

  // Under causal masking the first query blocks straddle the diagonal; later ones see every key
  // of the block. The tail blocks of Sq and Sk are masked too.
  for (int t = 0; t < steps; ++t) {
    const int m0 = (m_begin + t % m_steps) * kBlockM;
    const bool masked =
        keys_partial || m0 + kBlockM > p.seqlen_q || (p.causal && n0 + kBlockN - 1 > m0 + p.causal_offset);
    if (masked)
      step(t, std::true_type{});
    else
      step(t, std::false_type{});
  }

  // ---- Epilogue: dK (times softmax_scale) and dV in the input dtype, rows past Sk dropped.
  // (A CTA with no step, e.g. keys no query sees under causal masking, writes zeros.)
  Element* dk_gmem = static_cast<Element*>(p.dk) + batch * p.dk_batch_stride + head_kv * p.dk_head_stride;
  Element* dv_gmem = static_cast<Element*>(p.dv) + batch * p.dv_batch_stride + head_kv * p.dv_head_stride;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = n0 + wg * 64 + acc_row + 8 * h;
    if (row < p.seqlen_k) {
#pragma unroll
      for (int j = 0; j < kAccRegs / 4; ++j) {
        const int col = 8 * j + acc_col;
        if (col < p.head_dim) {
          *reinterpret_cast<uint32_t*>(dk_gmem + row * p.dk_row_stride + col) =
              pack2<Element>(dk[4 * j + 2 * h] * p.softmax_scale, dk[4 * j + 2 * h + 1] * p.softmax_scale);
          *reinterpret_cast<uint32_t*>(dv_gmem + row * p.dv_row_stride + col) =
              pack2<Element>(dv[4 * j + 2 * h], dv[4 * j + 2 * h + 1]);
        }
      }
    }
  }
}

#endif  // FLASHATTN_SM90A_ENABLED

}  // namespace sm90
}  // namespace flashattn
