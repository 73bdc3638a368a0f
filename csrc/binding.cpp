// The torch binding: the CUDA implementations of flashattn::fwd and flashattn::fwd_bhsd (schemas in
// flashattn/_ops.py).
// Thin by design: checks, fills FwdParams, calls the launcher in csrc/flash_fwd/.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <cmath>
#include <string>

#include "device_limits.h"
#include "flash_fwd/api.h"
#include "flash_fwd_sm90/api.h"

#define FLASHATTN_STR2(x) #x
#define FLASHATTN_STR(x) FLASHATTN_STR2(x)

namespace {

using flashattn::CausalMode;
using flashattn::DType;

// cp.async moves 16-byte chunks: base pointers and row/head/batch strides must keep every chunk
// 16-byte aligned. Other views are copied (the caller asked for any strides, not for speed there).
at::Tensor aligned_for_kernel(const at::Tensor& t) {
  const bool ok = reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && t.stride(0) % 8 == 0 &&
                  t.stride(1) % 8 == 0 && t.stride(2) % 8 == 0;
  return ok ? t : t.contiguous();
}

std::tuple<at::Tensor, at::Tensor> fwd_cuda(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                            double softmax_scale, int64_t causal_mode, c10::string_view backend,
                                            int64_t window_left, int64_t window_right, double softcap) {
  TORCH_CHECK(q_in.dim() == 4 && k_in.dim() == 4 && v_in.dim() == 4, "flashattn::fwd: q, k, v must be 4-D [B, S, H, D]");
  TORCH_CHECK(q_in.scalar_type() == k_in.scalar_type() && q_in.scalar_type() == v_in.scalar_type(),
              "flashattn::fwd: q, k, v must share one dtype");
  TORCH_CHECK(q_in.scalar_type() == at::kHalf || q_in.scalar_type() == at::kBFloat16,
              "flashattn::fwd: dtype must be float16 or bfloat16");
  TORCH_CHECK(q_in.is_cuda() && k_in.device() == q_in.device() && v_in.device() == q_in.device(),
              "flashattn::fwd: q, k, v must be on one CUDA device");
  TORCH_CHECK(q_in.stride(-1) == 1 && k_in.stride(-1) == 1 && v_in.stride(-1) == 1,
              "flashattn::fwd: last dimension must be contiguous");
  const int64_t B = q_in.size(0), Sq = q_in.size(1), Hq = q_in.size(2), D = q_in.size(3);
  const int64_t Sk = k_in.size(1), Hk = k_in.size(2);
  TORCH_CHECK(k_in.sizes() == v_in.sizes(), "flashattn::fwd: k and v shapes differ");
  TORCH_CHECK(k_in.size(0) == B && k_in.size(3) == D, "flashattn::fwd: k/v batch or head dim differ from q");
  TORCH_CHECK(Hk > 0 && Hq % Hk == 0, "flashattn::fwd: q heads must be a multiple of k/v heads");
  TORCH_CHECK(D >= 8 && D <= 256 && D % 8 == 0, "flashattn::fwd: head dim must be a multiple of 8 in [8, 256]");
  TORCH_CHECK(Sk >= 1 || B * Sq * Hq == 0, "flashattn::fwd: key sequence length must be >= 1");
  TORCH_CHECK(causal_mode >= 0 && causal_mode <= 2, "flashattn::fwd: causal_mode must be 0, 1 or 2");
  TORCH_CHECK(window_left >= -1 && window_right >= -1, "flashattn::fwd: window_left and window_right must be >= -1 "
              "(-1: unbounded), got ", window_left, " and ", window_right);
  TORCH_CHECK(softcap == 0.0 || (softcap > 0.0 && std::isfinite(static_cast<float>(softcap)) && static_cast<float>(softcap) > 0.f),
              "flashattn::fwd: softcap must be 0 (off) or a positive float32-representable value, got ", softcap);
  TORCH_CHECK(backend == "auto" || backend == "portable" || backend == "hopper",
              "flashattn::fwd: backend must be 'auto', 'portable' or 'hopper', got '", std::string(backend), "'");
  TORCH_CHECK(B <= INT32_MAX && Sq <= INT32_MAX && Sk <= INT32_MAX && Hq <= INT32_MAX, "flashattn::fwd: sizes too large");

  const c10::cuda::CUDAGuard guard(q_in.device());
  at::Tensor out = at::empty({B, Sq, Hq, D}, q_in.options());
  at::Tensor lse = at::empty({B, Hq, Sq}, q_in.options().dtype(at::kFloat));
  if (out.numel() == 0) return {out, lse};

  const at::Tensor q = aligned_for_kernel(q_in), k = aligned_for_kernel(k_in), v = aligned_for_kernel(v_in);

  flashattn::FwdParams p;
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.o = out.data_ptr();
  p.lse = lse.data_ptr<float>();
  p.q_batch_stride = q.stride(0), p.q_row_stride = q.stride(1), p.q_head_stride = q.stride(2);
  p.k_batch_stride = k.stride(0), p.k_row_stride = k.stride(1), p.k_head_stride = k.stride(2);
  p.v_batch_stride = v.stride(0), p.v_row_stride = v.stride(1), p.v_head_stride = v.stride(2);
  p.o_batch_stride = out.stride(0), p.o_row_stride = out.stride(1), p.o_head_stride = out.stride(2);
  p.batch = static_cast<int>(B);
  p.heads_q = static_cast<int>(Hq);
  p.heads_kv = static_cast<int>(Hk);
  p.seqlen_q = static_cast<int>(Sq);
  p.seqlen_k = static_cast<int>(Sk);
  p.head_dim = static_cast<int>(D);
  p.dtype = q.scalar_type() == at::kBFloat16 ? DType::kBFloat16 : DType::kFloat16;
  p.set_scale(static_cast<float>(softmax_scale));
  p.set_softcap(static_cast<float>(softcap));
  p.set_mask(static_cast<CausalMode>(causal_mode), window_left, window_right);

  const flashattn::DeviceLimits dev = flashattn::device_limits(q.get_device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  // The Hopper path balances causal work over the SMs by handing its tiles out through a zeroed
  // counter private to this call: a stream-ordered allocation and memset, so concurrent streams
  // never share one, and CUDA-graph capture records both.
  at::Tensor tile_counter;
  if (backend != "portable" && flashattn::flash_fwd_sm90_wants_tile_counter(p, dev)) {
    tile_counter = at::zeros({1}, q.options().dtype(at::kInt));
    p.tile_counter = tile_counter.data_ptr<int>();
  }
  cudaError_t err;
  if (backend == "portable") {
    err = flashattn::flash_fwd(p, dev, stream);
  } else {
    // flash_fwd_sm90 checks flash_fwd_sm90_supported() itself and answers cudaErrorNotSupported
    // before any launch (also for a tensor map the driver refused): no sticky error, so 'auto' can
    // run the portable path instead, and the check is made once per call.
    err = flashattn::flash_fwd_sm90(p, dev, stream);
    if (err == cudaErrorNotSupported) {
      TORCH_CHECK(backend == "auto", "flashattn::fwd: backend 'hopper' needs a compute capability 9.0 GPU (found ",
                  dev.cc_major, ".", dev.cc_minor,
                  "), an extension built with TORCH_CUDA_ARCH_LIST containing 9.0a (this build: ",
                  FLASHATTN_STR(FLASHATTN_ARCHS), "), and 16-byte aligned q/k/v with row/head/batch strides that "
                  "are multiples of 8 elements; use backend 'auto' or 'portable' otherwise");
      err = flashattn::flash_fwd(p, dev, stream);
    }
  }
  TORCH_CHECK(err == cudaSuccess, "flashattn::fwd: kernel launch failed: ", cudaGetErrorString(err));
  return {out, lse};
}

// flashattn::fwd on the torch layout [B, H, S, D] (SDPA's), out in that layout too (a transposed view
// of the [B, S, H, D] buffer the kernels write). The views are taken here rather than in Python,
// where each one costs about a microsecond of host time per call (the latency grid is host-bound).
std::tuple<at::Tensor, at::Tensor> fwd_bhsd_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                 double softmax_scale, int64_t causal_mode, c10::string_view backend,
                                                 int64_t window_left, int64_t window_right, double softcap) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "flashattn::fwd_bhsd: q, k, v must be 4-D [B, H, S, D]");
  auto [out, lse] = fwd_cuda(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), softmax_scale, causal_mode, backend,
                             window_left, window_right, softcap);
  return {out.transpose(1, 2), lse};
}

std::map<std::string, std::string> build_info() {
  return {
      {"cuda_archs", FLASHATTN_STR(FLASHATTN_ARCHS)},
      {"nvcc", FLASHATTN_STR(FLASHATTN_NVCC_VERSION)},
      {"torch", FLASHATTN_STR(FLASHATTN_TORCH_VERSION)},
      {"cuda_runtime", std::to_string(CUDART_VERSION)},
  };
}

}  // namespace

TORCH_LIBRARY_IMPL(flashattn, CUDA, m) {
  m.impl("fwd", &fwd_cuda);
  m.impl("fwd_bhsd", &fwd_bhsd_cuda);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "flashattn CUDA kernels (the ops are registered under torch.ops.flashattn)";
  m.def("build_info", &build_info, "How this extension was built");
}
