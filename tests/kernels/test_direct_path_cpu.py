"""The entry points' direct path against their checked path, on CPU.

With the compiled extension, a call in its common form goes straight to the op (the C++ binding
checks it); every other call, and any the op refused, takes the checked path (flashattn._validate,
then the op). Here recording CPU kernels stand in for the CUDA ones and the direct path is switched
on by hand (without the extension it is off): for every valid call form both paths hand the op the
same tensors and scalars (a None scale being 1/sqrt(D)), the common forms skip the Python checks,
and an op that refuses a call leaves the error to the checked path. That the binding refuses every
bad input the checked path refuses is checked on a GPU (tests/kernels/test_validation.py and
tests/kernels/test_kvcache.py with real tensors).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import pytest
import torch

import flashattn
from flashattn import _validate, interface, kvcache

F16, BF16, I32 = torch.float16, torch.bfloat16, torch.int32


def _record(arg):
    if isinstance(arg, torch.Tensor):
        return ("tensor", arg.data_ptr(), tuple(arg.shape), tuple(arg.stride()), arg.dtype)
    return arg


def _ranks(op: str, args: tuple) -> str | None:
    """The binding's refusal of tensors of another rank (the layouts each op takes)."""
    rank = 3 if op == "fwd_varlen" else 4
    return None if all(a.dim() == rank for a in args[:3]) else f"flashattn::{op}: q, k, v must be {rank}-D"


class Recorder:
    """CPU kernels of the forward ops that record what they are handed (the scale resolved as the
    binding resolves it) and return outputs shaped like the CUDA kernels'. `refuse(op, args)`
    returning a message makes a kernel raise it, as the binding does (by default: another rank)."""

    SCALE_INDEX = {"fwd": 3, "fwd_bhsd": 3, "fwd_varlen": 7, "fwd_kvcache": 7}

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.refuse: Callable[[str, tuple], str | None] = _ranks

    def kernel(self, op: str):
        def run(*args):
            message = self.refuse(op, args)
            if message:
                raise RuntimeError(message)
            args = list(args)
            i = self.SCALE_INDEX[op]
            if args[i] is None:
                args[i] = 1.0 / math.sqrt(args[0].shape[-1])
            self.calls.append((op, *(_record(a) for a in args)))
            q = args[0]
            if op == "fwd_bhsd":
                b, h, s, d = q.shape
                return q.new_zeros(b, s, h, d).transpose(1, 2), q.new_zeros(b, h, s, dtype=torch.float32)
            if op == "fwd_varlen":
                return q.new_zeros(q.shape), q.new_zeros(q.shape[1], q.shape[0], dtype=torch.float32)
            return q.new_zeros(q.shape), q.new_zeros(q.shape[0], q.shape[2], q.shape[1], dtype=torch.float32)

        return run


def _tensor_any_device(name: str, t, rank_min: int) -> None:
    """_validate.tensor but for the device: CPU tensors stand in for CUDA ones."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() < rank_min:
        raise ValueError(f"{name} must have at least {rank_min} dimensions, got shape {tuple(t.shape)}")
    if t.dtype not in _validate.SUPPORTED_DTYPES:
        raise TypeError(f"{name}.dtype must be torch.float16 or torch.bfloat16, got {t.dtype}")


def _meta_any_device(name: str, t):
    shape = t.shape
    if len(shape) != 4:
        raise ValueError(f"{name} must be 4-D [batch, seqlen, heads, head_dim], got shape {tuple(shape)}")
    return shape, t.stride()


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    rec = Recorder()
    monkeypatch.setattr(_validate, "tensor", _tensor_any_device)
    monkeypatch.setattr(_validate, "_meta", _meta_any_device)
    monkeypatch.setattr(flashattn._ext, "require_extension", lambda: None)
    lib = torch.library.Library("flashattn", "IMPL")
    try:
        for op in Recorder.SCALE_INDEX:
            lib.impl(op, rec.kernel(op), "CPU")
        yield rec
    finally:
        lib._destroy()


def _both_paths(monkeypatch: pytest.MonkeyPatch, rec: Recorder, call: Callable[[], object]):
    """(calls, result) of `call` on the checked path, then on the direct path."""
    runs = []
    for direct in (False, True):
        monkeypatch.setattr(interface, "_DIRECT", direct)
        monkeypatch.setattr(kvcache, "_DIRECT", direct)
        rec.calls.clear()
        result = call()
        runs.append((list(rec.calls), result))
    return runs


def _shapes(result) -> list:
    items = result if isinstance(result, tuple) else (result,)
    return [(tuple(t.shape), tuple(t.stride()), t.dtype) for t in items]


def t(*shape: int, dtype: torch.dtype = F16, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


B, H, S, D = 2, 4, 16, 64
BHSD = (B, H, S, D)
BSHD = (B, S, H, D)
q4, k4, v4 = t(*BHSD), t(*BHSD, seed=1), t(*BHSD, seed=2)
qg, kg = t(B, 4, S, D), t(B, 2, 24, D, seed=1)
qs, ks, vs = t(*BSHD), t(*BSHD, seed=1), t(*BSHD, seed=2)
qp, kp = t(40, 4, D), t(48, 2, D, seed=1)
cu_q, cu_k = torch.tensor([0, 10, 40], dtype=I32), torch.tensor([0, 20, 48], dtype=I32)
qd, kc, vc = t(B, 1, 4, 128), t(B, 64, 2, 128, seed=1), t(B, 64, 2, 128, seed=2)
kn, vn = t(B, 1, 2, 128, seed=3), t(B, 1, 2, 128, seed=4)
pool_k, pool_v = t(9, 16, 2, 128, seed=5), t(9, 16, 2, 128, seed=6)
table = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]], dtype=I32)
lens = torch.tensor([5, 9], dtype=I32)
sdpa, fa, varlen, kv = (flashattn.scaled_dot_product_attention, flashattn.flash_attn_func,
                        flashattn.flash_attn_varlen_func, flashattn.flash_attn_with_kvcache)

VALID_CALLS = {
    "sdpa": lambda: sdpa(q4, k4, v4),
    "sdpa-causal-scale": lambda: sdpa(q4, k4, v4, is_causal=True, scale=0.3),
    "sdpa-int-scale": lambda: sdpa(q4, k4, v4, scale=2),
    "sdpa-gqa": lambda: sdpa(qg, kg, kg, enable_gqa=True),
    "sdpa-rank3": lambda: sdpa(q4[0], k4[0], v4[0], is_causal=True),
    "sdpa-transposed-views": lambda: sdpa(qs.transpose(1, 2), ks.transpose(1, 2), vs.transpose(1, 2)),
    "fa": lambda: fa(qs, ks, vs),
    "fa-causal-lse": lambda: fa(qs, ks, vs, softmax_scale=0.2, causal=True, return_lse=True),
    "fa-int-softcap-0": lambda: fa(qs, ks, vs, softcap=0),
    "fa-window-softcap": lambda: fa(qs, ks, vs, window_size=(3, 0), softcap=30.0),
    "fa-window-list": lambda: fa(qs, ks, vs, window_size=[-1, -1]),
    "varlen": lambda: varlen(qp, kp, kp, cu_q, cu_k, 30, 28),
    "varlen-causal-lse": lambda: varlen(qp, kp, kp, cu_q, cu_k, 30, 28, softmax_scale=0.5, causal=True, return_lse=True),
    "varlen-window": lambda: varlen(qp, kp, kp, cu_q, cu_k, 30, 28, window_size=(4, 4)),
    "kv-full-cache": lambda: kv(qd, kc, vc),
    "kv-int-seqlens-causal": lambda: kv(qd, kc, vc, cache_seqlens=7, causal=True, return_lse=True),
    "kv-tensor-seqlens-append": lambda: kv(qd, kc, vc, kn, vn, cache_seqlens=lens, num_splits=3),
    "kv-paged": lambda: kv(qd, pool_k, pool_v, cache_seqlens=lens, block_table=table),
    "kv-paged-full": lambda: kv(qd, pool_k, pool_v, block_table=table),
    "kv-seqused": lambda: kv(qd, kc, vc, seqused_k=lens, softmax_scale=0.1),
    "kv-window-softcap": lambda: kv(qd, kc, vc, cache_seqlens=lens, window_size=(8, 0), softcap=5.0),
}


@pytest.mark.parametrize("name", list(VALID_CALLS))
def test_both_paths_hand_the_op_the_same(monkeypatch: pytest.MonkeyPatch, recorder: Recorder, name: str) -> None:
    (checked_calls, checked), (direct_calls, direct) = _both_paths(monkeypatch, recorder, VALID_CALLS[name])
    assert len(checked_calls) == 1, checked_calls
    assert direct_calls == checked_calls
    assert _shapes(direct) == _shapes(checked)


COMMON_FORMS = ["sdpa", "sdpa-causal-scale", "sdpa-gqa", "fa", "fa-causal-lse", "varlen", "kv-full-cache",
                "kv-int-seqlens-causal", "kv-tensor-seqlens-append", "kv-paged", "kv-seqused"]


@pytest.mark.parametrize("name", COMMON_FORMS)
def test_common_forms_skip_the_python_checks(monkeypatch: pytest.MonkeyPatch, recorder: Recorder, name: str) -> None:
    monkeypatch.setattr(interface, "_DIRECT", True)
    monkeypatch.setattr(kvcache, "_DIRECT", True)
    for check in ("sdpa", "flash_attn_func", "varlen", "kvcache"):
        monkeypatch.setattr(_validate, check, lambda *a, check=check: pytest.fail(f"_validate.{check} ran"))
    VALID_CALLS[name]()
    assert len(recorder.calls) == 1


def test_a_refused_call_is_explained_by_the_checked_path(monkeypatch: pytest.MonkeyPatch, recorder: Recorder) -> None:
    """The op refuses (as the binding does, with its own message); the caller gets the checked
    path's error, which names the argument, and no chained op error."""
    monkeypatch.setattr(interface, "_DIRECT", True)
    recorder.refuse = lambda op, args: "flashattn::fwd: dtype must be float16 or bfloat16" if args[0].dtype not in (
        F16, BF16) else None
    with pytest.raises(TypeError, match=r"q\.dtype must be torch\.float16 or torch\.bfloat16, got torch\.float32") as info:
        fa(qs.float(), ks.float(), vs.float())
    assert info.value.__context__ is None and not recorder.calls


def test_an_op_error_on_valid_inputs_is_raised_as_the_op_raised_it(monkeypatch: pytest.MonkeyPatch,
                                                                   recorder: Recorder) -> None:
    """A failure the checks do not explain (a launch failure, memory): the checked path calls the
    op again, which raises its own error."""
    monkeypatch.setattr(interface, "_DIRECT", True)
    attempts = []
    recorder.refuse = lambda op, args: attempts.append(op) or "flashattn::fwd: kernel launch failed: out of memory"
    with pytest.raises(RuntimeError, match="kernel launch failed: out of memory"):
        fa(qs, ks, vs)
    assert attempts == ["fwd", "fwd"]


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: fa(qs, ks, vs, softcap=False), TypeError, "softcap must be a float (0.0: off), got bool"),
    (lambda: varlen(qp, kp, kp, cu_q, cu_k, True, 28), TypeError, "max_seqlen_q must be a Python int"),
    (lambda: varlen(qp, kp, kp, cu_q, cu_k, torch.tensor(30), 28), TypeError, "max_seqlen_q must be a Python int"),
    (lambda: kv(qd, kc, vc, num_splits=True), TypeError, "num_splits must be an int, got bool"),
    (lambda: kv(qd, kc, vc, cache_seqlens=True), TypeError, "cache_seqlens must be an int32 tensor, an int or None"),
    (lambda: sdpa(q4, t(B, 2, S, D), t(B, 2, S, D)), ValueError, "pass enable_gqa=True"),
], ids=["softcap-false", "max-seqlen-bool", "max-seqlen-tensor", "num-splits-bool", "seqlens-bool", "heads-without-gqa"])
def test_python_types_the_op_would_take_are_refused_before_it(monkeypatch: pytest.MonkeyPatch, recorder: Recorder,
                                                              call, error, match: str) -> None:
    """What the op's schema would convert silently (a bool for an int or float, a tensor for an
    int) and what only the entry knows (enable_gqa) never reach the op on the direct path."""
    monkeypatch.setattr(interface, "_DIRECT", True)
    monkeypatch.setattr(kvcache, "_DIRECT", True)
    with pytest.raises(error, match=match.replace("(", r"\(").replace(")", r"\)")):
        call()
    assert not recorder.calls
