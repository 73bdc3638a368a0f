// The split-KV decoding kernel (flash-decoding), sm80+ (mma.sync m16n8k16, ldmatrix, cp.async).
//
// Grid: one CTA per (query tile, split, kv head, batch), 1-D, query tiles fastest so the CTAs
// that stream the same K/V run side by side and share it in L2. A CTA owns
//   * 16 packed query rows: the Sq * group rows of one (batch, kv head), group = Hq/Hk, row R
//     being query i = R / group of head hk * group + R % group (decode_traits.h);
//   * the key blocks [nb_begin, nb_end) of its split: the n_blocks key blocks this tile needs
//     (all of seqlen_k(b), or under causal masking those up to its last row's diagonal) cut into
//     num_splits near-equal runs. Splits are computed per batch on the device from
//     cache_seqlens, so the host never reads sequence lengths (no sync, CUDA-graph safe).
// Each warp keeps its own online softmax over its 16-key slice of every step; at the end the
// warps' (max, sum, O) are merged through shared memory and the CTA writes either the final
// output (num_splits == 1) or an fp32 partial O normalized by its own sum plus its LSE, which
// decode_combine.cuh merges with LSE weights.
//
// Pipeline (kStages-deep ring, one barrier per step):
//   prologue: load blocks nb_begin .. nb_begin+kStages-2, one commit group each
//   step it:  wait until block it landed (<= kStages-2 groups pending) -> barrier
//             -> load block it+kStages-1 into the stage block it-1 used (the barrier proved every
//                warp is done with it) -> commit (possibly empty, keeps the group count uniform)
//             -> S = Q K^T, scale, mask, online softmax, O += P V on block it's stage.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../common/mask.cuh"
#include "../common/ptx.cuh"
#include "../common/softmax.cuh"
#include "decode_params.h"
#include "decode_traits.h"

namespace flashattn {

// Batch b's key count: the valid cache entries plus the appended ones, clamped to the cache.
__device__ __forceinline__ int decode_seqlen_k(const DecodeParams& p, int batch) {
  int len = p.cache_seqlens != nullptr ? p.cache_seqlens[batch] : p.cache_seqlen;
  len = min(max(len, 0), p.seqlen_k_max);
  return min(len + p.seqlen_new, p.seqlen_k_max);
}

// Minimum CTAs per SM in the split kernel's launch bounds: none asked for the contiguous cache
// (0 emits no directive), one for the paged cache. Without it, ptxas capped the paged 8-warp
// kHopper config at 128 registers and spilled the table reads' addresses; the configs' shared
// memory, not their registers, still sets how many CTAs share an SM.
template <bool kPaged>
constexpr int kDecodeSplitMinCtas = kPaged ? 1 : 0;

// kPaged: K/V rows are found through p.block_table. A template flag of the kernel itself rather
// than a runtime branch or a shared __device__ body, so that the contiguous cache's instance
// compiles to the PTX it had before paging existed (tools/kernel_identity.py; a body moved into a
// force-inlined function came out with a different block layout).
template <typename Traits, typename Element, bool kPaged>
__global__ void __launch_bounds__(Traits::kNThreads, kDecodeSplitMinCtas<kPaged>)
    flash_decode_split_kernel(const __grid_constant__ DecodeParams p) {
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kWarpN = Traits::kWarpN;
  constexpr int kStride = Traits::kSmemStride;  // Q rows
  constexpr int kKV = Traits::kKVStride;          // K/V rows (Traits::kSwizzle: dense, swizzled)
  constexpr int kStages = Traits::kStages;
  constexpr int kNWarps = Traits::kNWarps;
  constexpr int kNTilesS = Traits::kNTilesS;
  constexpr int kNTilesO = Traits::kNTilesO;
  constexpr int kChunksPerRow = Traits::kChunksPerRow;
  constexpr int kRowsPerPass = Traits::kRowsPerPass;
  using Softmax = OnlineSoftmax<1, kNTilesS, kNTilesO>;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  Element* sQ = reinterpret_cast<Element*>(smem_raw);
  unsigned char* ring = smem_raw + Traits::kSmemQBytes;
  Element* sK = reinterpret_cast<Element*>(ring);                 // [kStages][kBlockN][kKV]
  Element* sV = sK + kStages * kBlockN * kKV;                      // [kStages][kBlockN][kKV]
  float* sO = reinterpret_cast<float*>(ring);                      // after the loop: [kNWarps][kBlockM][kOStride]
  float* sMax = reinterpret_cast<float*>(ring + Traits::kSmemRingBytes);  // [kNWarps][kBlockM]
  float* sSum = sMax + kNWarps * kBlockM;                          // [kNWarps][kBlockM]
  float* sScale = sSum + kNWarps * kBlockM;                        // [kNWarps][kBlockM]
  float* sLse = sScale + kNWarps * kBlockM;                        // [kBlockM]

  // The combine kernel may be scheduled from here on (on sm90, where decode_dispatch.cu launches it
  // with programmatic stream serialization): its CTAs block in griddepcontrol.wait until this grid
  // has completed and its writes are visible, so its launch latency hides behind this kernel's
  // tail instead of following it. A no-op when nothing depends on this grid programmatically.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;

  // ---- which tile ----------------------------------------------------------------------------
  int linear = blockIdx.x;
  const int m_block = linear % p.num_m_blocks;
  linear /= p.num_m_blocks;
  const int split = linear % p.num_splits;
  linear /= p.num_splits;
  const int head_kv = linear % p.heads_kv;
  const int batch = linear / p.heads_kv;

  const int group = p.heads_q / p.heads_kv;
  const int rows_total = p.seqlen_q * group;
  const int m0 = m_block * kBlockM;
  const int rows_here = min(kBlockM, rows_total - m0);
  const int i_first = m0 / group;                  // smallest query index in the tile
  const int i_last = (m0 + rows_here - 1) / group;  // largest

  const int seqlen_k = decode_seqlen_k(p, batch);
  // The causal mask and the window, bottom-right aligned (csrc/common/mask.cuh).
  const KeyWindow window = make_key_window(seqlen_k, seqlen_k - p.seqlen_q, p.window_left, p.window_right);

  // Key blocks this tile needs (those inside the window of one of its rows: the cost follows the
  // window, not the cache length), and this split's share of them. Blocks the KeyBlocks call
  // unmasked are seen whole by every row of the tile; the others apply the mask.
  const KeyBlocks blocks = key_blocks(window, i_first, i_last + 1, kBlockN);
  const int n_blocks = max(0, blocks.count());
  const int blocks_per_split = (n_blocks + p.num_splits - 1) / p.num_splits;
  const int nb_begin = blocks.n_begin + min(n_blocks, split * blocks_per_split);
  const int nb_end = blocks.n_begin + min(n_blocks, split * blocks_per_split + blocks_per_split);
  const int key_end = min(window.hi(i_last), nb_end * kBlockN);  // keys [nb_begin * kBlockN, key_end)
  const bool softcap = p.softcap > 0.f;  // uniform
  // The score transform's factors (x * scale_log2, or tanh(x * softcap_scale) * softcap_log2) held
  // in registers across the key blocks: left to the compiler, the per-score choice reloaded them
  // from the parameter bank, 48 constant loads a block between the S MMAs and the softmax.
  const float score_mul = opaque(softcap ? p.softcap_scale : p.scale_log2);
  const float cap_mul = opaque(p.softcap_log2);

  // ---- Q tile: 16 packed rows, gathered row by row; rows past the tile and columns past the
  // runtime head dim are zero-filled ------------------------------------------------------------
  {
    const Element* q_base = static_cast<const Element*>(p.q) + batch * p.q_batch_stride +
                            static_cast<int64_t>(head_kv) * group * p.q_head_stride;
    for (int idx = tid; idx < kBlockM * kChunksPerRow; idx += Traits::kNThreads) {
      const int r = idx / kChunksPerRow;
      const int c = idx - r * kChunksPerRow;
      const int R = m0 + r;
      const bool pred = R < rows_total && c * 8 < p.head_dim;
      const int i = R / group;
      const int g = R - i * group;
      const Element* src = pred ? q_base + i * p.q_row_stride + g * p.q_head_stride + c * 8 : q_base;
      cp_async_16(smem_addr(sQ + r * kStride + c * 8), src, pred);
    }
  }

  // ---- K/V stream: every thread owns one 16-byte column chunk and every kRowsPerPass-th row ---
  const int chunk = tid % kChunksPerRow;
  const int row0 = tid / kChunksPerRow;
  const bool col_ok = chunk * 8 < p.head_dim;
  // Paged: the batch and row terms come from the table per row, so the base holds neither.
  const Element* k_src = static_cast<const Element*>(p.k_cache) + (kPaged ? 0 : batch * p.k_batch_stride) +
                         head_kv * p.k_head_stride + chunk * 8 + (kPaged ? 0 : row0 * p.k_row_stride);
  const Element* v_src = static_cast<const Element*>(p.v_cache) + (kPaged ? 0 : batch * p.v_batch_stride) +
                         head_kv * p.v_head_stride + chunk * 8 + (kPaged ? 0 : row0 * p.v_row_stride);
  // Every row this thread copies is row0 mod 8 (Traits::kSwizzle asserts kRowsPerPass % 8 == 0).
  const int chunk_at = Traits::kSwizzle ? swizzled_chunk_128b(chunk, row0) : chunk;
  const uint32_t k_dst = smem_addr(sK + row0 * kKV + chunk_at * 8);
  const uint32_t v_dst = smem_addr(sV + row0 * kKV + chunk_at * 8);
  // Rows at or past key_end read as zeros: they are masked, and V must be finite there (0 * NaN
  // would poison O; cache entries past seqlen_k may hold anything).
  auto load_block = [&](const int nb, const int stage) {
    const int key0 = nb * kBlockN;
    const uint32_t off = stage * Traits::kStageBytes;
    if constexpr (kPaged) {
      // Rows go in 16-row groups, each inside one page (key0 and page_size are multiples of 16),
      // and which group a pass falls in is known at compile time (kRowsPerPass divides 16): one
      // table read per group, not per row. The table is only read for groups that hold a loaded
      // row: entries past the sequence's last page may be anything, or past the table's row.
      constexpr int kPassesPerGroup = kDecodeMinPageSize / kRowsPerPass;
      const int* table = p.block_table + batch * p.block_table_batch_stride;
      DecodePageCursor cursor(key0, p.page_size);
#pragma unroll
      for (int g = 0; g < kBlockN / kDecodeMinPageSize; ++g) {
        const int gkey0 = key0 + g * kDecodeMinPageSize;
        const int page = col_ok && gkey0 < key_end ? min(max(__ldg(table + cursor.page_idx), 0), p.num_pages - 1) : 0;
        const int row_base = cursor.row_base() + row0;
        const Element* kg = k_src + static_cast<int64_t>(page) * p.k_batch_stride + static_cast<int64_t>(row_base) * p.k_row_stride;
        const Element* vg = v_src + static_cast<int64_t>(page) * p.v_batch_stride + static_cast<int64_t>(row_base) * p.v_row_stride;
#pragma unroll
        for (int j = 0; j < kPassesPerGroup; ++j) {
          const int i = g * kPassesPerGroup + j;  // the pass: rows row0 + i * kRowsPerPass of the tile
          const bool pred = col_ok && gkey0 + row0 + j * kRowsPerPass < key_end;
          const uint32_t dst_off = off + i * kRowsPerPass * kKV * 2;
          cp_async_16_l2<Traits::kL2Prefetch>(k_dst + dst_off, kg + j * kRowsPerPass * p.k_row_stride, pred);
          cp_async_16_l2<Traits::kL2Prefetch>(v_dst + dst_off, vg + j * kRowsPerPass * p.v_row_stride, pred);
        }
        cursor.next();
      }
    } else {
      const Element* kp = k_src + static_cast<int64_t>(key0) * p.k_row_stride;
      const Element* vp = v_src + static_cast<int64_t>(key0) * p.v_row_stride;
#pragma unroll
      for (int i = 0; i < Traits::kPasses; ++i) {
        const bool pred = col_ok && key0 + row0 + i * kRowsPerPass < key_end;
        const uint32_t dst_off = off + i * kRowsPerPass * kKV * 2;
        cp_async_16_l2<Traits::kL2Prefetch>(k_dst + dst_off, pred ? kp : k_src, pred);
        cp_async_16_l2<Traits::kL2Prefetch>(v_dst + dst_off, pred ? vp : v_src, pred);
        kp += kRowsPerPass * p.k_row_stride;
        vp += kRowsPerPass * p.v_row_stride;
      }
    }
  };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (nb_begin + s < nb_end) load_block(nb_begin + s, s);
    cp_async_commit();  // the first group also carries the Q tile
  }

  // ---- main loop -----------------------------------------------------------------------------
  float o[1][kNTilesO][4];
#pragma unroll
  for (int nt = 0; nt < kNTilesO; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[0][nt][e] = 0.f;
  Softmax softmax;
  softmax.init();

  // This thread's accumulator rows are lane/4 and lane/4 + 8 of the tile; the keys [col_lo,
  // col_hi) each may see in this split.
  int col_lo[2], col_hi[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = (m0 + lane / 4 + 8 * h) / group;
    col_lo[h] = window.lo(i);
    col_hi[h] = min(key_end, window.hi(i));
  }

  // ldmatrix bases (fragment layouts as in the forward kernel):
  //  Q (A operand):            row lane%16, k-half lane/16
  //  K (B operand, 2 n-tiles): key warp*kWarpN + lane%8 + 8*(lane/16), k-half (lane/8)%2
  //  V (B operand, .trans):    key warp*kWarpN + lane%8 + 8*((lane/8)%2), column half lane/16
  //  (plus 16 keys per further k16 slice)
  const uint32_t q_base = smem_addr(sQ + (lane % 16) * kStride + (lane / 16) * 8);
  //  K/V swizzled (Traits::kSwizzle): the bases hold the row only; the lane's 16-byte chunk of
  //  column group j (2 j plus its half) is placed by its row, whose mod 8 is lane % 8.
  const uint32_t k_base = smem_addr(sK + (warp * kWarpN + lane % 8 + (lane / 16) * 8) * kKV +
                                    (Traits::kSwizzle ? 0 : ((lane / 8) % 2) * 8));
  const uint32_t v_base = smem_addr(sV + (warp * kWarpN + lane % 8 + ((lane / 8) % 2) * 8) * kKV +
                                    (Traits::kSwizzle ? 0 : (lane / 16) * 8));
  // Byte offset of 16-column group j (0..kHeadDim/16-1) of a K row (is_v false) or V row from
  // k_base (v_base). Swizzled, the lane's chunk is 2 j + half = 2 j ^ half (its half of the group:
  // K (lane / 8) % 2, V lane / 16), placed as swizzled_chunk_128b(2 j ^ half, lane), the XORs
  // regrouped so that lane ^ half is one register and 2 j a constant.
  auto col = [&](const int j, auto is_v) -> uint32_t {
    if constexpr (Traits::kSwizzle) {
      const int half = decltype(is_v)::value ? lane / 16 : (lane / 8) % 2;
      return swizzled_chunk_128b(2 * j, lane ^ half) * 16;
    } else {
      return j * 32;
    }
  };

  int stage = 0;                // stage of the block being computed
  int load_stage = kStages - 1;  // stage the next prefetch fills

  auto step = [&](const int nb, auto masked) {
    constexpr bool kMasked = decltype(masked)::value;
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (nb + kStages - 1 < nb_end) load_block(nb + kStages - 1, load_stage);
    cp_async_commit();
    const uint32_t stage_off = stage * Traits::kStageBytes;

    // S = Q K^T over this warp's 16 keys
    float s[1][kNTilesS][4];
#pragma unroll
    for (int nt = 0; nt < kNTilesS; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[0][nt][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < Traits::kHeadDim / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, q_base + kk * 32);
#pragma unroll
      for (int ks = 0; ks < Traits::kKSlices; ++ks) {  // 16 keys each
        uint32_t b[4];
        ldmatrix_x4(b, k_base + stage_off + ks * 16 * kKV * 2 + col(kk, std::false_type{}));
        mma_m16n8k16<Element>(s[0][2 * ks], a, b[0], b[1]);
        mma_m16n8k16<Element>(s[0][2 * ks + 1], a, b[2], b[3]);
      }
    }

    // To log2 units before masking: any scale (0 and negative included) is exact, masked
    // entries stay -inf; with a softcap c, x = s * scale becomes c tanh(x / c) first.
#pragma unroll
    for (int nt = 0; nt < kNTilesS; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[0][nt][e] = softcap ? tanh_approx(s[0][nt][e] * score_mul) * cap_mul : s[0][nt][e] * score_mul;
        if constexpr (kMasked) {
          const int col = nb * kBlockN + warp * kWarpN + nt * 8 + (lane % 4) * 2 + (e % 2);
          if (col < col_lo[e / 2] || col >= col_hi[e / 2]) s[0][nt][e] = -INFINITY;
        }
      }
    softmax.update(s, o);

#pragma unroll
    for (int ks = 0; ks < Traits::kKSlices; ++ks) {
      // P as the A operand of k16 slice ks (accumulator layout of n-tiles 2 ks, 2 ks + 1 == A fragment).
      uint32_t pa[4];
      pa[0] = pack2<Element>(s[0][2 * ks][0], s[0][2 * ks][1]);
      pa[1] = pack2<Element>(s[0][2 * ks][2], s[0][2 * ks][3]);
      pa[2] = pack2<Element>(s[0][2 * ks + 1][0], s[0][2 * ks + 1][1]);
      pa[3] = pack2<Element>(s[0][2 * ks + 1][2], s[0][2 * ks + 1][3]);

      // O += P V over the slice's 16 keys
#pragma unroll
      for (int np = 0; np < kNTilesO / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_base + stage_off + ks * 16 * kKV * 2 + col(np, std::true_type{}));
        mma_m16n8k16<Element>(o[0][2 * np], pa, b[0], b[1]);
        mma_m16n8k16<Element>(o[0][2 * np + 1], pa, b[2], b[3]);
      }
    }

    stage = stage + 1 == kStages ? 0 : stage + 1;
    load_stage = load_stage + 1 == kStages ? 0 : load_stage + 1;
  };

  for (int nb = nb_begin; nb < nb_end; ++nb) {
    if (blocks.masked(nb))
      step(nb, std::true_type{});
    else
      step(nb, std::false_type{});
  }

  // ---- merge the warps ------------------------------------------------------------------------
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the K/V ring: sO may overwrite it
  {
    float* my_o = sO + warp * kBlockM * Traits::kOStride;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = lane / 4 + 8 * h;
      const float sum = quad_sum(softmax.row_sum[0][h]);
      if (lane % 4 == 0) {
        sMax[warp * kBlockM + r] = softmax.row_max[0][h];
        sSum[warp * kBlockM + r] = sum;
      }
#pragma unroll
      for (int nt = 0; nt < kNTilesO; ++nt)
        *reinterpret_cast<float2*>(my_o + r * Traits::kOStride + nt * 8 + (lane % 4) * 2) =
            make_float2(o[0][nt][2 * h], o[0][nt][2 * h + 1]);
    }
  }
  __syncthreads();
  if (tid < kBlockM) {
    // Row max in log2 units over the warps (-inf: the row saw no key in this split), the
    // merged sum, each warp's weight 2^(m_w - M) / L, and the natural-log LSE.
    const int r = tid;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < kNWarps; ++w) m = fmaxf(m, sMax[w * kBlockM + r]);
    const float m_used = m == -INFINITY ? 0.f : m;
    float l = 0.f;
#pragma unroll
    for (int w = 0; w < kNWarps; ++w) {
      const float f = ex2(sMax[w * kBlockM + r] - m_used);
      sScale[w * kBlockM + r] = f;
      l += sSum[w * kBlockM + r] * f;
    }
    const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
    for (int w = 0; w < kNWarps; ++w) sScale[w * kBlockM + r] *= inv;
    sLse[r] = l > 0.f ? (m + __log2f(l)) * 0.6931471805599453f : -INFINITY;
  }
  __syncthreads();

  // ---- write: 8 columns per thread per pass --------------------------------------------------
  const bool split_mode = p.num_splits > 1;
  for (int idx = tid; idx < kBlockM * kChunksPerRow; idx += Traits::kNThreads) {
    const int r = idx / kChunksPerRow;
    const int c = idx - r * kChunksPerRow;
    const int R = m0 + r;
    if (R >= rows_total || c * 8 >= p.head_dim) continue;
    float acc[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.f;
#pragma unroll
    for (int w = 0; w < kNWarps; ++w) {
      const float f = sScale[w * kBlockM + r];
      const float* src = sO + (w * kBlockM + r) * Traits::kOStride + c * 8;
      const float4 x0 = *reinterpret_cast<const float4*>(src);
      const float4 x1 = *reinterpret_cast<const float4*>(src + 4);
      acc[0] += f * x0.x, acc[1] += f * x0.y, acc[2] += f * x0.z, acc[3] += f * x0.w;
      acc[4] += f * x1.x, acc[5] += f * x1.y, acc[6] += f * x1.z, acc[7] += f * x1.w;
    }
    const int i = R / group;
    const int head_q = head_kv * group + (R - i * group);
    // Row index in [B, Hq, Sq] order (the LSE layout; the partials use it too).
    const int64_t row = (static_cast<int64_t>(batch) * p.heads_q + head_q) * p.seqlen_q + i;
    if (split_mode) {
      const int64_t rows_all = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
      const int64_t prow = split * rows_all + row;
      float* dst = p.o_accum + prow * p.head_dim + c * 8;
      *reinterpret_cast<float4*>(dst) = make_float4(acc[0], acc[1], acc[2], acc[3]);
      *reinterpret_cast<float4*>(dst + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
      if (c == 0) p.lse_accum[prow] = sLse[r];
    } else {
      Element* dst = static_cast<Element*>(p.o) + batch * p.o_batch_stride + i * p.o_row_stride +
                     head_q * p.o_head_stride + c * 8;
      uint4 packed;
      packed.x = pack2<Element>(acc[0], acc[1]);
      packed.y = pack2<Element>(acc[2], acc[3]);
      packed.z = pack2<Element>(acc[4], acc[5]);
      packed.w = pack2<Element>(acc[6], acc[7]);
      *reinterpret_cast<uint4*>(dst) = packed;
      if (c == 0) p.lse[row] = sLse[r];
    }
  }
}

}  // namespace flashattn
