// Explicit instantiation of the Hopper forward path: fp16, head dim 256 (and smaller dims rounded up to it).
#include "launch.cuh"

namespace flashattn {
namespace sm90 {
using Traits256 = Sm90DefaultConfig<256>::Traits;
template cudaError_t run_fwd_sm90<Traits256, __half>(const FwdParams&, const DeviceLimits&, cudaStream_t);
template bool kernel_is_real<Traits256, __half>();
}  // namespace sm90
}  // namespace flashattn
