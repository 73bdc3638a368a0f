// One launcher per decode tile config (explicitly instantiated in csrc/flash_decode/instantiations/):
// the split kernel's launch and its occupancy, which the split heuristic needs.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

#include "decode_kernel.cuh"
#include "decode_params.h"
#include "decode_traits.h"

namespace flashattn {

template <typename Traits, typename Element, bool kPaged>
cudaError_t decode_set_attributes() {
  auto kernel = flash_decode_split_kernel<Traits, Element, kPaged>;
  if constexpr (Traits::kSmemBytes > 48 * 1024) {
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes);
    if (err != cudaSuccess) return err;
  }
  // All of the unified L1/shared array as shared memory: K/V bypass L1 (cp.async.cg), and the
  // largest carveout is what lets 2-3 CTAs of ~75 KB share one SM.
  return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
}

constexpr int kDecodeMaxDevices = 64;

// Per device: the attributes above are set once (a host-side driver call per launch would cost
// about a microsecond of CPU time on a path whose GPU time can be a few microseconds), and the
// occupancy is queried once. Concurrent first calls each set the (same) attributes and store the
// (same) count; atomics keep that free of data races. The paged kernel is a kernel of its own, with
// its own attributes and occupancy.
template <typename Traits, typename Element, bool kPaged>
struct DecodeDeviceCache {
  static inline std::atomic<int> ctas_per_sm[kDecodeMaxDevices] = {};  // 0: not yet known
};

template <typename Traits, typename Element, bool kPaged>
cudaError_t decode_prepare(int* ctas_per_sm) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const bool cacheable = device >= 0 && device < kDecodeMaxDevices;
  if (cacheable) {
    const int known = DecodeDeviceCache<Traits, Element, kPaged>::ctas_per_sm[device].load(std::memory_order_acquire);
    if (known > 0) {
      if (ctas_per_sm != nullptr) *ctas_per_sm = known;
      return cudaSuccess;
    }
  }
  err = decode_set_attributes<Traits, Element, kPaged>();
  if (err != cudaSuccess) return err;
  int n = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, flash_decode_split_kernel<Traits, Element, kPaged>,
                                                      Traits::kNThreads, Traits::kSmemBytes);
  if (err != cudaSuccess) return err;
  if (n < 1) n = 1;
  if (cacheable) DecodeDeviceCache<Traits, Element, kPaged>::ctas_per_sm[device].store(n, std::memory_order_release);
  if (ctas_per_sm != nullptr) *ctas_per_sm = n;
  return cudaSuccess;
}

// CTAs of this config resident per SM on the current device (registers, shared memory and
// threads all counted by the runtime's occupancy calculator), for the contiguous or the paged
// cache's kernel.
template <typename Traits, typename Element>
cudaError_t decode_ctas_per_sm(int* ctas, bool paged = false) {
  return paged ? decode_prepare<Traits, Element, true>(ctas) : decode_prepare<Traits, Element, false>(ctas);
}

template <typename Traits, typename Element>
cudaError_t run_decode_split(const DecodeParams& p, cudaStream_t stream) {
  const long long grid = static_cast<long long>(p.num_m_blocks) * p.num_splits * p.heads_kv * p.batch;
  if (grid == 0) return cudaSuccess;
  if (grid > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  const unsigned blocks = static_cast<unsigned>(grid);
  if (p.block_table != nullptr) {
    const cudaError_t err = decode_prepare<Traits, Element, true>(nullptr);
    if (err != cudaSuccess) return err;
    flash_decode_split_kernel<Traits, Element, true><<<blocks, Traits::kNThreads, Traits::kSmemBytes, stream>>>(p);
  } else {
    const cudaError_t err = decode_prepare<Traits, Element, false>(nullptr);
    if (err != cudaSuccess) return err;
    flash_decode_split_kernel<Traits, Element, false><<<blocks, Traits::kNThreads, Traits::kSmemBytes, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace flashattn
