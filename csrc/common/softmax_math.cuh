// The few device helpers every softmax in csrc/ shares (portable, Hopper and decode kernels).
#pragma once

namespace flashattn {

// 2^x on the SFU; ex2(-inf) = 0.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// log2(x) on the SFU; lg2(0) = -inf.
__device__ __forceinline__ float lg2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The softcap's derivative factor 1 - t^2 (t = tanh(x / c), dy/dx = 1 - t^2 for y = c t) from the
// probability p = 2^(t softcap_log2 - lse2) it produced, so that a backward keeps no t per score:
// t = (lg2(p) + lse2) / softcap_log2. A probability of 0 (masked, or underflowed) has no gradient
// and gets 0.
__device__ __forceinline__ float softcap_grad_from_p(float p, float lse2, float inv_softcap_log2) {
  const float t = (lg2(p) + lse2) * inv_softcap_log2;
  return p > 0.f ? 1.f - t * t : 0.f;
}

// tanh on the SFU (sm75+), for the logit softcap: one instruction, but approximate: PTX gives a
// maximum relative error of 2^-10.987 (about 4.9e-4, i.e. about one float16 ulp) over the whole
// range, so a capped score c * tanh(x / c) is off by up to ~4.9e-4 * |c tanh(x / c)| <= 4.9e-4 |x|,
// comparable to rounding the scores to float16 (tests/numerics.py allows for it explicitly).
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Row reductions over a quad: in the mma.sync m16n8 and wgmma m64nN accumulator layouts a row is
// spread over the 4 lanes of a quad, so two xor-shuffles reduce it.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace flashattn
