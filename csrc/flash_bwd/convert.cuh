// Backward, step 3 of 3: dQ = softmax_scale * dq_accum, from the float32 accumulator
// [B, Hq, Sq, head_dim] to the input dtype in dq's layout ([B, Sq, Hq, D], any strides).
// One thread per 8 consecutive elements of a row (one 16-byte store).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/bwd_params.h"
#include "../common/ptx.cuh"

namespace flashattn {

constexpr int kBwdConvertThreads = 256;

template <typename Element>
__global__ void __launch_bounds__(kBwdConvertThreads) flash_bwd_convert_dq_kernel(const __grid_constant__ BwdParams p) {
  const int chunks_per_row = p.head_dim / 8;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kBwdConvertThreads + threadIdx.x;
  const int64_t total = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q * chunks_per_row;
  if (idx >= total) return;
  const int c = static_cast<int>(idx % chunks_per_row);
  const int64_t row = idx / chunks_per_row;  // (b * Hq + h) * Sq + i: the accumulator's row
  const int i = static_cast<int>(row % p.seqlen_q);
  const int h = static_cast<int>((row / p.seqlen_q) % p.heads_q);
  const int b = static_cast<int>(row / (static_cast<int64_t>(p.seqlen_q) * p.heads_q));
  const float4* src = reinterpret_cast<const float4*>(p.dq_accum + row * p.head_dim + c * 8);
  const float4 lo = src[0], hi = src[1];
  const float s = p.softmax_scale;
  uint4 out;
  out.x = pack2<Element>(lo.x * s, lo.y * s);
  out.y = pack2<Element>(lo.z * s, lo.w * s);
  out.z = pack2<Element>(hi.x * s, hi.y * s);
  out.w = pack2<Element>(hi.z * s, hi.w * s);
  Element* dst = static_cast<Element*>(p.dq) + b * p.dq_batch_stride + i * p.dq_row_stride + h * p.dq_head_stride + c * 8;
  *reinterpret_cast<uint4*>(dst) = out;
}

// Launches the conversion of every dq_accum row of `p` (nothing when there is none). Shared by
// both backward paths.
template <typename Element>
cudaError_t launch_bwd_convert_dq(const BwdParams& p, cudaStream_t stream) {
  const long long chunks = static_cast<long long>(p.batch) * p.heads_q * p.seqlen_q * (p.head_dim / 8);
  if (chunks <= 0) return cudaSuccess;
  const long long grid = (chunks + kBwdConvertThreads - 1) / kBwdConvertThreads;
  if (grid > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  flash_bwd_convert_dq_kernel<Element><<<static_cast<unsigned>(grid), kBwdConvertThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashattn
