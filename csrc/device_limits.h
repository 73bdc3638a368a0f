// What the launchers need to know of a device (flashattn::DeviceLimits), read once per device and
// shared by the torch bindings (csrc/binding*.cpp). Through
// cudaDeviceGetAttribute, so no ATen/cuda/CUDAContext.h is needed, and under std::call_once, so no
// driver query lands on the per-call path (an inline function: one cache for the whole extension).
#pragma once

#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <mutex>
#include <utility>

#include "check.h"
#include "common/params.h"

namespace flashattn {

inline DeviceLimits read_device_limits(int device) {
  DeviceLimits d;
  for (auto [attr, field] : {std::pair{cudaDevAttrMultiProcessorCount, &d.sm_count},
                             std::pair{cudaDevAttrMaxSharedMemoryPerBlockOptin, &d.max_smem_per_block},
                             std::pair{cudaDevAttrComputeCapabilityMajor, &d.cc_major},
                             std::pair{cudaDevAttrComputeCapabilityMinor, &d.cc_minor}}) {
    const cudaError_t err = cudaDeviceGetAttribute(field, attr, device);
    FLASHATTN_CHECK(err == cudaSuccess, "flashattn: cannot read device ", device, "'s attributes: ", cudaGetErrorString(err));
  }
  return d;
}

inline DeviceLimits device_limits(int device) {
  constexpr int kMaxDevices = 64;
  if (device < 0 || device >= kMaxDevices) return read_device_limits(device);
  static std::once_flag once[kMaxDevices];
  static DeviceLimits cache[kMaxDevices];
  std::call_once(once[device], [device] { cache[device] = read_device_limits(device); });
  return cache[device];
}

}  // namespace flashattn
