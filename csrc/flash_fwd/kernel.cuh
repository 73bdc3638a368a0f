// The portable forward kernel (sm80+, mma.sync): one thread block per (batch, head, query block),
// K/V streamed through shared memory in kBlockN-row steps, online softmax in registers.
//
// Two flavours, chosen at compile time by kVarlen: dense batches, and packed variable-length ones
// (FwdParams::cu_seqlens_q, tile_scheduler.cuh). A template parameter rather than a runtime
// switch, so that the dense kernels, measured and tested on GPUs, compile to the code they had
// before packed batches existed (tools/kernel_identity.py proves it from the PTX): a runtime
// switch cost them up to 26 registers per thread.
//
// K and V live in two shared-memory stages. Step n (key blocks walked from the last one the query
// block needs down to the first, csrc/common/mask.cuh; blocks that need no mask skip it):
//   wait for stage n%2 -> barrier -> S = Q K^T -> start loading K/V[n-1] into the other stage
//   -> scale, mask, online softmax -> O += P V
// The one barrier per step does two jobs: it publishes K/V[n] to every warp, and it proves every
// warp is done with step n+1, whose stage the K/V[n-1] load then overwrites. The load is issued
// after Q K^T rather than right after the barrier: its address arithmetic then does not compete
// with the S accumulators for registers (issued earlier, D=128 spilled on sm_90a), and it still
// has the softmax, P V and the next barrier wait to hide behind.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../common/gmem_tile.cuh"
#include "../common/mask.cuh"
#include "../common/params.h"
#include "../common/ptx.cuh"
#include "../common/softmax.cuh"
#include "epilogue.cuh"
#include "tile_scheduler.cuh"

namespace flashattn {

template <typename Traits, typename Element, bool kVarlen>
__global__ void __launch_bounds__(Traits::kNThreads) flash_fwd_kernel(const __grid_constant__ FwdParams p,
                                                                      const int num_m_blocks) {
  using Softmax = OnlineSoftmax<Traits::kMTiles, Traits::kNTilesS, Traits::kNTilesO>;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kStride = Traits::kSmemStride;
  constexpr int kMTiles = Traits::kMTiles;
  constexpr int kNTilesS = Traits::kNTilesS;
  constexpr int kNTilesO = Traits::kNTilesO;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  Element* sQ = reinterpret_cast<Element*>(smem_raw);
  Element* sK = sQ + Traits::kSmemQ;
  Element* sV = sK + Traits::kSmemK;

  const FwdTile tile = fwd_tile(p, num_m_blocks, blockIdx.x);
  const int m0 = tile.m_block * kBlockM;

  // Packed batches: the sequence's geometry (fwd_seq), kept in shared memory and read back there
  // by the loop and the epilogue; held in registers across the loop, the D=128 kernel spills. One
  // thread writes it and a barrier publishes it: every thread storing the same values and reading
  // them back unsynchronized is a data race under CUDA's memory model (compute-sanitizer's
  // racecheck reported it), whatever the values. The exit test reads the published copy, so the
  // whole block leaves together and no thread is left waiting at a later barrier. The dense
  // flavour never touches it, and it takes no shared memory there.
  __shared__ FwdSeq seq_smem;
  if constexpr (kVarlen) {
    if (threadIdx.x == 0) seq_smem = fwd_seq(p, tile.batch);
    __syncthreads();
    // The grid covers the longest sequence; shorter ones' surplus blocks stop here.
    if (m0 >= seq_smem.seqlen_q) return;
  }
  // The sequence's lengths and mask alignment, read where used: the parameters when dense.
  auto seqlen_q = [&] {
    if constexpr (kVarlen) return seq_smem.seqlen_q; else return p.seqlen_q;
  };
  auto seqlen_k = [&] {
    if constexpr (kVarlen) return seq_smem.seqlen_k; else return p.seqlen_k;
  };
  auto causal_offset = [&] {
    if constexpr (kVarlen) return seq_smem.causal_offset; else return p.causal_offset;
  };

  // The dense flavour's pointers and valid rows, computed once here as they always were (its code
  // is the one it had before packed batches). The packed flavour starts q/k/v/o at the sequence's
  // first packed row (its batch strides are zero, set_varlen) and forms the output pointers and
  // the valid rows where they are used, from shared memory; its lse is [Hq, total_q].
  const int rows_valid_dense = p.seqlen_q - m0;
  const Element* q_gmem = static_cast<const Element*>(p.q) + tile.batch * p.q_batch_stride +
                          tile.head_q * p.q_head_stride + m0 * p.q_row_stride;
  const Element* k_gmem = static_cast<const Element*>(p.k) + tile.batch * p.k_batch_stride + tile.head_kv * p.k_head_stride;
  const Element* v_gmem = static_cast<const Element*>(p.v) + tile.batch * p.v_batch_stride + tile.head_kv * p.v_head_stride;
  Element* const o_gmem_dense = static_cast<Element*>(p.o) + tile.batch * p.o_batch_stride +
                                tile.head_q * p.o_head_stride + m0 * p.o_row_stride;
  float* const lse_gmem_dense = p.lse + (static_cast<int64_t>(tile.batch) * p.heads_q + tile.head_q) * p.seqlen_q + m0;
  if constexpr (kVarlen) {
    q_gmem += static_cast<int64_t>(seq_smem.q_row0) * p.q_row_stride;
    k_gmem += static_cast<int64_t>(seq_smem.k_row0) * p.k_row_stride;
    v_gmem += static_cast<int64_t>(seq_smem.k_row0) * p.v_row_stride;
  }
  auto rows_valid = [&] {
    if constexpr (kVarlen) return seq_smem.seqlen_q - m0; else return rows_valid_dense;
  };
  auto o_gmem = [&] {
    if constexpr (kVarlen)
      return static_cast<Element*>(p.o) + tile.batch * p.o_batch_stride + tile.head_q * p.o_head_stride +
             (static_cast<int64_t>(seq_smem.q_row0) + m0) * p.o_row_stride;
    else
      return o_gmem_dense;
  };
  auto lse_gmem = [&] {
    if constexpr (kVarlen)
      return p.lse + static_cast<int64_t>(tile.head_q) * p.total_q + seq_smem.q_row0 + m0;
    else
      return lse_gmem_dense;
  };

  // Key blocks this query block needs (csrc/common/mask.cuh): those with a key visible to one of
  // its real rows under the causal mask / window, so the cost follows the window, not Sk. Blocks
  // [full_begin, full_end) are seen whole by every row and run without a mask.
  const KeyBlocks blocks = key_blocks(make_key_window(seqlen_k(), causal_offset(), p.window_left, p.window_right), m0,
                                      min(m0 + kBlockM, seqlen_q()), kBlockN);
  if (blocks.count() <= 0) {
    store_empty_rows<Traits>(o_gmem(), p.o_row_stride, lse_gmem(), rows_valid(), p.head_dim);
    return;
  }
  // Softcap: a uniform switch (off in every call that does not ask for it).
  const bool softcap = p.softcap > 0.f;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;

  // Per-lane ldmatrix base addresses (see ../common/ptx.cuh for the fragment layouts):
  //  Q (A operand):            row lane%16 of the m-tile, k-half lane/16
  //  K (B operand, 2 n-tiles): key row lane%8 + 8*(lane/16), k-half (lane/8)%2
  //  V (B operand, .trans):    key row lane%8 + 8*((lane/8)%2), column half lane/16
  const uint32_t q_base = smem_addr(sQ + (warp * Traits::kWarpM + lane % 16) * kStride + (lane / 16) * 8);
  const uint32_t k_base = smem_addr(sK + (lane % 8 + (lane / 16) * 8) * kStride + ((lane / 8) % 2) * 8);
  const uint32_t v_base = smem_addr(sV + (lane % 8 + ((lane / 8) % 2) * 8) * kStride + (lane / 16) * 8);

  const GmemTileLoader<Traits, kBlockN, Element> k_loader(k_gmem, p.k_row_stride, sK, p.head_dim);
  const GmemTileLoader<Traits, kBlockN, Element> v_loader(v_gmem, p.v_row_stride, sV, p.head_dim);
  auto load_kv = [&](int n) {
    const uint32_t stage_bytes = (n % 2) * Traits::kStageBytes;
    k_loader.load(n * kBlockN, seqlen_k() - n * kBlockN, stage_bytes, p.k_row_stride);
    v_loader.load(n * kBlockN, seqlen_k() - n * kBlockN, stage_bytes, p.v_row_stride);
  };
  {
    const GmemTileLoader<Traits, kBlockM, Element> q_loader(q_gmem, p.q_row_stride, sQ, p.head_dim);
    q_loader.load(0, rows_valid(), 0, p.q_row_stride);
    load_kv(blocks.n_end - 1);
  }
  cp_async_commit();

  float o[kMTiles][kNTilesO][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNTilesO; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][nt][e] = 0.f;
  Softmax softmax;
  softmax.init();

  // Query row of accumulator element (mt, e) relative to m0 is warp_row0 + mt*16 + lane/4 + (e/2)*8.
  const int warp_row0 = warp * Traits::kWarpM;

  auto step = [&](const int n, auto masked) {
    constexpr bool kMasked = decltype(masked)::value;
    cp_async_wait<0>();
    __syncthreads();
    const uint32_t stage_bytes = (n % 2) * Traits::kStageBytes;

    // S = Q K^T
    float s[kMTiles][kNTilesS][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNTilesS; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < Traits::kHeadDim / 16; ++kk) {
      uint32_t a[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) ldmatrix_x4(a[mt], q_base + (mt * 16 * kStride + kk * 16) * 2);
#pragma unroll
      for (int np = 0; np < kNTilesS / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, k_base + stage_bytes + (np * 16 * kStride + kk * 16) * 2);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_m16n8k16<Element>(s[mt][2 * np], a[mt], b[0], b[1]);
          mma_m16n8k16<Element>(s[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }

    if (n > blocks.n_begin) {
      load_kv(n - 1);
      cp_async_commit();
    }

    // Scores to log2 units before masking, so that any scale (0 and negative included) is exact
    // and masked entries stay -inf; with a softcap c, x = s * scale becomes c tanh(x / c) first.
    if (softcap) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNTilesS; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] = tanh_approx(s[mt][nt][e] * p.softcap_scale) * p.softcap_log2;
    } else {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNTilesS; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] *= p.scale_log2;
    }
    if constexpr (kMasked) {
      // Built here from the parameters (and the sequence's lengths) rather than kept live across the loop.
      const KeyWindow window = make_key_window(seqlen_k(), causal_offset(), p.window_left, p.window_right);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = m0 + warp_row0 + mt * 16 + lane / 4 + h * 8;
          const int lo = window.lo(row), hi = window.hi(row);
#pragma unroll
          for (int nt = 0; nt < kNTilesS; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int col = n * kBlockN + nt * 8 + (lane % 4) * 2 + e;
              if (col < lo || col >= hi) s[mt][nt][2 * h + e] = -INFINITY;
            }
        }
    }
    softmax.update(s, o);

    // P in the A-operand layout: the m16n8 accumulators of n-tiles 2kk and 2kk+1 are exactly
    // the m16k16 A fragment of key slice kk, so P never touches shared memory.
    uint32_t pa[kMTiles][kNTilesS / 2][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int kk = 0; kk < kNTilesS / 2; ++kk) {
        pa[mt][kk][0] = pack2<Element>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][kk][1] = pack2<Element>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][kk][2] = pack2<Element>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][kk][3] = pack2<Element>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }

    // O += P V
#pragma unroll
    for (int kk = 0; kk < kNTilesS / 2; ++kk)
#pragma unroll
      for (int np = 0; np < kNTilesO / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_base + stage_bytes + (kk * 16 * kStride + np * 16) * 2);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_m16n8k16<Element>(o[mt][2 * np], pa[mt][kk], b[0], b[1]);
          mma_m16n8k16<Element>(o[mt][2 * np + 1], pa[mt][kk], b[2], b[3]);
        }
      }
  };

  // Masked blocks at the right edge (Sk, the diagonal or the window's right edge) come first, then
  // the unmasked ones, then the masked ones at the window's left edge (none without one). One loop
  // with a uniform branch per block: three loops (two masked call sites) spilled at D=128 on sm_80.
  for (int n = blocks.n_end - 1; n >= blocks.n_begin; --n) {
    if (blocks.masked(n))
      step(n, std::true_type{});
    else
      step(n, std::false_type{});
  }

  float lse[kMTiles][2];
  softmax.finalize(o, lse);
  store_output<Traits, Element>(o, lse, sQ + warp_row0 * kStride, o_gmem() + warp_row0 * p.o_row_stride,
                                p.o_row_stride, lse_gmem() + warp_row0, rows_valid() - warp_row0, p.head_dim);
}

}  // namespace flashattn
