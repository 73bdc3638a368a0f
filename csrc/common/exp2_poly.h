// 2^x without the SFU, for the share of a softmax's exponentials that a kernel moves onto the FMA
// and integer pipes (Sm90FwdTraits::kExpEmu). Plain host/device C++, so tests/ checks the very
// code the kernels run against std::exp2 on a CPU.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FLASHATTN_EXP2_HD __host__ __device__ __forceinline__
#else
#define FLASHATTN_EXP2_HD inline
#endif

namespace flashattn {

// The bits of a 32-bit value as another 32-bit type (memcpy: defined behaviour in C++17, a plain
// register move in nvcc's and GCC's output).
template <typename To, typename From>
FLASHATTN_EXP2_HD To bits_as(From x) {
  static_assert(sizeof(To) == 4 && sizeof(From) == 4, "32-bit values");
  To y;
  std::memcpy(&y, &x, sizeof y);
  return y;
}

// For x <= 0 (or -inf): x = n + f with n = round(x) (adding 1.5 * 2^23 leaves n in the low
// mantissa bits of t; IEEE adds, nothing here can be contracted into an FMA), 2^f for
// f in [-0.5, 0.5] by a degree-3 relative-minimax polynomial (max relative error 7.5e-5, under
// half an ulp of fp16 and of bf16, which P is rounded to next), then n added to the exponent
// field: the bits of t shifted left by 23 are n << 23 modulo 2^32 (1.5 * 2^23's own bits all
// shift out). x < -125 gives 0, -inf included (2^x would be subnormal there; ex2.approx.ftz
// flushes those to 0 as well). Three FADDs, three FFMAs, a shift, an integer add, a select.
FLASHATTN_EXP2_HD float exp2_poly(float x) {
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23
  const float t = x + kRound;
  const float f = x - (t - kRound);
  const float p = ((0.05517132f * f + 0.24261054f) * f + 0.69326097f) * f + 0.99992812f;
  const float y = bits_as<float>(bits_as<uint32_t>(p) + (bits_as<uint32_t>(t) << 23));
  return x >= -125.f ? y : 0.f;
}

}  // namespace flashattn

#undef FLASHATTN_EXP2_HD
