// The torch binding of packed variable-length batches: the CUDA implementation of
// flashattn::fwd_varlen (schema in flashattn/_ops.py). Thin by design: checks (a second line of
// defence behind flashattn/interface.py, which raises the user-facing errors), fills FwdParams,
// calls the portable forward's packed flavour (flash_fwd_varlen, csrc/flash_fwd/). Never reads
// cu_seqlens on the host, so a call is CUDA-graph capturable.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>

#include "common/unowned_rows.h"
#include "device_limits.h"
#include "flash_fwd/api.h"
#include "tensor_access.h"

namespace {

using flashattn::CausalMode;
using flashattn::DType;

void check_cu_seqlens(const at::Tensor& cu, const char* name, const at::Tensor& q) {
  TORCH_CHECK(cu.scalar_type() == at::kInt, "flashattn::fwd_varlen: ", name, " must be int32, got ", cu.scalar_type());
  TORCH_CHECK(cu.device() == q.device(), "flashattn::fwd_varlen: ", name, " must be on q's device ", q.device(),
              ", got ", cu.device());
  TORCH_CHECK(cu.dim() == 1 && cu.size(0) >= 1, "flashattn::fwd_varlen: ", name, " must be 1-D [batch + 1], got shape ",
              cu.sizes());
  TORCH_CHECK(cu.is_contiguous(), "flashattn::fwd_varlen: ", name, " must be contiguous");
}

std::tuple<at::Tensor, at::Tensor> fwd_varlen_cuda(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                                   const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                                                   int64_t max_seqlen_q, int64_t max_seqlen_k, double softmax_scale,
                                                   int64_t causal_mode, c10::string_view backend, int64_t window_left,
                                                   int64_t window_right, double softcap) {
  TORCH_CHECK(q_in.dim() == 3 && k_in.dim() == 3 && v_in.dim() == 3,
              "flashattn::fwd_varlen: q, k, v must be 3-D [total, H, D]");
  TORCH_CHECK(q_in.scalar_type() == k_in.scalar_type() && q_in.scalar_type() == v_in.scalar_type(),
              "flashattn::fwd_varlen: q, k, v must share one dtype");
  TORCH_CHECK(q_in.scalar_type() == at::kHalf || q_in.scalar_type() == at::kBFloat16,
              "flashattn::fwd_varlen: dtype must be float16 or bfloat16");
  TORCH_CHECK(q_in.is_cuda() && k_in.device() == q_in.device() && v_in.device() == q_in.device(),
              "flashattn::fwd_varlen: q, k, v must be on one CUDA device");
  TORCH_CHECK(q_in.stride(-1) == 1 && k_in.stride(-1) == 1 && v_in.stride(-1) == 1,
              "flashattn::fwd_varlen: last dimension must be contiguous");
  check_cu_seqlens(cu_seqlens_q, "cu_seqlens_q", q_in);
  check_cu_seqlens(cu_seqlens_k, "cu_seqlens_k", q_in);
  TORCH_CHECK(cu_seqlens_q.size(0) == cu_seqlens_k.size(0),
              "flashattn::fwd_varlen: cu_seqlens_q and cu_seqlens_k must have the same length (batch + 1), got ",
              cu_seqlens_q.size(0), " and ", cu_seqlens_k.size(0));
  const int64_t B = cu_seqlens_q.size(0) - 1;
  const int64_t total_q = q_in.size(0), Hq = q_in.size(1), D = q_in.size(2);
  const int64_t total_k = k_in.size(0), Hk = k_in.size(1);
  TORCH_CHECK(k_in.sizes() == v_in.sizes(), "flashattn::fwd_varlen: k and v shapes differ");
  TORCH_CHECK(k_in.size(2) == D, "flashattn::fwd_varlen: k/v head dim differs from q's");
  TORCH_CHECK(Hk > 0 && Hq % Hk == 0, "flashattn::fwd_varlen: q heads must be a multiple of k/v heads");
  TORCH_CHECK(D >= 8 && D <= 256 && D % 8 == 0, "flashattn::fwd_varlen: head dim must be a multiple of 8 in [8, 256]");
  TORCH_CHECK(max_seqlen_q >= 0 && max_seqlen_k >= 0, "flashattn::fwd_varlen: max_seqlen_q and max_seqlen_k must be >= 0");
  TORCH_CHECK(causal_mode >= 0 && causal_mode <= 2, "flashattn::fwd_varlen: causal_mode must be 0, 1 or 2");
  TORCH_CHECK(window_left >= -1 && window_right >= -1, "flashattn::fwd_varlen: window_left and window_right must be >= -1 "
              "(-1: unbounded), got ", window_left, " and ", window_right);
  TORCH_CHECK(softcap == 0.0 || (softcap > 0.0 && std::isfinite(static_cast<float>(softcap)) && static_cast<float>(softcap) > 0.f),
              "flashattn::fwd_varlen: softcap must be 0 (off) or a positive float32-representable value, got ", softcap);
  TORCH_CHECK(backend == "auto" || backend == "portable" || backend == "hopper",
              "flashattn::fwd_varlen: backend must be 'auto', 'portable' or 'hopper', got '", std::string(backend), "'");
  // The Hopper path's TMA descriptors describe dense [B, S, H, D] tensors: packed batches run the
  // portable kernel on every GPU, and a forced 'hopper' says so rather than running another path.
  TORCH_CHECK(backend != "hopper", "flashattn::fwd_varlen: backend 'hopper' does not support packed variable-length "
              "batches (its TMA path needs dense [B, S, H, D] tensors); use backend 'auto' or 'portable', which run "
              "the portable kernel for them on every GPU");
  // Per-sequence offsets and window bounds are int in the kernel: 2^30 rows leave room for their sums.
  TORCH_CHECK(total_q < (int64_t{1} << 30) && total_k < (int64_t{1} << 30) && B < (int64_t{1} << 30) && Hq <= INT32_MAX,
              "flashattn::fwd_varlen: sizes too large (total rows must be below 2^30)");
  // Lengths a sequence cannot exceed; a larger max_seqlen would only launch blocks that exit at once.
  max_seqlen_q = std::min(max_seqlen_q, total_q);
  max_seqlen_k = std::min(max_seqlen_k, total_k);

  const c10::cuda::CUDAGuard guard(q_in.device());
  at::Tensor out = at::empty({total_q, Hq, D}, q_in.options());
  at::Tensor lse = at::empty({Hq, total_q}, q_in.options().dtype(at::kFloat));
  if (out.numel() == 0) return {out, lse};
  if (B == 0) {  // no sequence: every row is unowned
    out.zero_();
    lse.fill_(-std::numeric_limits<float>::infinity());
    return {out, lse};
  }

  const at::Tensor q = flashattn::aligned_or_copy(q_in), k = flashattn::aligned_or_copy(k_in),
                   v = flashattn::aligned_or_copy(v_in);

  flashattn::FwdParams p;
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.o = out.data_ptr();
  p.lse = lse.data_ptr<float>();
  p.q_row_stride = q.stride(0), p.q_head_stride = q.stride(1);
  p.k_row_stride = k.stride(0), p.k_head_stride = k.stride(1);
  p.v_row_stride = v.stride(0), p.v_head_stride = v.stride(1);
  p.o_row_stride = out.stride(0), p.o_head_stride = out.stride(1);
  p.batch = static_cast<int>(B);
  p.heads_q = static_cast<int>(Hq);
  p.heads_kv = static_cast<int>(Hk);
  p.head_dim = static_cast<int>(D);
  p.dtype = q.scalar_type() == at::kBFloat16 ? DType::kBFloat16 : DType::kFloat16;
  p.set_varlen(cu_seqlens_q.data_ptr<int>(), cu_seqlens_k.data_ptr<int>(), static_cast<int>(max_seqlen_q),
               static_cast<int>(max_seqlen_k), static_cast<int>(total_q), static_cast<int>(total_k));
  p.set_scale(static_cast<float>(softmax_scale));
  p.set_softcap(static_cast<float>(softcap));
  p.set_mask(static_cast<CausalMode>(causal_mode), window_left, window_right);

  const flashattn::DeviceLimits dev = flashattn::device_limits(q.get_device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  cudaError_t err = flashattn::flash_fwd_varlen(p, dev, stream);
  TORCH_CHECK(err == cudaSuccess, "flashattn::fwd_varlen: kernel launch failed: ", cudaGetErrorString(err));
  // Rows no sequence owns (padding at the end of a packed buffer): out 0 and lse -inf, as for a
  // row that sees no key, rather than whatever memory the allocator handed out.
  err = flashattn::fill_unowned_rows(out.data_ptr(), 1, total_q, Hq * D / 2, cu_seqlens_q.data_ptr<int>(),
                                     static_cast<int>(B), 0u, stream);
  if (err == cudaSuccess)
    err = flashattn::fill_unowned_rows(lse.data_ptr(), Hq, total_q, 1, cu_seqlens_q.data_ptr<int>(), static_cast<int>(B),
                                       0xff800000u, stream);
  TORCH_CHECK(err == cudaSuccess, "flashattn::fwd_varlen: kernel launch failed: ", cudaGetErrorString(err));
  return {out, lse};
}

}  // namespace

TORCH_LIBRARY_IMPL(flashattn, CUDA, m) { m.impl("fwd_varlen", &fwd_varlen_cuda); }
