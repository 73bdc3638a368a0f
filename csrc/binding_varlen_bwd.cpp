// The torch binding of the backward of packed variable-length batches: the CUDA implementation of
// flashattn::bwd_varlen (schema in flashattn/_ops.py). Thin by design: checks (csrc/host_args.h),
// allocates the gradients and scratch buffers in the packed layouts (csrc/common/bwd_packed.cuh),
// fills BwdParams, calls the Hopper backward (csrc/flash_bwd_sm90/) where it runs the call, the
// portable one (csrc/flash_bwd/) otherwise, as the dense binding chooses. Never reads cu_seqlens
// on the host, so a call is CUDA-graph capturable.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>
#include <tuple>

#include "bwd_scratch.h"
#include "device_limits.h"
#include "flash_bwd/api.h"
#include "flash_bwd_sm90/api.h"
#include "host_args.h"

namespace {

using flashattn::BwdParams;
using flashattn::CausalMode;

std::tuple<at::Tensor, at::Tensor, at::Tensor> bwd_varlen_cuda(
    const at::Tensor& dout_in, const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
    const at::Tensor& out_in, const at::Tensor& lse_in, const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
    int64_t max_seqlen_q, int64_t max_seqlen_k, double softmax_scale, int64_t causal_mode, bool deterministic,
    c10::string_view backend, int64_t window_left, int64_t window_right, double softcap) {
  constexpr const char* op = "flashattn::bwd_varlen";
  // `backend` is the forward's, which refuses "hopper" for packed batches (it names the dense Hopper
  // kernels); "auto" runs the Hopper backward where flash_bwd_sm90_supported() says yes.
  flashattn::check_packed_backend(op, backend);
  flashattn::check_qkv(op, q_in, k_in, v_in, 3, "[total, H, D]");
  FLASHATTN_CHECK(dout_in.sizes() == q_in.sizes() && out_in.sizes() == q_in.sizes(), op,
              ": dout and out must have q's shape [total_q, Hq, D]");
  flashattn::check_like(op, "dout", dout_in, q_in);
  flashattn::check_like(op, "out", out_in, q_in);
  // Not dout: it comes from any loss (out.sum() broadcasts with stride 0) and is copied below when
  // its layout needs it, as the dense backward does.
  flashattn::check_unit_last_stride(op, {&q_in, &k_in, &v_in, &out_in});
  const int64_t B = flashattn::check_packing(op, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, q_in);
  const int64_t total_q = q_in.size(0), Hq = q_in.size(1), D = q_in.size(2);
  const int64_t total_k = k_in.size(0), Hk = k_in.size(1);
  flashattn::check_lse(op, lse_in, q_in, {Hq, total_q}, "[Hq, total_q]");
  flashattn::check_mask(op, causal_mode, window_left, window_right, softcap);
  const float scale = flashattn::softmax_scale_of(op, softmax_scale, D);
  flashattn::check_packed_sizes(op, B, total_q, total_k, Hq, max_seqlen_q, max_seqlen_k);

  const c10::cuda::CUDAGuard guard(q_in.device());
  // dq: both paths write every row (rows no sequence owns as 0). dk/dv: the kernels write the rows
  // of every sequence; the Hopper path also zeroes the rows no sequence owns (its launcher), the
  // portable one needs them zeroed here (past cu_seqlens_k[B], which no thread block knows of
  // without a host read): below, once the path is known.
  at::Tensor dq = at::empty({total_q, Hq, D}, q_in.options());
  at::Tensor dk = at::empty({total_k, Hk, D}, q_in.options());
  at::Tensor dv = at::empty({total_k, Hk, D}, q_in.options());
  if (dq.numel() == 0 || B == 0 || total_k == 0) {  // no query, no sequence, or no key: nothing is attended
    dq.zero_();
    dk.zero_();
    dv.zero_();
    return {dq, dk, dv};
  }

  // dout may come from any loss (a broadcast from out.sum() has stride 0 everywhere): made dense, as
  // the dense binding does, since the Hopper backward reads it through TMA (positive strides).
  const at::Tensor dout = flashattn::aligned_or_copy(flashattn::has_broadcast_dim(dout_in) ? dout_in.contiguous() : dout_in);
  const at::Tensor q = flashattn::aligned_or_copy(q_in), k = flashattn::aligned_or_copy(k_in),
                   v = flashattn::aligned_or_copy(v_in), out = flashattn::aligned_or_copy(out_in);
  const at::Tensor lse = lse_in.contiguous();
  const flashattn::DeviceLimits dev = flashattn::device_limits(q.get_device());

  BwdParams p;
  flashattn::set_packed(p, q, k, v, out, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k);
  flashattn::set_packed(dout, p.dout, p.do_row_stride, p.do_head_stride);
  flashattn::set_packed(dq, p.dq, p.dq_row_stride, p.dq_head_stride);
  flashattn::set_packed(dk, p.dk, p.dk_row_stride, p.dk_head_stride);
  flashattn::set_packed(dv, p.dv, p.dv_row_stride, p.dv_head_stride);
  p.lse = lse.data_ptr<float>();
  p.dtype = flashattn::dtype_of(q);
  p.set_scale(scale);
  // The forward's mask and softcap, set as csrc/binding_varlen.cpp sets them, so that the backward
  // recomputes exactly the probabilities the saved lse normalizes.
  p.set_softcap(static_cast<float>(softcap));
  p.set_mask(static_cast<CausalMode>(causal_mode), window_left, window_right);

  // The path and tile config (and with them the ticket array's block M) depend on the device, the
  // head dim, the mask and the softcap.
  const bool hopper = backend != "portable" && flashattn::flash_bwd_sm90_supported(p, dev);
  const int block_m = hopper ? flashattn::flash_bwd_sm90_block_m(p) : flashattn::flash_bwd_block_m(p, dev);
  FLASHATTN_CHECK(block_m > 0, op, ": no backward tile config fits this device's ", dev.max_smem_per_block,
              " bytes of shared memory per block");
  // The packed layouts (csrc/common/bwd_packed.cuh): head-major over the packed rows, as lse; the
  // Hopper path's dq_accum in query-block tiles per sequence (csrc/flash_bwd_sm90/block.h).
  if (!hopper) {
    dk.zero_();
    dv.zero_();
  }
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.get_device()).stream();
  const int64_t dq_floats = hopper ? flashattn::flash_bwd_sm90_dq_accum_floats(p) : Hq * total_q * D;
  const int64_t ticket_words = deterministic ? B * Hq * ((max_seqlen_q + block_m - 1) / block_m) : 0;
  const at::Tensor scratch = flashattn::bwd_scratch(p, q, dq_floats, 0, ticket_words, Hq * total_q, stream);
  const cudaError_t err = hopper ? flashattn::flash_bwd_sm90(p, dev, stream) : flashattn::flash_bwd(p, dev, stream);
  FLASHATTN_CHECK(err == cudaSuccess, op, ": kernel launch failed: ", cudaGetErrorString(err));
  return {dq, dk, dv};
}

}  // namespace

TORCH_LIBRARY_IMPL(flashattn, CUDA, m) { m.impl("bwd_varlen", &bwd_varlen_cuda); }
