// wgmma shared-memory descriptors and the dS^T store offsets of the Hopper backward kernel, as
// plain host/device code so that lab/sm90_bwd_desc_check.cu can compare them with CuTe's
// make_gmma_desc on the CPU. Layout forms: ../common/sm90/ptx.cuh; tiles: traits.h.
//
// Each operand has a base descriptor (k-step 0, stage 0) and a byte offset per k-step; the
// kernel adds stage and k-step offsets with desc_advance.
#pragma once

#include <cstdint>

#include "../common/sm90/ptx.cuh"
#include "traits.h"

namespace flashattn {
namespace sm90 {

// Every descriptor here has SBO = 1024 and the 128-byte swizzle, so its upper 32 bits are this
// constant; the kernel keeps only the lower words (start address, LBO) in registers and adds its
// byte offsets there (the start-address field never carries: shared addresses stay under 2^18),
// which saves a register and a carry chain per descriptor.
constexpr uint32_t kBwdDescHi = static_cast<uint32_t>((static_cast<uint64_t>(1024u >> 4) << 32 | static_cast<uint64_t>(1) << 62) >> 32);
FLASHATTN_HD uint32_t desc_lo(uint64_t desc) { return static_cast<uint32_t>(desc); }
FLASHATTN_HD uint64_t desc_from_lo(uint32_t lo, uint32_t bytes) {
  return static_cast<uint64_t>(kBwdDescHi) << 32 | static_cast<uint64_t>(lo + (bytes >> 4));
}

template <typename Traits>
struct Sm90BwdDescs {
  static constexpr bool kSplitD = Traits::kDqSplit == Sm90BwdDqSplit::kSplitD;

  // S^T = K Q^T / dP^T = V dO^T, A = K_wg or V_wg ([128 keys][D], rows 64 wg ..), K-major:
  // k-step kk is plane kk / 4, 32 B per kk % 4 inside the 128-byte rows.
  static FLASHATTN_HD uint64_t score_a(uint32_t kv_tile, int wg) {
    return make_smem_desc_sw128(kv_tile + static_cast<uint32_t>(wg) * 64u * kChunkRowBytes, 16u, 1024u);
  }
  static FLASHATTN_HD uint32_t score_a_step(int kk) {
    return static_cast<uint32_t>(kk / 4) * Traits::kKVPlaneBytes + static_cast<uint32_t>(kk % 4) * 32u;
  }
  // B = Q or dO ([64 queries][D]), K-major.
  static FLASHATTN_HD uint64_t score_b(uint32_t q_tile) { return make_smem_desc_sw128(q_tile, 16u, 1024u); }
  static FLASHATTN_HD uint32_t score_b_step(int kk) {
    return static_cast<uint32_t>(kk / 4) * Traits::kQPlaneBytes + static_cast<uint32_t>(kk % 4) * 32u;
  }
  // dV += P^T dO / dK += dS^T Q: B = dO or Q, MN-major (N = D over the chunk planes: LBO = plane
  // stride, unused with one plane; K = queries: k-step kk is 16 rows).
  static FLASHATTN_HD uint64_t acc_b(uint32_t q_tile) {
    return make_smem_desc_sw128(q_tile, Traits::kChunks > 1 ? Traits::kQPlaneBytes : 0u, 1024u);
  }
  static FLASHATTN_HD uint32_t acc_b_step(int kk) { return static_cast<uint32_t>(kk) * 16u * kChunkRowBytes; }
  // The roles form: warpgroup wg's kAccN columns (traits.h roles_col) of a tile of `plane_bytes`
  // planes as one MN-major operand. D = 256: planes 2 wg and 2 wg + 1 (LBO = the plane stride).
  // D = 192: plane wg, then the 32 columns of half wg of plane 2 as a second, partial swizzle atom
  // (N = 96): LBO = from the start to that half, 64 bytes into plane 2's rows for warpgroup 1
  // (the swizzle applies to the address bits, so a start 64 bytes into a row reads on as the
  // D = 64 kSplitD dQ's B did).
  static FLASHATTN_HD uint64_t roles_b(uint32_t tile, int wg, uint32_t plane_bytes) {
    if (Traits::kSharedPlane)
      return make_smem_desc_sw128(tile + static_cast<uint32_t>(wg) * plane_bytes,
                                  static_cast<uint32_t>(2 - wg) * plane_bytes + static_cast<uint32_t>(wg) * 64u, 1024u);
    return make_smem_desc_sw128(tile + static_cast<uint32_t>(2 * wg) * plane_bytes, plane_bytes, 1024u);
  }
  // B = dO or Q of dV += P^T dO / dK += dS^T Q in the roles form; k-steps as acc_b_step.
  static FLASHATTN_HD uint64_t acc_b_half(uint32_t q_tile, int wg) { return roles_b(q_tile, wg, Traits::kQPlaneBytes); }
  // The D = 256 form's A of dV += P^T dO and dK += dS^T Q: P^T or dS^T [64 keys][64 queries]
  // (one plane) as K-major A (M = keys, K = queries): k-step kk is 32 bytes into the rows.
  static FLASHATTN_HD uint64_t pds_a(uint32_t tile) { return make_smem_desc_sw128(tile, 16u, 1024u); }
  static FLASHATTN_HD uint32_t pds_a_step(int kk) { return static_cast<uint32_t>(kk) * 32u; }

  // dQ = dS K. A = dS^T [128 keys][kBlockM queries] (planes of 64 queries) as MN-major A: M = 64
  // queries (plane wg with kSplitQueries), K = keys (all 128, or warpgroup wg's 64 with kSplitKeys).
  static FLASHATTN_HD uint64_t dq_a(uint32_t ds_tile, int wg) {
    if (Traits::kDqSplit == Sm90BwdDqSplit::kSplitQueries)
      return make_smem_desc_sw128(ds_tile + static_cast<uint32_t>(wg) * Traits::kDSPlaneBytes, 0u, 1024u);
    const uint32_t row0 = kSplitD ? 0u : static_cast<uint32_t>(wg) * 64u;
    return make_smem_desc_sw128(ds_tile + row0 * kChunkRowBytes, 0u, 1024u);
  }
  // B = K [128 keys][D] as MN-major B. kSplitD: warpgroup wg's N = D/2 columns start at plane wg
  // (D = 128) or 64 bytes into the 128-byte rows (D = 64). kSplitQueries: all D columns, all keys.
  // kSplitKeys: keys 64 wg .., N = D. (The D = 256 form is kSplitD with N = 128: planes 2 wg, 2 wg + 1.)
  static FLASHATTN_HD uint64_t dq_b(uint32_t k_tile, int wg) {
    if (Traits::kDqSplit == Sm90BwdDqSplit::kSplitQueries)
      return make_smem_desc_sw128(k_tile, Traits::kChunks > 1 ? Traits::kKVPlaneBytes : 0u, 1024u);
    if (Traits::kRoles) return roles_b(k_tile, wg, Traits::kKVPlaneBytes);
    if (kSplitD) {
      const int col0 = wg * (Traits::kHeadDim / 2);
      const uint32_t off = static_cast<uint32_t>(col0 / kChunkCols) * Traits::kKVPlaneBytes +
                           static_cast<uint32_t>(col0 % kChunkCols) * 2u;
      // N = D/2 spans two planes at D = 256 (LBO = the plane stride), part of one below.
      return make_smem_desc_sw128(k_tile + off, Traits::kDqN > kChunkCols ? Traits::kKVPlaneBytes : 0u, 1024u);
    }
    return make_smem_desc_sw128(k_tile + static_cast<uint32_t>(wg) * 64u * kChunkRowBytes,
                                Traits::kChunks > 1 ? Traits::kKVPlaneBytes : 0u, 1024u);
  }
  static FLASHATTN_HD uint32_t dq_step(int kk) { return static_cast<uint32_t>(kk) * 16u * kChunkRowBytes; }

  // ---- kTransposed (traits.h): dQ^T = K^T dS^T.
  // A = K [128 keys][D] viewed (D, keys), MN-major: warpgroup wg's M = 64 columns are plane wg
  // (one swizzle atom wide: LBO unused); k-step kk is 16 key rows.
  static FLASHATTN_HD uint64_t dqt_a(uint32_t k_tile, int wg) {
    return make_smem_desc_sw128(k_tile + static_cast<uint32_t>(wg) * Traits::kKVPlaneBytes, 0u, 1024u);
  }
  static FLASHATTN_HD uint32_t dqt_a_step(int kk) { return static_cast<uint32_t>(kk) * 16u * kChunkRowBytes; }
  // B = dS [kBlockM queries][128 keys] (a plane per 64 keys), K-major, N = kBlockM: k-step kk is
  // plane kk / 4, 32 B per kk % 4 inside the 128-byte rows (as score_b over Q's planes).
  static FLASHATTN_HD uint64_t dqt_b(uint32_t ds_tile) { return make_smem_desc_sw128(ds_tile, 16u, 1024u); }
  static FLASHATTN_HD uint32_t dqt_b_step(int kk) {
    return static_cast<uint32_t>(kk / 4) * Traits::kDSPlaneBytes + static_cast<uint32_t>(kk % 4) * 32u;
  }
  // Where lane `lane` of warp `warp` (of warpgroup wg) points its stmatrix .x4 .trans number g,
  // which stores the dS values of query slices j = 2 g, 2 g + 1 (the A fragment dsa[g] of the
  // dK GEMM: register i is slice j = 2 g + i / 2, key half h = i % 2). The lane gives row c = lane
  // % 8 of matrix i = lane / 8: query q = 8 j + c, keys 64 wg + 16 warp + 8 h .. + 8, the 16-byte
  // chunk 2 warp + h (swizzled by q % 8) of plane wg's row q.
  static FLASHATTN_HD uint32_t ds_t_addr(int wg, int warp, int g, int lane) {
    const int i = lane / 8, q = 8 * (2 * g + i / 2) + lane % 8, h = i % 2;
    return static_cast<uint32_t>(wg) * Traits::kDSPlaneBytes + static_cast<uint32_t>(q) * kChunkRowBytes +
           (static_cast<uint32_t>((2 * warp + h) ^ (q % 8)) * 16u);
  }

  // Byte offset in the dS^T tile of element (key row, query col), col even: the 128-byte swizzle
  // of the planes of 128 rows x 64 queries (swizzled_offset(kBlockN, row, col)); (col, col + 1)
  // are adjacent.
  static FLASHATTN_HD uint32_t ds_offset(int row, int col) {
    return static_cast<uint32_t>(col / kChunkCols) * Traits::kDSPlaneBytes + static_cast<uint32_t>(row) * kChunkRowBytes +
           ((static_cast<uint32_t>((col % kChunkCols) / 8) ^ static_cast<uint32_t>(row % 8)) * 16u) +
           static_cast<uint32_t>(col % 8) * 2u;
  }
};

}  // namespace sm90
}  // namespace flashattn
