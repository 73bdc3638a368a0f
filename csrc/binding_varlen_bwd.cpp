// The torch binding of the backward of packed variable-length batches: the CUDA implementation of
// flashattn::bwd_varlen (schema in flashattn/_ops.py). Thin by design: checks (a second line of
// defence behind flashattn/_ops.py's check_bwd_varlen_args, which raises the user-facing errors),
// allocates the gradients and scratch buffers in the packed layouts (csrc/flash_bwd/varlen.cuh),
// fills BwdParams, calls the portable backward (csrc/flash_bwd/) on every GPU. Never reads
// cu_seqlens on the host, so a call is CUDA-graph capturable.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>

#include "device_limits.h"
#include "flash_bwd/api.h"
#include "tensor_access.h"

namespace {

using flashattn::BwdParams;
using flashattn::CausalMode;
using flashattn::DType;

void check_cu_seqlens(const at::Tensor& cu, const char* name, const at::Tensor& q) {
  TORCH_CHECK(cu.scalar_type() == at::kInt, "flashattn::bwd_varlen: ", name, " must be int32, got ", cu.scalar_type());
  TORCH_CHECK(cu.device() == q.device(), "flashattn::bwd_varlen: ", name, " must be on q's device ", q.device(),
              ", got ", cu.device());
  TORCH_CHECK(cu.dim() == 1 && cu.size(0) >= 1, "flashattn::bwd_varlen: ", name, " must be 1-D [batch + 1], got shape ",
              cu.sizes());
  TORCH_CHECK(cu.is_contiguous(), "flashattn::bwd_varlen: ", name, " must be contiguous");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> bwd_varlen_cuda(
    const at::Tensor& dout_in, const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
    const at::Tensor& out_in, const at::Tensor& lse_in, const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
    int64_t max_seqlen_q, int64_t max_seqlen_k, double softmax_scale, int64_t causal_mode, bool deterministic,
    c10::string_view backend, int64_t window_left, int64_t window_right, double softcap) {
  TORCH_CHECK(backend == "auto" || backend == "portable" || backend == "hopper",
              "flashattn::bwd_varlen: backend must be 'auto', 'portable' or 'hopper', got '", std::string(backend), "'");
  // As the forward: the Hopper backward's TMA descriptors describe dense tensors, so packed
  // batches run the portable backward on every GPU, and a forced 'hopper' says so.
  TORCH_CHECK(backend != "hopper", "flashattn::bwd_varlen: backend 'hopper' does not support packed variable-length "
              "batches (its TMA path needs dense [B, S, H, D] tensors); use backend 'auto' or 'portable', which run "
              "the portable kernels for them on every GPU");
  for (const at::Tensor* t : {&dout_in, &q_in, &k_in, &v_in, &out_in})
    TORCH_CHECK(t->dim() == 3, "flashattn::bwd_varlen: dout, q, k, v, out must be 3-D [total, H, D]");
  const at::ScalarType dtype = q_in.scalar_type();
  TORCH_CHECK(dtype == at::kHalf || dtype == at::kBFloat16, "flashattn::bwd_varlen: dtype must be float16 or bfloat16");
  for (const at::Tensor* t : {&dout_in, &k_in, &v_in, &out_in})
    TORCH_CHECK(t->scalar_type() == dtype, "flashattn::bwd_varlen: dout, q, k, v, out must share one dtype");
  TORCH_CHECK(q_in.is_cuda(), "flashattn::bwd_varlen: tensors must be on a CUDA device");
  for (const at::Tensor* t : {&dout_in, &k_in, &v_in, &out_in, &lse_in})
    TORCH_CHECK(t->device() == q_in.device(), "flashattn::bwd_varlen: all tensors must be on one CUDA device");
  for (const at::Tensor* t : {&dout_in, &q_in, &k_in, &v_in, &out_in})
    TORCH_CHECK(t->size(-1) <= 1 || t->stride(-1) == 1, "flashattn::bwd_varlen: last dimension must be contiguous");
  check_cu_seqlens(cu_seqlens_q, "cu_seqlens_q", q_in);
  check_cu_seqlens(cu_seqlens_k, "cu_seqlens_k", q_in);
  TORCH_CHECK(cu_seqlens_q.size(0) == cu_seqlens_k.size(0),
              "flashattn::bwd_varlen: cu_seqlens_q and cu_seqlens_k must have the same length (batch + 1), got ",
              cu_seqlens_q.size(0), " and ", cu_seqlens_k.size(0));
  const int64_t B = cu_seqlens_q.size(0) - 1;
  const int64_t total_q = q_in.size(0), Hq = q_in.size(1), D = q_in.size(2);
  const int64_t total_k = k_in.size(0), Hk = k_in.size(1);
  TORCH_CHECK(dout_in.sizes() == q_in.sizes() && out_in.sizes() == q_in.sizes(),
              "flashattn::bwd_varlen: dout and out must have q's shape [total_q, Hq, D]");
  TORCH_CHECK(k_in.sizes() == v_in.sizes(), "flashattn::bwd_varlen: k and v shapes differ");
  TORCH_CHECK(k_in.size(2) == D, "flashattn::bwd_varlen: k/v head dim differs from q's");
  TORCH_CHECK(Hk > 0 && Hq % Hk == 0, "flashattn::bwd_varlen: q heads must be a multiple of k/v heads");
  TORCH_CHECK(D >= 8 && D <= 256 && D % 8 == 0, "flashattn::bwd_varlen: head dim must be a multiple of 8 in [8, 256]");
  TORCH_CHECK(lse_in.scalar_type() == at::kFloat && lse_in.dim() == 2 && lse_in.size(0) == Hq &&
                  lse_in.size(1) == total_q,
              "flashattn::bwd_varlen: lse must be float32 [Hq, total_q] as flashattn::fwd_varlen returns it");
  TORCH_CHECK(max_seqlen_q >= 0 && max_seqlen_k >= 0, "flashattn::bwd_varlen: max_seqlen_q and max_seqlen_k must be >= 0");
  TORCH_CHECK(causal_mode >= 0 && causal_mode <= 2, "flashattn::bwd_varlen: causal_mode must be 0, 1 or 2");
  TORCH_CHECK(window_left >= -1 && window_right >= -1, "flashattn::bwd_varlen: window_left and window_right must be "
              ">= -1 (-1: unbounded), got ", window_left, " and ", window_right);
  TORCH_CHECK(softcap == 0.0 || (softcap > 0.0 && std::isfinite(static_cast<float>(softcap)) && static_cast<float>(softcap) > 0.f),
              "flashattn::bwd_varlen: softcap must be 0 (off) or a positive float32-representable value, got ", softcap);
  // Per-sequence offsets and window bounds are int in the kernel: 2^30 rows leave room for their sums.
  TORCH_CHECK(total_q < (int64_t{1} << 30) && total_k < (int64_t{1} << 30) && B < (int64_t{1} << 30) && Hq <= INT32_MAX,
              "flashattn::bwd_varlen: sizes too large (total rows must be below 2^30)");
  // As the forward's: lengths no sequence can exceed (a larger bound only adds blocks that exit).
  max_seqlen_q = std::min(max_seqlen_q, total_q);
  max_seqlen_k = std::min(max_seqlen_k, total_k);

  const c10::cuda::CUDAGuard guard(q_in.device());
  // dq: every row written (the dQ conversion covers all of total_q, rows no sequence owns from the
  // zeroed accumulator). dk/dv: the kernel writes the rows of every sequence; zeroed for the rows
  // past cu_seqlens_k[B], which no thread block knows of without a host read.
  at::Tensor dq = at::empty({total_q, Hq, D}, q_in.options());
  at::Tensor dk = at::zeros({total_k, Hk, D}, q_in.options());
  at::Tensor dv = at::zeros({total_k, Hk, D}, q_in.options());
  if (dq.numel() == 0) return {dq, dk, dv};
  if (B == 0 || total_k == 0) {  // no sequence, or none with a key: nothing is attended
    dq.zero_();
    return {dq, dk, dv};
  }

  // dout may come from any loss (a broadcast from out.sum() has stride 0 everywhere).
  const at::Tensor dout = flashattn::aligned_or_copy(dout_in);
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
  p.q_row_stride = q.stride(0), p.q_head_stride = q.stride(1);
  p.k_row_stride = k.stride(0), p.k_head_stride = k.stride(1);
  p.v_row_stride = v.stride(0), p.v_head_stride = v.stride(1);
  p.o_row_stride = out.stride(0), p.o_head_stride = out.stride(1);
  p.do_row_stride = dout.stride(0), p.do_head_stride = dout.stride(1);
  p.dq_row_stride = dq.stride(0), p.dq_head_stride = dq.stride(1);
  p.dk_row_stride = dk.stride(0), p.dk_head_stride = dk.stride(1);
  p.dv_row_stride = dv.stride(0), p.dv_head_stride = dv.stride(1);
  p.batch = static_cast<int>(B);
  p.heads_q = static_cast<int>(Hq);
  p.heads_kv = static_cast<int>(Hk);
  p.head_dim = static_cast<int>(D);
  p.dtype = dtype == at::kBFloat16 ? DType::kBFloat16 : DType::kFloat16;
  p.set_varlen(cu_seqlens_q.data_ptr<int>(), cu_seqlens_k.data_ptr<int>(), static_cast<int>(max_seqlen_q),
               static_cast<int>(max_seqlen_k), static_cast<int>(total_q), static_cast<int>(total_k));
  p.set_scale(static_cast<float>(softmax_scale));
  // The forward's mask and softcap, set as csrc/binding_varlen.cpp sets them, so that the backward
  // recomputes exactly the probabilities the saved lse normalizes.
  p.set_softcap(static_cast<float>(softcap));
  p.set_mask(static_cast<CausalMode>(causal_mode), window_left, window_right);

  // The tile config (and with it the ticket array's block M) depends on the device, the head dim,
  // the mask and the softcap.
  const int block_m = flashattn::flash_bwd_block_m(p, dev);
  TORCH_CHECK(block_m > 0, "flashattn::bwd_varlen: no backward tile config fits this device's ",
              dev.max_smem_per_block, " bytes of shared memory per block");
  const at::TensorOptions f32 = q.options().dtype(at::kFloat);
  // The packed layouts of csrc/flash_bwd/varlen.cuh: head-major over the packed rows, as lse.
  at::Tensor dpsum = at::empty({Hq, total_q}, f32);
  at::Tensor dq_accum = at::zeros({Hq, total_q, D}, f32);
  at::Tensor semaphore;
  if (deterministic)
    semaphore = at::zeros({B, Hq, (max_seqlen_q + block_m - 1) / block_m}, q.options().dtype(at::kInt));
  p.dpsum = dpsum.data_ptr<float>();
  p.dq_accum = dq_accum.data_ptr<float>();
  p.dq_semaphore = deterministic ? semaphore.data_ptr<int>() : nullptr;

  const cudaError_t err = flashattn::flash_bwd(p, dev, c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "flashattn::bwd_varlen: kernel launch failed: ", cudaGetErrorString(err));
  return {dq, dk, dv};
}

}  // namespace

TORCH_LIBRARY_IMPL(flashattn, CUDA, m) { m.impl("bwd_varlen", &bwd_varlen_cuda); }
