// The Hopper (sm_90a) shared-memory layout and warpgroup shape every sm90 kernel is built on, forward
// (csrc/flash_fwd_sm90) and backward (csrc/flash_bwd_sm90). Plain C++ (no CUDA), so the paths' tile
// budgets can be checked on any machine.
//
// Shared memory holds every 16-bit tile as 64-column (128-byte) chunk planes, TMA-loaded with the
// 128-byte swizzle: a [rows, D] tile is D/64 planes of [rows][64] elements, plane c holding columns
// [64c, 64c + 64), each 128-byte row's 16-byte pieces XOR-permuted by (row % 8). That is exactly the
// canonical wgmma SWIZZLE_128B layout (ptx.cuh's descriptors, swizzled_offset; tma_host.cu's box).
#pragma once

namespace flashattn {
namespace sm90 {

constexpr int kWarpgroupThreads = 128;
constexpr int kRowsPerConsumer = 64;  // rows per consumer warpgroup (wgmma M): queries forward, keys backward

constexpr int kChunkCols = 64;         // columns per 128-byte swizzle chunk (16-bit elements)
constexpr int kChunkRowBytes = 128;    // one row of a chunk plane
constexpr int kSwizzleAtomBytes = 1024;  // 8 rows x 128 B: the swizzle repeats every 8 rows
constexpr int kMaxSmemSm90 = 232448;   // 227 KB opt-in per block on H100/H200

}  // namespace sm90
}  // namespace flashattn
