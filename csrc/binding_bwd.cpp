// The torch binding of the backward pass: the CUDA implementation of flashattn::bwd (schema in
// flashattn/_ops.py). Thin by design: checks (csrc/host_args.h), allocates the gradients and
// scratch buffers, fills BwdParams, calls the launcher in csrc/flash_bwd/ or csrc/flash_bwd_sm90/.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <tuple>

#include "bwd_scratch.h"
#include "device_limits.h"
#include "flash_bwd/api.h"
#include "flash_bwd_sm90/api.h"
#include "host_args.h"

namespace {

using flashattn::BwdParams;
using flashattn::CausalMode;

std::tuple<at::Tensor, at::Tensor, at::Tensor> bwd_cuda(const at::Tensor& dout_in, const at::Tensor& q_in,
                                                        const at::Tensor& k_in, const at::Tensor& v_in,
                                                        const at::Tensor& out_in, const at::Tensor& lse_in,
                                                        double softmax_scale, int64_t causal_mode, bool deterministic,
                                                        c10::string_view backend, int64_t window_left,
                                                        int64_t window_right, double softcap) {
  constexpr const char* op = "flashattn::bwd";
  // `backend` is the one the forward was called with. "auto" and "hopper" run the Hopper backward
  // where it exists (compute capability 9.0, head dim <= 128, no window / softcap:
  // flash_bwd_sm90_supported), the portable backward otherwise; "portable" always the portable
  // one. The gradients do not depend on which forward path produced out and lse.
  flashattn::check_backend(op, backend);
  flashattn::check_qkv(op, q_in, k_in, v_in, 4, "[B, S, H, D]");
  const int64_t B = q_in.size(0), Sq = q_in.size(1), Hq = q_in.size(2), D = q_in.size(3);
  const int64_t Sk = k_in.size(1), Hk = k_in.size(2);
  FLASHATTN_CHECK(k_in.size(0) == B, op, ": k/v batch size differs from q's");
  FLASHATTN_CHECK(dout_in.sizes() == q_in.sizes() && out_in.sizes() == q_in.sizes(), op,
              ": dout and out must have q's shape [B, Sq, Hq, D]");
  flashattn::check_like(op, "dout", dout_in, q_in);
  flashattn::check_like(op, "out", out_in, q_in);
  flashattn::check_lse(op, lse_in, q_in, {B, Hq, Sq}, "[B, Hq, Sq]");
  FLASHATTN_CHECK(Sk >= 1 || B * Sq * Hq == 0, op, ": key sequence length must be >= 1");
  flashattn::check_mask(op, causal_mode, window_left, window_right, softcap);
  const float scale = flashattn::softmax_scale_of(op, softmax_scale, D);
  FLASHATTN_CHECK(B <= INT32_MAX && Sq <= INT32_MAX && Sk <= INT32_MAX && Hq <= INT32_MAX, op, ": sizes too large");

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
  flashattn::set_dense(p, q, k, v, out);
  flashattn::set_bshd(dout, p.dout, p.do_batch_stride, p.do_row_stride, p.do_head_stride);
  flashattn::set_bshd(dq, p.dq, p.dq_batch_stride, p.dq_row_stride, p.dq_head_stride);
  flashattn::set_bshd(dk, p.dk, p.dk_batch_stride, p.dk_row_stride, p.dk_head_stride);
  flashattn::set_bshd(dv, p.dv, p.dv_batch_stride, p.dv_row_stride, p.dv_head_stride);
  p.lse = lse.data_ptr<float>();
  p.dtype = flashattn::dtype_of(q);
  p.set_scale(scale);
  // The forward's mask and softcap, set as csrc/binding.cpp sets them, so that the backward
  // recomputes exactly the probabilities the saved lse normalizes.
  p.set_softcap(static_cast<float>(softcap));
  p.set_mask(static_cast<CausalMode>(causal_mode), window_left, window_right);

  // The path and tile config (and with them the ticket array's block M) depend on the device,
  // the head dim, the mask and the softcap.
  const bool hopper = backend != "portable" && flashattn::flash_bwd_sm90_supported(p, dev);
  const int block_m = hopper ? flashattn::flash_bwd_sm90_block_m(p) : flashattn::flash_bwd_block_m(p, dev);
  FLASHATTN_CHECK(block_m > 0, op, ": no backward tile config fits this device's ", dev.max_smem_per_block,
              " bytes of shared memory per block");
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.get_device()).stream();
  // The Hopper path keeps each query block of dq_accum as one tile in its accumulator order.
  const int64_t dq_floats = hopper ? flashattn::flash_bwd_sm90_dq_accum_floats(p) : B * Hq * Sq * D;
  const int64_t ticket_words = deterministic ? B * Hq * ((Sq + block_m - 1) / block_m) : 0;
  // A GQA group split over CTAs adds dK/dV in float32 (never in deterministic mode).
  if (hopper) p.group_split = flashattn::flash_bwd_sm90_group_split(p, dev, deterministic);
  // So does the split of the grid's last wave into pieces that fill the GPU.
  if (hopper) flashattn::flash_bwd_sm90_plan_tail(p, dev, deterministic);
  const int64_t dkv_floats = hopper ? flashattn::flash_bwd_sm90_dkv_accum_floats(p) : 0;
  const at::Tensor scratch = flashattn::bwd_scratch(p, q, dq_floats, dkv_floats, ticket_words, B * Hq * Sq, stream);
  const cudaError_t err = hopper ? flashattn::flash_bwd_sm90(p, dev, stream) : flashattn::flash_bwd(p, dev, stream);
  FLASHATTN_CHECK(err == cudaSuccess, op, ": kernel launch failed: ", cudaGetErrorString(err));
  return {dq, dk, dv};
}

}  // namespace

TORCH_LIBRARY_IMPL(flashattn, CUDA, m) { m.impl("bwd", &bwd_cuda); }
