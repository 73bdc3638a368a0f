// The torch binding of packed variable-length batches: the CUDA implementation of
// flashattn::fwd_varlen (schema in flashattn/_ops.py, autograd in csrc/autograd.cpp). Thin by
// design: checks (csrc/host_args.h), fills FwdParams, calls a forward's packed flavour: the Hopper
// one under backend 'auto' where it runs the call (flash_fwd_sm90_varlen, csrc/flash_fwd_sm90/),
// else the portable one (flash_fwd_varlen, csrc/flash_fwd/). Never reads cu_seqlens on the host, so
// a call is CUDA-graph capturable.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <tuple>

#include "common/unowned_rows.h"
#include "device_limits.h"
#include "flash_fwd/api.h"
#include "flash_fwd_sm90/api.h"
#include "host_args.h"

namespace {

using flashattn::CausalMode;

std::tuple<at::Tensor, at::Tensor> fwd_varlen_cuda(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                                   const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                                                   int64_t max_seqlen_q, int64_t max_seqlen_k,
                                                   std::optional<double> softmax_scale, int64_t causal_mode,
                                                   c10::string_view backend, int64_t window_left, int64_t window_right,
                                                   double softcap) {
  constexpr const char* op = "flashattn::fwd_varlen";
  flashattn::check_qkv(op, q_in, k_in, v_in, 3, "[total, H, D]");
  flashattn::check_unit_last_stride(op, {&q_in, &k_in, &v_in});
  const int64_t B = flashattn::check_packing(op, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, q_in);
  const int64_t total_q = q_in.size(0), Hq = q_in.size(1), D = q_in.size(2);
  const int64_t total_k = k_in.size(0);
  flashattn::check_mask(op, causal_mode, window_left, window_right, softcap);
  flashattn::check_packed_backend(op, backend);
  const float scale = flashattn::softmax_scale_of(op, softmax_scale, D);
  const int64_t bound_q = max_seqlen_q, bound_k = max_seqlen_k;  // the caller's, before the clamp below
  flashattn::check_packed_sizes(op, B, total_q, total_k, Hq, max_seqlen_q, max_seqlen_k);

  const c10::cuda::CUDAGuard guard(q_in.device());
  at::Tensor out = at::empty({total_q, Hq, D}, q_in.options());
  // lse, and behind it one int32 word for the Hopper path's tile counter (the dense binding's form).
  const int64_t lse_numel = Hq * total_q;
  at::Tensor lse_storage = at::empty({lse_numel + 1}, q_in.options().dtype(at::kFloat));
  at::Tensor lse = lse_storage.as_strided({Hq, total_q}, {total_q, 1});  // one view op
  if (out.numel() == 0) return {out, lse};
  if (B == 0) {  // no sequence: every row is unowned
    out.zero_();
    lse.fill_(-std::numeric_limits<float>::infinity());
    return {out, lse};
  }

  const at::Tensor q = flashattn::aligned_or_copy(q_in), k = flashattn::aligned_or_copy(k_in),
                   v = flashattn::aligned_or_copy(v_in);
  flashattn::FwdParams p;
  flashattn::set_packed(p, q, k, v, out, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k);
  p.set_bounds(bound_q, bound_k);
  p.lse = lse.data_ptr<float>();
  p.dtype = flashattn::dtype_of(q);
  p.set_scale(scale);
  p.set_softcap(static_cast<float>(softcap));
  p.set_mask(static_cast<CausalMode>(causal_mode), window_left, window_right);

  const flashattn::DeviceLimits dev = flashattn::device_limits(q.get_device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.get_device()).stream();
  // The Hopper path hands its query tiles out through a zeroed counter private to the call.
  cudaError_t err = cudaErrorNotSupported;
  if (backend == "auto" && flashattn::flash_fwd_sm90_varlen_supported(p, dev)) {
    flashattn::set_zeroed_tile_counter(op, p, lse_storage, lse_numel, stream);
    err = flashattn::flash_fwd_sm90_varlen(p, dev, stream);
  }
  if (err == cudaErrorNotSupported) err = flashattn::flash_fwd_varlen(p, dev, stream);
  FLASHATTN_CHECK(err == cudaSuccess, op, ": kernel launch failed: ", cudaGetErrorString(err));
  // Rows no sequence owns (padding at the end of a packed buffer): out 0 and lse -inf, as for a
  // row that sees no key, rather than whatever memory the allocator handed out.
  err = flashattn::fill_unowned_rows(out.data_ptr(), 1, total_q, Hq * D / 2, cu_seqlens_q.data_ptr<int>(),
                                     static_cast<int>(B), 0u, stream);
  if (err == cudaSuccess)
    err = flashattn::fill_unowned_rows(lse.data_ptr(), Hq, total_q, 1, cu_seqlens_q.data_ptr<int>(), static_cast<int>(B),
                                       0xff800000u, stream);
  FLASHATTN_CHECK(err == cudaSuccess, op, ": kernel launch failed: ", cudaGetErrorString(err));
  return {out, lse};
}

}  // namespace

TORCH_LIBRARY_IMPL(flashattn, CUDA, m) { m.impl("fwd_varlen", &fwd_varlen_cuda); }
