// Host side: a kernel's attributes (its dynamic shared-memory limit, its shared-memory carveout) set
// once per device rather than per launch (a cudaFuncSetAttribute is about a microsecond of CPU
// time, paid on every call of the small shapes the host path is timed on). The flag is per kernel
// and attribute (a template instance each) and device; concurrent first calls each set the same
// value, and the atomic keeps that free of data races.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace flashattn {

template <auto kKernel, cudaFuncAttribute kAttribute>
cudaError_t set_attribute_once(const int value) {
  static std::atomic<uint64_t> done{0};  // bit d: set on device d
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64)
    return cudaFuncSetAttribute(kKernel, kAttribute, value);
  const uint64_t bit = uint64_t{1} << device;
  if (done.load(std::memory_order_relaxed) & bit) return cudaSuccess;
  const cudaError_t err = cudaFuncSetAttribute(kKernel, kAttribute, value);
  if (err == cudaSuccess) done.fetch_or(bit, std::memory_order_relaxed);
  return err;
}

template <auto kKernel>
cudaError_t set_max_dynamic_smem_once(const int bytes) {
  return set_attribute_once<kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize>(bytes);
}

// The whole unified L1/shared array as shared memory: what lets several CTAs of a kernel share an SM.
template <auto kKernel>
cudaError_t set_max_shared_carveout_once() {
  return set_attribute_once<kKernel, cudaFuncAttributePreferredSharedMemoryCarveout>(cudaSharedmemCarveoutMaxShared);
}

// A kernel as a type, for generic lambdas that launch one of several kernels and set its
// attributes once (set_attribute_once needs the kernel as a template argument).
template <auto kKernel>
struct KernelRef {
  static constexpr auto value = kKernel;
};

}  // namespace flashattn
