// Declarations of the per-instantiation entry points (defined in launch.cuh, explicitly
// instantiated in instantiations/fwd_sm90_*.cu), so that dispatch.cu compiles no kernel itself.
#pragma once

#include <cuda_runtime.h>

#include "../common/params.h"
#include "api.h"

namespace flashattn {
namespace sm90 {

template <typename Traits, typename Element, bool kDynamic>
cudaError_t run_fwd_sm90(const FwdParams& p, const DeviceLimits& dev, cudaStream_t stream);

template <typename Traits, typename Element, bool kDynamic>
bool kernel_is_real();

template <typename Traits, typename Element>
int max_active_clusters(int splits);

// The packed flavour's (instantiations/fwd_sm90_packed_*.cu).
template <typename Traits, typename Element>
cudaError_t run_fwd_sm90_packed(const FwdParams& p, const DeviceLimits& dev, cudaStream_t stream);

template <typename Traits, typename Element>
bool packed_kernel_is_real();

// The FP8 forward's (instantiations/fwd_sm90_fp8_*.cu).
template <typename Traits, bool kDynamic>
cudaError_t run_fwd_sm90_fp8(const FwdParams& p, const Fp8FwdArgs& x, const DeviceLimits& dev, cudaStream_t stream);

template <typename Traits, bool kDynamic>
bool fp8_kernel_is_real();

}  // namespace sm90
}  // namespace flashattn
