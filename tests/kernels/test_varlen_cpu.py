"""Packed variable-length batches (flash_attn_varlen_func, issue 16), CPU side:

  * validation: every bad argument is refused with an error naming it, on fake CUDA tensors
    (FakeTensorMode, as tests/kernels/test_validation.py), before any kernel; valid calls reach the op's
    fake kernel with the documented shapes (out [total_q, Hq, D], lse float32 [Hq, total_q]);
  * the float64 varlen reference against an independent computation: one attention over the whole
    packed batch with a block-diagonal mask (sequence b's queries see only sequence b's keys,
    aligned per sequence);
  * the kernel's per-sequence mask: FwdParams::set_varlen + set_mask and the in-kernel window of
    each sequence (offset Sk_b - Sq_b, or 0 top-left) built with the host compiler, against
    flashattn.reference.visible_keys, including windows the host keeps although no row reaches them;
  * the forward op: torch.library.opcheck of the schema and fake kernel; torch.compile(fullgraph=True)
    traces it;
  * the backward (flashattn::bwd_varlen): its schema (the contract with the CUDA binding), fake
    kernel, and the argument checks of the fake kernel and of the Python wrapper the autograd calls
    (errors naming the argument, backend 'hopper' refused before the op);
  * the autograd of fwd_varlen with CPU stand-in kernels (tests/standin_kernels.py): gradients of
    flash_attn_varlen_func and of the op equal the float64 reference (and autograd through the
    float64 forward reference), gradcheck, zero gradients for rows no sequence owns, the
    deterministic switches, backend, window and softcap as the backward receives them,
    needs_input_grad, no double backward, opcheck, torch.compile of forward + backward;
  * the backward's config for a packed batch (host compiler): the compact route, on every device
    limit and head dim, and its packed flavour generated for exactly those configs.
The GPU numerics are in tests/kernels/test_varlen_gpu.py.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch._subclasses.fake_tensor import FakeTensorMode

import flashattn
import strategies as fst
from flashattn.reference import attention_reference, attention_reference_varlen, visible_keys
from repo_modules import ROOT, run_cpp_probe
from standin_kernels import allow_cpu_entry_points, cpu_standin_kernels
from tensor_makers import fake_maker

F16, BF16, F32, I32, I64 = torch.float16, torch.bfloat16, torch.float32, torch.int32, torch.int64
NONE, TOP_LEFT, BOTTOM_RIGHT = flashattn.CAUSAL_NONE, flashattn.CAUSAL_TOP_LEFT, flashattn.CAUSAL_BOTTOM_RIGHT
TQ, TK, HQ, HK, D, B = 40, 56, 4, 2, 64, 3


def varlen(mk, q_shape=(TQ, HQ, D), kv_shape=(TK, HK, D), cu_q=None, cu_k=None, max_q=16, max_k=24, dtype=F16,
           kv_dtype=None, device="cuda", q_strides=None, **kw):
    """One flash_attn_varlen_func call on tensors from mk, cu_seqlens int32 [B + 1] unless given."""
    q = mk(*q_shape, dtype=dtype, device=device, strides=q_strides)
    k, v = (mk(*kv_shape, dtype=kv_dtype or dtype, device=device) for _ in range(2))
    cu_q = mk(B + 1, dtype=I32, device=device) if cu_q is None else cu_q
    cu_k = mk(B + 1, dtype=I32, device=device) if cu_k is None else cu_k
    return flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, **kw)


BAD = [
    # id, call(mk), error, message
    ("q-rank-4", lambda mk: varlen(mk, q_shape=(1, TQ, HQ, D)), ValueError, "q must be 3-D [total_tokens, heads, head_dim]"),
    ("k-rank-2", lambda mk: varlen(mk, kv_shape=(TK, D)), ValueError, "k must have at least 3 dimensions"),
    ("float32", lambda mk: varlen(mk, dtype=F32), TypeError, "q.dtype must be torch.float16 or torch.bfloat16, got torch.float32"),
    ("cpu-tensors", lambda mk: varlen(mk, device="cpu"), ValueError, "q must be on a CUDA device, got device cpu"),
    ("mixed-dtypes", lambda mk: varlen(mk, kv_dtype=BF16), TypeError, "query, key and value must share one dtype"),
    ("head-dim-12", lambda mk: varlen(mk, q_shape=(TQ, HQ, 12), kv_shape=(TK, HK, 12)), ValueError, "multiple of 8 in [8, 256], got 12"),
    ("heads-not-multiple", lambda mk: varlen(mk, q_shape=(TQ, 6, D), kv_shape=(TK, 4, D)), ValueError, "q heads (6) must be a multiple of k/v heads (4)"),
    ("zero-kv-heads", lambda mk: varlen(mk, kv_shape=(TK, 0, D)), ValueError, "k/v must have at least one head"),
    ("noncontiguous-last-dim", lambda mk: varlen(mk, q_strides=(HQ * 2 * D, 2 * D, 2)), ValueError, "q must have a contiguous last dimension"),
    ("cu-q-int64", lambda mk: varlen(mk, cu_q=mk(B + 1, dtype=I64)), TypeError, "cu_seqlens_q.dtype must be torch.int32, got torch.int64"),
    ("cu-k-float", lambda mk: varlen(mk, cu_k=mk(B + 1, dtype=F32)), TypeError, "cu_seqlens_k.dtype must be torch.int32"),
    ("cu-q-on-cpu", lambda mk: varlen(mk, cu_q=mk(B + 1, dtype=I32, device="cpu")), ValueError, "cu_seqlens_q must be on q's device"),
    ("cu-k-2d", lambda mk: varlen(mk, cu_k=mk(1, B + 1, dtype=I32)), ValueError, "cu_seqlens_k must be 1-D [batch + 1]"),
    ("cu-q-empty", lambda mk: varlen(mk, cu_q=mk(0, dtype=I32), cu_k=mk(0, dtype=I32)), ValueError, "cu_seqlens_q must be 1-D [batch + 1]"),
    ("cu-q-noncontiguous", lambda mk: varlen(mk, cu_q=mk(B + 1, dtype=I32, strides=(2,))), ValueError, "cu_seqlens_q must be contiguous"),
    ("cu-lengths-differ", lambda mk: varlen(mk, cu_q=mk(B + 1, dtype=I32), cu_k=mk(B + 2, dtype=I32)), ValueError,
     "cu_seqlens_q and cu_seqlens_k must have the same length (batch + 1), got 4 and 5"),
    ("cu-not-a-tensor", lambda mk: varlen(mk, cu_q=[0, 10, 20, 40]), TypeError, "cu_seqlens_q must be a torch.Tensor (int32 [batch + 1]), got list"),
    ("max-seqlen-q-negative", lambda mk: varlen(mk, max_q=-1), ValueError, "max_seqlen_q must be >= 0, got -1"),
    ("max-seqlen-k-tensor", lambda mk: varlen(mk, max_k=mk(1, dtype=I32)), TypeError, "max_seqlen_k must be a Python int"),
    ("max-seqlen-k-float", lambda mk: varlen(mk, max_k=24.0), TypeError, "max_seqlen_k must be a Python int"),
    ("max-seqlen-q-bool", lambda mk: varlen(mk, max_q=True), TypeError, "max_seqlen_q must be a Python int"),
    ("window-below-minus-one", lambda mk: varlen(mk, window_size=(-2, 0)), ValueError, "window_size values must be >= -1 (-1: unbounded), got (-2, 0)"),
    ("window-float", lambda mk: varlen(mk, window_size=(4.0, 0)), TypeError, "window_size must be a pair of ints"),
    ("softcap-negative", lambda mk: varlen(mk, softcap=-1.0), ValueError, "softcap must be finite and >= 0 (0.0: off), got -1.0"),
    ("softcap-nan", lambda mk: varlen(mk, softcap=math.nan), ValueError, "softcap must be finite and >= 0"),
    ("scale-inf", lambda mk: varlen(mk, softmax_scale=math.inf), ValueError, "scale must be finite, got inf"),
]


@pytest.mark.parametrize(("call", "error", "match"), [pytest.param(c, e, m, id=i) for i, c, e, m in BAD])
def test_bad_input_is_refused(call, error, match) -> None:
    with FakeTensorMode(), pytest.raises(error) as info:
        call(fake_maker)
    assert match in str(info.value)


@contextmanager
def _backend(name: str) -> Iterator[None]:
    previous = flashattn.get_backend()
    flashattn.set_backend(name)
    try:
        yield
    finally:
        flashattn.set_backend(previous)


def test_hopper_backend_is_refused_by_name() -> None:
    """The Hopper path needs dense tensors (TMA): forced, a varlen call says so; it never runs
    another path silently."""
    with FakeTensorMode(), _backend("hopper"), pytest.raises(ValueError, match="backend 'hopper' does not support packed"):
        varlen(fake_maker)


def test_valid_inputs_reach_the_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table's calls with good inputs pass validation and reach the op (its fake kernel here):
    out [total_q, Hq, D] in q's dtype, lse float32 [Hq, total_q]; 'auto' and 'portable' both."""
    monkeypatch.setattr(flashattn._ext, "require_extension", lambda: None)
    with FakeTensorMode():
        for backend in ("auto", "portable"):
            with _backend(backend):
                out, lse = varlen(fake_maker, causal=True, window_size=(8, 0), softcap=30.0, return_lse=True)
                assert out.shape == (TQ, HQ, D) and out.dtype == F16
                assert lse.shape == (HQ, TQ) and lse.dtype == F32
        out = varlen(fake_maker, max_q=0, max_k=0, window_size=[3, 3], softcap=5)  # 0 bounds, list, int: fine
        assert out.shape == (TQ, HQ, D)
        out = varlen(fake_maker, kv_shape=(0, HK, D))  # no keys at all: every row sees none (out 0, lse -inf)
        assert out.shape == (TQ, HQ, D)


# ---- the float64 reference --------------------------------------------------------------------------


def _block_diagonal_reference(q, k, v, cu_q, cu_k, scale, mode, window, softcap):
    """One attention over the whole packed batch with a block-diagonal mask: independent of
    attention_reference_varlen's per-sequence loop."""
    tq, hq, d = q.shape
    tk, hk = k.shape[0], k.shape[1]
    mask = torch.zeros(tq, tk, dtype=torch.bool)
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
        if q1 > q0 and k1 > k0:
            vis = visible_keys(q1 - q0, k1 - k0, mode, window)
            mask[q0:q1, k0:k1] = True if vis is None else vis
    qd = q.double().transpose(0, 1)
    kd = k.double().transpose(0, 1).repeat_interleave(hq // hk, dim=0)
    vd = v.double().transpose(0, 1).repeat_interleave(hq // hk, dim=0)
    s = torch.matmul(qd, kd.transpose(-1, -2)) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    s = s.masked_fill(~mask, -math.inf)
    lse = torch.logsumexp(s, dim=-1)  # [Hq, total_q]
    seen = torch.isfinite(lse)
    p = torch.exp(s - lse.masked_fill(~seen, 0.0)[..., None]).masked_fill(~seen[..., None], 0.0)
    return torch.matmul(p, vd).transpose(0, 1), lse


@settings(max_examples=30)
@given(spec=fst.varlen_specs(max_batch=4, max_seqlen=40, causal_choices=(NONE, TOP_LEFT, BOTTOM_RIGHT)))
def test_reference_matches_a_block_diagonal_mask(spec) -> None:
    x = spec.make("cpu")
    q, k, v = (t.double() for t in (x.q, x.k, x.v))
    scale = 1 / math.sqrt(spec.head_dim) if spec.scale is None else spec.scale
    out, lse = attention_reference_varlen(q, k, v, x.cu_seqlens_q, x.cu_seqlens_k, scale, spec.causal_mode, spec.window,
                                          spec.softcap)
    ref_out, ref_lse = _block_diagonal_reference(q, k, v, x.cu_q, x.cu_k, scale, spec.causal_mode, spec.window,
                                                 spec.softcap)
    assert out.shape == q.shape and lse.shape == (spec.heads_q, q.shape[0])
    torch.testing.assert_close(out, ref_out, rtol=1e-9, atol=1e-9)
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
    finite = torch.isfinite(lse)
    torch.testing.assert_close(lse[finite], ref_lse[finite], rtol=1e-9, atol=1e-9)


def test_reference_sequence_without_keys_gives_zero_and_minus_inf() -> None:
    q = torch.randn(7, 2, 8, dtype=torch.float64)
    k = v = torch.randn(3, 1, 8, dtype=torch.float64)
    out, lse = attention_reference_varlen(q, k, v, [0, 4, 7], [0, 0, 3])
    assert bool((out[:4] == 0).all()) and bool((lse[:, :4] == -math.inf).all())
    o1, l1 = attention_reference(q[None, 4:], k[None], v[None])
    assert torch.equal(out[4:], o1[0]) and torch.equal(lse[:, 4:], l1[0])


# ---- the kernel's per-sequence mask (host compiler) ---------------------------------------------------

_PROBE = r"""
#include <cstdio>
#include <initializer_list>
#include "common/mask.cuh"
#include "common/params.h"
using namespace flashattn;
int main() {
  // A packed batch's host setup, then each sequence's window as the kernel forms it (fwd_seq):
  // lengths (Sq_b, Sk_b) at most the packed totals.
  const int totals[][2] = {{1, 1}, {40, 40}, {100, 7}, {7, 100}, {300, 300}};
  for (const auto& t : totals)
    for (int mode : {0, 1, 2})
      for (int left : {-1, 0, 1, 6, 39, 99, 299, 1 << 30})
        for (int right : {-1, 0, 1, 6, 39, 99, 2147483647}) {
          FwdParams p;
          p.set_varlen(nullptr, nullptr, t[0], t[1], t[0], t[1]);
          p.cu_seqlens_q = reinterpret_cast<const int*>(&p);  // non-null: packed
          p.set_mask(static_cast<CausalMode>(mode), left, right);
          for (int sq : {0, 1, 5, 40, 100, 300})
            for (int sk : {0, 1, 7, 40, 100, 300}) {
              if (sq > t[0] || sk > t[1]) continue;
              const int offset = p.mask_top_left ? 0 : sk - sq;
              const KeyWindow w = make_key_window(sk, offset, p.window_left, p.window_right);
              std::printf("seq %d %d %d %d %d %d %d", sq, sk, mode, left, right, p.window_left, p.window_right);
              for (int i = 0; i < sq; ++i) std::printf(" %d:%d", w.lo(i), w.hi(i));
              std::printf("\n");
            }
        }
}
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> list[str]:
    return run_cpp_probe(tmp_path_factory, "varlen_mask", _PROBE)


def test_per_sequence_mask_matches_the_reference(probe: list[str]) -> None:
    """Each sequence's rows see exactly visible_keys(Sq_b, Sk_b, mode, window): the offset is the
    sequence's own, and the host's normalization against the packed totals (not the caller's
    max_seqlen) never drops an edge some sequence's row reaches."""
    n = 0
    for line in probe:
        f = line.split()
        assert f[0] == "seq", line
        sq, sk, mode, left, right = (int(x) for x in f[1:6])
        j = torch.arange(sk)
        got = torch.stack([(j >= int(r.split(":")[0])) & (j < int(r.split(":")[1])) for r in f[8:]]) if sq else None
        want = visible_keys(sq, sk, mode, (left, right))
        if sq:
            want = torch.ones(sq, sk, dtype=torch.bool) if want is None else want
            assert torch.equal(got, want), line[:200]
        n += 1
    assert n > 3000


# ---- the forward op: no_grad, opcheck, torch.compile -------------------------------------------------


@contextmanager
def cpu_standin_varlen() -> Iterator[None]:
    """The CPU stand-in kernels (tests/standin_kernels.py), fwd_varlen's among them."""
    with cpu_standin_kernels():
        yield


def _cpu_problem(requires_grad: bool = False):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(11, 4, 16, generator=gen, dtype=torch.float64)
    k = torch.randn(9, 2, 16, generator=gen, dtype=torch.float64)
    v = torch.randn(9, 2, 16, generator=gen, dtype=torch.float64)
    if requires_grad:
        q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    cu_q = torch.tensor([0, 3, 3, 11], dtype=I32)
    cu_k = torch.tensor([0, 4, 5, 9], dtype=I32)
    return q, k, v, cu_q, cu_k


def test_no_grad_and_inputs_without_grad_run(monkeypatch) -> None:
    allow_cpu_entry_points(monkeypatch)
    q, k, v, cu_q, cu_k = _cpu_problem(requires_grad=True)
    with cpu_standin_varlen():
        with torch.no_grad():
            out = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 8, 4)
        assert not out.requires_grad
        out = flashattn.flash_attn_varlen_func(q.detach(), k.detach(), v.detach(), cu_q, cu_k, 8, 4)
        assert not out.requires_grad


def test_opcheck_schema_and_fake_kernel() -> None:
    q, k, v, cu_q, cu_k = _cpu_problem()
    with cpu_standin_varlen():
        torch.library.opcheck(torch.ops.flashattn.fwd_varlen.default,
                              (q, k, v, cu_q, cu_k, 8, 4, 0.25, BOTTOM_RIGHT, "auto", 3, 0, 20.0),
                              test_utils=("test_schema", "test_faketensor"))


def test_compile_fullgraph_traces_the_op(monkeypatch) -> None:
    allow_cpu_entry_points(monkeypatch)
    q, k, v, cu_q, cu_k = _cpu_problem()

    def f(q, k, v, cu_q, cu_k):
        return flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 8, 4, causal=True, window_size=(2, 0),
                                                return_lse=True)

    with cpu_standin_varlen():
        torch._dynamo.reset()
        out, lse = torch.compile(f, backend="aot_eager", fullgraph=True)(q, k, v, cu_q, cu_k)
        ref, ref_lse = f(q, k, v, cu_q, cu_k)
    assert torch.equal(out, ref) and torch.equal(lse, ref_lse)


def test_public_api_exports_varlen() -> None:
    assert "flash_attn_varlen_func" in flashattn.__all__ and "attention_reference_varlen" in flashattn.__all__
    params = list(__import__("inspect").signature(flashattn.flash_attn_varlen_func).parameters)
    assert params == ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "softmax_scale",
                      "causal", "window_size", "softcap", "return_lse"]


# ---- the backward: flashattn::bwd_varlen's schema, fake kernel, argument checks -----------------------

BWD_VARLEN_SCHEMA = (
    "flashattn::bwd_varlen(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor cu_seqlens_q, "
    "Tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, float softmax_scale, int causal_mode, "
    "bool deterministic, str backend, int window_left=-1, int window_right=-1, float softcap=0.) "
    "-> (Tensor dq, Tensor dk, Tensor dv)"
)


def test_bwd_varlen_schema_is_the_contract_with_the_binding() -> None:
    assert str(torch.ops.flashattn.bwd_varlen.default._schema) == BWD_VARLEN_SCHEMA


def _bwd_args(mk, **replace):
    """bwd_varlen's positional arguments on tensors from mk; `replace` swaps one by name."""
    args = {
        "dout": mk(TQ, HQ, D), "q": mk(TQ, HQ, D), "k": mk(TK, HK, D), "v": mk(TK, HK, D), "out": mk(TQ, HQ, D),
        "lse": mk(HQ, TQ, dtype=F32), "cu_seqlens_q": mk(B + 1, dtype=I32), "cu_seqlens_k": mk(B + 1, dtype=I32),
        "max_seqlen_q": 16, "max_seqlen_k": 24, "softmax_scale": 0.125, "causal_mode": BOTTOM_RIGHT,
        "deterministic": False, "backend": "auto",
    }
    args.update({name: (value(mk) if callable(value) else value) for name, value in replace.items()})
    return tuple(args.values())


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["fp16", "bf16"])
def test_bwd_varlen_fake_kernel(dtype) -> None:
    """dq, dk, dv: new contiguous tensors in q's dtype shaped like q, k, v, whatever the input
    strides (a stride-0 dout from out.sum(), a strided k)."""
    with FakeTensorMode():
        mk = lambda *shape, dtype=dtype, strides=None: fake_maker(*shape, dtype=dtype, strides=strides)  # noqa: E731
        args = _bwd_args(mk, dout=lambda mk: mk(TQ, HQ, D, strides=(0, 0, 0)),
                         k=lambda mk: mk(TK, HK, D, strides=(HK * 2 * D, 2 * D, 1)))
        dq, dk, dv = torch.ops.flashattn.bwd_varlen(*args)
        q, k, v = args[1:4]
    for g, x, name in ((dq, q, "dq"), (dk, k, "dk"), (dv, v, "dv")):
        assert (g.shape, g.dtype, g.device.type) == (x.shape, dtype, "cuda"), name
        assert g.is_contiguous(), f"{name} strides {g.stride()}"


BAD_BWD_VARLEN = [
    # id, replaced arguments, error, message
    ("dout-shape", {"dout": lambda mk: mk(TQ + 1, HQ, D)}, ValueError, "dout must have out's shape"),
    ("dout-dtype", {"dout": lambda mk: mk(TQ, HQ, D, dtype=BF16)}, TypeError, "dout.dtype must be q's dtype torch.float16"),
    ("out-shape", {"out": lambda mk: mk(TQ, HQ, D + 8)}, ValueError, "out must have q's shape"),
    ("out-dtype", {"out": lambda mk: mk(TQ, HQ, D, dtype=F32)}, TypeError, "out.dtype must be q's dtype"),
    ("q-rank-4", {"q": lambda mk: mk(1, TQ, HQ, D)}, ValueError, "q, k and v must be 3-D [total, H, D]"),
    ("k-v-shapes", {"v": lambda mk: mk(TK + 1, HK, D)}, ValueError, "k and v must have the same shape"),
    ("k-head-dim", {"k": lambda mk: mk(TK, HK, D + 8), "v": lambda mk: mk(TK, HK, D + 8)}, ValueError,
     "k's head dim must be q's 64"),
    ("heads-not-multiple", {"k": lambda mk: mk(TK, 3, D), "v": lambda mk: mk(TK, 3, D)}, ValueError,
     "q heads (4) must be a multiple of k/v heads (3)"),
    ("k-dtype", {"k": lambda mk: mk(TK, HK, D, dtype=BF16), "v": lambda mk: mk(TK, HK, D, dtype=BF16)}, TypeError,
     "k.dtype must be q's dtype"),
    ("lse-dense-layout", {"lse": lambda mk: mk(1, HQ, TQ, dtype=F32)}, ValueError, "lse must be [Hq, total_q] = [4, 40]"),
    ("lse-transposed", {"lse": lambda mk: mk(TQ, HQ, dtype=F32)}, ValueError, "lse must be [Hq, total_q]"),
    ("lse-dtype", {"lse": lambda mk: mk(HQ, TQ, dtype=F16)}, TypeError, "lse must be float32"),
    ("cu-q-int64", {"cu_seqlens_q": lambda mk: mk(B + 1, dtype=I64)}, TypeError, "cu_seqlens_q.dtype must be torch.int32"),
    ("cu-k-2d", {"cu_seqlens_k": lambda mk: mk(1, B + 1, dtype=I32)}, ValueError, "cu_seqlens_k must be 1-D [batch + 1]"),
    ("cu-k-on-cpu", {"cu_seqlens_k": lambda mk: mk(B + 1, dtype=I32, device="cpu")}, ValueError,
     "cu_seqlens_k must be on q's device"),
    ("cu-lengths-differ", {"cu_seqlens_k": lambda mk: mk(B + 2, dtype=I32)}, ValueError,
     "cu_seqlens_q and cu_seqlens_k must have the same length (batch + 1), got 4 and 5"),
    ("max-seqlen-q-negative", {"max_seqlen_q": -1}, ValueError, "max_seqlen_q must be >= 0, got -1"),
    ("hopper", {"backend": "hopper"}, ValueError, "backend 'hopper' does not support packed variable-length batches"),
]


@pytest.mark.parametrize(("replace", "error", "match"), [pytest.param(r, e, m, id=i) for i, r, e, m in BAD_BWD_VARLEN])
@pytest.mark.parametrize("entry", ["op", "wrapper"])
def test_bwd_varlen_refuses_inconsistent_arguments(replace: dict, error, match: str, entry: str) -> None:
    """The op (its fake kernel: a compiled graph fails at trace time) and the Python wrapper the
    autograd calls (before the op) both refuse, naming the argument."""
    call = torch.ops.flashattn.bwd_varlen if entry == "op" else flashattn._ops.bwd_varlen
    with FakeTensorMode(), pytest.raises(error) as info:
        call(*_bwd_args(fake_maker, **replace))
    assert match in str(info.value)


# ---- the backward through the autograd of fwd_varlen, on CPU with the stand-in kernels -----------------


@pytest.fixture
def standin_calls():
    """The stand-in kernels; yields the list of (bwd and bwd_varlen) backward calls."""
    with cpu_standin_kernels() as calls:
        yield calls


@pytest.fixture(autouse=True)
def deterministic_switches_off():
    torch_flag = torch.are_deterministic_algorithms_enabled()
    torch_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    flashattn.set_deterministic(False)
    torch.use_deterministic_algorithms(False)
    yield
    flashattn.set_deterministic(False)
    torch.use_deterministic_algorithms(torch_flag, warn_only=torch_warn_only)


def _autograd_of_reference(q, k, v, dout, cu_q, cu_k, scale, mode, window, softcap):
    """Gradients by autograd through the float64 varlen forward reference: independent of the
    explicit formulas of attention_reference_varlen_grads (what the stand-in returns)."""
    leaves = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    out, _ = attention_reference_varlen(*leaves, cu_q, cu_k, scale, mode, window, softcap)
    if not out.requires_grad:  # no sequence with both queries and keys: out is the constant 0
        return (None, None, None)
    return torch.autograd.grad(out, leaves, dout.double(), allow_unused=True)


@settings(max_examples=25, deadline=None)
@given(spec=fst.varlen_specs(max_batch=4, max_seqlen=24, max_heads_q=4, causal_choices=(NONE, TOP_LEFT, BOTTOM_RIGHT)),
       use_op=st.booleans(),
       deterministic=st.booleans())
def test_gradients_equal_the_float64_reference(spec, use_op: bool, deterministic: bool) -> None:
    """Autograd of flash_attn_varlen_func (or of the op itself, in every causal mode) through the
    stand-ins equals the float64 reference gradients: packed rows in, each sequence's gradient in
    its own rows; zero-length sequences, GQA, windows, softcaps."""
    mp = pytest.MonkeyPatch()  # (not the fixture: Hypothesis runs many examples per test call)
    allow_cpu_entry_points(mp)
    try:
        x = spec.make("cpu")
        q, k, v = (t.detach().double().requires_grad_(True) for t in (x.q, x.k, x.v))
        scale = 1 / math.sqrt(spec.head_dim) if spec.scale is None else spec.scale
        mode = spec.causal_mode if use_op else (spec.causal_mode if spec.causal_mode != TOP_LEFT else BOTTOM_RIGHT)
        gen = torch.Generator().manual_seed(spec.seed)
        dout = torch.randn(q.shape, generator=gen, dtype=torch.float64)
        flashattn.set_deterministic(deterministic)
        with cpu_standin_kernels() as calls:
            if use_op:
                out, _ = torch.ops.flashattn.fwd_varlen(q, k, v, x.cu_seqlens_q, x.cu_seqlens_k, spec.max_seqlen_q,
                                                        spec.max_seqlen_k, scale, mode, "auto", *spec.window,
                                                        spec.softcap)
            else:
                out = flashattn.flash_attn_varlen_func(q, k, v, x.cu_seqlens_q, x.cu_seqlens_k, spec.max_seqlen_q,
                                                       spec.max_seqlen_k, spec.scale, mode == BOTTOM_RIGHT,
                                                       spec.window, spec.softcap)
            got = torch.autograd.grad(out, (q, k, v), dout)
        assert len(calls) == 1
        call = calls[0]
        assert call.max_seqlen == (spec.max_seqlen_q, spec.max_seqlen_k) and call.causal_mode == mode
        assert call.window == spec.window and call.softcap == spec.softcap and call.deterministic == deterministic
        assert call.softmax_scale == scale
        want = flashattn.attention_reference_varlen_grads(q.detach(), k.detach(), v.detach(), dout, x.cu_q, x.cu_k,
                                                          scale, mode, spec.window, spec.softcap)
        independent = _autograd_of_reference(q, k, v, dout, x.cu_q, x.cu_k, scale, mode, spec.window, spec.softcap)
        for g, w, a, name in zip(got, want, independent, ("dq", "dk", "dv")):
            assert g.shape == w.shape and g.dtype == torch.float64, name
            torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10, msg=lambda m: f"{name} {spec!r}: {m}")
            a = torch.zeros_like(w) if a is None else a
            torch.testing.assert_close(w, a, rtol=1e-9, atol=1e-9, msg=lambda m: f"{name} (autograd) {spec!r}: {m}")
    finally:
        mp.undo()


@pytest.mark.parametrize("mode", [NONE, TOP_LEFT, BOTTOM_RIGHT], ids=["none", "top-left", "bottom-right"])
@pytest.mark.parametrize(("window", "softcap"), [((-1, -1), 0.0), ((2, 1), 0.0), ((-1, -1), 3.0)],
                         ids=["plain", "window", "softcap"])
def test_gradcheck_fwd_varlen_op(standin_calls, mode: int, window, softcap: float) -> None:
    """Finite differences of the forward against the registered backward: the op's autograd hands
    the right tensors, packing and scalars to bwd_varlen and its gradients to q, k, v. The packing
    has a sequence without keys, one without queries, and rows past cu_seqlens[B]."""
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(*s, generator=gen, dtype=torch.float64).requires_grad_(True)
               for s in ((12, 4, 8), (10, 2, 8), (10, 2, 8)))
    cu_q = torch.tensor([0, 3, 3, 5, 11], dtype=I32)
    cu_k = torch.tensor([0, 4, 6, 6, 9], dtype=I32)

    def f(q, k, v):
        return torch.ops.flashattn.fwd_varlen(q, k, v, cu_q, cu_k, 6, 4, 0.4, mode, "auto", *window, softcap)[0]

    assert torch.autograd.gradcheck(f, (q, k, v))
    assert standin_calls and all(c.max_seqlen == (6, 4) and c.window == window for c in standin_calls)
    dq, dk, dv = torch.autograd.grad(f(q, k, v).sum(), (q, k, v))
    assert bool((dq[11:] == 0).all()) and bool((dk[9:] == 0).all()) and bool((dv[9:] == 0).all())
    assert bool((dq[5:5] == 0).all()) and bool((dk[4:6] == 0).all()), "no queries: no key gradient"


@pytest.mark.parametrize("needs", ["q", "k", "v", "kv"])
def test_only_inputs_that_require_grad_get_one(standin_calls, needs: str) -> None:
    q, k, v, cu_q, cu_k = _cpu_problem()
    q, k, v = (t.requires_grad_(name in needs) for t, name in zip((q, k, v), "qkv"))
    out, _ = torch.ops.flashattn.fwd_varlen(q, k, v, cu_q, cu_k, 8, 4, 0.3, BOTTOM_RIGHT, "auto")
    out.sum().backward()
    want = flashattn.attention_reference_varlen_grads(q.detach(), k.detach(), v.detach(), torch.ones_like(out), cu_q,
                                                      cu_k, 0.3, BOTTOM_RIGHT)
    for t, w, name in zip((q, k, v), want, "qkv"):
        assert (t.grad is not None) == (name in needs), name
        if name in needs:
            torch.testing.assert_close(t.grad, w, rtol=1e-12, atol=1e-12)
    assert standin_calls[-1].dout_strides == (0, 0, 0), "out.sum() hands the op a stride-0 dout"


def test_lse_is_not_differentiable_and_no_double_backward(standin_calls) -> None:
    q, k, v, cu_q, cu_k = _cpu_problem(requires_grad=True)
    out, lse = torch.ops.flashattn.fwd_varlen(q, k, v, cu_q, cu_k, 8, 4, 0.3, NONE, "auto")
    assert out.requires_grad and not lse.requires_grad
    (dq,) = torch.autograd.grad(out.square().sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        dq.sum().backward()


def _varlen_backward_once(**kw) -> None:
    q, k, v, cu_q, cu_k = _cpu_problem(requires_grad=True)
    out = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 8, 4, causal=True, **kw)
    flashattn.set_deterministic(False)
    torch.use_deterministic_algorithms(False)
    out.sum().backward()
    assert q.grad is not None and k.grad is not None and v.grad is not None


@pytest.mark.parametrize("switch", ["off", "flashattn", "torch", "torch-warn-only"])
def test_deterministic_setting_of_the_forward_reaches_the_op(monkeypatch, standin_calls, switch: str) -> None:
    """As the dense autograd: the switches in effect when the forward ran (either flashattn's or
    torch's), not those when the backward runs."""
    allow_cpu_entry_points(monkeypatch)
    if switch == "flashattn":
        flashattn.set_deterministic(True)
    elif switch.startswith("torch"):
        torch.use_deterministic_algorithms(True, warn_only=switch == "torch-warn-only")
    _varlen_backward_once()
    assert standin_calls[-1].deterministic is (switch != "off")


@pytest.mark.parametrize("name", ["auto", "portable"])
def test_backward_gets_the_forward_backend(monkeypatch, standin_calls, name: str) -> None:
    allow_cpu_entry_points(monkeypatch)
    with _backend(name):
        _varlen_backward_once(window_size=(3, 0), softcap=4.0)
    assert standin_calls[-1].backend == name
    assert standin_calls[-1].window == (3, 0) and standin_calls[-1].softcap == 4.0


def test_backward_with_backend_hopper_is_refused_in_python(standin_calls) -> None:
    """The op's forward called directly with 'hopper' (the CUDA binding refuses it; the CPU stand-in
    does not): its backward still never reaches a kernel, the Python wrapper says why."""
    q, k, v, cu_q, cu_k = _cpu_problem(requires_grad=True)
    out, _ = torch.ops.flashattn.fwd_varlen(q, k, v, cu_q, cu_k, 8, 4, 0.3, NONE, "hopper")
    with pytest.raises(ValueError, match="bwd_varlen: backend 'hopper' does not support packed"):
        out.sum().backward()
    assert not standin_calls and q.grad is None


def test_opcheck_autograd_registration_and_bwd_varlen() -> None:
    q, k, v, cu_q, cu_k = _cpu_problem(requires_grad=True)
    with cpu_standin_kernels():
        torch.library.opcheck(torch.ops.flashattn.fwd_varlen.default, (q, k, v, cu_q, cu_k, 8, 4, 0.25, TOP_LEFT, "auto"))
        qd, kd, vd = (t.detach() for t in (q, k, v))
        out, lse = torch.ops.flashattn.fwd_varlen(qd, kd, vd, cu_q, cu_k, 8, 4, 0.25, TOP_LEFT, "auto")
        dout = torch.randn_like(out)
        torch.library.opcheck(torch.ops.flashattn.bwd_varlen.default,
                              (dout, qd, kd, vd, out, lse, cu_q, cu_k, 8, 4, 0.25, TOP_LEFT, True, "portable", 2, 0, 9.0))


def test_compile_fullgraph_forward_and_backward(monkeypatch) -> None:
    """A training step through flash_attn_varlen_func compiles with fullgraph=True and gives eager's
    gradients; the compiled backward calls bwd_varlen once."""
    allow_cpu_entry_points(monkeypatch)
    q, k, v, cu_q, cu_k = _cpu_problem(requires_grad=True)
    w = torch.randn(q.shape, dtype=torch.float64)

    def step(q, k, v, cu_q, cu_k):
        out = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 8, 4, causal=True, window_size=(2, 0))
        return (out * w).square().sum()

    with cpu_standin_kernels() as calls:
        want = torch.autograd.grad(step(q, k, v, cu_q, cu_k), (q, k, v))
        n_eager = len(calls)
        torch._dynamo.reset()
        compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
        got = torch.autograd.grad(compiled(q, k, v, cu_q, cu_k), (q, k, v))
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    assert len(calls) == n_eager + 1


def test_standin_saved_out_lse_reads_the_varlen_layout() -> None:
    """attention_reference_varlen_grads from a given out and lse ([Hq, total_q]) equals the
    recomputing path when they are the forward's own."""
    q, k, v, cu_q, cu_k = _cpu_problem()
    dout = torch.randn(q.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    out, lse = attention_reference_varlen(q, k, v, cu_q, cu_k, 0.3, BOTTOM_RIGHT, (1, -1), 2.0)
    a = flashattn.attention_reference_varlen_grads(q, k, v, dout, cu_q, cu_k, 0.3, BOTTOM_RIGHT, (1, -1), 2.0)
    b = flashattn.attention_reference_varlen_grads(q, k, v, dout, cu_q, cu_k, 0.3, BOTTOM_RIGHT, (1, -1), 2.0,
                                                   out=out, lse=lse)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)
    assert not bool((a[1] == 0).all()), "a gradient that is 0 everywhere checks nothing"


# ---- which backward config a packed batch runs, and that it is built (host compiler) -------------------

_ROUTE_PROBE = r"""
#include <cstdio>
#include "flash_bwd/registry.h"
using namespace flashattn;
int main() {
  // Per device limit (sm86/89, sm80, sm90) and head dim: the config a packed batch's backward picks
  // (BwdParams' packing pointers set; any non-null value: the host never reads them), with and
  // without a softcap, and the one a dense call without window or softcap picks.
  const int cu[2] = {0, 0};
  for (int smem : {99 * 1024, 163 * 1024, 227 * 1024})
    for (int d = 8; d <= 256; d += 8)
      for (float softcap : {0.f, 30.f}) {
        FwdParams p;
        p.head_dim = d;
        p.set_varlen(cu, cu, 100, 100, 1000, 1000);
        p.set_scale(0.125f);
        p.set_softcap(softcap);
        p.set_mask(CausalMode::kBottomRight, -1, -1);
        const BwdConfigInfo* v = select_bwd_config(d, smem, bwd_takes_compact_route(p));
        const BwdConfigInfo* w = select_bwd_config(d, smem, true);
        const BwdConfigInfo* dense = select_bwd_config(d, smem, false);
        std::printf("%d %d %g %d %d %d %d %d\n", smem, d, softcap, bwd_takes_compact_route(p) ? 1 : 0,
                    v ? v->head_dim : -1, v ? static_cast<int>(v->variant) : -1, v == w ? 1 : 0,
                    dense ? static_cast<int>(dense->variant) : -1);
      }
}
"""


def test_packed_batches_take_the_compact_route_and_its_configs_are_built(tmp_path_factory) -> None:
    """A packed batch's backward runs on the configs the window/softcap kernels run on (whatever
    its mask and softcap), and every one of them has its packed flavour generated
    (csrc/flash_bwd/instantiations/bwd_varlen_*.cu: a missing one would be a call that fails at
    launch): the C++ selection and tools/gen_instantiations.py's rule agree."""
    lines = run_cpp_probe(tmp_path_factory, "varlen_route", _ROUTE_PROBE)
    variant_name = {0: "large", 1: "compact"}
    files = {p.name for p in (ROOT / "csrc" / "flash_bwd" / "instantiations").glob("bwd_varlen_*.cu")}
    assert files, "no bwd_varlen_*.cu instantiation"
    picked = set()
    for line in lines:
        smem, d, softcap, compact_route, hd, variant, same_as_window, dense_variant = line.split()
        assert compact_route == "1" and same_as_window == "1", line
        assert int(hd) >= int(d) and variant in ("0", "1"), line
        picked.add((int(hd), variant_name[int(variant)]))
        for dtype in ("bf16", "fp16"):
            assert f"bwd_varlen_{dtype}_hdim{hd}_{variant_name[int(variant)]}.cu" in files, line
    assert len(lines) == 3 * 32 * 2
    # No file for a config the route never picks (it would compile kernels no call runs), and the
    # route differs from the dense one somewhere (else this checks nothing).
    assert {f"bwd_varlen_{t}_hdim{d}_{v}.cu" for d, v in picked for t in ("bf16", "fp16")} == files
    assert any(line.split()[5] != line.split()[7] for line in lines)
