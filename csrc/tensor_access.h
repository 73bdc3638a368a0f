// What the kernels' 16-byte vector accesses need of a tensor, shared by the torch bindings.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace flashattn {

// 16-byte vector access: base 16-byte aligned, unit last stride, every other stride (of a dim
// longer than 1) a multiple of 8 elements.
inline bool aligned16(const at::Tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0) return false;
  if (t.dim() > 0 && t.size(-1) > 1 && t.stride(-1) != 1) return false;
  for (int64_t dim = 0; dim < t.dim() - 1; ++dim)
    if (t.size(dim) > 1 && t.stride(dim) % 8 != 0) return false;
  return true;
}

// True when some dimension longer than 1 has stride 0 (a broadcast view, e.g. the gradient of
// out.sum()).
inline bool has_broadcast_dim(const at::Tensor& t) {
  for (int64_t dim = 0; dim < t.dim(); ++dim)
    if (t.size(dim) > 1 && t.stride(dim) == 0) return true;
  return false;
}

// A view the kernels cannot read 16 bytes at a time is copied once (the API promises any strides,
// not speed for every one of them).
inline at::Tensor aligned_or_copy(const at::Tensor& t) { return aligned16(t) ? t : t.contiguous(); }

}  // namespace flashattn
