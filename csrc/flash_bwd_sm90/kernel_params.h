// What the Hopper backward kernel receives, by value, as a __grid_constant__ parameter.
#pragma once

#include <cuda.h>  // CUtensorMap (header only: the driver is reached through the runtime, see ../flash_fwd_sm90/tma_host.h)

#include "../common/bwd_params.h"

namespace flashattn {
namespace sm90 {

struct Sm90BwdParams {
  // TMA descriptors: q and dout [B, Sq, Hq, D], k and v [B, Sk, Hk, D], 4-D maps (D, S, H, B) over
  // the caller's strides with their true extents (rows past the sequence end and columns past
  // head_dim read as zeros), box = 64 columns x 64 rows, 128-byte swizzle. Packed batches: the
  // packed tensors [total, H, D] as B = 1, S = total (tma_tensors.h).
  CUtensorMap tma_q;
  CUtensorMap tma_do;
  CUtensorMap tma_k;
  CUtensorMap tma_v;
  // dk and dv [B, Sk, Hk, D]: the same form, written by TMA stores (rows past Sk and columns past
  // head_dim are not written).
  CUtensorMap tma_dk;
  CUtensorMap tma_dv;
  BwdParams p;
  int num_n_blocks;  // key blocks of kBlockN per (batch, K/V head)
  int num_m_blocks;  // query blocks of kBlockM per (batch, query head): dq_accum is
                     // [B, Hq, num_m_blocks, kBlockM * kHeadDim] in the tile order of traits.h
  int lpt_heads;     // the CTA order (block.h, bwd_block): 0 = a (batch, K/V head)'s key blocks
                     // one after another; n > 0 = groups of n of them, key block slowest in a group
  int reverse_m;     // 1: each CTA walks its query blocks from the last down (launch.cuh says when)
  int dq_blocks_per_head;  // packed batches: dq_accum is [Hq, dq_blocks_per_head, kBlockM * kHeadDim] (block.h)
  int rotate_m;  // 1: deterministic mode's rotated walks (block.h: BwdBlock::rotated; launch.cuh says when)
};

}  // namespace sm90
}  // namespace flashattn
