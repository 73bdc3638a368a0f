// Does compute-sanitizer's initcheck see memory written by a TMA (bulk tensor) store? (issue 25)
//
// The Hopper forward writes `out` with cp.async.bulk.tensor stores; initcheck then reported every
// later plain read of `out` (the backward's preprocess) as an uninitialized global read. This is
// the smallest program with the same pattern, to tell a tool limitation from a real bug:
//   buffer A (cudaMalloc, never initialized) <- one 64 x 64 fp16 tile by a TMA store
//   buffer B (cudaMalloc, never initialized) <- the same tile by plain st.global (the control)
//   a plain kernel reads both; the host copies both back and checks every element.
// If the values are right (exit 0) and initcheck reports reads of A but none of B, initcheck does
// not track bulk tensor stores and the Hopper forward's reports are false (docs/sanitizer.md).
//
//   nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a lab/initcheck_tma.cu -o build/initcheck_tma
//   compute-sanitizer --tool initcheck build/initcheck_tma
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#define CHECK(x)                                                                           \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));       \
      return 2;                                                                            \
    }                                                                                      \
  } while (0)

constexpr int kRows = 64, kCols = 64;

__device__ __forceinline__ __half value_at(int r, int c) { return __float2half(static_cast<float>(r * kCols + c) * 0.25f); }

// One CTA: fill a 64 x 64 tile in shared memory, make it visible to the async proxy, store it with
// one 2-D bulk tensor store, and wait until the store has completed (reads of global memory by a
// later kernel are then ordered by the kernel boundary).
__global__ void tma_store_kernel(const __grid_constant__ CUtensorMap map) {
  __shared__ alignas(128) __half tile[kRows * kCols];
  for (int i = threadIdx.x; i < kRows * kCols; i += blockDim.x) tile[i] = value_at(i / kCols, i % kCols);
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t src = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(&map), "r"(src),
                 "r"(0), "r"(0)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  }
}

__global__ void plain_store_kernel(__half* dst) {
  for (int i = threadIdx.x; i < kRows * kCols; i += blockDim.x) dst[i] = value_at(i / kCols, i % kCols);
}

__global__ void read_kernel(const __half* a, const __half* b, float* sums) {
  float sa = 0.f, sb = 0.f;
  for (int i = threadIdx.x; i < kRows * kCols; i += blockDim.x) {
    sa += __half2float(a[i]);
    sb += __half2float(b[i]);
  }
  atomicAdd(&sums[0], sa);
  atomicAdd(&sums[1], sb);
}

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

int main() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &status));
  if (status != cudaDriverEntryPointSuccess || fn == nullptr) {
    std::printf("cuTensorMapEncodeTiled not found\n");
    return 2;
  }
  __half *a = nullptr, *b = nullptr;
  float* sums = nullptr;
  CHECK(cudaMalloc(&a, kRows * kCols * sizeof(__half)));
  CHECK(cudaMalloc(&b, kRows * kCols * sizeof(__half)));
  CHECK(cudaMalloc(&sums, 2 * sizeof(float)));
  CHECK(cudaMemset(sums, 0, 2 * sizeof(float)));

  CUtensorMap map;
  const cuuint64_t dims[2] = {kCols, kRows};
  const cuuint64_t strides[1] = {kCols * sizeof(__half)};
  const cuuint32_t box[2] = {kCols, kRows};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = reinterpret_cast<EncodeTiledFn>(fn)(
      &map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, a, dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::printf("cuTensorMapEncodeTiled failed: %d\n", static_cast<int>(r));
    return 2;
  }
  tma_store_kernel<<<1, 128>>>(map);
  plain_store_kernel<<<1, 128>>>(b);
  read_kernel<<<1, 128>>>(a, b, sums);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());

  std::vector<__half> ha(kRows * kCols), hb(kRows * kCols);
  CHECK(cudaMemcpy(ha.data(), a, ha.size() * sizeof(__half), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hb.data(), b, hb.size() * sizeof(__half), cudaMemcpyDeviceToHost));
  int wrong_a = 0, wrong_b = 0;
  for (int i = 0; i < kRows * kCols; ++i) {
    const float want = static_cast<float>(i) * 0.25f;
    wrong_a += __half2float(ha[i]) != __half2float(__float2half(want));
    wrong_b += __half2float(hb[i]) != __half2float(__float2half(want));
  }
  std::printf("initcheck_tma: TMA-stored buffer: %d wrong of %d; plain-stored buffer: %d wrong\n", wrong_a,
              kRows * kCols, wrong_b);
  std::printf("initcheck_tma: under initcheck, reports on the TMA buffer only (with 0 wrong) = the tool does not "
              "track bulk tensor stores\n");
  return wrong_a == 0 && wrong_b == 0 ? 0 : 1;
}
