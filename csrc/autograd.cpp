// The autograd of flashattn's ops, registered for the Autograd dispatch key (schemas in
// flashattn/_ops.py, CUDA kernels in csrc/binding*.cpp). It says what flashattn/_autograd.py says
// (the Python form, for machines without this extension): the forward ops save q, k, v, out and
// lse (never an S x S matrix), lse is not differentiable, the backward runs the backward op with
// the forward's scalars, backend and deterministic mode as they were when the forward ran, and a
// gradient of the backward is refused. In C++ because torch.library's Python autograd costs a call
// ~11 us of host time even when nothing requires grad (docs/perf-notes.md, "Host cost per call");
// here a call that needs no graph goes straight to the kernel. Device-independent: it reaches the
// kernels through the dispatcher only.
#include "autograd.h"

#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <tuple>

#include "host_args.h"

namespace flashattn {
namespace {
std::atomic<bool> deterministic_flag{false};
}  // namespace

void set_deterministic(bool flag) { deterministic_flag.store(flag, std::memory_order_relaxed); }
bool get_deterministic() { return deterministic_flag.load(std::memory_order_relaxed); }

}  // namespace flashattn

namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr const char* kDoubleBackwardMessage =
    "flashattn's backward is not differentiable: double backward (a gradient of a gradient, e.g. "
    "torch.autograd.grad(..., create_graph=True) followed by another backward) is not supported";

using FwdSig = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, std::optional<double>, int64_t,
                                          c10::string_view, int64_t, int64_t, double);
using BwdSig = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                  const Tensor&, const Tensor&, double, int64_t, bool, c10::string_view,
                                                  int64_t, int64_t, double);
using FwdVarlenSig = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                int64_t, int64_t, std::optional<double>, int64_t, c10::string_view,
                                                int64_t, int64_t, double);
using BwdVarlenSig = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                        const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                        int64_t, int64_t, double, int64_t, bool, c10::string_view,
                                                        int64_t, int64_t, double);
using KvcacheSig = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, const std::optional<Tensor>&,
                                              const std::optional<Tensor>&, const std::optional<Tensor>&, int64_t,
                                              std::optional<double>, bool, int64_t, int64_t, int64_t, double,
                                              const std::optional<Tensor>&, const std::optional<Tensor>&);

// The ops' handles, looked up once (the schemas are defined by flashattn/_ops.py before any call).
template <class Sig>
c10::TypedOperatorHandle<Sig> find_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}
const c10::TypedOperatorHandle<FwdSig>& fwd_op(bool bhsd) {
  static const auto fwd = find_op<FwdSig>("flashattn::fwd");
  static const auto fwd_bhsd = find_op<FwdSig>("flashattn::fwd_bhsd");
  return bhsd ? fwd_bhsd : fwd;
}
const c10::TypedOperatorHandle<BwdSig>& bwd_op() {
  static const auto op = find_op<BwdSig>("flashattn::bwd");
  return op;
}
const c10::TypedOperatorHandle<FwdVarlenSig>& fwd_varlen_op() {
  static const auto op = find_op<FwdVarlenSig>("flashattn::fwd_varlen");
  return op;
}
const c10::TypedOperatorHandle<BwdVarlenSig>& bwd_varlen_op() {
  static const auto op = find_op<BwdVarlenSig>("flashattn::bwd_varlen");
  return op;
}
const c10::TypedOperatorHandle<KvcacheSig>& kvcache_op() {
  static const auto op = find_op<KvcacheSig>("flashattn::fwd_kvcache");
  return op;
}

bool graph_needed(std::initializer_list<const Tensor*> inputs) {
  if (!at::GradMode::is_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

// The backward's deterministic mode, read when the forward runs: flashattn's switch or
// torch.use_deterministic_algorithms(True) (warn_only included, as torch's own ops do).
bool deterministic_backward() {
  return flashattn::get_deterministic() || at::globalContext().deterministicAlgorithms();
}

// The scalars a forward hands its backward.
void save_scalars(AutogradContext* ctx, std::optional<double> softmax_scale, const Tensor& q, int64_t causal_mode,
                  c10::string_view backend, int64_t window_left, int64_t window_right, double softcap) {
  ctx->saved_data["scale"] =
      softmax_scale.has_value() ? *softmax_scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  ctx->saved_data["causal_mode"] = causal_mode;
  ctx->saved_data["backend"] = std::string(backend);
  ctx->saved_data["window_left"] = window_left;
  ctx->saved_data["window_right"] = window_right;
  ctx->saved_data["softcap"] = softcap;
  ctx->saved_data["deterministic"] = deterministic_backward();
}

// The gradients of q, k, v where asked for, then none for the `rest` non-tensor inputs.
variable_list grads_for(AutogradContext* ctx, Tensor dq, Tensor dk, Tensor dv, size_t rest) {
  variable_list grads{ctx->needs_input_grad(0) ? std::move(dq) : Tensor(),
                      ctx->needs_input_grad(1) ? std::move(dk) : Tensor(),
                      ctx->needs_input_grad(2) ? std::move(dv) : Tensor()};
  grads.resize(3 + rest);
  return grads;
}

// Every kernel runs below autograd only, as torch.library's Python autograd runs it: ADInplaceOrView
// still sees the ops inside a kernel (fwd_bhsd's out stays a view of its [B, S, H, D] buffer) and
// the caches fwd_kvcache mutates.

// ---- flashattn::fwd and flashattn::fwd_bhsd -------------------------------------------------------

struct DenseAttention : torch::autograd::Function<DenseAttention> {
  static constexpr size_t kNonTensorInputs = 7;  // softmax_scale .. softcap, bhsd

  static variable_list forward(AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                               std::optional<double> softmax_scale, int64_t causal_mode, c10::string_view backend,
                               int64_t window_left, int64_t window_right, double softcap, bool bhsd) {
    Tensor out, lse;
    {
      at::AutoDispatchBelowAutograd below;
      std::tie(out, lse) =
          fwd_op(bhsd).call(q, k, v, softmax_scale, causal_mode, backend, window_left, window_right, softcap);
    }
    ctx->set_materialize_grads(false);
    ctx->mark_non_differentiable({lse});
    ctx->save_for_backward({q, k, v, out, lse});
    save_scalars(ctx, softmax_scale, q, causal_mode, backend, window_left, window_right, softcap);
    ctx->saved_data["bhsd"] = bhsd;
    return {out, lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Tensor& dout = grads[0];
    if (!dout.defined()) return variable_list(3 + kNonTensorInputs);
    const variable_list saved = ctx->get_saved_variables();
    const auto& d = ctx->saved_data;
    // The torch layout runs the same kernel on [B, S, H, D] views; its gradients come back as
    // [B, H, S, D] views of [B, S, H, D] buffers, like the forward's out.
    const bool bhsd = d.at("bhsd").toBool();
    auto bshd = [bhsd](const Tensor& t) { return bhsd ? t.transpose(1, 2) : t; };
    auto [dq, dk, dv] = bwd_op().call(bshd(dout), bshd(saved[0]), bshd(saved[1]), bshd(saved[2]), bshd(saved[3]),
                                      saved[4], d.at("scale").toDouble(), d.at("causal_mode").toInt(),
                                      d.at("deterministic").toBool(), d.at("backend").toStringRef(),
                                      d.at("window_left").toInt(), d.at("window_right").toInt(),
                                      d.at("softcap").toDouble());
    return grads_for(ctx, bshd(dq), bshd(dk), bshd(dv), kNonTensorInputs);
  }
};

template <bool kBhsd>
std::tuple<Tensor, Tensor> fwd_autograd(const Tensor& q, const Tensor& k, const Tensor& v,
                                        std::optional<double> softmax_scale, int64_t causal_mode,
                                        c10::string_view backend, int64_t window_left, int64_t window_right,
                                        double softcap) {
  if (!graph_needed({&q, &k, &v})) {
    at::AutoDispatchBelowAutograd below;
    return fwd_op(kBhsd).call(q, k, v, softmax_scale, causal_mode, backend, window_left, window_right, softcap);
  }
  const variable_list r =
      DenseAttention::apply(q, k, v, softmax_scale, causal_mode, backend, window_left, window_right, softcap, kBhsd);
  return {r[0], r[1]};
}

// ---- flashattn::fwd_varlen ------------------------------------------------------------------------

struct PackedAttention : torch::autograd::Function<PackedAttention> {
  static constexpr size_t kNonTensorInputs = 10;  // cu_seqlens_q .. softcap

  static variable_list forward(AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k, int64_t max_seqlen_q,
                               int64_t max_seqlen_k, std::optional<double> softmax_scale, int64_t causal_mode,
                               c10::string_view backend, int64_t window_left, int64_t window_right, double softcap) {
    Tensor out, lse;
    {
      at::AutoDispatchBelowAutograd below;
      std::tie(out, lse) = fwd_varlen_op().call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                                softmax_scale, causal_mode, backend, window_left, window_right, softcap);
    }
    ctx->set_materialize_grads(false);
    ctx->mark_non_differentiable({lse});
    // The packing (cu_seqlens, the max_seqlen bounds) is walked by the backward exactly as here.
    ctx->save_for_backward({q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k});
    save_scalars(ctx, softmax_scale, q, causal_mode, backend, window_left, window_right, softcap);
    ctx->saved_data["max_seqlen_q"] = max_seqlen_q;
    ctx->saved_data["max_seqlen_k"] = max_seqlen_k;
    return {out, lse};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Tensor& dout = grads[0];
    if (!dout.defined()) return variable_list(3 + kNonTensorInputs);
    const variable_list s = ctx->get_saved_variables();
    const auto& d = ctx->saved_data;
    // As flashattn/_autograd.py's backward (flashattn._ops.bwd_varlen): a forward that ran with
    // 'hopper' (possible only on a kernel that does not refuse it) gets no backward kernel either.
    FLASHATTN_CHECK_VALUE(d.at("backend").toStringRef() != "hopper", "flashattn::bwd_varlen: ",
                      flashattn::kVarlenHopperMessage);
    auto [dq, dk, dv] = bwd_varlen_op().call(
        dout, s[0], s[1], s[2], s[3], s[4], s[5], s[6], d.at("max_seqlen_q").toInt(), d.at("max_seqlen_k").toInt(),
        d.at("scale").toDouble(), d.at("causal_mode").toInt(), d.at("deterministic").toBool(),
        d.at("backend").toStringRef(), d.at("window_left").toInt(), d.at("window_right").toInt(),
        d.at("softcap").toDouble());
    return grads_for(ctx, dq, dk, dv, kNonTensorInputs);
  }
};

std::tuple<Tensor, Tensor> fwd_varlen_autograd(const Tensor& q, const Tensor& k, const Tensor& v,
                                               const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k,
                                               int64_t max_seqlen_q, int64_t max_seqlen_k,
                                               std::optional<double> softmax_scale, int64_t causal_mode,
                                               c10::string_view backend, int64_t window_left, int64_t window_right,
                                               double softcap) {
  if (!graph_needed({&q, &k, &v})) {
    at::AutoDispatchBelowAutograd below;
    return fwd_varlen_op().call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                                causal_mode, backend, window_left, window_right, softcap);
  }
  const variable_list r = PackedAttention::apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                                 softmax_scale, causal_mode, backend, window_left, window_right,
                                                 softcap);
  return {r[0], r[1]};
}

// ---- the backward ops: their own gradient is refused ----------------------------------------------
// Without an autograd kernel, torch would let a double backward through them run and silently
// leave gradients out; a graph node over their inputs that raises says so instead.

using Grads = std::tuple<Tensor, Tensor, Tensor>;

struct NotDifferentiable : torch::autograd::Function<NotDifferentiable> {
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs, const std::function<Grads()>& run) {
    at::AutoDispatchBelowAutograd below;
    auto [dq, dk, dv] = run();
    return {dq, dk, dv};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    FLASHATTN_CHECK(false, kDoubleBackwardMessage);
    return {};
  }
};

Grads run_backward_op(at::TensorList inputs, const std::function<Grads()>& run) {
  bool graph = at::GradMode::is_enabled();
  if (graph) {
    graph = false;
    for (const Tensor& t : inputs) graph = graph || t.requires_grad();
  }
  if (!graph) {
    at::AutoDispatchBelowAutograd below;
    return run();
  }
  const variable_list r = NotDifferentiable::apply(inputs, run);
  return {r[0], r[1], r[2]};
}

Grads bwd_autograd(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& lse, double softmax_scale, int64_t causal_mode, bool deterministic,
                   c10::string_view backend, int64_t window_left, int64_t window_right, double softcap) {
  return run_backward_op({dout, q, k, v, out, lse}, [&] {
    return bwd_op().call(dout, q, k, v, out, lse, softmax_scale, causal_mode, deterministic, backend, window_left,
                         window_right, softcap);
  });
}

Grads bwd_varlen_autograd(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k,
                          int64_t max_seqlen_q, int64_t max_seqlen_k, double softmax_scale, int64_t causal_mode,
                          bool deterministic, c10::string_view backend, int64_t window_left, int64_t window_right,
                          double softcap) {
  return run_backward_op({dout, q, k, v, out, lse}, [&] {
    return bwd_varlen_op().call(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                softmax_scale, causal_mode, deterministic, backend, window_left, window_right, softcap);
  });
}

// ---- flashattn::fwd_kvcache: inference only -------------------------------------------------------

std::tuple<Tensor, Tensor> fwd_kvcache_autograd(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                                const std::optional<Tensor>& k, const std::optional<Tensor>& v,
                                                const std::optional<Tensor>& cache_seqlens, int64_t cache_seqlen,
                                                std::optional<double> softmax_scale, bool causal, int64_t num_splits,
                                                int64_t window_left, int64_t window_right, double softcap,
                                                const std::optional<Tensor>& block_table,
                                                const std::optional<Tensor>& seqused_k) {
  if (at::GradMode::is_enabled()) {
    const Tensor none;
    for (auto [name, t] : {std::pair{"q", &q}, std::pair{"k_cache", &k_cache}, std::pair{"v_cache", &v_cache},
                           std::pair{"k", k.has_value() ? &*k : &none}, std::pair{"v", v.has_value() ? &*v : &none}})
      FLASHATTN_CHECK(!(t->defined() && t->requires_grad()), "flash_attn_with_kvcache is inference-only (no backward), but ",
                  name, " requires grad: use flashattn.flash_attn_func (or scaled_dot_product_attention) to train, "
                  "or call it under torch.no_grad() / torch.inference_mode()");
  }
  at::AutoDispatchBelowAutograd below;
  return kvcache_op().call(q, k_cache, v_cache, k, v, cache_seqlens, cache_seqlen, softmax_scale, causal, num_splits,
                           window_left, window_right, softcap, block_table, seqused_k);
}

}  // namespace

TORCH_LIBRARY_IMPL(flashattn, Autograd, m) {
  m.impl("fwd", &fwd_autograd<false>);
  m.impl("fwd_bhsd", &fwd_autograd<true>);
  m.impl("fwd_varlen", &fwd_varlen_autograd);
  m.impl("bwd", &bwd_autograd);
  m.impl("bwd_varlen", &bwd_varlen_autograd);
  m.impl("fwd_kvcache", &fwd_kvcache_autograd);
}
