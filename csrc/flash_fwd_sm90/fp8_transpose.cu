// The FP8 forward's V transpose (docs/hopper.md "FP8 forward"): 8-bit wgmma reads its B operand
// K-major only, so O += P V needs V^T [D, keys] in shared memory. This kernel writes V^T once per
// call into a scratch buffer the binding allocates, uint8 [B, Hk, D, vt_keys] contiguous, with the
// keys of every 32-key group in the order of P's register fragment (fp8_key_of_position, traits.h)
// and zeros for keys >= seqlen_k up to vt_keys (a multiple of 128), so the forward TMA-loads plain
// 128-key planes. Plain CUDA (any arch): its own launch before the forward, same stream.
//
// One CTA per (64 keys, 64 head-dim columns, batch x KV head): 256 threads stage the 64 x 64 bytes
// of V in shared memory (16-byte loads where the row allows it), then write them transposed, each
// thread 16 consecutive key positions of one V^T row.
#include <cuda_runtime.h>

#include <cstdint>

#include "api.h"
#include "traits.h"

namespace flashattn {

namespace {

constexpr int kTKeys = 64;  // keys per CTA (two 32-key permutation groups)
constexpr int kTCols = 64;  // head-dim columns per CTA
constexpr int kTThreads = 256;

__global__ void __launch_bounds__(kTThreads) fp8_transpose_v_kernel(const uint8_t* __restrict__ v,
                                                                     uint8_t* __restrict__ vt, int seqlen_k,
                                                                     int head_dim, int heads_kv, int64_t vt_keys,
                                                                     int64_t batch_stride, int64_t row_stride,
                                                                     int64_t head_stride) {
  __shared__ uint8_t tile[kTKeys][kTCols + 16];  // [key][column]; +16: fewer bank conflicts when read by column
  const int key0 = blockIdx.x * kTKeys;
  const int col0 = blockIdx.y * kTCols;
  const int bh = blockIdx.z;
  const int b = bh / heads_kv, h = bh % heads_kv;
  const uint8_t* src = v + b * batch_stride + h * head_stride;
  // Load: thread t reads 16 bytes (columns 16 (t % 4) .. +15) of key t / 4. The binding's V has
  // 16-byte aligned rows (strides multiples of 16, head dim a multiple of 16).
  {
    const int key = threadIdx.x / 4, c = 16 * (threadIdx.x % 4);
    uint4 val = make_uint4(0u, 0u, 0u, 0u);
    if (key0 + key < seqlen_k && col0 + c < head_dim)
      val = *reinterpret_cast<const uint4*>(src + static_cast<int64_t>(key0 + key) * row_stride + col0 + c);
    *reinterpret_cast<uint4*>(&tile[key][c]) = val;
  }
  __syncthreads();
  // Store: thread t writes V^T row col0 + t / 4, key positions 16 (t % 4) .. +15 of this CTA's 64.
  const int col = threadIdx.x / 4, pos0 = 16 * (threadIdx.x % 4);
  if (col0 + col >= head_dim) return;
  uint32_t words[4];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    uint32_t word = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int key = sm90::fp8_key_of_position(pos0 + 4 * w + i);  // within the CTA's 64 (two groups)
      word |= static_cast<uint32_t>(tile[key][col]) << (8 * i);
    }
    words[w] = word;
  }
  uint8_t* dst = vt + (static_cast<int64_t>(bh) * head_dim + col0 + col) * vt_keys + key0 + pos0;
  *reinterpret_cast<uint4*>(dst) = make_uint4(words[0], words[1], words[2], words[3]);
}

}  // namespace

int64_t flash_fwd_sm90_fp8_vt_keys(int64_t seqlen_k) { return (seqlen_k + 127) / 128 * 128; }

cudaError_t flash_fwd_sm90_fp8_transpose_v(const FwdParams& p, const Fp8FwdArgs& x, cudaStream_t stream) {
  if (p.dtype != DType::kFloat8E4M3 || x.vt == nullptr || p.v == nullptr) return cudaErrorInvalidValue;
  if (p.head_dim % 16 != 0 || x.vt_keys != flash_fwd_sm90_fp8_vt_keys(p.seqlen_k)) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(p.v) % 16 != 0 || reinterpret_cast<uintptr_t>(x.vt) % 16 != 0) return cudaErrorInvalidValue;
  if ((p.seqlen_k > 1 && p.v_row_stride % 16 != 0) || (p.heads_kv > 1 && p.v_head_stride % 16 != 0) ||
      (p.batch > 1 && p.v_batch_stride % 16 != 0))
    return cudaErrorInvalidValue;
  const int64_t bh = static_cast<int64_t>(p.batch) * p.heads_kv;
  if (bh == 0 || x.vt_keys == 0) return cudaSuccess;
  if (bh > 65535) return cudaErrorNotSupported;  // grid z
  const dim3 grid(static_cast<unsigned>(x.vt_keys / kTKeys), static_cast<unsigned>((p.head_dim + kTCols - 1) / kTCols),
                  static_cast<unsigned>(bh));
  fp8_transpose_v_kernel<<<grid, kTThreads, 0, stream>>>(static_cast<const uint8_t*>(p.v), static_cast<uint8_t*>(x.vt),
                                                         p.seqlen_k, p.head_dim, p.heads_kv, x.vt_keys, p.v_batch_stride,
                                                         p.v_row_stride, p.v_head_stride);
  return cudaGetLastError();
}

}  // namespace flashattn
