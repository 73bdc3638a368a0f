// The torch binding of the dense forward: the CUDA implementations of flashattn::fwd and
// flashattn::fwd_bhsd (schemas in flashattn/_ops.py, autograd in csrc/autograd.cpp). Thin by
// design: checks (csrc/host_args.h), fills FwdParams, calls the launcher in csrc/flash_fwd/ or
// csrc/flash_fwd_sm90/.
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "device_limits.h"
#include "flash_fwd/api.h"
#include "flash_fwd_sm90/api.h"
#include "host_args.h"

#define FLASHATTN_STR2(x) #x
#define FLASHATTN_STR(x) FLASHATTN_STR2(x)

namespace {

using flashattn::CausalMode;

// The dense forward on q, k, v [B, S, H, D] (bhsd false) or [B, H, S, D] (bhsd true: read through
// their strides as they are, no transposed views taken), out shaped like q, stored [B, Sq, Hq, D].
std::tuple<at::Tensor, at::Tensor> fwd_impl(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                            std::optional<double> softmax_scale, int64_t causal_mode,
                                            c10::string_view backend, int64_t window_left, int64_t window_right,
                                            double softcap, const bool bhsd) {
  const char* const op = bhsd ? "flashattn::fwd_bhsd" : "flashattn::fwd";
  const int s_dim = bhsd ? 2 : 1, h_dim = bhsd ? 1 : 2;
  flashattn::check_qkv(op, q_in, k_in, v_in, 4, bhsd ? "[B, H, S, D]" : "[B, S, H, D]", h_dim);
  flashattn::check_unit_last_stride(op, {&q_in, &k_in, &v_in});
  const int64_t B = q_in.size(0), Sq = q_in.size(s_dim), Hq = q_in.size(h_dim), D = q_in.size(3);
  const int64_t Sk = k_in.size(s_dim);
  FLASHATTN_CHECK(k_in.size(0) == B, op, ": k/v batch size differs from q's");
  FLASHATTN_CHECK(Sk >= 1 || B * Sq * Hq == 0, op, ": key sequence length must be >= 1");
  flashattn::check_mask(op, causal_mode, window_left, window_right, softcap);
  flashattn::check_backend(op, backend);
  const float scale = flashattn::softmax_scale_of(op, softmax_scale, D);
  FLASHATTN_CHECK(B <= INT32_MAX && Sq <= INT32_MAX && Sk <= INT32_MAX && Hq <= INT32_MAX, op, ": sizes too large");

  const c10::cuda::CUDAGuard guard(q_in.device());
  // The outputs come from the caching allocator without a dispatcher op each
  // (at::detail::empty_cuda; the kernels write every element, so the fill of new memory that
  // torch.use_deterministic_algorithms asks of at::empty is not wanted). out in [B, Sq, Hq, D]
  // memory, for fwd_bhsd seen as [B, Hq, Sq, D] (no transposed view after).
  const at::TensorOptions options = q_in.options();
  at::Tensor out = bhsd ? at::detail::empty_strided_cuda({B, Hq, Sq, D}, {Sq * Hq * D, D, Hq * D, 1}, options)
                        : at::detail::empty_cuda({B, Sq, Hq, D}, options);
  // lse [B, Hq, Sq], and behind it (where the Hopper path's dynamic schedule wants it, below) one
  // int32 word for its tile counter: one allocation for both, shaped as lse in place (no view op).
  const int64_t lse_numel = B * Hq * Sq;
  at::Tensor lse = at::detail::empty_cuda({lse_numel + 1}, options.dtype(at::kFloat));
  const int64_t lse_sizes[] = {B, Hq, Sq}, lse_strides[] = {Hq * Sq, Sq, 1};
  lse.unsafeGetTensorImpl()->set_sizes_and_strides(at::IntArrayRef(lse_sizes), at::IntArrayRef(lse_strides));
  if (out.numel() == 0) return {out, lse};

  const at::Tensor q = flashattn::aligned_or_copy(q_in), k = flashattn::aligned_or_copy(k_in),
                   v = flashattn::aligned_or_copy(v_in);
  flashattn::FwdParams p;
  flashattn::set_dense(p, q, k, v, out, s_dim, h_dim);
  p.lse = lse.data_ptr<float>();
  p.dtype = flashattn::dtype_of(q);
  p.set_scale(scale);
  p.set_softcap(static_cast<float>(softcap));
  p.set_mask(static_cast<CausalMode>(causal_mode), window_left, window_right);

  const flashattn::DeviceLimits dev = flashattn::device_limits(q.get_device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.get_device()).stream();
  // 'auto' runs a tiny call (one short tile a head, few heads) on the portable path, which finishes
  // it before the Hopper kernel's prologue does. Otherwise the Hopper path's plan (config, schedule,
  // split), made once for the call.
  const bool portable =
      backend == "portable" || (backend == "auto" && flashattn::flash_fwd_sm90_prefers_portable(p, dev));
  const flashattn::Sm90FwdPlan plan = portable ? flashattn::Sm90FwdPlan{} : flashattn::flash_fwd_sm90_plan(p, dev);
  // The Hopper path balances causal work over the SMs by handing its tiles out through a zeroed
  // counter private to this call: the word behind lse, zeroed by a stream-ordered memset, so
  // concurrent streams never share one and CUDA-graph capture records it (at::zeros cost an
  // allocation and a fill kernel per call).
  if (plan.tile_counter) flashattn::set_zeroed_tile_counter(op, p, lse, lse_numel, stream);
  // Few query tiles for the SMs (short prefills, B=1 H=1): the Hopper path splits each tile's keys
  // over several CTAs, which merge in shared memory as one cluster where they can, else write
  // float32 partials (one allocation: o_accum, then lse_accum) that a second kernel merges into
  // out and lse. The portable path ignores the split.
  at::Tensor split_accum;
  p.num_splits = plan.split.num_splits;
  if (plan.split.num_splits > 1 && !plan.split.in_cluster) {
    const int64_t rows = plan.split.num_splits * B * Hq * Sq;
    split_accum = at::detail::empty_cuda({rows * (D + 1)}, options.dtype(at::kFloat));
    p.o_accum = split_accum.data_ptr<float>();
    p.lse_accum = p.o_accum + rows * D;
  }
  cudaError_t err;
  if (portable) {
    err = flashattn::flash_fwd(p, dev, stream);
  } else {
    // flash_fwd_sm90 answers cudaErrorNotSupported before any launch when the plan found no
    // instantiation or the driver refused a tensor map: no sticky error, so 'auto' can run the
    // portable path instead.
    err = flashattn::flash_fwd_sm90(p, plan, dev, stream);
    if (err == cudaErrorNotSupported) {
      FLASHATTN_CHECK(backend == "auto", op, ": backend 'hopper' needs a compute capability 9.0 GPU (found ",
                  dev.cc_major, ".", dev.cc_minor,
                  "), an extension built with TORCH_CUDA_ARCH_LIST containing 9.0a (this build: ",
                  FLASHATTN_STR(FLASHATTN_ARCHS), "), and 16-byte aligned q/k/v with row/head/batch strides that "
                  "are multiples of 8 elements; use backend 'auto' or 'portable' otherwise");
      err = flashattn::flash_fwd(p, dev, stream);
    }
  }
  FLASHATTN_CHECK(err == cudaSuccess, op, ": kernel launch failed: ", cudaGetErrorString(err));
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor> fwd_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            std::optional<double> softmax_scale, int64_t causal_mode,
                                            c10::string_view backend, int64_t window_left, int64_t window_right,
                                            double softcap) {
  return fwd_impl(q, k, v, softmax_scale, causal_mode, backend, window_left, window_right, softcap, false);
}

// flashattn::fwd on the torch layout [B, H, S, D] (SDPA's), out in that layout too (allocated as the
// [B, S, H, D] buffer the kernels write, seen as [B, H, S, D]). q, k, v are read through their own
// strides: a transposed view of each tensor cost a dispatcher op a call.
std::tuple<at::Tensor, at::Tensor> fwd_bhsd_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                 std::optional<double> softmax_scale, int64_t causal_mode,
                                                 c10::string_view backend, int64_t window_left, int64_t window_right,
                                                 double softcap) {
  return fwd_impl(q, k, v, softmax_scale, causal_mode, backend, window_left, window_right, softcap, true);
}

}  // namespace

TORCH_LIBRARY_IMPL(flashattn, CUDA, m) {
  m.impl("fwd", &fwd_cuda);
  m.impl("fwd_bhsd", &fwd_bhsd_cuda);
}
