// The torch binding of the backward pass: the CUDA implementation of flashattn::bwd (schema in
// flashattn/_ops.py). Thin by design: checks, allocates the gradients and scratch buffers, fills
// BwdParams, calls the launcher in csrc/flash_bwd/.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cmath>
#include <string>
#include <tuple>

#include "device_limits.h"
#include "flash_bwd/api.h"
#include "flash_bwd_sm90/api.h"
#include "tensor_access.h"

namespace {

using flashattn::BwdParams;
using flashattn::CausalMode;
using flashattn::DType;

std::tuple<at::Tensor, at::Tensor, at::Tensor> bwd_cuda(const at::Tensor& dout_in, const at::Tensor& q_in,
                                                        const at::Tensor& k_in, const at::Tensor& v_in,
                                                        const at::Tensor& out_in, const at::Tensor& lse_in,
                                                        double softmax_scale, int64_t causal_mode, bool deterministic,
                                                        c10::string_view backend, int64_t window_left,
                                                        int64_t window_right, double softcap) {
  TORCH_CHECK(backend == "auto" || backend == "portable" || backend == "hopper",
              "flashattn::bwd: backend must be 'auto', 'portable' or 'hopper', got '", std::string(backend), "'");
  // `backend` is the one the forward was called with. "auto" and "hopper" run the Hopper backward
  // where it exists (compute capability 9.0, head dim <= 128, no window / softcap:
  // flash_bwd_sm90_supported), the portable backward otherwise; "portable" always the portable
  // one. The gradients do not depend on which forward path produced out and lse.
  for (const at::Tensor* t : {&dout_in, &q_in, &k_in, &v_in, &out_in})
    TORCH_CHECK(t->dim() == 4, "flashattn::bwd: dout, q, k, v, out must be 4-D [B, S, H, D]");
  const at::ScalarType dtype = q_in.scalar_type();
  TORCH_CHECK(dtype == at::kHalf || dtype == at::kBFloat16, "flashattn::bwd: dtype must be float16 or bfloat16");
  for (const at::Tensor* t : {&dout_in, &k_in, &v_in, &out_in})
    TORCH_CHECK(t->scalar_type() == dtype, "flashattn::bwd: dout, q, k, v, out must share one dtype");
  TORCH_CHECK(q_in.is_cuda(), "flashattn::bwd: tensors must be on a CUDA device");
  for (const at::Tensor* t : {&dout_in, &k_in, &v_in, &out_in, &lse_in})
    TORCH_CHECK(t->device() == q_in.device(), "flashattn::bwd: all tensors must be on one CUDA device");
  const int64_t B = q_in.size(0), Sq = q_in.size(1), Hq = q_in.size(2), D = q_in.size(3);
  const int64_t Sk = k_in.size(1), Hk = k_in.size(2);
  TORCH_CHECK(dout_in.sizes() == q_in.sizes() && out_in.sizes() == q_in.sizes(),
              "flashattn::bwd: dout and out must have q's shape [B, Sq, Hq, D]");
  TORCH_CHECK(k_in.sizes() == v_in.sizes(), "flashattn::bwd: k and v shapes differ");
  TORCH_CHECK(k_in.size(0) == B && k_in.size(3) == D, "flashattn::bwd: k/v batch or head dim differ from q");
  TORCH_CHECK(Hk > 0 && Hq % Hk == 0, "flashattn::bwd: q heads must be a multiple of k/v heads");
  TORCH_CHECK(D >= 8 && D <= 256 && D % 8 == 0, "flashattn::bwd: head dim must be a multiple of 8 in [8, 256]");
  TORCH_CHECK(lse_in.scalar_type() == at::kFloat && lse_in.dim() == 3 && lse_in.size(0) == B && lse_in.size(1) == Hq &&
                  lse_in.size(2) == Sq,
              "flashattn::bwd: lse must be float32 [B, Hq, Sq] as flashattn::fwd returns it");
  TORCH_CHECK(Sk >= 1 || B * Sq * Hq == 0, "flashattn::bwd: key sequence length must be >= 1");
  TORCH_CHECK(causal_mode >= 0 && causal_mode <= 2, "flashattn::bwd: causal_mode must be 0, 1 or 2");
  TORCH_CHECK(window_left >= -1 && window_right >= -1, "flashattn::bwd: window_left and window_right must be >= -1 "
              "(-1: unbounded), got ", window_left, " and ", window_right);
  TORCH_CHECK(softcap == 0.0 || (softcap > 0.0 && std::isfinite(static_cast<float>(softcap)) && static_cast<float>(softcap) > 0.f),
              "flashattn::bwd: softcap must be 0 (off) or a positive float32-representable value, got ", softcap);
  TORCH_CHECK(B <= INT32_MAX && Sq <= INT32_MAX && Sk <= INT32_MAX && Hq <= INT32_MAX, "flashattn::bwd: sizes too large");

  const c10::cuda::CUDAGuard guard(q_in.device());
  at::Tensor dq = at::empty({B, Sq, Hq, D}, q_in.options());
  at::Tensor dk = at::empty({B, Sk, Hk, D}, q_in.options());
  at::Tensor dv = at::empty({B, Sk, Hk, D}, q_in.options());
  if (dk.numel() == 0 && dq.numel() == 0) return {dq, dk, dv};
  if (dq.numel() == 0) {  // no query: nothing attends to any key
    dk.zero_();
    dv.zero_();
    return {dq, dk, dv};
  }

  // dout may come from any loss (a broadcast from out.sum() has stride 0 everywhere): such a
  // view is made dense, since the Hopper backward reads dout through TMA, which needs positive
  // strides (the copy costs one pass over dout, only for a loss that broadcasts it).
  const at::Tensor dout = flashattn::aligned_or_copy(flashattn::has_broadcast_dim(dout_in) ? dout_in.contiguous() : dout_in);
  const at::Tensor q = flashattn::aligned_or_copy(q_in), k = flashattn::aligned_or_copy(k_in),
                   v = flashattn::aligned_or_copy(v_in), out = flashattn::aligned_or_copy(out_in);
  const at::Tensor lse = lse_in.contiguous();
  const flashattn::DeviceLimits dev = flashattn::device_limits(q.get_device());

  BwdParams p;
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.o = out.data_ptr();
  p.lse = lse.data_ptr<float>();
  p.dout = dout.data_ptr();
  p.dq = dq.data_ptr();
  p.dk = dk.data_ptr();
  p.dv = dv.data_ptr();
  p.q_batch_stride = q.stride(0), p.q_row_stride = q.stride(1), p.q_head_stride = q.stride(2);
  p.k_batch_stride = k.stride(0), p.k_row_stride = k.stride(1), p.k_head_stride = k.stride(2);
  p.v_batch_stride = v.stride(0), p.v_row_stride = v.stride(1), p.v_head_stride = v.stride(2);
  p.o_batch_stride = out.stride(0), p.o_row_stride = out.stride(1), p.o_head_stride = out.stride(2);
  p.do_batch_stride = dout.stride(0), p.do_row_stride = dout.stride(1), p.do_head_stride = dout.stride(2);
  p.dq_batch_stride = dq.stride(0), p.dq_row_stride = dq.stride(1), p.dq_head_stride = dq.stride(2);
  p.dk_batch_stride = dk.stride(0), p.dk_row_stride = dk.stride(1), p.dk_head_stride = dk.stride(2);
  p.dv_batch_stride = dv.stride(0), p.dv_row_stride = dv.stride(1), p.dv_head_stride = dv.stride(2);
  p.batch = static_cast<int>(B);
  p.heads_q = static_cast<int>(Hq);
  p.heads_kv = static_cast<int>(Hk);
  p.seqlen_q = static_cast<int>(Sq);
  p.seqlen_k = static_cast<int>(Sk);
  p.head_dim = static_cast<int>(D);
  p.dtype = dtype == at::kBFloat16 ? DType::kBFloat16 : DType::kFloat16;
  p.set_scale(static_cast<float>(softmax_scale));
  // The forward's mask and softcap, set as csrc/binding.cpp sets them, so that the backward
  // recomputes exactly the probabilities the saved lse normalizes.
  p.set_softcap(static_cast<float>(softcap));
  p.set_mask(static_cast<CausalMode>(causal_mode), window_left, window_right);

  // The path and tile config (and with them the ticket array's block M) depend on the device,
  // the head dim, the mask and the softcap.
  const bool hopper = backend != "portable" && flashattn::flash_bwd_sm90_supported(p, dev);
  const int block_m = hopper ? flashattn::flash_bwd_sm90_block_m(p) : flashattn::flash_bwd_block_m(p, dev);
  TORCH_CHECK(block_m > 0, "flashattn::bwd: no backward tile config fits this device's ",
              dev.max_smem_per_block, " bytes of shared memory per block");
  const at::TensorOptions f32 = q.options().dtype(at::kFloat);
  at::Tensor dpsum = at::empty({B, Hq, Sq}, f32);
  // The Hopper path keeps each query block of dq_accum as one tile in its accumulator order.
  at::Tensor dq_accum = hopper ? at::zeros({flashattn::flash_bwd_sm90_dq_accum_floats(p)}, f32)
                               : at::zeros({B, Hq, Sq, D}, f32);
  at::Tensor semaphore;
  if (deterministic) semaphore = at::zeros({B, Hq, (Sq + block_m - 1) / block_m}, q.options().dtype(at::kInt));
  p.dpsum = dpsum.data_ptr<float>();
  p.dq_accum = dq_accum.data_ptr<float>();
  p.dq_semaphore = deterministic ? semaphore.data_ptr<int>() : nullptr;

  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const cudaError_t err = hopper ? flashattn::flash_bwd_sm90(p, dev, stream) : flashattn::flash_bwd(p, dev, stream);
  TORCH_CHECK(err == cudaSuccess, "flashattn::bwd: kernel launch failed: ", cudaGetErrorString(err));
  return {dq, dk, dv};
}

}  // namespace

TORCH_LIBRARY_IMPL(flashattn, CUDA, m) { m.impl("bwd", &bwd_cuda); }
