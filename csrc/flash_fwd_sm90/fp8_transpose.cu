// The FP8 forward's V transpose (docs/hopper.md "FP8 forward"): 8-bit wgmma reads its B operand
// K-major only, so O += P V needs V^T [D, keys] in shared memory. This kernel writes V^T once per
// call into a scratch buffer the binding allocates, uint8 [B, Hk, D, vt_keys] contiguous, with the
// keys of every 32-key group in the order of P's register fragment (fp8_key_of_position, traits.h)
// and zeros for keys >= seqlen_k up to vt_keys (a multiple of 128), so the forward TMA-loads plain
// planes of 128 or 64 keys (traits.h kVtPlaneKeys; TMA fills a plane past vt_keys with zeros).
// Plain CUDA (any arch): its own launch before the forward, same stream.
//
// One CTA per (128 keys, 128 head-dim columns, batch x KV head), 256 threads: each thread loads four
// 16-byte pieces of V rows into shared memory (16 KB, in flight together), then reads 16 keys x 4
// columns back as 32-bit words and transposes them with byte permutes into four 16-byte pieces of
// V^T rows: 2.8 TB/s of V read plus V^T written on the H100, its memory's rate (45 us for a 64 MB V;
// 64 x 64 per CTA with 16 bytes a thread each way ran at 1.5-1.9 TB/s: lab/fp8_time.py --breakdown,
// docs/perf-notes.md 2026-11-28).
//
// Shared memory holds the tile as [key][128 bytes] with each row's 16-byte pieces XOR-swizzled by
// (key / 16) % 8: the transpose's 32-bit reads (a warp: 8 key chunks x 4 column words at one key
// offset) then fall on 32 different banks.
#include <cuda_runtime.h>

#include <cstdint>

#include "api.h"
#include "traits.h"

namespace flashattn {

namespace {

constexpr int kTKeys = 128;  // keys per CTA (four 32-key permutation groups)
constexpr int kTCols = 128;  // head-dim columns per CTA
constexpr int kTThreads = 256;

__device__ __forceinline__ int swizzled_word(int key, int word) { return word ^ (4 * ((key / 16) % 8)); }

__global__ void __launch_bounds__(kTThreads) fp8_transpose_v_kernel(const uint8_t* __restrict__ v,
                                                                     uint8_t* __restrict__ vt, int seqlen_k,
                                                                     int head_dim, int heads_kv, int64_t vt_keys,
                                                                     int64_t batch_stride, int64_t row_stride,
                                                                     int64_t head_stride) {
  __shared__ uint32_t tile[kTKeys][kTCols / 4];  // [key][column word], swizzled (swizzled_word)
  const int key0 = blockIdx.x * kTKeys;
  const int col0 = blockIdx.y * kTCols;
  const int bh = blockIdx.z;
  const int b = bh / heads_kv, h = bh % heads_kv;
  const uint8_t* src = v + b * batch_stride + h * head_stride;
  // Load: piece i = it * 256 + t is key i / 8, columns 16 (i % 8) .. +15 (eight threads a 128-byte
  // row segment). The binding's V has 16-byte aligned rows (strides multiples of 16, head dim a
  // multiple of 16); keys past seqlen_k and columns past head_dim read as zeros.
  uint4 piece[4];
#pragma unroll
  for (int it = 0; it < 4; ++it) {
    const int i = it * kTThreads + threadIdx.x, key = i / 8, c = 16 * (i % 8);
    piece[it] = make_uint4(0u, 0u, 0u, 0u);
    if (key0 + key < seqlen_k && col0 + c < head_dim)
      piece[it] = *reinterpret_cast<const uint4*>(src + static_cast<int64_t>(key0 + key) * row_stride + col0 + c);
  }
#pragma unroll
  for (int it = 0; it < 4; ++it) {
    const int i = it * kTThreads + threadIdx.x, key = i / 8;
    *reinterpret_cast<uint4*>(&tile[key][swizzled_word(key, 4 * (i % 8))]) = piece[it];
  }
  __syncthreads();
  // Transpose: thread t takes key chunk kc = t % 8 (keys 16 kc .. +15, the 16 V^T positions of one
  // half of a 32-key group) and column word cw = t / 8 (columns 4 cw .. +3). Position 4q + i of the
  // chunk holds key 8 (i / 2) + 2q + (i % 2) (fp8_key_of_position), so output word q of column
  // 4 cw + r gathers byte r of keys 2q, 2q + 1, 2q + 8, 2q + 9.
  const int kc = threadIdx.x % 8, cw = threadIdx.x / 8;
  if (col0 + 4 * cw >= head_dim) return;
  uint32_t w[16];
#pragma unroll
  for (int j = 0; j < 16; ++j) w[j] = tile[16 * kc + j][swizzled_word(16 * kc + j, cw)];
  uint32_t out[4][4];  // [column r][word q]
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint32_t lo = __byte_perm(w[2 * q], w[2 * q + 1], 0x5140);       // a0 b0 a1 b1
    const uint32_t hi = __byte_perm(w[2 * q], w[2 * q + 1], 0x7362);       // a2 b2 a3 b3
    const uint32_t lo8 = __byte_perm(w[2 * q + 8], w[2 * q + 9], 0x5140);  // c0 d0 c1 d1
    const uint32_t hi8 = __byte_perm(w[2 * q + 8], w[2 * q + 9], 0x7362);  // c2 d2 c3 d3
    out[0][q] = __byte_perm(lo, lo8, 0x5410);
    out[1][q] = __byte_perm(lo, lo8, 0x7632);
    out[2][q] = __byte_perm(hi, hi8, 0x5410);
    out[3][q] = __byte_perm(hi, hi8, 0x7632);
  }
  // A warp's four stores each write 4 V^T rows x 128 contiguous bytes.
  uint8_t* dst = vt + (static_cast<int64_t>(bh) * head_dim + col0 + 4 * cw) * vt_keys + key0 + 16 * kc;
#pragma unroll
  for (int r = 0; r < 4; ++r)
    *reinterpret_cast<uint4*>(dst + r * vt_keys) = make_uint4(out[r][0], out[r][1], out[r][2], out[r][3]);
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
