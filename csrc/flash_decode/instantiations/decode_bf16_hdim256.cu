// The split-KV decoding kernel for __nv_bfloat16, head dim 256 (the kPortable config of csrc/flash_decode/decode_traits.h).
// One config per translation unit keeps nvcc runs parallel; the registry in
// csrc/flash_decode/decode_dispatch.cu lists the same set.
#include "../decode_launch.cuh"

FLASHATTN_DECODE_INSTANTIATE(256, kPortable, __nv_bfloat16)
