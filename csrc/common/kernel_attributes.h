// Host side: a kernel's dynamic shared-memory limit set once per device rather than per launch (a
// cudaFuncSetAttribute is about a microsecond of CPU time, paid on every call of the small shapes
// the host path is timed on). The flag is per kernel (a template instance per kernel) and device;
// concurrent first calls each set the same value, and the atomic keeps that free of data races.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace flashattn {

template <auto kKernel>
cudaError_t set_max_dynamic_smem_once(const int bytes) {
  static std::atomic<uint64_t> done{0};  // bit d: set on device d
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64)
    return cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  const uint64_t bit = uint64_t{1} << device;
  if (done.load(std::memory_order_relaxed) & bit) return cudaSuccess;
  const cudaError_t err = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess) done.fetch_or(bit, std::memory_order_relaxed);
  return err;
}

}  // namespace flashattn
