// The DType tag of a CUDA element type, for the dispatch tables that map (dtype, head dim, variant)
// to an instantiated launcher: every path's registry.inc names its element types, not DType tags.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "params.h"

namespace flashattn {

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<__half>() { return DType::kFloat16; }
template <>
constexpr DType dtype_of<__nv_bfloat16>() { return DType::kBFloat16; }

}  // namespace flashattn
