// The backward bindings' scratch (csrc/binding_bwd.cpp, binding_varlen_bwd.cpp): one float32
// allocation for every buffer the launchers need besides the gradients, the part that must start
// zeroed recorded for the preprocess kernel to zero. Apart from host_args.h, which the CPU-only
// host build (lab/host_cpu_build.py) compiles without the CUDA runtime's headers.
#pragma once

#include <ATen/ATen.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "check.h"
#include "common/bwd_params.h"

namespace flashattn {

// The backward's float32 scratch in one allocation (at::zeros cost an allocation and a fill kernel
// each, per call): dq_accum (first: the bulk reduce-adds need 16-byte aligned tiles, and every
// part's size keeps the next one 16-byte aligned but the last), the split GQA group's dkv_accum,
// the deterministic mode's tickets (int32, zero is the same bits), then dpsum, which the
// preprocess kernel writes. The parts before dpsum must start zeroed: they are the region
// BwdParams::zero_floats, which both backward paths' preprocess kernel zeroes as it reads O and dO,
// ahead of the main kernel in stream order (a memset of its own cost a launch and ran alone). A
// region too large for that int is zeroed here by a stream-ordered memset instead.
inline at::Tensor bwd_scratch(BwdParams& p, const at::Tensor& q, const int64_t dq_floats, const int64_t dkv_floats,
                              const int64_t ticket_words, const int64_t dpsum_floats, const cudaStream_t stream) {
  const int64_t ticket_pad = (ticket_words + 3) / 4 * 4;
  at::Tensor scratch = at::empty({dq_floats + dkv_floats + ticket_pad + dpsum_floats}, q.options().dtype(at::kFloat));
  float* const base = scratch.data_ptr<float>();
  p.dq_accum = base;
  p.dkv_accum = dkv_floats > 0 ? base + dq_floats : nullptr;
  p.dq_semaphore = ticket_words > 0 ? reinterpret_cast<int*>(base + dq_floats + dkv_floats) : nullptr;
  p.dpsum = base + dq_floats + dkv_floats + ticket_pad;
  const int64_t zero_floats = dq_floats + dkv_floats + ticket_words;
  if (zero_floats <= INT32_MAX) {
    p.zero_floats = static_cast<int>(zero_floats);
    return scratch;
  }
  p.zero_floats = 0;
  const cudaError_t err = cudaMemsetAsync(base, 0, static_cast<size_t>(zero_floats) * sizeof(float), stream);
  FLASHATTN_CHECK(err == cudaSuccess, "flashattn: zeroing the backward's scratch failed: ", cudaGetErrorString(err));
  return scratch;
}

}  // namespace flashattn
