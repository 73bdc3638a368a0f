// The split-KV decoding kernel for __nv_bfloat16, head dim 128, kHopper config: 8 warps, 142 KB of shared
// memory, run on sm90 only (see csrc/flash_decode/decode_traits.h). One config per translation
// unit keeps nvcc runs parallel; the registry in csrc/flash_decode/decode_dispatch.cu lists the same set.
#include "../decode_launch.cuh"

FLASHATTN_DECODE_INSTANTIATE(128, kHopper, __nv_bfloat16)
