"""Public entry points: validate the inputs, pick the layout, call the one registered op."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator

import torch

from . import _ext, _ops

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
MIN_HEAD_DIM = 8
MAX_HEAD_DIM = 256

_backend = os.environ.get("FLASHATTN_BACKEND", "auto")


def set_backend(name: str) -> None:
    """Choose the forward path: "auto" (Hopper path on sm90 where it applies), "portable"
    (mma.sync, every sm80+ GPU), or "hopper". Also settable with FLASHATTN_BACKEND.

    The backward follows the same switch: "auto" and "hopper" run the Hopper backward on an sm90
    build for the calls it covers (docs/api.md, Training), every other call the portable one. The
    gradients do not depend on the path the forward took."""
    global _backend
    if name not in _ops.BACKENDS:
        raise ValueError(f"backend must be one of {_ops.BACKENDS}, got {name!r}")
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


def _check_tensor(name: str, t, rank_min: int) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() < rank_min:
        raise ValueError(f"{name} must have at least {rank_min} dimensions, got shape {tuple(t.shape)}")
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name}.dtype must be torch.float16 or torch.bfloat16, got {t.dtype}")
    if not t.is_cuda:  # (not t.device.type: that builds a device object, ~0.3 us per tensor per call)
        raise _ext.not_on_cuda(name, t)
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(
            f"{name} must have a contiguous last dimension (stride(-1) == 1), got strides {tuple(t.stride())}"
        )


def _check_common(q, k, v) -> None:
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"query, key and value must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    # get_device() is an int (all three are CUDA tensors by now); .device builds an object per call.
    if k.get_device() != q.get_device() or v.get_device() != q.get_device():
        raise ValueError(f"query, key and value must be on one device, got {q.device}, {k.device}, {v.device}")
    d = q.shape[-1]
    if d < MIN_HEAD_DIM or d > MAX_HEAD_DIM or d % 8 != 0:
        raise ValueError(
            f"head dim (query.shape[-1]) must be a multiple of 8 in [{MIN_HEAD_DIM}, {MAX_HEAD_DIM}], got {d}"
        )
    k_shape = k.shape
    if k_shape != v.shape:
        raise ValueError(f"key and value must have the same shape, got {tuple(k_shape)} and {tuple(v.shape)}")
    if k_shape[-1] != d:
        raise ValueError(f"key head dim must equal query head dim {d}, got key shape {tuple(k_shape)}")


def _scale(scale: float | None, d: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(d)
    scale = float(scale)
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    return scale


def _window(window_size) -> tuple[int, int]:
    """(left, right) from window_size: a pair of ints, each -1 (unbounded on that side) or >= 0."""
    if isinstance(window_size, (str, bytes)) or not hasattr(window_size, "__len__") or len(window_size) != 2:
        raise TypeError(f"window_size must be a pair of ints (left, right), -1 meaning unbounded, got {window_size!r}")
    left, right = window_size
    for name, w in (("left", left), ("right", right)):
        if isinstance(w, bool) or not isinstance(w, int):
            raise TypeError(
                f"window_size must be a pair of ints (left, right), got {type(w).__name__} {w!r} for {name}"
            )
        if w < -1:
            raise ValueError(f"window_size values must be >= -1 (-1: unbounded), got {tuple(window_size)}")
    return int(left), int(right)


def _softcap(softcap) -> float:
    """softcap as a float: 0 (off) or a finite value > 0."""
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
        raise TypeError(f"softcap must be a float (0.0: off), got {type(softcap).__name__}")
    softcap = float(softcap)
    if not math.isfinite(softcap) or softcap < 0.0:
        raise ValueError(f"softcap must be finite and >= 0 (0.0: off), got {softcap}")
    if softcap > 0.0 and not 1.2e-38 < softcap < 3.4e38:
        raise ValueError(f"softcap must be 0 or a positive value within float32's normal range, got {softcap}")
    return softcap


def _run(q4, k4, v4, scale: float, causal_mode: int, bhsd: bool = False, window: tuple[int, int] = (-1, -1),
         softcap: float = 0.0):
    """q4 [B, Sq, Hq, D], k4/v4 [B, Sk, Hk, D] -> (out [B, Sq, Hq, D], lse [B, Hq, Sq]); with bhsd, the
    sequence and head dims swapped in the inputs and in out."""
    if q4.numel() > 0 and k4.shape[2 if bhsd else 1] == 0:
        order = "[B, H, S, D]" if bhsd else "[B, S, H, D]"
        raise ValueError(
            f"key/value sequence length must be >= 1 when query is not empty, got key shape {tuple(k4.shape)} "
            f"in {order} order (attention over no keys is undefined)"
        )
    if _ext._EXT is None and not torch.compiler.is_compiling():  # (loaded at import: one attribute read)
        _ext.require_extension()
    # The backward's mode is read when the forward runs (the op's autograd setup); under
    # torch.compile that happens once, at trace time. Reading the switch here, in code torch.compile
    # traces, makes it guard on it, so a compiled graph retraces when set_deterministic changes
    # (torch.use_deterministic_algorithms is guarded by torch.compile itself).
    if _ops._deterministic:
        pass
    return (_ops.fwd_bhsd if bhsd else _ops.fwd)(q4, k4, v4, scale, causal_mode, _backend, window[0], window[1], softcap)


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
    if attn_mask is not None:
        raise ValueError("attn_mask is not supported by flashattn (use is_causal, or torch's SDPA for masks)")
    if dropout_p != 0.0:
        raise ValueError(f"dropout_p must be 0.0 (dropout is not supported by flashattn), got {dropout_p}")
    min_rank = 3 if enable_gqa else 2
    for name, t in (("query", query), ("key", key), ("value", value)):
        _check_tensor(name, t, min_rank)
    if not (query.dim() == key.dim() == value.dim()):
        raise ValueError(
            f"query, key and value must have the same rank, got {query.dim()}, {key.dim()}, {value.dim()}"
        )
    _check_common(query, key, value)
    rank = query.dim()
    if rank >= 3:
        hq, hk = query.shape[-3], key.shape[-3]
        if hk == 0:
            raise ValueError(f"key/value must have at least one head, got key shape {tuple(key.shape)}")
        if query.shape[:-3] != key.shape[:-3]:
            raise ValueError(
                f"query and key batch dims must match, got {tuple(query.shape[:-3])} and {tuple(key.shape[:-3])}"
            )
        if enable_gqa:
            if hq % hk != 0:
                raise ValueError(f"with enable_gqa, query heads ({hq}) must be a multiple of key/value heads ({hk})")
        elif hq != hk:
            raise ValueError(
                f"query heads ({hq}) and key/value heads ({hk}) differ: pass enable_gqa=True for grouped-query attention"
            )

    def to_bshd(t: torch.Tensor) -> torch.Tensor:
        if t.dim() == 2:
            t = t[None, None]
        elif t.dim() == 3:
            t = t.unsqueeze(0)
        elif t.dim() > 4:
            t = t.flatten(0, -4)
        return t.transpose(1, 2)

    causal = _ops.CAUSAL_TOP_LEFT if is_causal else _ops.CAUSAL_NONE
    if rank == 4:  # the common case: no reshapes, and the layout views taken in C++ (host time per call)
        out, _ = _run(query, key, value, _scale(scale, query.shape[-1]), causal, bhsd=True)
        return out
    out, _ = _run(to_bshd(query), to_bshd(key), to_bshd(value), _scale(scale, query.shape[-1]), causal)
    return out.transpose(1, 2).reshape(query.shape)


def flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    softmax_scale: float | None = None,
    causal: bool = False,
    return_lse: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
):
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
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(name, t, 4)
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D [batch, seqlen, heads, head_dim], got shape {tuple(t.shape)}")
    _check_common(q, k, v)
    if k.shape[2] == 0:
        raise ValueError(f"k/v must have at least one head, got k shape {tuple(k.shape)}")
    if k.shape[0] != q.shape[0]:
        raise ValueError(f"q and k batch sizes differ: {q.shape[0]} vs {k.shape[0]}")
    if q.shape[2] % k.shape[2] != 0:
        raise ValueError(f"q heads ({q.shape[2]}) must be a multiple of k/v heads ({k.shape[2]})")
    window = _window(window_size) if window_size != (-1, -1) else (-1, -1)
    softcap = _softcap(softcap) if softcap != 0.0 or isinstance(softcap, bool) else 0.0
    causal_mode = _ops.CAUSAL_BOTTOM_RIGHT if causal else _ops.CAUSAL_NONE
    out, lse = _run(q, k, v, _scale(softmax_scale, q.shape[-1]), causal_mode, window=window, softcap=softcap)
    return (out, lse) if return_lse else out


def _check_cu_seqlens(name: str, cu, q: torch.Tensor) -> None:
    if not isinstance(cu, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (int32 [batch + 1]), got {type(cu).__name__}")
    if cu.dtype != torch.int32:
        raise TypeError(f"{name}.dtype must be torch.int32, got {cu.dtype}")
    if cu.get_device() != q.get_device():
        raise ValueError(f"{name} must be on q's device {q.device}, got device {cu.device}")
    if cu.dim() != 1 or cu.shape[0] < 1:
        raise ValueError(f"{name} must be 1-D [batch + 1] (cumulative sequence lengths), got shape {tuple(cu.shape)}")
    if not cu.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got strides {tuple(cu.stride())}")


def _max_seqlen(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a Python int (a bound the caller knows, never read from the device), "
                        f"got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)


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
):
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

    Runs the portable kernel on every GPU (the Hopper path needs dense tensors): under
    set_backend("hopper") it raises a ValueError.

    out is differentiable with respect to q, k and v (the portable backward kernels' packed flavour;
    memory O(total)); rows of k/v and q that no sequence owns get gradient 0. The lse is NOT differentiable, as in flash_attn_func. See
    set_deterministic.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(name, t, 3)
        if t.dim() != 3:
            raise ValueError(f"{name} must be 3-D [total_tokens, heads, head_dim], got shape {tuple(t.shape)}")
    _check_common(q, k, v)
    if k.shape[1] == 0:
        raise ValueError(f"k/v must have at least one head, got k shape {tuple(k.shape)}")
    if q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"q heads ({q.shape[1]}) must be a multiple of k/v heads ({k.shape[1]})")
    _check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, q)
    _check_cu_seqlens("cu_seqlens_k", cu_seqlens_k, q)
    if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0]:
        raise ValueError(
            f"cu_seqlens_q and cu_seqlens_k must have the same length (batch + 1), got {cu_seqlens_q.shape[0]} "
            f"and {cu_seqlens_k.shape[0]}"
        )
    max_seqlen_q = _max_seqlen("max_seqlen_q", max_seqlen_q)
    max_seqlen_k = _max_seqlen("max_seqlen_k", max_seqlen_k)
    window = _window(window_size) if window_size != (-1, -1) else (-1, -1)
    softcap = _softcap(softcap) if softcap != 0.0 or isinstance(softcap, bool) else 0.0
    if _backend == "hopper":
        raise ValueError(
            "flash_attn_varlen_func: backend 'hopper' does not support packed variable-length batches (its TMA "
            "path needs dense [B, S, H, D] tensors); use set_backend('auto') or 'portable', which run the "
            "portable kernel for them on every GPU"
        )
    scale = _scale(softmax_scale, q.shape[-1])
    if _ext._EXT is None and not torch.compiler.is_compiling():
        _ext.require_extension()
    causal_mode = _ops.CAUSAL_BOTTOM_RIGHT if causal else _ops.CAUSAL_NONE
    if _ops._deterministic:  # read in traced code, so that torch.compile guards on it (see _run)
        pass
    out, lse = _ops.fwd_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, causal_mode,
                               _backend, window[0], window[1], softcap)
    return (out, lse) if return_lse else out
