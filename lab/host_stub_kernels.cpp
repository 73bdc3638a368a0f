// CPU stand-ins for flashattn's CUDA kernels, for timing the host path on a machine without a GPU
// (lab/host_overhead.py): each allocates the op's outputs with the shapes and strides the binding
// gives them and launches nothing. Boxed, so one stub serves any version of an op's schema (the
// timing compares the tree against an older checkout).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

namespace {

enum class Kind { kFwd, kFwdBhsd, kBwd, kFwdVarlen, kKvcache };

template <Kind kKind>
void stub(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  const at::Tensor q = torch::jit::peek(*stack, kKind == Kind::kBwd ? 1 : 0, n).toTensor();
  const at::Tensor k = torch::jit::peek(*stack, kKind == Kind::kBwd ? 2 : 1, n).toTensor();
  const at::Tensor v = torch::jit::peek(*stack, kKind == Kind::kBwd ? 3 : 2, n).toTensor();
  torch::jit::drop(*stack, n);
  const auto f32 = q.options().dtype(at::kFloat);
  switch (kKind) {
    case Kind::kFwd:
    case Kind::kKvcache:
      stack->emplace_back(at::empty(q.sizes(), q.options()));
      stack->emplace_back(at::empty({q.size(0), q.size(2), q.size(1)}, f32));
      break;
    case Kind::kFwdBhsd:
      stack->emplace_back(at::empty({q.size(0), q.size(2), q.size(1), q.size(3)}, q.options()).transpose(1, 2));
      stack->emplace_back(at::empty({q.size(0), q.size(1), q.size(2)}, f32));
      break;
    case Kind::kFwdVarlen:
      stack->emplace_back(at::empty(q.sizes(), q.options()));
      stack->emplace_back(at::empty({q.size(1), q.size(0)}, f32));
      break;
    case Kind::kBwd:
      stack->emplace_back(at::empty(q.sizes(), q.options()));
      stack->emplace_back(at::empty(k.sizes(), q.options()));
      stack->emplace_back(at::empty(v.sizes(), q.options()));
      break;
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(flashattn, CPU, m) {
  m.impl("fwd", torch::CppFunction::makeFromBoxedFunction<&stub<Kind::kFwd>>());
  m.impl("fwd_bhsd", torch::CppFunction::makeFromBoxedFunction<&stub<Kind::kFwdBhsd>>());
  m.impl("bwd", torch::CppFunction::makeFromBoxedFunction<&stub<Kind::kBwd>>());
  m.impl("fwd_varlen", torch::CppFunction::makeFromBoxedFunction<&stub<Kind::kFwdVarlen>>());
  m.impl("bwd_varlen", torch::CppFunction::makeFromBoxedFunction<&stub<Kind::kBwd>>());
  m.impl("fwd_kvcache", torch::CppFunction::makeFromBoxedFunction<&stub<Kind::kKvcache>>());
}
