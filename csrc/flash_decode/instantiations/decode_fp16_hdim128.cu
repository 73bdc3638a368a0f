// The split-KV decoding kernel for __half, head dim 128 (the kPortable config of csrc/flash_decode/decode_traits.h).
// One config per translation unit keeps nvcc runs parallel; the registry in
// csrc/flash_decode/decode_dispatch.cu lists the same set.
#include "../decode_launch.cuh"

FLASHATTN_DECODE_INSTANTIATE(128, kPortable, __half)
