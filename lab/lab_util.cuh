// Shared by the torch-free tile-config labs (kernel_lab.cu, bwd_lab.cu): a CUDA error check that
// exits, and a hash fill of bf16 inputs (timing only, no numerics).
#pragma once

#include <cuda_bf16.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(...)                                                                   \
  do {                                                                               \
    cudaError_t e = (__VA_ARGS__);                                                   \
    if (e != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

// Uniform in (-amp, amp), from a hash of the index and the seed.
__global__ void fill_random(__nv_bfloat16* x, size_t n, unsigned seed, float amp) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
    x[i] = __float2bfloat16(((h & 0xffff) / 32768.0f - 1.0f) * amp);
  }
}
