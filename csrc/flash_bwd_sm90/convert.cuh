// dQ = softmax_scale * dq_accum for the Hopper backward, whose dq_accum holds each query block as
// one contiguous tile in the consumers' accumulator order (traits.h: dq_tile_offset), so the
// kernel adds it with a single bulk reduce (or, at D = 256, with vector reductions). One CTA per
// (batch, query head, query block), two passes through shared memory:
//   1. the tile's float4s in order (coalesced), each scaled and packed to two 16-bit pairs, rows r
//      and r + 8 of one column pair, into a row-major [kBlockM][D + 8] tile (the 16-byte row
//      padding puts a warp's 8 rows x 4 column pairs on 32 distinct banks);
//   2. 16-byte pieces of its rows out to dq, a warp's stores contiguous along each row.
// (Reading the float tile through shared memory by rows instead hit 16-way bank conflicts, and
// storing the pairs straight from registers wrote 16 scattered bytes per row and instruction:
// both ran at half the memory bandwidth or less.) Packed batches (kPacked): one CTA per (sequence,
// query head, query block of the bound), reading the sequence's tile (block.h) and writing its
// rows; a block past the sequence's queries exits. The rows no sequence owns, before cu_seqlens_q[0]
// and from cu_seqlens_q[B] on, get 0 from flash_bwd_sm90_zero_unowned_kernel (below).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/bwd_packed.cuh"
#include "../common/bwd_params.h"
#include "../common/ptx.cuh"
#include "block.h"
#include "traits.h"

namespace flashattn {
namespace sm90 {

constexpr int kBwdSm90ConvertThreads = 256;

template <typename Traits, typename Element, bool kPacked>
__global__ void __launch_bounds__(kBwdSm90ConvertThreads)
    flash_bwd_sm90_convert_dq_kernel(const __grid_constant__ BwdParams p, const int num_m_blocks,
                                     const int dq_blocks_per_head) {
  static_assert(Traits::kDqSplit != Sm90BwdDqSplit::kSplitKeys, "the kernel's tile orders");
  constexpr int kBlockM = Traits::kBlockM;
  // Elements per shared row: the planes' columns (D = 96's dQ^T has 128 rows, the last 32 zeros)
  // and 8 more.
  constexpr int kPitch = Traits::kChunks * kChunkCols + 8;
  constexpr int kVecs = Traits::kDqTileFloats / 4;
  constexpr int kVecsPerPart = Traits::kDqRegs / 4 * kWarpgroupThreads;  // one warpgroup's part
  constexpr bool kSplitD = Traits::kDqSplit == Sm90BwdDqSplit::kSplitD;
  static_assert(kBlockM * kPitch * 2 <= 48 * 1024, "static shared memory");
  __shared__ __align__(16) uint32_t tile[kBlockM * kPitch / 2];
  const int m_block = static_cast<int>(blockIdx.x % num_m_blocks);
  const int bh = static_cast<int>(blockIdx.x / num_m_blocks);
  const int h = bh % p.heads_q;
  const int b = bh / p.heads_q;
  int64_t tile_index = blockIdx.x;
  int seqlen_q = p.seqlen_q, row0 = 0;
  if constexpr (kPacked) {
    const BwdSeq seq = bwd_seq(p, b);
    if (m_block * kBlockM >= seq.seqlen_q) return;
    seqlen_q = seq.seqlen_q;
    row0 = seq.q_row0;
    tile_index = static_cast<int64_t>(h) * dq_blocks_per_head + bwd_packed_dq_block0(row0, b, kBlockM) + m_block;
  }
  const float4* src = reinterpret_cast<const float4*>(p.dq_accum) + tile_index * kVecs;
  const float s = p.softmax_scale;
#pragma unroll 4
  for (int i = threadIdx.x; i < kVecs; i += kBwdSm90ConvertThreads) {
    const float4 v = src[i];
    // Float4 i = dq_tile_offset(wg, j, wtid, 0) / 4: values (row, col), (row, col + 1),
    // (row + 8, col), (row + 8, col + 1) of warpgroup wg's part.
    const int wg = i / kVecsPerPart;
    const int j = (i % kVecsPerPart) / kWarpgroupThreads;
    const int wtid = i % kWarpgroupThreads;
    if constexpr (Traits::kDqTransposed) {
      // The accumulator of dQ^T: its row is column d of dQ, its column the query row q; the four
      // values are (q, d), (q + 1, d), (q, d + 8), (q + 1, d + 8), stored as 16-bit halves.
      const int d = wg * kRowsPerConsumer + 16 * (wtid / 32) + (wtid % 32) / 4;
      const int q = 8 * j + 2 * (wtid % 4);
      const uint32_t lo = pack2<Element>(v.x * s, v.z * s), hi = pack2<Element>(v.y * s, v.w * s);
      uint16_t* t16 = reinterpret_cast<uint16_t*>(tile);
      t16[q * kPitch + d] = static_cast<uint16_t>(lo);
      t16[q * kPitch + d + 8] = static_cast<uint16_t>(lo >> 16);
      t16[(q + 1) * kPitch + d] = static_cast<uint16_t>(hi);
      t16[(q + 1) * kPitch + d + 8] = static_cast<uint16_t>(hi >> 16);
    } else {
      const int row = (kSplitD ? 0 : wg * kRowsPerConsumer) + 16 * (wtid / 32) + (wtid % 32) / 4;
      const int col = (kSplitD ? Traits::dq_split_col(wg, 8 * j) : 8 * j) + 2 * (wtid % 4);
      tile[(row * kPitch + col) / 2] = pack2<Element>(v.x * s, v.y * s);
      tile[((row + 8) * kPitch + col) / 2] = pack2<Element>(v.z * s, v.w * s);
    }
  }
  __syncthreads();
  const int m0 = m_block * kBlockM;
  const int rows = min(kBlockM, seqlen_q - m0);
  const int chunks = p.head_dim / 8;  // 16-byte pieces of a row that dq holds
  Element* dq = static_cast<Element*>(p.dq) + b * p.dq_batch_stride + static_cast<int64_t>(row0 + m0) * p.dq_row_stride +
                h * p.dq_head_stride;
  for (int c = threadIdx.x; c < rows * chunks; c += kBwdSm90ConvertThreads) {
    const int row = c / chunks;
    const int piece = c % chunks;
    *reinterpret_cast<uint4*>(dq + row * p.dq_row_stride + 8 * piece) =
        *reinterpret_cast<const uint4*>(&tile[(row * kPitch + 8 * piece) / 2]);
  }
}

// The float32 dK/dV sums' conversion (both kernels below): 8 columns from 8 * piece on of row r of
// dkv_accum ([2][rows][kHeadDim], dV's rows after dK's), dK's times softmax_scale, as one 16-byte
// store into row `row` of (batch b, K/V head h) of dv or dk.
template <typename Traits, typename Element>
__device__ __forceinline__ void convert_dkv_piece(const BwdParams& p, const int64_t r, const int piece, const bool is_v,
                                                  const int b, const int row, const int h) {
  const float4* src = reinterpret_cast<const float4*>(p.dkv_accum + r * Traits::kHeadDim + 8 * piece);
  const float s = is_v ? 1.f : p.softmax_scale;
  const float4 lo = src[0], hi = src[1];
  const uint4 packed = make_uint4(pack2<Element>(lo.x * s, lo.y * s), pack2<Element>(lo.z * s, lo.w * s),
                                  pack2<Element>(hi.x * s, hi.y * s), pack2<Element>(hi.z * s, hi.w * s));
  Element* dst = is_v ? static_cast<Element*>(p.dv) + b * p.dv_batch_stride + row * p.dv_row_stride + h * p.dv_head_stride
                      : static_cast<Element*>(p.dk) + b * p.dk_batch_stride + row * p.dk_row_stride + h * p.dk_head_stride;
  *reinterpret_cast<uint4*>(dst + 8 * piece) = packed;
}

// The grid of a grid-stride conversion over `total` 16-byte pieces (at most 65536 CTAs).
inline unsigned bwd_sm90_convert_grid(const long long total) {
  const long long blocks = (total + kBwdSm90ConvertThreads - 1) / kBwdSm90ConvertThreads;
  return static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
}

// A split GQA group (BwdParams::group_split > 1): dk (times softmax_scale) and dv from the float32
// sums in dkv_accum [2][B][Hk][Sk][kHeadDim], 16 bytes of output a thread a step:
// thread i takes 8 columns of one row of one of the two, the head_dim columns dk and dv hold.
template <typename Traits, typename Element>
__global__ void __launch_bounds__(kBwdSm90ConvertThreads)
    flash_bwd_sm90_convert_dkv_kernel(const __grid_constant__ BwdParams p) {
  const int pieces = p.head_dim / 8;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads_kv * p.seqlen_k;  // per tensor
  const int64_t total = 2 * rows * pieces;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kBwdSm90ConvertThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kBwdSm90ConvertThreads) {
    const int piece = static_cast<int>(i % pieces);
    const int64_t r = i / pieces;  // [2][B][Hk][Sk] row
    const bool is_v = r >= rows;
    const int64_t rr = is_v ? r - rows : r;
    const int row = static_cast<int>(rr % p.seqlen_k);
    const int64_t bh = rr / p.seqlen_k;
    const int h = static_cast<int>(bh % p.heads_kv);
    const int b = static_cast<int>(bh / p.heads_kv);
    convert_dkv_piece<Traits, Element>(p, r, piece, is_v, b, row, h);
  }
}

template <typename Traits, typename Element>
cudaError_t launch_bwd_sm90_convert_dkv(const BwdParams& p, cudaStream_t stream) {
  const long long total = 2ll * p.batch * p.heads_kv * p.seqlen_k * (p.head_dim / 8);
  if (total <= 0) return cudaSuccess;
  flash_bwd_sm90_convert_dkv_kernel<Traits, Element><<<bwd_sm90_convert_grid(total), kBwdSm90ConvertThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

// The split last wave (BwdParams::tail_split > 1, group_split 1): dk (times softmax_scale) and dv
// of the split units from their float32 sums in dkv_accum [2][tail_units][kBlockN][kHeadDim], as
// above; a unit's key block and (batch, K/V head) are its first piece's (block.h, in the main
// kernel's CTA order: lpt_heads), rows past Sk skipped.
template <typename Traits, typename Element>
__global__ void __launch_bounds__(kBwdSm90ConvertThreads)
    flash_bwd_sm90_convert_tail_kernel(const __grid_constant__ BwdParams p, const int num_n_blocks, const int lpt_heads) {
  const int pieces = p.head_dim / 8;
  const int64_t rows = static_cast<int64_t>(p.tail_units) * Traits::kBlockN;  // per tensor
  const int64_t total = 2 * rows * pieces;
  const int first_piece = p.batch * p.heads_kv * num_n_blocks - p.tail_units;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kBwdSm90ConvertThreads + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kBwdSm90ConvertThreads) {
    const int piece = static_cast<int>(i % pieces);
    const int64_t r = i / pieces;  // [2][tail_units][kBlockN] row
    const bool is_v = r >= rows;
    const int64_t rr = is_v ? r - rows : r;
    const int unit = static_cast<int>(rr / Traits::kBlockN);
    const BwdBlock blk = bwd_block<Traits>(p, num_n_blocks, lpt_heads, 0, first_piece + unit * p.tail_split);
    const int row = blk.n0 + static_cast<int>(rr % Traits::kBlockN);
    if (row >= p.seqlen_k) continue;
    convert_dkv_piece<Traits, Element>(p, r, piece, is_v, blk.batch, row, blk.head_kv);
  }
}

template <typename Traits, typename Element>
cudaError_t launch_bwd_sm90_convert_tail(const BwdParams& p, const int num_n_blocks, const int lpt_heads,
                                         cudaStream_t stream) {
  const long long total = 2ll * p.tail_units * Traits::kBlockN * (p.head_dim / 8);
  if (total <= 0) return cudaSuccess;
  flash_bwd_sm90_convert_tail_kernel<Traits, Element>
      <<<bwd_sm90_convert_grid(total), kBwdSm90ConvertThreads, 0, stream>>>(p, num_n_blocks, lpt_heads);
  return cudaGetLastError();
}

// Packed batches: the gradient rows no sequence owns set to 0: dq rows [0, cu_seqlens_q[0]) and
// [cu_seqlens_q[B], total_q), dk and dv rows likewise by cu_seqlens_k (every head, the head_dim
// columns), kBwdSm90ZeroRows rows a CTA; a CTA with no such row exits after four reads. The kernels
// write every row a sequence owns (a key block past a sequence's queries writes zeros), so this
// replaces zero-filling the three tensors (4-6% of a 16k-token backward at D=64). (Offsets that
// break the contract, decreasing ones, may leave rows inside those ranges that no sequence owns
// unwritten: their values are unspecified, as docs/varlen.md says of such calls.)
constexpr int kBwdSm90ZeroRows = 16;

template <typename Element>
__device__ __forceinline__ void zero_unowned_rows(void* base, const int64_t row_stride, const int64_t head_stride,
                                                  const int heads, const int head_dim, const int* cu, const int batch,
                                                  const int total) {
  const int first = min(max(__ldg(cu), 0), total);
  const int end = min(max(__ldg(cu + batch), first), total);
  const int r0 = static_cast<int>(blockIdx.x) * kBwdSm90ZeroRows;
  const int r1 = min(r0 + kBwdSm90ZeroRows, total);
  if (r0 >= r1 || (r0 >= first && r1 <= end)) return;
  const int pieces = head_dim / 8;  // 16-byte pieces of a row of one head
  const int per_row = heads * pieces;
  for (int i = threadIdx.x; i < (r1 - r0) * per_row; i += kBwdSm90ConvertThreads) {
    const int row = r0 + i / per_row;
    if (row >= first && row < end) continue;
    const int h = (i % per_row) / pieces;
    Element* dst = static_cast<Element*>(base) + row * row_stride + h * head_stride + 8 * (i % pieces);
    *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
  }
}

template <typename Element>
__global__ void __launch_bounds__(kBwdSm90ConvertThreads)
    flash_bwd_sm90_zero_unowned_kernel(const __grid_constant__ BwdParams p) {
  zero_unowned_rows<Element>(p.dq, p.dq_row_stride, p.dq_head_stride, p.heads_q, p.head_dim, p.cu_seqlens_q, p.batch,
                             p.total_q);
  zero_unowned_rows<Element>(p.dk, p.dk_row_stride, p.dk_head_stride, p.heads_kv, p.head_dim, p.cu_seqlens_k, p.batch,
                             p.total_k);
  zero_unowned_rows<Element>(p.dv, p.dv_row_stride, p.dv_head_stride, p.heads_kv, p.head_dim, p.cu_seqlens_k, p.batch,
                             p.total_k);
}

template <typename Traits, typename Element, bool kPacked>
cudaError_t launch_bwd_sm90_convert_dq(const BwdParams& p, int num_m_blocks, int dq_blocks_per_head,
                                       cudaStream_t stream) {
  const long long grid = static_cast<long long>(p.batch) * p.heads_q * num_m_blocks;
  if (grid <= 0) return cudaSuccess;
  if (grid > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  if constexpr (kPacked) {
    const int rows = p.total_q > p.total_k ? p.total_q : p.total_k;
    const int zero_grid = (rows + kBwdSm90ZeroRows - 1) / kBwdSm90ZeroRows;
    if (zero_grid > 0) flash_bwd_sm90_zero_unowned_kernel<Element><<<zero_grid, kBwdSm90ConvertThreads, 0, stream>>>(p);
  }
  flash_bwd_sm90_convert_dq_kernel<Traits, Element, kPacked>
      <<<static_cast<unsigned>(grid), kBwdSm90ConvertThreads, 0, stream>>>(p, num_m_blocks, dq_blocks_per_head);
  return cudaGetLastError();
}

}  // namespace sm90
}  // namespace flashattn
