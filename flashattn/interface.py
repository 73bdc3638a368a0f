"""Public entry points: hand what the caller passed to the one registered op.

Two paths, one behaviour. Eagerly, with the compiled extension built, a call in its common form
(plain tensors; no mask, dropout, window or softcap) goes straight to the op: the C++ binding
checks every argument and the C++ autograd records the backward, so the call costs the dispatcher
and the launch, not Python. Every other call takes the checked path: flashattn._validate raises the
error that names the argument, normalizes the scalars and calls the op. That is also the path of a
call the binding refused (to say why), of torch.compile tracing (the checks run at trace time, and
the graph guards on the switches) and of a machine without the extension. docs/perf-notes.md
("Host cost per call") has the measurements behind the split.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal, overload

import torch

from . import _ext, _ops, _validate
from ._validate import MAX_HEAD_DIM, MIN_HEAD_DIM, SUPPORTED_DTYPES

__all__ = ["MAX_HEAD_DIM", "MIN_HEAD_DIM", "SUPPORTED_DTYPES"]

_backend = os.environ.get("FLASHATTN_BACKEND", "auto")

# The direct path: the extension is loaded (so the binding checks and the C++ autograd is
# registered) and the caller's tensors are plain ones (FakeTensor and other subclasses, whose
# kernels may not check, take the checked path).
_DIRECT = _ext._EXT is not None and _ops.DIRECT_PATH
_Tensor = torch.Tensor
_tracing = torch.compiler.is_compiling
_FWD = _ops.eager_callable(_ops._fwd)
_FWD_BHSD = _ops.eager_callable(_ops._fwd_bhsd)
_FWD_VARLEN = _ops.eager_callable(_ops._fwd_varlen)
_NONE, _TOP_LEFT, _BOTTOM_RIGHT = _ops.CAUSAL_NONE, _ops.CAUSAL_TOP_LEFT, _ops.CAUSAL_BOTTOM_RIGHT


def set_backend(name: str) -> None:
    """Choose the forward path: "auto" (Hopper path on sm90 where it applies), "portable"
    (mma.sync, every sm80+ GPU), or "hopper". Also settable with FLASHATTN_BACKEND.

    The backward follows the same switch: "auto" and "hopper" run the Hopper backward on an sm90
    build for the calls it covers (docs/api.md, Training), every other call the portable one. The
    gradients do not depend on the path the forward took."""
    global _backend
    _validate.backend(name)
    _backend = name


def get_backend() -> str:
    return _backend


def set_deterministic(flag: bool) -> None:
    """Make the backward bitwise reproducible run to run (True), or let it accumulate dQ with
    atomics (False, the default: faster, and results may differ in the last bits between runs).

    The backward is deterministic when this switch or torch's
    `torch.use_deterministic_algorithms(True)` is on. Both are read when the forward runs: the
    backward of a forward follows the setting in effect at that forward (torch.compile'd code
    retraces when either changes). The forward is always deterministic."""
    if not isinstance(flag, bool):
        raise TypeError(f"set_deterministic takes a bool, got {type(flag).__name__}")
    _ops.set_deterministic(flag)


def get_deterministic() -> bool:
    """flashattn's own switch (set_deterministic); torch.are_deterministic_algorithms_enabled()
    turns the deterministic backward on as well."""
    return _ops.get_deterministic()


def set_check_indices(flag: bool) -> None:
    """Validate device-side index tensors before each launch (True), or trust them (False, the
    default; also settable with FLASHATTN_CHECK_INDICES=1 at import).

    The tensors: cu_seqlens_q / cu_seqlens_k of packed batches (flash_attn_varlen_func, its
    backward, torch's varlen ops once activated) and cache_seqlens, seqused_k and block_table of
    flash_attn_with_kvcache. Without the check, bad values cannot make a kernel touch memory outside
    the tensors it was given (they are clamped on the device), but the results are then meaningless;
    with it, a ValueError names the argument, the first bad entry and what was expected. It costs
    one GPU synchronization per call (a debug mode for serving engines), is skipped while
    torch.compile traces, and raises under CUDA-graph capture."""
    if not isinstance(flag, bool):
        raise TypeError(f"set_check_indices takes a bool, got {type(flag).__name__}")
    _ops.set_check_indices(flag)


def get_check_indices() -> bool:
    """Whether the checked indices mode (set_check_indices) is on."""
    return _ops.get_check_indices()


@contextlib.contextmanager
def check_indices(flag: bool = True) -> Iterator[None]:
    """`set_check_indices(flag)` for the duration of a `with` block, then the previous setting again
    (also when the block raises). Process-wide, like set_check_indices."""
    previous = _ops.get_check_indices()
    set_check_indices(flag)
    try:
        yield
    finally:
        _ops.set_check_indices(previous)


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """`set_backend(name)` for the duration of a `with` block, then the previous backend again
    (also when the block raises). Process-wide, like set_backend: not a per-thread setting."""
    previous = _backend
    set_backend(name)
    try:
        yield
    finally:
        set_backend(previous)


def _run(q4: torch.Tensor, k4: torch.Tensor, v4: torch.Tensor, scale: float, causal_mode: int, bhsd: bool = False,
         window: tuple[int, int] = (-1, -1), softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The checked path's call, after validation: q4 [B, Sq, Hq, D], k4/v4 [B, Sk, Hk, D] -> (out
    [B, Sq, Hq, D], lse [B, Hq, Sq]); with bhsd, the sequence and head dims swapped in the inputs
    and in out."""
    _validate.empty_keys(q4, k4, bhsd)
    _ready()
    return (_ops.fwd_bhsd if bhsd else _ops.fwd)(q4, k4, v4, scale, causal_mode, _backend, window[0], window[1], softcap)


def _ready() -> None:
    """The checked path's last step before the op: the extension (not needed while torch.compile
    traces on fake tensors), and the switches a compiled graph must guard on."""
    if _tracing():
        _ops.guard_switches_when_traced()
    elif _ext._EXT is None:
        _ext.require_extension()


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """Drop-in for `torch.nn.functional.scaled_dot_product_attention` (same signature).

    Layout: query [..., Hq, L, D], key/value [..., Hk, S, D] (any leading batch dims, which must
    match; rank 2 means one batch and one head). Hq must equal Hk unless `enable_gqa=True`, then
    Hq must be a multiple of Hk (grouped-query / multi-query attention, K/V never repeated in memory).
    dtype float16 or bfloat16, on one CUDA device, head dim a multiple of 8 in [8, 256], the last
    dimension contiguous; other strides are free (a transposed [B, S, H, D] view needs no copy).

    `is_causal=True` uses SDPA's top-left alignment: query i attends to keys j <= i, also when
    L != S. `scale` defaults to 1/sqrt(D). Returns a tensor shaped like query (a view of a
    [B, L, H, D] buffer). Not supported, and refused with a ValueError naming the argument:
    `attn_mask`, `dropout_p > 0`.

    Differentiable with respect to query, key and value (flashattn's backward kernels; memory
    O(S), only q, k, v, the output and the log-sum-exp are kept for it). See set_deterministic.
    """
    if _DIRECT and attn_mask is None and dropout_p == 0.0 and type(query) is _Tensor and not _tracing():
        try:
            if enable_gqa or query.shape[1] == key.shape[1]:
                return _FWD_BHSD(query, key, value, scale, _TOP_LEFT if is_causal else _NONE, _backend)[0]
        except Exception:
            pass  # the checked call below says what was refused, or raises the op's own error again
    scale = _validate.sdpa(query, key, value, attn_mask, dropout_p, scale, enable_gqa)

    def to_bshd(t: torch.Tensor) -> torch.Tensor:
        if t.dim() == 2:
            t = t[None, None]
        elif t.dim() == 3:
            t = t.unsqueeze(0)
        elif t.dim() > 4:
            t = t.flatten(0, -4)
        return t.transpose(1, 2)

    causal = _TOP_LEFT if is_causal else _NONE
    if query.dim() == 4:  # no reshapes, and the layout views taken in C++
        out, _ = _run(query, key, value, scale, causal, bhsd=True)
        return out
    out, _ = _run(to_bshd(query), to_bshd(key), to_bshd(value), scale, causal)
    return out.transpose(1, 2).reshape(query.shape)


# The return type follows return_lse as the call site spells it (tests/infra/data/typed_usage.py).
@overload
def flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    softmax_scale: float | None = None,
    causal: bool = False,
    return_lse: Literal[False] = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    q_descale: torch.Tensor | None = None,
    k_descale: torch.Tensor | None = None,
    v_descale: torch.Tensor | None = None,
) -> torch.Tensor: ...


@overload
def flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    softmax_scale: float | None = None,
    causal: bool = False,
    *,
    return_lse: Literal[True],
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    q_descale: torch.Tensor | None = None,
    k_descale: torch.Tensor | None = None,
    v_descale: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]: ...


@overload
def flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    softmax_scale: float | None = None,
    causal: bool = False,
    return_lse: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    q_descale: torch.Tensor | None = None,
    k_descale: torch.Tensor | None = None,
    v_descale: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]: ...


def flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    softmax_scale: float | None = None,
    causal: bool = False,
    return_lse: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    q_descale: torch.Tensor | None = None,
    k_descale: torch.Tensor | None = None,
    v_descale: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """FlashAttention-style forward: q [B, Sq, Hq, D], k/v [B, Sk, Hk, D] with Hq a multiple of
    Hk (GQA/MQA). `causal=True` is bottom-right aligned (query i attends to keys
    j <= i + Sk - Sq, as with a KV cache); query rows that see no key give output 0 and LSE -inf.
    Returns out [B, Sq, Hq, D], and with `return_lse=True` also the natural-log log-sum-exp of the
    scaled scores, float32 [B, Hq, Sq].

    `window_size=(left, right)`: local (sliding-window) attention, bottom-right aligned like
    `causal`: query i attends to keys j with i + Sk - Sq - left <= j <= i + Sk - Sq + right, -1
    meaning unbounded on that side; `causal=True` is right = 0 on top of it. The cost follows the
    window, not Sk. `softcap=c > 0` replaces each scaled score x by c * tanh(x / c) before the
    softmax (Gemma 2; the kernels use the GPU's approximate tanh, ~2^-11 relative error), and the
    LSE is that of the capped scores. Both are differentiable (the backward applies the same
    mask and the softcap's derivative).

    out is differentiable with respect to q, k and v (flashattn's backward kernels; memory O(S)).
    The lse is NOT differentiable: it comes back with requires_grad=False, and no gradient flows
    through a loss that uses it (use out for anything you train through). See set_deterministic.

    FP8 (experimental, Hopper only, forward only): q, k, v torch.float8_e4m3fn with q_descale,
    k_descale, v_descale float32 [B, Hk] (FlashAttention-3's interface: the inputs are
    q.float() * q_descale[b, kv head] etc.; all three required), head dim a multiple of 16 up to
    256, causal or not, GQA; no window, no softcap. out is bfloat16, the LSE that of the descaled
    scores (docs/hopper.md, "FP8 forward").
    """
    if (_DIRECT and type(q) is _Tensor and window_size == (-1, -1) and softcap == 0.0 and softcap is not False
            and q_descale is None and k_descale is None and v_descale is None and not _tracing()):
        try:
            out, lse = _FWD(q, k, v, softmax_scale, _BOTTOM_RIGHT if causal else _NONE, _backend)
            return (out, lse) if return_lse else out
        except Exception:
            pass  # the checked call below says what was refused, or raises the op's own error again
    if _validate.is_fp8_call(q, k, v, q_descale, k_descale, v_descale):
        scale = _validate.fp8(q, k, v, q_descale, k_descale, v_descale, softmax_scale, window_size, softcap)
        if not _tracing() and type(q) is _Tensor:
            _validate.fp8_device(q)
        _ready()
        if TYPE_CHECKING:  # _validate.fp8 refused a missing descale
            assert q_descale is not None and k_descale is not None and v_descale is not None
        out, lse = _ops.fwd_fp8(q, k, v, q_descale, k_descale, v_descale, scale, _BOTTOM_RIGHT if causal else _NONE)
        return (out, lse) if return_lse else out
    scale, window, softcap = _validate.flash_attn_func(q, k, v, softmax_scale, window_size, softcap)
    out, lse = _run(q, k, v, scale, _BOTTOM_RIGHT if causal else _NONE, window=window, softcap=softcap)
    return (out, lse) if return_lse else out


# The return type follows return_lse as the call site spells it (tests/infra/data/typed_usage.py).
@overload
def flash_attn_varlen_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    return_lse: Literal[False] = False,
) -> torch.Tensor: ...


@overload
def flash_attn_varlen_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    *,
    return_lse: Literal[True],
) -> tuple[torch.Tensor, torch.Tensor]: ...


@overload
def flash_attn_varlen_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]: ...


def flash_attn_varlen_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """FlashAttention-style forward over a packed batch of variable-length sequences.

    q [total_q, Hq, D], k/v [total_k, Hk, D] (Hq a multiple of Hk; float16/bfloat16 on one CUDA
    device; last dim contiguous, any row/head strides). cu_seqlens_q / cu_seqlens_k: int32 [B + 1]
    cumulative lengths on q's device, nondecreasing, starting at 0: sequence b is rows
    cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of q and cu_seqlens_k[b] .. cu_seqlens_k[b + 1] - 1
    of k/v. Zero-length sequences are allowed; a sequence with queries but no keys gives output 0
    and LSE -inf for its rows. The lengths are read on the device only: the call never waits for
    the GPU and can be captured in a CUDA graph.

    max_seqlen_q / max_seqlen_k: Python ints, at least every sequence's query / key length (they
    size the grid: rows of a longer sequence would not be computed). cu_seqlens are the caller's
    contract too (0 <= cu[b] <= cu[b + 1] <= total rows), not checked, as that would need a sync;
    output rows of q that no sequence covers are left unwritten. Bad offsets are clamped on the
    device into the packed tensors (a decreasing pair gives an empty sequence), so nothing outside
    q, k, v and the outputs is touched; set_check_indices(True) validates them instead, with a
    ValueError naming the argument.

    Per sequence, exactly as flash_attn_func on that sequence alone: `causal=True` is bottom-right
    aligned (query i attends to keys j <= i + Sk_b - Sq_b), `window_size=(left, right)` is aligned
    the same way (-1 unbounded), `softcap=c > 0` caps each scaled score to c * tanh(x / c);
    `softmax_scale` defaults to 1/sqrt(D). Rows that see no key give 0 and LSE -inf.

    Returns out [total_q, Hq, D]; with `return_lse=True` also the natural-log log-sum-exp of the
    scaled scores as float32 [Hq, total_q] (FlashAttention's varlen layout: head-major, one column
    per packed query row; not [B, Hq, S]).

    On an H100 under set_backend("auto") the Hopper forward's packed flavour runs it, elsewhere and
    under "portable" the portable kernel; set_backend("hopper") raises a ValueError (that backend
    names the dense Hopper kernels).

    out is differentiable with respect to q, k and v (on an H100 the Hopper backward's packed kernels,
    elsewhere the portable backward's packed flavour; memory O(total)); rows of k/v and q that no sequence owns get gradient 0. The lse is NOT differentiable, as in flash_attn_func. See
    set_deterministic.
    """
    if (_DIRECT and not _ops._check_indices and type(q) is _Tensor and type(max_seqlen_q) is int
            and type(max_seqlen_k) is int and window_size == (-1, -1) and softcap == 0.0 and softcap is not False
            and not _tracing()):
        try:
            out, lse = _FWD_VARLEN(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                                   _BOTTOM_RIGHT if causal else _NONE, _backend)
            return (out, lse) if return_lse else out
        except Exception:
            pass  # the checked call below says what was refused, or raises the op's own error again
    max_seqlen_q, max_seqlen_k, scale, window, softcap = _validate.varlen(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, window_size, softcap, _backend
    )
    _ready()
    out, lse = _ops.fwd_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale,
                               _BOTTOM_RIGHT if causal else _NONE, _backend, window[0], window[1], softcap)
    return (out, lse) if return_lse else out
