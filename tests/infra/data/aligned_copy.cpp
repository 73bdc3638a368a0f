// flashattn::aligned_or_copy (csrc/host_args.h) on CPU tensors: what the bindings hand the kernels
// must be 16-byte loadable, copied once where the view is not, and the same tensor where it is.
// Prints one line per case (tests/infra/test_host_args_cpu.py compares them).
#include <cstdint>
#include <cstdio>

#include "host_args.h"

static void show(const char* name, const at::Tensor& view) {
  const at::Tensor got = flashattn::aligned_or_copy(view);
  const bool aligned = reinterpret_cast<uintptr_t>(got.data_ptr()) % 16 == 0;
  const bool same = got.data_ptr() == view.data_ptr();
  const bool equal = at::equal(got, view);
  std::printf("%s aligned=%d same=%d equal=%d loadable=%d\n", name, aligned, same, equal,
              static_cast<int>(flashattn::aligned16(got)));
}

int main() {
  const auto half = at::TensorOptions().dtype(at::kHalf);
  const at::Tensor flat = at::randn({3 + 2 * 4 * 3 * 64}, half);
  // Contiguous by torch's rule, 6 bytes past a 16-byte boundary: contiguous() would hand it back.
  show("offset", flat.narrow(0, 3, 2 * 4 * 3 * 64).view({2, 4, 3, 64}));
  // One row of one head at that address (a sequence sliced from a packed batch).
  show("offset-one-row", flat.narrow(0, 3, 64).view({1, 1, 1, 64}));
  // Rows padded to 69 elements: strides a 16-byte load cannot step.
  show("pad-dim", at::randn({2, 4, 3, 69}, half).narrow(3, 0, 64));
  // Loadable views pass through uncopied: contiguous, a transposed [B, H, S, D] buffer, a sliced head.
  show("contiguous", at::randn({2, 4, 3, 64}, half));
  show("bhsd", at::randn({2, 3, 4, 64}, half).transpose(1, 2));
  show("slice-heads", at::randn({2, 4, 5, 64}, half).narrow(2, 2, 3));
  return 0;
}
