// The few device helpers every softmax in csrc/ shares (portable, Hopper and decode kernels).
#pragma once

namespace flashattn {

// 2^x on the SFU; ex2(-inf) = 0.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
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
