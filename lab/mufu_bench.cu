// Throughput of the SFU's exponential on this GPU: ex2.approx.f32 (one result per op) against the
// packed ex2.approx.f16x2 and ex2.approx.ftz.bf16x2 (two results per op, if the hardware pairs
// them). Decides whether the softmax could halve its SFU time by exponentiating packed 16-bit
// values (perf-notes "v11"). Results per clock per SM, every SM busy, 8 independent chains per
// thread so latency does not count.
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a lab/mufu_bench.cu -o build/mufu_bench && build/mufu_bench
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

constexpr int kChains = 8;
constexpr int kIters = 4096;

__global__ void ex2_f32(float* out, float seed) {
  float v[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) v[c] = -seed * (threadIdx.x % 7 + c) * 1e-3f;
  for (int i = 0; i < kIters; ++i)
#pragma unroll
    for (int c = 0; c < kChains; ++c) asm volatile("ex2.approx.ftz.f32 %0, %0;" : "+f"(v[c]));
  float s = 0.f;
#pragma unroll
  for (int c = 0; c < kChains; ++c) s += v[c];
  if (s == 12345.f) out[threadIdx.x] = s;
}

template <bool kBf16>
__global__ void ex2_x2(float* out, float seed) {
  uint32_t v[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) {
    const float f = -seed * (threadIdx.x % 7 + c) * 1e-3f;
    if (kBf16)
      asm("cvt.rn.bf16x2.f32 %0, %1, %1;" : "=r"(v[c]) : "f"(f));
    else
      asm("cvt.rn.f16x2.f32 %0, %1, %1;" : "=r"(v[c]) : "f"(f));
  }
  for (int i = 0; i < kIters; ++i)
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if (kBf16)
        asm volatile("ex2.approx.ftz.bf16x2 %0, %0;" : "+r"(v[c]));
      else
        asm volatile("ex2.approx.f16x2 %0, %0;" : "+r"(v[c]));
    }
  uint32_t s = 0;
#pragma unroll
  for (int c = 0; c < kChains; ++c) s ^= v[c];
  if (s == 12345u) out[threadIdx.x] = float(s);
}

template <typename K>
static double results_per_clk_per_sm(K kernel, int results_per_op, int sms, int clock_khz, float* out) {
  const int blocks = sms * 4, threads = 512;
  kernel<<<blocks, threads>>>(out, 1.f);  // warm-up
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  float best = 1e30f;
  for (int r = 0; r < 5; ++r) {
    cudaEventRecord(a);
    kernel<<<blocks, threads>>>(out, 1.f);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    best = ms < best ? ms : best;
  }
  const double results = double(blocks) * threads * kChains * kIters * results_per_op;
  const double clocks = best * 1e-3 * clock_khz * 1e3;
  return results / clocks / sms;
}

int main() {
  int dev = 0, sms = 0, clock_khz = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev);
  float* out;
  cudaMalloc(&out, 4096 * sizeof(float));
  std::printf("SMs %d, clock %d MHz (max; results/clk are relative to it)\n", sms, clock_khz / 1000);
  std::printf("ex2.approx.ftz.f32      %6.2f results/clk/SM\n", results_per_clk_per_sm(ex2_f32, 1, sms, clock_khz, out));
  std::printf("ex2.approx.f16x2        %6.2f results/clk/SM\n", results_per_clk_per_sm(ex2_x2<false>, 2, sms, clock_khz, out));
  std::printf("ex2.approx.ftz.bf16x2   %6.2f results/clk/SM\n", results_per_clk_per_sm(ex2_x2<true>, 2, sms, clock_khz, out));
  const cudaError_t e = cudaDeviceSynchronize();
  std::printf("%s\n", e == cudaSuccess ? "ok" : cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 2;
}
