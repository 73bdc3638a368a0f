"""CPU stand-in kernels for flashattn's ops, registered for the duration of a test, so that the CPU
suite runs the autograd layer of flashattn/_ops.py for real (torch.autograd.gradcheck,
torch.library.opcheck, torch.compile with aot_eager) on CPU tensors of any floating dtype.

fwd / fwd_bhsd / fwd_varlen: the float64 reference rounded to the input dtype (fwd_bhsd's out, like the CUDA
kernel's and the fake's, is the [B, H, S, D] view of a contiguous [B, S, H, D] buffer); bwd: the
float64 gradient reference, rounded likewise, contiguous: by default from out and lse recomputed in
float64 (the lse the ops hand back is float32, which would cost the float64 tests their precision);
with `saved_out_lse=True`, like the CUDA kernel, from the out and lse it is given (what a ring
attention needs: it hands the ones merged over the whole row, not the chunk's). Every bwd call's
scalar arguments and dout's strides are recorded. Like the CUDA op, bwd differentiates every backend's forward, window
and softcap included. bwd_varlen: the float64 per-sequence gradient reference
(flashattn.attention_reference_varlen_grads) rounded likewise, recorded in the same list (with its
max_seqlen bounds); like the CUDA op it refuses backend 'hopper'.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

import flashattn


@dataclass(frozen=True)
class BwdCall:
    softmax_scale: float
    causal_mode: int
    deterministic: bool
    backend: str
    dout_strides: tuple[int, ...]
    shapes: tuple[tuple[int, ...], ...]  # dout, q, k, v, out, lse
    window: tuple[int, int] = (-1, -1)
    softcap: float = 0.0
    max_seqlen: tuple[int, int] | None = None  # bwd_varlen's (max_seqlen_q, max_seqlen_k); None for bwd


def _fwd(q, k, v, softmax_scale, causal_mode, backend, window_left=-1, window_right=-1, softcap=0.0):
    out, lse = flashattn.attention_reference(q, k, v, softmax_scale, causal_mode, (window_left, window_right), softcap)
    return out.to(q.dtype).contiguous(), lse.float()


def _fwd_bhsd(q, k, v, softmax_scale, causal_mode, backend, window_left=-1, window_right=-1, softcap=0.0):
    out, lse = _fwd(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), softmax_scale, causal_mode, backend,
                    window_left, window_right, softcap)
    return out.transpose(1, 2), lse


def _fwd_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal_mode, backend,
                window_left=-1, window_right=-1, softcap=0.0):
    out, lse = flashattn.attention_reference_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal_mode,
                                                    (window_left, window_right), softcap)
    return out.to(q.dtype), lse.float()


@contextmanager
def cpu_standin_kernels(saved_out_lse: bool = False) -> Iterator[list[BwdCall]]:
    """Registers the stand-ins as the CPU kernels of flashattn::fwd, fwd_bhsd, bwd, fwd_varlen and
    bwd_varlen; yields the list the bwd and bwd_varlen calls are appended to; removes the
    registrations afterwards. saved_out_lse: bwd and bwd_varlen read the out and lse they are given
    instead of recomputing them."""
    calls: list[BwdCall] = []

    def bwd(dout, q, k, v, out, lse, softmax_scale, causal_mode, deterministic, backend, window_left=-1,
            window_right=-1, softcap=0.0):
        calls.append(
            BwdCall(softmax_scale, causal_mode, deterministic, backend, tuple(dout.stride()),
                    tuple(tuple(t.shape) for t in (dout, q, k, v, out, lse)), (window_left, window_right), softcap)
        )
        grads = flashattn.attention_reference_grads(q, k, v, dout, softmax_scale, causal_mode,
                                                    (window_left, window_right), softcap,
                                                    **({"out": out, "lse": lse} if saved_out_lse else {}))
        return tuple(g.to(q.dtype).contiguous() for g in grads)

    def bwd_varlen(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                   causal_mode, deterministic, backend, window_left=-1, window_right=-1, softcap=0.0):
        if backend == "hopper":
            raise RuntimeError("flashattn::bwd_varlen: backend 'hopper' does not support packed variable-length batches")
        calls.append(
            BwdCall(softmax_scale, causal_mode, deterministic, backend, tuple(dout.stride()),
                    tuple(tuple(t.shape) for t in (dout, q, k, v, out, lse)), (window_left, window_right), softcap,
                    (max_seqlen_q, max_seqlen_k))
        )
        grads = flashattn.attention_reference_varlen_grads(q, k, v, dout, cu_seqlens_q, cu_seqlens_k, softmax_scale,
                                                           causal_mode, (window_left, window_right), softcap,
                                                           **({"out": out, "lse": lse} if saved_out_lse else {}))
        return tuple(g.to(q.dtype).contiguous() for g in grads)

    lib = torch.library.Library("flashattn", "IMPL")
    try:
        lib.impl("fwd", _fwd, "CPU")
        lib.impl("fwd_bhsd", _fwd_bhsd, "CPU")
        lib.impl("bwd", bwd, "CPU")
        lib.impl("fwd_varlen", _fwd_varlen, "CPU")
        lib.impl("bwd_varlen", bwd_varlen, "CPU")
        yield calls
    finally:
        lib._destroy()


def _check_tensor_any_device(name: str, t, rank_min: int) -> None:
    """flashattn._validate.tensor without its CUDA-device and fp16/bf16 requirements."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() < rank_min:
        raise ValueError(f"{name} must have at least {rank_min} dimensions, got shape {tuple(t.shape)}")


def allow_cpu_entry_points(monkeypatch) -> None:
    """Let flashattn.scaled_dot_product_attention and flash_attn_func take CPU tensors of any
    floating dtype (their device and dtype checks relaxed, the extension not required), so that,
    with cpu_standin_kernels(), the entry points' autograd runs on CPU. Validation itself is
    tested on its own (tests/kernels/test_validation.py)."""
    from flashattn import _ext, _validate

    monkeypatch.setattr(_validate, "tensor", _check_tensor_any_device)
    monkeypatch.setattr(_ext, "require_extension", lambda: None)
