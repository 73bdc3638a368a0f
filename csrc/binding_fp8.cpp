// The torch binding of the FP8 Hopper forward (issue 29): the CUDA implementation of
// flashattn::fwd_fp8 (schema and fake kernel in flashattn/_ops.py). q, k, v float8_e4m3fn
// [B, S, H, D]; q_descale, k_descale, v_descale float32 [B, Hk] (FlashAttention-3's form); out
// bfloat16 [B, Sq, Hq, D] and lse float32 [B, Hq, Sq]. Two launches on the current stream: the V
// transpose into a scratch V^T (csrc/flash_fwd_sm90/fp8_transpose.cu), then the forward. No
// backward (inputs that require grad are refused). docs/hopper.md, "FP8 forward".
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "device_limits.h"
#include "flash_fwd_sm90/api.h"
#include "host_args.h"

#define FLASHATTN_STR2(x) #x
#define FLASHATTN_STR(x) FLASHATTN_STR2(x)

namespace {

using flashattn::CausalMode;

constexpr const char* kOp = "flashattn::fwd_fp8";

void check_descale(const char* name, const at::Tensor& t, const at::Tensor& q, int64_t B, int64_t Hk) {
  FLASHATTN_CHECK(t.scalar_type() == at::kFloat, kOp, ": ", name, " must be float32, got ", t.scalar_type());
  FLASHATTN_CHECK(t.dim() == 2 && t.size(0) == B && t.size(1) == Hk, kOp, ": ", name,
                  " must have shape [batch, k/v heads] = [", B, ", ", Hk, "], got ", t.sizes());
  FLASHATTN_CHECK(t.device() == q.device(), kOp, ": ", name, " must be on q's device ", q.device(), ", got ",
                  t.device());
}

std::tuple<at::Tensor, at::Tensor> fwd_fp8_cuda(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                                const at::Tensor& q_descale_in, const at::Tensor& k_descale_in,
                                                const at::Tensor& v_descale_in, std::optional<double> softmax_scale,
                                                int64_t causal_mode) {
  FLASHATTN_CHECK(q_in.dim() == 4 && k_in.dim() == 4 && v_in.dim() == 4, kOp, ": q, k, v must be 4-D [B, S, H, D], got ",
                  q_in.sizes(), ", ", k_in.sizes(), ", ", v_in.sizes());
  FLASHATTN_CHECK(q_in.scalar_type() == at::kFloat8_e4m3fn && k_in.scalar_type() == at::kFloat8_e4m3fn &&
                      v_in.scalar_type() == at::kFloat8_e4m3fn,
                  kOp, ": q, k, v must all be float8_e4m3fn, got ", q_in.scalar_type(), ", ", k_in.scalar_type(), ", ",
                  v_in.scalar_type());
  FLASHATTN_CHECK(q_in.is_cuda() && k_in.device() == q_in.device() && v_in.device() == q_in.device(), kOp,
                  ": q, k, v must be on one CUDA device, got ", q_in.device(), ", ", k_in.device(), ", ", v_in.device());
  FLASHATTN_CHECK(!q_in.requires_grad() && !k_in.requires_grad() && !v_in.requires_grad(), kOp,
                  ": the FP8 forward has no backward; q, k, v must not require grad");
  FLASHATTN_CHECK(k_in.sizes() == v_in.sizes(), kOp, ": k and v shapes differ: ", k_in.sizes(), " and ", v_in.sizes());
  flashattn::check_unit_last_stride(kOp, {&q_in, &k_in, &v_in});
  const int64_t B = q_in.size(0), Sq = q_in.size(1), Hq = q_in.size(2), D = q_in.size(3);
  const int64_t Sk = k_in.size(1), Hk = k_in.size(2);
  FLASHATTN_CHECK(k_in.size(0) == B, kOp, ": k/v batch size differs from q's");
  FLASHATTN_CHECK(k_in.size(3) == D, kOp, ": k/v head dim differs from q's ", D);
  FLASHATTN_CHECK(Hk > 0 && Hq % Hk == 0, kOp, ": q heads (", Hq, ") must be a multiple of k/v heads (", Hk, ")");
  FLASHATTN_CHECK(D >= 16 && D <= 256 && D % 16 == 0, kOp, ": head dim must be a multiple of 16 in [16, 256], got ", D);
  FLASHATTN_CHECK(Sk >= 1 || B * Sq * Hq == 0, kOp, ": key sequence length must be >= 1");
  check_descale("q_descale", q_descale_in, q_in, B, Hk);
  check_descale("k_descale", k_descale_in, q_in, B, Hk);
  check_descale("v_descale", v_descale_in, q_in, B, Hk);
  FLASHATTN_CHECK(causal_mode >= 0 && causal_mode <= 2, kOp, ": causal_mode must be 0, 1 or 2, got ", causal_mode);
  const float scale = flashattn::softmax_scale_of(kOp, softmax_scale, D);
  FLASHATTN_CHECK(B <= INT32_MAX && Sq <= INT32_MAX && Sk <= INT32_MAX && Hq <= INT32_MAX, kOp, ": sizes too large");

  const c10::cuda::CUDAGuard guard(q_in.device());
  const flashattn::DeviceLimits dev = flashattn::device_limits(q_in.get_device());
  FLASHATTN_CHECK(dev.cc_major == 9 && dev.cc_minor == 0, kOp, ": the FP8 forward needs a compute capability 9.0 GPU "
                  "(H100/H200), found ", dev.cc_major, ".", dev.cc_minor);
  at::Tensor out = at::empty({B, Sq, Hq, D}, q_in.options().dtype(at::kBFloat16));
  if (out.numel() == 0) return {out, at::empty({B, Hq, Sq}, q_in.options().dtype(at::kFloat))};

  // TMA reads one-byte rows 16 bytes aligned (strides multiples of 16 elements), else one copy.
  const at::Tensor q = flashattn::aligned_or_copy(q_in), k = flashattn::aligned_or_copy(k_in),
                   v = flashattn::aligned_or_copy(v_in);
  const at::Tensor q_descale = q_descale_in.contiguous(), k_descale = k_descale_in.contiguous(),
                   v_descale = v_descale_in.contiguous();
  flashattn::FwdParams p;
  flashattn::set_dense(p, q, k, v, out);
  p.dtype = flashattn::DType::kFloat8E4M3;
  p.set_scale(scale);
  p.set_causal(static_cast<CausalMode>(causal_mode));

  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.get_device()).stream();
  // The dynamic schedule's counter, zeroed and private to the call, as flashattn::fwd allocates it
  // (csrc/binding.cpp).
  at::Tensor tile_counter;
  if (flashattn::flash_fwd_sm90_fp8_wants_tile_counter(p, dev)) {
    tile_counter = at::zeros({1}, q.options().dtype(at::kInt));
    p.tile_counter = tile_counter.data_ptr<int>();
  }
  const at::Tensor lse = at::empty({B, Hq, Sq}, q.options().dtype(at::kFloat));
  p.lse = lse.data_ptr<float>();
  FLASHATTN_CHECK(flashattn::flash_fwd_sm90_fp8_supported(p, dev), kOp, ": this build or these tensors cannot run "
                  "the FP8 forward: it needs an extension built with TORCH_CUDA_ARCH_LIST containing 9.0a (this "
                  "build: ", FLASHATTN_STR(FLASHATTN_ARCHS), ") and tensors TMA can describe");

  flashattn::Fp8FwdArgs x;
  x.vt_keys = flashattn::flash_fwd_sm90_fp8_vt_keys(Sk);
  const at::Tensor vt = at::empty({B, Hk, D, x.vt_keys}, q.options().dtype(at::kByte));  // V^T scratch
  x.vt = vt.data_ptr();
  x.q_descale = q_descale.data_ptr<float>();
  x.k_descale = k_descale.data_ptr<float>();
  x.v_descale = v_descale.data_ptr<float>();
  cudaError_t err = flashattn::flash_fwd_sm90_fp8_transpose_v(p, x, stream);
  FLASHATTN_CHECK(err == cudaSuccess, kOp, ": V transpose launch failed: ", cudaGetErrorString(err));
  err = flashattn::flash_fwd_sm90_fp8(p, x, dev, stream);
  FLASHATTN_CHECK(err == cudaSuccess, kOp, ": kernel launch failed: ", cudaGetErrorString(err));
  return {out, lse};
}

}  // namespace

TORCH_LIBRARY_IMPL(flashattn, CUDA, m) { m.impl("fwd_fp8", &fwd_fp8_cuda); }
