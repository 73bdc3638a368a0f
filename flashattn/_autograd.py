"""The autograd of flashattn's ops in Python, registered only where the compiled extension is not
(a CPU machine: the CPU suite runs it with stand-in kernels). With the extension, csrc/autograd.cpp
registers the same autograd in C++: torch.library's Python autograd costs a call ~11 us of host
time even when nothing requires grad, ~70 us when something does (docs/perf-notes.md, "Host cost
per call"), the C++ one well under a microsecond. The two say the same: what is saved, which
switches are read when, what double backward raises.
"""

from __future__ import annotations

import math
from typing import Any, NoReturn

import torch

from . import _ops

DOUBLE_BACKWARD_MESSAGE = (
    "flashattn's backward is not differentiable: double backward (a gradient of a gradient, e.g. "
    "torch.autograd.grad(..., create_graph=True) followed by another backward) is not supported"
)


def _scale_of(softmax_scale: float | None, q: torch.Tensor) -> float:
    """The forward's scale as the backward op takes it (None is 1/sqrt(head dim))."""
    return 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, torch.Tensor]) -> None:
    """Saves what the backward needs: q, k, v, out and lse (O(S) memory, never an S x S matrix),
    the scalars, the backend and the deterministic switch as they were at forward time. lse is
    not differentiable (its gradient is never computed: a loss through lse gets no gradient from
    it, and torch says so when it is the only path)."""
    q, k, v, softmax_scale, causal_mode, backend, *mask = inputs
    out, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.softmax_scale = _scale_of(softmax_scale, q)
    ctx.causal_mode = causal_mode
    ctx.backend = backend
    # window_left, window_right, softcap (the schema's defaults when the caller left them out).
    ctx.mask = tuple(mask) + (-1, -1, 0.0)[len(mask):]
    ctx.num_inputs = len(inputs)
    ctx.deterministic = _ops.deterministic_backward()


def _grads_for(ctx: Any, dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    need = ctx.needs_input_grad
    return (dq if need[0] else None, dk if need[1] else None, dv if need[2] else None) + (None,) * (ctx.num_inputs - 3)


def _bwd_for(ctx: Any, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
             lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward op with the forward's scalars; window/softcap only when set (fewer arguments
    on the common path)."""
    args = (dout, q, k, v, out, lse, ctx.softmax_scale, ctx.causal_mode, ctx.deterministic, ctx.backend)
    if ctx.mask == (-1, -1, 0.0):
        return _ops._bwd(*args)
    return _ops._bwd(*args, *ctx.mask)


def _fwd_backward(ctx: Any, dout: torch.Tensor | None, dlse: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    if dout is None:
        return (None,) * ctx.num_inputs
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = _bwd_for(ctx, dout, q, k, v, out, lse)
    return _grads_for(ctx, dq, dk, dv)


def _fwd_bhsd_backward(ctx: Any, dout: torch.Tensor | None,
                       dlse: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """The same kernel on [B, S, H, D] views of the torch-layout tensors; the gradients come back
    as [B, H, S, D] views of contiguous [B, S, H, D] buffers (like the forward's out)."""
    if dout is None:
        return (None,) * ctx.num_inputs
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = _bwd_for(
        ctx, dout.transpose(1, 2), q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), out.transpose(1, 2), lse
    )
    return _grads_for(ctx, dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2))


def _no_setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, ...]) -> None:
    pass


def _double_backward(ctx: Any, *grads: torch.Tensor | None) -> NoReturn:
    # Without an autograd kernel, torch would let a double backward through the backward ops run
    # and silently leave gradients out; say so instead.
    raise RuntimeError(DOUBLE_BACKWARD_MESSAGE)


def _fwd_varlen_setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, torch.Tensor]) -> None:
    """As _setup_context, plus the packing (cu_seqlens, the max_seqlen bounds) the backward walks
    exactly as the forward did."""
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal_mode, backend, *mask = inputs
    out, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k)
    ctx.max_seqlen = (max_seqlen_q, max_seqlen_k)
    ctx.softmax_scale = _scale_of(softmax_scale, q)
    ctx.causal_mode = causal_mode
    ctx.backend = backend
    ctx.mask = tuple(mask) + (-1, -1, 0.0)[len(mask):]
    ctx.num_inputs = len(inputs)
    ctx.deterministic = _ops.deterministic_backward()


def _fwd_varlen_backward(ctx: Any, dout: torch.Tensor | None,
                         dlse: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    if dout is None:
        return (None,) * ctx.num_inputs
    q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
    max_seqlen_q, max_seqlen_k = ctx.max_seqlen
    dq, dk, dv = _ops.bwd_varlen(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                 ctx.softmax_scale, ctx.causal_mode, ctx.deterministic, ctx.backend, *ctx.mask)
    return _grads_for(ctx, dq, dk, dv)


def register() -> None:
    torch.library.register_autograd("flashattn::fwd", _fwd_backward, setup_context=_setup_context)
    torch.library.register_autograd("flashattn::fwd_bhsd", _fwd_bhsd_backward, setup_context=_setup_context)
    torch.library.register_autograd("flashattn::bwd", _double_backward, setup_context=_no_setup_context)
    torch.library.register_autograd("flashattn::fwd_varlen", _fwd_varlen_backward,
                                    setup_context=_fwd_varlen_setup_context)
    torch.library.register_autograd("flashattn::bwd_varlen", _double_backward, setup_context=_no_setup_context)
