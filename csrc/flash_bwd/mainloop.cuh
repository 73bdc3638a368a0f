// Backward, step 2 of 3: the main kernel (sm80+, mma.sync), FlashAttention-2's structure.
//
// One thread block per (batch, K/V head, block of kBlockN keys). K and V stay in shared memory;
// the block walks every query head of its GQA group and, per head, the query blocks that can see
// its keys, so dK and dV are summed over the group in registers and K/V are never repeated.
// Per step (one query block of one head), with P = exp2(S * scale_log2 - lse_log2):
//   wait for Q, dO, lse, dpsum of this step -> barrier -> start loading the next step's
//   A: S^T = K Q^T, dP^T = V dO^T; P^T and dS^T = P^T * (dP^T - dpsum) to shared memory
//      (with a softcap, P from the capped scores and dS^T times tanh's derivative: see phase A)
//   barrier
//   B: dV += P^T dO, dK += dS^T Q
//   C: dQ_partial = dS K, added into the float32 dq_accum (atomics; in deterministic mode after
//      the key blocks before this one, see dq_semaphore in ../common/bwd_params.h; otherwise the
//      last Traits::kDqDefer of an unmasked step's additions wait for the next step's barrier)
// The first barrier publishes this step's Q/dO and proves every warp has left the previous step's
// phases B and C, whose P^T/dS^T buffers phase A overwrites and whose Q/dO stage the next load
// reuses. The second publishes P^T and dS^T.
//
// softmax_scale is applied once at the end: dK in the epilogue below, dQ in convert.cuh.
//
// Masking (causal, local window) is the forward's rule, csrc/common/mask.cuh: a key block walks
// only the query blocks that see one of its keys (query_blocks: bounded on both sides, so the cost
// follows the window), and applies the per-element mask only on the steps where the forward would
// (key_blocks(...).masked(): tiles straddling the diagonal, a window edge, Sk or Sq).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../common/bwd_params.h"
#include "../common/gmem_tile.cuh"
#include "../common/mask.cuh"
#include "../common/ptx.cuh"
#include "../common/softmax_math.cuh"
#include "../common/swizzle.h"
#include "varlen.cuh"

namespace flashattn {

// 4-byte global->shared copy, zero-filled when !pred (lse and dpsum of rows past Sq).
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, bool pred) {
  const int src_bytes = pred ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

// Adds a pair of neighbouring floats (8-byte aligned): one vector reduction on sm90, whose L2
// atomics unit takes float2; two scalar ones before it. On sm90 as `red` in inline PTX, not
// atomicAdd(float2*): that one compiles to an atom whose (unused) result registers the warp
// must wait on before it can reuse them, an L2 round trip per dQ tile (ncu: long-scoreboard
// stalls 2x FlashAttention-2's).
__device__ __forceinline__ void atomic_add_pair(float* dst, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(a), "f"(b));
#else
  atomicAdd(dst, a);
  atomicAdd(dst + 1, b);
#endif
}

// Adds one accumulator tile's two rows (r = 0: v[0], v[1]; r = 8: v[2], v[3], columns c, c+1 with
// c = (lane % 4) * 2) as float4 reductions on sm90: lanes 2j and 2j+1 swap halves so that the
// even lane holds row r = 0 and the odd lane row r = 8, each four consecutive columns starting at
// a multiple of 4 (16-byte aligned). Half the reduction instructions of atomic_add_pair, for two
// shuffles. row0/row8: the two rows' destinations at column c (nullptr: row out of range).
__device__ __forceinline__ void atomic_add_tile_rows(float* row0, float* row8, const float (&v)[4], int lane) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const bool odd = lane & 1;
  const float sx = odd ? v[0] : v[2], sy = odd ? v[1] : v[3];
  const float rx = __shfl_xor_sync(0xffffffffu, sx, 1), ry = __shfl_xor_sync(0xffffffffu, sy, 1);
  float* dst = odd ? (row8 == nullptr ? nullptr : row8 - 2) : row0;
  const float4 x = odd ? make_float4(rx, ry, v[2], v[3]) : make_float4(v[0], v[1], rx, ry);
  if (dst != nullptr)
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "f"(x.x), "f"(x.y), "f"(x.z), "f"(x.w));
#else
  if (row0 != nullptr) atomic_add_pair(row0, v[0], v[1]);
  if (row8 != nullptr) atomic_add_pair(row8, v[2], v[3]);
#endif
}

__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

__device__ __forceinline__ void st_shared_b32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v));
}

// A step's dQ ticket in deterministic mode (p.dq_semaphore). kIndex: held as a 32-bit index across
// phase C instead of a 64-bit pointer, a register fewer, which the swizzled tiles at the register
// limit need (a pointer spilled them); the padded tiles keep the pointer form they were measured
// with (the index form changed their schedules: the padded D=128 tile ran 1-4% slower). The index
// counts query blocks of 32+ rows times heads: 2^31 of them would take a dq_accum of over 2^45 bytes.
template <bool kIndex>
struct DqTicket {
  int* ptr = nullptr;
  __device__ void set(int* base, int64_t index) { ptr = base + index; }
  __device__ int* get(int*) const { return ptr; }
  __device__ bool held() const { return ptr != nullptr; }
};
template <>
struct DqTicket<true> {
  int index = -1;
  __device__ void set(int*, int64_t i) { index = static_cast<int>(i); }
  __device__ int* get(int* base) const { return base + index; }
  __device__ bool held() const { return index >= 0; }
};

// kWindow: the general mask of csrc/common/mask.cuh (local windows; causal masking too); without
// it, causal masking alone, as before windows existed. kSoftcap (implies kWindow at launch): the
// capped scores and tanh's derivative. Kernels of their own rather than runtime switches: the
// extra live values spilled the tiles at the register limit (the large D = 64 and 128 tiles), so
// the launcher runs window/softcap calls on the configs with headroom (dispatch.cu) and the
// kernels without them stay exactly as tight as before. kVarlen: packed variable-length batches
// (varlen.cuh), a flavour of its own for the same reason, on the same configs; the dense kernels
// compile as before. The packed flavour declares one block per SM enough (the dense kernels' count
// at their register use): left to itself, ptxas squeezed some packed kernels into 128 registers
// for a second block and spilled.
template <typename Traits, typename Element, bool kVarlen, bool kWindow, bool kSoftcap>
__global__ void __launch_bounds__(Traits::kNThreads, kVarlen ? 1 : 0)
    flash_bwd_kernel(const __grid_constant__ BwdParams p, const int num_n_blocks) {
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kStride = Traits::kSmemStride;  // K, V rows
  constexpr int kQStride = Traits::kQStride;     // Q, dO rows
  constexpr int kPStride = Traits::kPStride;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  Element* sK = reinterpret_cast<Element*>(smem_raw);
  Element* sV = sK + Traits::kSmemK;
  Element* sQ = sV + Traits::kSmemV;
  Element* sdO = sQ + Traits::kSmemQ;
  Element* sP = sdO + Traits::kSmemDO;
  Element* sdS = sP + Traits::kSmemP;
  float* sLse = reinterpret_cast<float*>(sdS + Traits::kSmemDS);
  float* sDpsum = sLse + Traits::kStages * kBlockM;

  // Key blocks vary fastest: the blocks of one (batch, head) run side by side and share their
  // Q/dO reads in L2, and in deterministic mode block n waits only on lower-numbered blocks, which
  // were scheduled before it.
  const int n_block = static_cast<int>(blockIdx.x % num_n_blocks);
  const int bh = static_cast<int>(blockIdx.x / num_n_blocks);
  const int head_kv = bh % p.heads_kv;
  const int batch = bh / p.heads_kv;
  const int group = p.heads_q / p.heads_kv;
  const int n0 = n_block * kBlockN;

  // The sequence's geometry: the parameters when dense; packed, its own lengths, causal offset and
  // first rows, read from cu_seqlens and kept in shared memory (varlen.cuh). Thread 0 writes it
  // and a barrier publishes it (every thread writing the same values and reading them back without
  // one is a data race under CUDA's memory model; racecheck reported it). A key block past its
  // sequence's keys has no dK/dV row to write and adds to no dQ: it stops here, on the published
  // copy, so the whole block leaves together (it also holds no deterministic ticket any other
  // block waits for: those wait only on key blocks with keys).
  if constexpr (kVarlen) {
    if (threadIdx.x == 0) bwd_seq_smem() = bwd_seq(p, batch);
    __syncthreads();
    if (n0 >= bwd_seq_smem().seqlen_k) return;
  }
  auto seqlen_q = [&]() -> int {
    if constexpr (kVarlen) return bwd_seq_smem().seqlen_q;
    else return p.seqlen_q;
  };
  auto seqlen_k = [&]() -> int {
    if constexpr (kVarlen) return bwd_seq_smem().seqlen_k;
    else return p.seqlen_k;
  };
  auto causal_offset = [&]() -> int {
    if constexpr (kVarlen) return bwd_seq_smem().causal_offset;
    else return p.causal_offset;
  };

  // Query blocks with a row that sees a key of this block (none for a block no row reaches):
  // under causal masking alone, rows i with i + causal_offset >= n0; with a window, bounded on
  // both sides.
  int m_begin, m_steps;
  if constexpr (kWindow) {
    const QueryBlocks qblocks =
        query_blocks(make_key_window(seqlen_k(), causal_offset(), p.window_left, p.window_right), n0,
                     min(n0 + kBlockN, seqlen_k()), seqlen_q(), kBlockM);
    m_begin = qblocks.m_begin;
    m_steps = qblocks.m_end - qblocks.m_begin;
  } else {
    m_begin = p.causal ? max(0, n0 - causal_offset()) / kBlockM : 0;
    m_steps = max(0, (seqlen_q() + kBlockM - 1) / kBlockM - m_begin);
  }
  const int steps = m_steps * group;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;

  // Packed: no batch stride, the sequence's first row instead.
  const Element* k_gmem;
  const Element* v_gmem;
  if constexpr (kVarlen) {
    const int64_t k_row0 = bwd_seq_smem().k_row0;
    k_gmem = static_cast<const Element*>(p.k) + k_row0 * p.k_row_stride + head_kv * p.k_head_stride;
    v_gmem = static_cast<const Element*>(p.v) + k_row0 * p.v_row_stride + head_kv * p.v_head_stride;
  } else {
    k_gmem = static_cast<const Element*>(p.k) + batch * p.k_batch_stride + head_kv * p.k_head_stride;
    v_gmem = static_cast<const Element*>(p.v) + batch * p.v_batch_stride + head_kv * p.v_head_stride;
  }

  // Step t is query block m_begin + t % m_steps of query head head_kv * group + t / m_steps.
  // Its Q/dO copy in two parts: where each thread reads (plan_q_do: a division, 64-bit offsets, the
  // loaders' lanes; a few registers) and the copies themselves (issue_q_do). Traits::kPlanQdoEarly
  // works out step t + 1's plan before phase B, where the tensor pipe is busy, rather than after
  // the barrier that ends phase B, where every warp does this integer work at once with no matrix
  // work beside it.
  using QLoader = GmemTileLoader<Traits, kBlockM, Element, Traits::kQStride, Traits::kSwizzleQdO>;
  struct QdoPlan {
    QLoader q, dout;     // their row 0 is the step's first query row
    const float* lse;    // this thread's row of lse and dpsum (threads < kBlockM; the tensors'
    const float* dpsum;  // first row where it lies past the sequence)
    int rows_valid;      // query rows of the step inside the sequence
  };
  auto plan_q_do = [&](int t) -> QdoPlan {
    const int hq = head_kv * group + t / m_steps;
    const int m0 = (m_begin + t % m_steps) * kBlockM;
    // Base pointers recomputed from the (constant-bank) params each step rather than kept live
    // across the loop: registers are the scarce resource of this kernel.
    const Element* q_head;
    const Element* do_head;
    int64_t lse_row;  // lse and dpsum: [B, Hq, Sq] dense, [Hq, total_q] packed
    if constexpr (kVarlen) {
      const int64_t q_row0 = bwd_seq_smem().q_row0;
      q_head = static_cast<const Element*>(p.q) + q_row0 * p.q_row_stride + hq * p.q_head_stride;
      do_head = static_cast<const Element*>(p.dout) + q_row0 * p.do_row_stride + hq * p.do_head_stride;
      lse_row = static_cast<int64_t>(hq) * p.total_q + q_row0 + m0;
    } else {
      q_head = static_cast<const Element*>(p.q) + batch * p.q_batch_stride + hq * p.q_head_stride;
      do_head = static_cast<const Element*>(p.dout) + batch * p.do_batch_stride + hq * p.do_head_stride;
      lse_row = (static_cast<int64_t>(batch) * p.heads_q + hq) * p.seqlen_q + m0;
    }
    const int rows_valid = seqlen_q() - m0;
    const int64_t row = static_cast<int64_t>(threadIdx.x) < rows_valid ? lse_row + threadIdx.x : 0;
    return QdoPlan{QLoader(q_head + m0 * p.q_row_stride, p.q_row_stride, sQ, p.head_dim),
                   QLoader(do_head + m0 * p.do_row_stride, p.do_row_stride, sdO, p.head_dim), p.lse + row,
                   p.dpsum + row, rows_valid};
  };
  auto issue_q_do = [&](const QdoPlan& plan, int stage) {
    const uint32_t stage_bytes = stage * Traits::kSmemQStage * 2;
    plan.q.load(0, plan.rows_valid, stage_bytes, p.q_row_stride);
    plan.dout.load(0, plan.rows_valid, stage_bytes, p.do_row_stride);
    if (threadIdx.x < kBlockM) {
      const bool ok = static_cast<int>(threadIdx.x) < plan.rows_valid;
      cp_async_4(smem_addr(sLse + stage * kBlockM + threadIdx.x), plan.lse, ok);
      cp_async_4(smem_addr(sDpsum + stage * kBlockM + threadIdx.x), plan.dpsum, ok);
    }
  };
  auto load_q_do = [&](int t) { issue_q_do(plan_q_do(t), Traits::kStages == 2 ? t % 2 : 0); };

  if (steps > 0) {
    const GmemTileLoader<Traits, kBlockN, Element> k_loader(k_gmem, p.k_row_stride, sK, p.head_dim);
    const GmemTileLoader<Traits, kBlockN, Element> v_loader(v_gmem, p.v_row_stride, sV, p.head_dim);
    k_loader.load(n0, seqlen_k() - n0, 0, p.k_row_stride);
    v_loader.load(n0, seqlen_k() - n0, 0, p.v_row_stride);
    load_q_do(0);
  }
  cp_async_commit();

  // dV and dK accumulators, phase B's layout: warp (wn, wd) owns keys wn * kBWarpRows.. and head
  // dims wd * kBWarpCols..; element (mt, nt, e) is key row mt*16 + lane/4 + (e/2)*8, column
  // nt*8 + (lane%4)*2 + e%2 of the warp tile.
  constexpr int kBMTiles = Traits::kBMTiles;
  constexpr int kBNTiles = Traits::kBNTiles;
  float dv[kBMTiles][kBNTiles][4];
  float dk[kBMTiles][kBNTiles][4];
#pragma unroll
  for (int mt = 0; mt < kBMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kBNTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) dv[mt][nt][e] = dk[mt][nt][e] = 0.f;

  // Phase A warp tile: keys a_row0.., queries a_col0.. of the step's block.
  const int a_row0 = (warp % Traits::kAWarpsN) * (kBlockN / Traits::kAWarpsN);
  const int a_col0 = (warp / Traits::kAWarpsN) * (kBlockM / Traits::kAWarpsM);
  const int b_row0 = (warp % Traits::kBWarpsN) * (kBlockN / Traits::kBWarpsN);
  const int b_col0 = (warp / Traits::kBWarpsN) * (Traits::kHeadDim / Traits::kBWarpsD);
  const int c_row0 = (warp % Traits::kCWarpsM) * (kBlockM / Traits::kCWarpsM);
  const int c_col0 = (warp / Traits::kCWarpsM) * (Traits::kHeadDim / Traits::kCChunks / Traits::kCWarpsD);

  // Per-lane ldmatrix addresses (fragment layouts: ../common/ptx.cuh and ../flash_fwd/kernel.cuh):
  //  A operand, row-major in smem (K, V in phase A; P^T, dS^T in phase B): row lane%16, k-half lane/16
  //  B operand stored [n][k] (Q, dO in phase A): row lane%8 + 8*(lane/16), k-half (lane/8)%2
  //  B operand stored [k][n], .trans (dO, Q in phase B; K in phase C): k-row lane%8 + 8*((lane/8)%2),
  //    n-half lane/16
  //  A operand stored [k][m], .trans (dS in phase C, from dS^T): k-row lane%8 + 8*(lane/16), m-half (lane/8)%2
  // All from one shared-window base, so that the distance between two buffers is an immediate
  // offset of the ldmatrix/st.shared that uses it rather than a register of its own.
  //  Q, dO swizzled (Traits::kSwizzleQdO): the lane's chunk placed by its row (every row a lane
  //  reads is that row plus a multiple of 8), each later column offset applied by q_off.
  const uint32_t smem0 = smem_addr(smem_raw);
  auto at = [&](const Element* buf, int elem) {
    return smem0 + static_cast<uint32_t>((buf - sK) + elem) * 2u;
  };
  auto q_at = [&](const Element* buf, int row, int col) {  // col: the lane's first column, a multiple of 8
    return at(buf, row * kQStride + (Traits::kSwizzleQdO ? swizzled_chunk_128b(col / 8, row) * 8 : col));
  };
  // A lane's Q/dO address `rows` elements (whole rows) and `cols` columns past `addr`; swizzled,
  // the columns' in-line bits are an XOR (swizzled_col_offset), not an immediate offset.
  auto q_off = [](uint32_t addr, int rows, int cols) -> uint32_t {
    if constexpr (Traits::kSwizzleQdO)
      return swizzled_col_offset(addr, cols) + static_cast<uint32_t>(rows) * 2u;
    else
      return addr + (rows + cols) * 2;
  };
  const uint32_t a_k = at(sK, (a_row0 + lane % 16) * kStride + (lane / 16) * 8);
  const uint32_t a_v = at(sV, (a_row0 + lane % 16) * kStride + (lane / 16) * 8);
  const uint32_t a_q = q_at(sQ, a_col0 + lane % 8 + (lane / 16) * 8, ((lane / 8) % 2) * 8);
  const uint32_t a_do = q_at(sdO, a_col0 + lane % 8 + (lane / 16) * 8, ((lane / 8) % 2) * 8);
  const uint32_t b_p = at(sP, (b_row0 + lane % 16) * kPStride + (lane / 16) * 8);
  const uint32_t b_ds = at(sdS, (b_row0 + lane % 16) * kPStride + (lane / 16) * 8);
  const uint32_t b_do = q_at(sdO, lane % 8 + ((lane / 8) % 2) * 8, b_col0 + (lane / 16) * 8);
  const uint32_t b_q = q_at(sQ, lane % 8 + ((lane / 8) % 2) * 8, b_col0 + (lane / 16) * 8);
  constexpr uint32_t kQFromDo = static_cast<uint32_t>(-Traits::kSmemQ * 2);  // sQ - sdO in bytes, mod 2^32
  static_assert(Traits::kSmemQ * 2 % 128 == 0, "Q and dO buffers whole 128-byte lines apart");
  const uint32_t c_ds = at(sdS, (lane % 8 + (lane / 16) * 8) * kPStride + c_row0 + ((lane / 8) % 2) * 8);
  const uint32_t c_k = at(sK, (lane % 8 + ((lane / 8) % 2) * 8) * kStride + c_col0 + (lane / 16) * 8);
  // Where this lane writes P^T / dS^T: row lane/4 (+8), column pair (lane%4)*2 of each accumulator tile.
  const uint32_t w_p = at(sP, (a_row0 + lane / 4) * kPStride + a_col0 + (lane % 4) * 2);
  const uint32_t w_ds = at(sdS, (a_row0 + lane / 4) * kPStride + a_col0 + (lane % 4) * 2);

  // Deferred dQ reductions (Traits::kDqDefer of a step's last reductions, unmasked steps outside
  // deterministic mode): carried past the next step's first barrier and issued there, so that one
  // step's reductions leave in two halves rather than one burst that fills the global-memory
  // instruction queue just before the barrier (ncu, docs/perf-notes.md). Live only from phase C to
  // the next step's start, where no phase holds its fragments.
  constexpr int kDqDefer = Traits::kDqDefer;
  constexpr int kDqPairs = Traits::kCMTiles * 2 * Traits::kCNTiles;  // reductions a step (one chunk)
  static_assert(kDqDefer == 0 || (Traits::kCChunks == 1 && kDqDefer <= kDqPairs), "deferred dQ reductions");
  [[maybe_unused]] float dq_defer[kDqDefer > 0 ? kDqDefer : 1][2];
  [[maybe_unused]] float* dq_defer_base = nullptr;
  // Where reduction (mt, r, nt) of phase C's unmasked path adds, from its base: accumulator tile
  // (mt, nt), row half r. Phase C issues them in the order i = (mt * 2 + r) * kCNTiles + nt.
  auto dq_pair_offset = [](int mt, int r, int nt) { return (mt * 16 + r * 8) * Traits::kHeadDim + nt * 8; };
  auto flush_dq_defer = [&]() {
    if constexpr (kDqDefer > 0) {
      if (dq_defer_base != nullptr) {
#pragma unroll
        for (int j = 0; j < kDqDefer; ++j) {
          const int i = kDqPairs - kDqDefer + j;
          const int nt = i % Traits::kCNTiles, r = (i / Traits::kCNTiles) % 2, mt = i / Traits::kCNTiles / 2;
          atomic_add_pair(dq_defer_base + dq_pair_offset(mt, r, nt), dq_defer[j][0], dq_defer[j][1]);
        }
        dq_defer_base = nullptr;
      }
    }
  };

  auto step = [&](const int t, auto masked) {
    constexpr bool kMasked = decltype(masked)::value;
    constexpr int kAMTiles = Traits::kAMTiles;
    constexpr int kANTiles = Traits::kANTiles;
    const int hq = head_kv * group + t / m_steps;
    const int m_block = m_begin + t % m_steps;
    const int m0 = m_block * kBlockM;
    const int stage = Traits::kStages == 2 ? t % 2 : 0;
    const uint32_t q_stage = stage * Traits::kSmemQStage * 2;

    cp_async_wait<0>();
    __syncthreads();
    flush_dq_defer();
    if (Traits::kStages == 2 && t + 1 < steps) load_q_do(t + 1);
    cp_async_commit();

    // ---- Phase A: S^T = K Q^T, dP^T = V dO^T.
    // acc = (the warp's key rows at a_base) x (the warp's query rows at b_base)^T over the head
    // dim. Query rows come as n8 pairs (ldmatrix.x4), or as a single n8 tile when a warp owns 8.
    auto score_gemm = [&](float (&acc)[kAMTiles][kANTiles][4], uint32_t a_base, uint32_t b_base) {
#pragma unroll
      for (int mt = 0; mt < kAMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < kANTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
#pragma unroll Traits::kAKUnroll
      for (int kk = 0; kk < Traits::kHeadDim / 16; ++kk) {
        uint32_t a[kAMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kAMTiles; ++mt) ldmatrix_x4(a[mt], a_base + (mt * 16 * kStride + kk * 16) * 2);
        const uint32_t b_addr = q_off(b_base, 0, kk * 16);
        if constexpr (kANTiles == 1) {
          uint32_t bf[2];
          ldmatrix_x2(bf, b_addr);
#pragma unroll
          for (int mt = 0; mt < kAMTiles; ++mt) mma_m16n8k16<Element>(acc[mt][0], a[mt], bf[0], bf[1]);
        } else {
#pragma unroll
          for (int np = 0; np < kANTiles / 2; ++np) {
            uint32_t bf[4];
            ldmatrix_x4(bf, b_addr + np * 16 * kQStride * 2);
#pragma unroll
            for (int mt = 0; mt < kAMTiles; ++mt) {
              mma_m16n8k16<Element>(acc[mt][2 * np], a[mt], bf[0], bf[1]);
              mma_m16n8k16<Element>(acc[mt][2 * np + 1], a[mt], bf[2], bf[3]);
            }
          }
        }
      }
    };
    float s[kAMTiles][kANTiles][4];
    float dp[kAMTiles][kANTiles][4];
    score_gemm(s, a_k, a_q + q_stage);
    score_gemm(dp, a_v, a_do + q_stage);

    // P^T = exp2(S^T * scale_log2 - lse * log2(e)); a row that sees no key has lse = -inf and
    // must get P = 0, so its lse is taken as +inf (exp2(s - inf) = 0) rather than -inf (NaN).
    //
    // Softcap c: the forward's score is y = c * tanh(x / c) with x = s * softmax_scale, in log2
    // units tanh(s * softcap_scale) * softcap_log2, with the same tanh_approx, so that P matches
    // the saved lse. With dS_y = P * (dP - dpsum) the softmax's gradient w.r.t. y (dpsum = rowsum
    // dO * O is unchanged: it is sum_j P_j dP_j either way), the chain rule through
    // dy/ds = softmax_scale * (1 - tanh^2(x / c)) gives dL/ds = dS_y * (1 - t^2) * softmax_scale;
    // dS^T holds dS_y * (1 - t^2) and softmax_scale is applied at the end as without a softcap.
    const float* lse_s = sLse + stage * kBlockM + a_col0 + (lane % 4) * 2;
    const float* dpsum_s = sDpsum + stage * kBlockM + a_col0 + (lane % 4) * 2;
#pragma unroll
    for (int nt = 0; nt < kANTiles; ++nt) {
      // The two columns of a lane are neighbours: one 8-byte load each (8-byte aligned: an even
      // column of a buffer that starts on 16 bytes).
      const float2 lse_pair = *reinterpret_cast<const float2*>(lse_s + nt * 8);
      const float2 dpsum_pair = *reinterpret_cast<const float2*>(dpsum_s + nt * 8);
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float lse_raw = c == 0 ? lse_pair.x : lse_pair.y;
        const float lse2 = lse_raw == -INFINITY ? INFINITY : lse_raw * 1.4426950408889634f;
        const float dpsum = c == 0 ? dpsum_pair.x : dpsum_pair.y;
#pragma unroll
        for (int mt = 0; mt < kAMTiles; ++mt)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int e = r * 2 + c;
            float pv;
            [[maybe_unused]] float dcap = 1.f;  // the softcap's 1 - t^2
            if constexpr (kSoftcap) {
              const float t = tanh_approx(s[mt][nt][e] * p.softcap_scale);
              pv = ex2(t * p.softcap_log2 - lse2);
              dcap = 1.f - t * t;
            } else {
              pv = ex2(s[mt][nt][e] * p.scale_log2 - lse2);
            }
            if constexpr (kMasked) {
              const int key = n0 + a_row0 + mt * 16 + lane / 4 + r * 8;
              const int query = m0 + a_col0 + nt * 8 + (lane % 4) * 2 + c;
              if constexpr (kWindow) {
                // The forward's rule per element (mask.cuh; visible() implies key < seqlen_k);
                // rows past Sq have lse and dpsum zero-filled, not -inf, so they are masked too.
                const KeyWindow window = make_key_window(seqlen_k(), causal_offset(), p.window_left, p.window_right);
                if (query >= seqlen_q() || !window.visible(query, key)) pv = 0.f;
              } else {
                if (key >= seqlen_k() || query >= seqlen_q() || (p.causal && key > query + causal_offset())) pv = 0.f;
              }
            }
            s[mt][nt][e] = pv;
            if constexpr (kSoftcap)
              dp[mt][nt][e] = pv * (dp[mt][nt][e] - dpsum) * dcap;
            else
              dp[mt][nt][e] = pv * (dp[mt][nt][e] - dpsum);
          }
      }
    }
#pragma unroll
    for (int mt = 0; mt < kAMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < kANTiles; ++nt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const uint32_t off = ((mt * 16 + r * 8) * kPStride + nt * 8) * 2;
          st_shared_b32(w_p + off, pack2<Element>(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
          st_shared_b32(w_ds + off, pack2<Element>(dp[mt][nt][2 * r], dp[mt][nt][2 * r + 1]));
        }
    __syncthreads();

    // The next step's copy planned here (see plan_q_do), issued after phase B.
    [[maybe_unused]] const auto next = [&] {
      if constexpr (Traits::kPlanQdoEarly)
        return plan_q_do(t + 1);
      else
        return 0;
    }();

    // ---- Phase B: dV += P^T dO, dK += dS^T Q (k = this step's queries).
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk) {
      uint32_t ap[kBMTiles][4], ads[kBMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kBMTiles; ++mt) {
        ldmatrix_x4(ap[mt], b_p + (mt * 16 * kPStride + kk * 16) * 2);
        ldmatrix_x4(ads[mt], b_ds + (mt * 16 * kPStride + kk * 16) * 2);
      }
#pragma unroll
      for (int np = 0; np < kBNTiles / 2; ++np) {
        uint32_t bd[4], bq[4];
        const uint32_t bd_addr = q_off(b_do + q_stage, kk * 16 * kQStride, np * 16);
        ldmatrix_x4_trans(bd, bd_addr);
        // Swizzled, Q's address is dO's plus an immediate (the buffers lie whole 128-byte lines
        // apart, so the XOR is the same): one address register fewer, which the swizzled tile at
        // the register limit needs. Padded tiles keep the form they were measured with.
        if constexpr (Traits::kSwizzleQdO)
          ldmatrix_x4_trans(bq, bd_addr + kQFromDo);
        else
          ldmatrix_x4_trans(bq, q_off(b_q + q_stage, kk * 16 * kQStride, np * 16));
#pragma unroll
        for (int mt = 0; mt < kBMTiles; ++mt) {
          mma_m16n8k16<Element>(dv[mt][2 * np], ap[mt], bd[0], bd[1]);
          mma_m16n8k16<Element>(dv[mt][2 * np + 1], ap[mt], bd[2], bd[3]);
          mma_m16n8k16<Element>(dk[mt][2 * np], ads[mt], bq[0], bq[1]);
          mma_m16n8k16<Element>(dk[mt][2 * np + 1], ads[mt], bq[2], bq[3]);
        }
      }
    }

    // One Q/dO stage: phase C reads neither, so once every warp is past phase B the next step's
    // load can start and land behind phase C, for the price of a third barrier.
    if constexpr (Traits::kStages == 1 && Traits::kLoadBeforeDq) {
      if (t + 1 < steps) {
        __syncthreads();
        if constexpr (Traits::kPlanQdoEarly)
          issue_q_do(next, 0);
        else
          load_q_do(t + 1);
        cp_async_commit();
      }
    }

    // ---- Phase C: dQ_partial = dS K (k = this block's keys), added to dq_accum, in kCChunks
    // column chunks of the head dim (two at D=256, where one would need a third 64-register
    // accumulator beside dK and dV).
    constexpr int kCMTiles = Traits::kCMTiles;
    constexpr int kCNTiles = Traits::kCNTiles;
    DqTicket<Traits::kSwizzleQdO> ticket;
    if (p.dq_semaphore != nullptr) {
      // Wait until the key blocks before this one that see this query block have added their
      // share. Those are exactly key_blocks(its rows).[n_begin, n_end), the forward's walk, a
      // contiguous range that starts at 0 only without a left window edge (mask.cuh: the same
      // relation as query_blocks), so the count reaches n_block - n_begin.
      ticket.set(p.dq_semaphore,
                 (static_cast<int64_t>(batch) * p.heads_q + hq) * ((p.seqlen_q + kBlockM - 1) / kBlockM) + m_block);
      if (threadIdx.x == 0) {
        int first = 0;  // causal masking alone: every key block from 0 on sees the query block
        if constexpr (kWindow)
          first = key_blocks(make_key_window(seqlen_k(), causal_offset(), p.window_left, p.window_right), m0,
                             min(m0 + kBlockM, seqlen_q()), kBlockN)
                      .n_begin;
        while (*reinterpret_cast<volatile int*>(ticket.get(p.dq_semaphore)) != n_block - first) {
        }
        __threadfence();
      }
      __syncthreads();
    }
    // dq_accum: [B, Hq, Sq, D] dense, [Hq, total_q, D] packed.
    float* dq_rows;
    if constexpr (kVarlen)
      dq_rows = p.dq_accum + (static_cast<int64_t>(hq) * p.total_q + bwd_seq_smem().q_row0) * p.head_dim;
    else
      dq_rows = p.dq_accum + (static_cast<int64_t>(batch) * p.heads_q + hq) * p.seqlen_q * p.head_dim;
#pragma unroll
    for (int chunk = 0; chunk < Traits::kCChunks; ++chunk) {
      constexpr int kChunkCols = Traits::kHeadDim / Traits::kCChunks;
      float dq[kCMTiles][kCNTiles][4];
#pragma unroll
      for (int mt = 0; mt < kCMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < kCNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) dq[mt][nt][e] = 0.f;
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        uint32_t a[kCMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kCMTiles; ++mt) ldmatrix_x4_trans(a[mt], c_ds + (kk * 16 * kPStride + mt * 16) * 2);
#pragma unroll
        for (int np = 0; np < kCNTiles / 2; ++np) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, c_k + (kk * 16 * kStride + chunk * kChunkCols + np * 16) * 2);
#pragma unroll
          for (int mt = 0; mt < kCMTiles; ++mt) {
            mma_m16n8k16<Element>(dq[mt][2 * np], a[mt], b[0], b[1]);
            mma_m16n8k16<Element>(dq[mt][2 * np + 1], a[mt], b[2], b[3]);
          }
        }
      }
      if constexpr (Traits::kDqVec4) {
#pragma unroll
        for (int mt = 0; mt < kCMTiles; ++mt) {
          const int row = m0 + c_row0 + mt * 16 + lane / 4;
#pragma unroll
          for (int nt = 0; nt < kCNTiles; ++nt) {
            // head_dim is a multiple of 8: an n8 tile is in range or out of it as a whole (and the
            // test is uniform across the warp, as the shuffles in atomic_add_tile_rows need).
            const int col0 = chunk * kChunkCols + c_col0 + nt * 8;
            if (col0 >= p.head_dim) continue;
            float* dst = dq_rows + static_cast<int64_t>(row) * p.head_dim + col0 + (lane % 4) * 2;
            atomic_add_tile_rows(row < seqlen_q() ? dst : nullptr, row + 8 < seqlen_q() ? dst + 8 * p.head_dim : nullptr,
                                 dq[mt][nt], lane);
          }
        }
      } else if (!kMasked && p.head_dim == Traits::kHeadDim) {
        // An unmasked step's rows are all below Sq (the loop below sends a tail block to the
        // masked step) and at the instantiated head dim every column exists: every reduction is
        // one base plus a compile-time offset, with no predicate or divergent branch (per
        // reduction a 64-bit address and a branch region cost ~9 instructions, ~150 a step).
        float* base = dq_rows + static_cast<int64_t>(m0 + c_row0 + lane / 4) * Traits::kHeadDim + chunk * kChunkCols +
                      c_col0 + (lane % 4) * 2;
        const bool defer = kDqDefer > 0 && !ticket.held();
#pragma unroll
        for (int mt = 0; mt < kCMTiles; ++mt)
#pragma unroll
          for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int nt = 0; nt < kCNTiles; ++nt) {
              const int i = (mt * 2 + r) * kCNTiles + nt;
              if (defer && i >= kDqPairs - kDqDefer) {
                dq_defer[i - (kDqPairs - kDqDefer)][0] = dq[mt][nt][2 * r];
                dq_defer[i - (kDqPairs - kDqDefer)][1] = dq[mt][nt][2 * r + 1];
              } else {
                atomic_add_pair(base + dq_pair_offset(mt, r, nt), dq[mt][nt][2 * r], dq[mt][nt][2 * r + 1]);
              }
            }
        if (defer) dq_defer_base = base;
      } else {
#pragma unroll
        for (int mt = 0; mt < kCMTiles; ++mt)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int row = m0 + c_row0 + mt * 16 + lane / 4 + r * 8;
            if (row < seqlen_q()) {
#pragma unroll
              for (int nt = 0; nt < kCNTiles; ++nt) {
                const int col = chunk * kChunkCols + c_col0 + nt * 8 + (lane % 4) * 2;
                if (col < p.head_dim) {
                  float* dst = dq_rows + static_cast<int64_t>(row) * p.head_dim + col;
                  atomic_add_pair(dst, dq[mt][nt][2 * r], dq[mt][nt][2 * r + 1]);
                }
              }
            }
          }
      }
    }
    if (ticket.held()) {
      __threadfence();
      __syncthreads();
      if (threadIdx.x == 0) atomicAdd(ticket.get(p.dq_semaphore), 1);
    }
    if constexpr (Traits::kStages == 1 && !Traits::kLoadBeforeDq) {
      if (t + 1 < steps) {
        __syncthreads();  // every warp is done with this step's Q/dO before the next overwrites them
        load_q_do(t + 1);
        cp_async_commit();
      }
    }
  };

  // Masked steps: the query blocks at the window's edges (the diagonal under causal masking),
  // the tail blocks of Sq and Sk; the forward's classification of the same (m, n) tile, so both
  // directions agree on which tiles need the per-element mask.
  const bool keys_partial = n0 + kBlockN > seqlen_k();
  for (int t = 0; t < steps; ++t) {
    const int m0 = (m_begin + t % m_steps) * kBlockM;
    bool masked = keys_partial || m0 + kBlockM > seqlen_q();
    if constexpr (kWindow)
      masked = masked || key_blocks(make_key_window(seqlen_k(), causal_offset(), p.window_left, p.window_right), m0,
                                    m0 + kBlockM, kBlockN)
                             .masked(n_block);
    else
      masked = masked || (p.causal && n0 + kBlockN - 1 > m0 + causal_offset());
    if (masked)
      step(t, std::true_type{});
    else
      step(t, std::false_type{});
  }

  flush_dq_defer();

  // ---- Epilogue: dK (times softmax_scale) and dV in the input dtype, rows past Sk dropped.
  // Traits::kEpilogueIndexAgain: the head and batch derived again from the block index rather than
  // kept across the loop (traits.h).
  int e_head_kv = head_kv, e_batch = batch;
  if constexpr (Traits::kEpilogueIndexAgain) {
    const int bh_again = static_cast<int>(opaque(blockIdx.x) / static_cast<uint32_t>(num_n_blocks));
    e_head_kv = bh_again % p.heads_kv;
    e_batch = bh_again / p.heads_kv;
  }
  Element* dk_gmem;
  Element* dv_gmem;
  if constexpr (kVarlen) {
    const int64_t k_row0 = bwd_seq_smem().k_row0;
    dk_gmem = static_cast<Element*>(p.dk) + k_row0 * p.dk_row_stride + e_head_kv * p.dk_head_stride;
    dv_gmem = static_cast<Element*>(p.dv) + k_row0 * p.dv_row_stride + e_head_kv * p.dv_head_stride;
  } else {
    dk_gmem = static_cast<Element*>(p.dk) + e_batch * p.dk_batch_stride + e_head_kv * p.dk_head_stride;
    dv_gmem = static_cast<Element*>(p.dv) + e_batch * p.dv_batch_stride + e_head_kv * p.dv_head_stride;
  }
#pragma unroll
  for (int mt = 0; mt < kBMTiles; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = n0 + b_row0 + mt * 16 + lane / 4 + r * 8;
      if (row < seqlen_k()) {
#pragma unroll
        for (int nt = 0; nt < kBNTiles; ++nt) {
          const int col = b_col0 + nt * 8 + (lane % 4) * 2;
          if (col < p.head_dim) {
            *reinterpret_cast<uint32_t*>(dk_gmem + row * p.dk_row_stride + col) =
                pack2<Element>(dk[mt][nt][2 * r] * p.softmax_scale, dk[mt][nt][2 * r + 1] * p.softmax_scale);
            *reinterpret_cast<uint32_t*>(dv_gmem + row * p.dv_row_stride + col) =
                pack2<Element>(dv[mt][nt][2 * r], dv[mt][nt][2 * r + 1]);
          }
        }
      }
    }
}

}  // namespace flashattn
