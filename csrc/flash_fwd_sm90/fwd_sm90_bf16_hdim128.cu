// Explicit instantiation of the Hopper forward path: bf16, head dim 128 (and smaller dims rounded up to it).
#include "launch.cuh"

namespace flashattn {
namespace sm90 {
using Traits128 = Sm90DefaultConfig<128>::Traits;
template cudaError_t run_fwd_sm90<Traits128, __nv_bfloat16>(const FwdParams&, const DeviceLimits&, cudaStream_t);
template bool kernel_is_real<Traits128, __nv_bfloat16>();
}  // namespace sm90
}  // namespace flashattn
