"""flashattn as PyTorch's flash-attention implementation (torch.nn.attention's registry).

Where the installed torch has `torch.nn.attention.register_flash_attention_impl` (2.11 and later),
importing flashattn registers an implementation named "flashattn" with it; nothing changes until it
is activated, by `flashattn.activate()` or `torch.nn.attention.activate_flash_attention_impl("flashattn")`.
Activation overrides the CUDA kernels of torch's flash-attention aten ops, the same mechanism torch
uses for its own FA3/FA4 (a `torch.library.Library("aten", "IMPL")` whose removal restores torch's
kernels): `F.scaled_dot_product_attention` under the flash backend (and anything else calling these
ops: `torch.compile`d graphs, `torch.nn.attention.bias.causal_lower_right`,
`torch.nn.attention.varlen`) then runs flashattn's forward and backward kernels
(`torch.ops.flashattn.fwd` / `bwd`, and their varlen ops for packed batches). `flashattn.deactivate()` or
`torch.nn.attention.restore_flash_attention_impl()` puts torch's own kernels back.

Ops overridden (CUDA dispatch key), with the semantics of torch's FlashAttention-2 kernels:
  * aten::_scaled_dot_product_flash_attention and its _backward: the torch layout, query
    [B, Hq, Sq, D], key/value [B, Hk, Sk, D];
  * aten::_flash_attention_forward and _flash_attention_backward: FlashAttention's layout, query
    [B, Sq, Hq, D], key/value [B, Sk, Hk, D]; or, with cum_seq_q and cum_seq_k (int32 [B + 1]), a
    packed variable-length batch, query [total_q, Hq, D], key/value [total_k, Hk, D], max_q /
    max_k bounding every sequence's lengths (flashattn's varlen kernels,
    `torch.ops.flashattn.fwd_varlen` / `bwd_varlen`). `torch.nn.attention.varlen.varlen_attn` and
    SDPA on nested jagged tensors call them so;
  * aten::_flash_attention_forward_no_dropout_inplace, where the installed torch has it (2.13: the
    output written into a given tensor, dense or packed, e.g. by varlen_attn_out; absent in 2.11).
In all of them:
  * dtypes float16 and bfloat16; head dim a multiple of 8 in [8, 256] (SDPA pads other head dims
    to a multiple of 8 before calling the op, and passes the scale of the unpadded one); Hq a
    multiple of Hk (SDPA with enable_gqa=True passes K/V with their Hk heads, never repeated);
    any strides with a contiguous last dim.
  * `is_causal=True` is bottom-right aligned, as in torch's FlashAttention-2 kernels for these ops:
    query i sees keys j <= i + Sk - Sq, per sequence in a packed batch (Sq_b, Sk_b its lengths).
    SDPA picks the flash backend for is_causal only when Sq == Sk, where that is also top-left
    (SDPA's is_causal); torch's `causal_lower_right` bias calls
    `_scaled_dot_product_flash_attention` with is_causal=True for Sq != Sk and relies on the
    bottom-right alignment; varlen_attn's causal is window_size (-1, 0), the same mask.
  * `scale=None` means 1/sqrt(D), D the head dim of the tensors given.
  * window_size_left / window_size_right (sliding-window attention, forward and backward) as torch's
    FlashAttention-2 kernels read them, against Sk (dense) or max_k (packed): None, negative or
    >= that bound is unbounded; is_causal sets the right edge to 0; a left edge with an unbounded
    right one gets the right edge Sk / max_k (which hides keys from the first rows only where
    Sq > Sk + 1); windows aligned bottom-right, per sequence when packed (flashattn's `window_size`).
  * outputs as torch's kernels (and their meta functions) give them: out and the gradients laid out
    like `torch.empty_like` of query (key, value), the log-sum-exp float32 [B, Hq, Sq] (dense) or
    [Hq, total_q] (packed: one column per packed query row), natural log; -inf on a row that sees
    no key, where torch's kernels write +inf; the backward takes it back as given; rng_state
    uint64 [2] and the philox offset uint64 [] (zeros: no dropout), an empty debug mask.
  * the backward is deterministic when `flashattn.set_deterministic(True)` or
    `torch.use_deterministic_algorithms(True)` is on when the backward runs (these aten ops carry
    no state from the forward to the backward but their tensors).
Not supported, refused with an error naming the argument and what is supported (never a silent
fallback to another implementation): dropout_p > 0, return_debug_mask=True, alibi_slopes,
seqused_k, block_table (paged KV), num_splits > 1 (NotImplementedError, a RuntimeError); only one
of cum_seq_q / cum_seq_k, packed tensors that are not 3-D, cumulative lengths that are not int32
[B + 1] on query's device, and the 'hopper' backend for packed batches (it names the dense Hopper
kernels; 'auto' runs the packed ones) (ValueError / TypeError); dtypes other than
float16/bfloat16 (e.g. float32); and the fp8 `.quantized` overloads (not overridden: they keep
torch's kernels).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

import torch

from . import _ext, _ops, _validate, interface

IMPL_NAME = "flashattn"

# The aten ops every supported torch has (2.11 and 2.13 schemas alike), and the one only newer
# torch versions have (registered where the installed torch defines it).
OPS = (
    "_flash_attention_forward",
    "_flash_attention_backward",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_backward",
)
OPTIONAL_OPS = ("_flash_attention_forward_no_dropout_inplace",)


def _registry() -> ModuleType | None:
    """torch.nn.attention when it has the flash-attention implementation registry, else None."""
    try:
        import torch.nn.attention as attention
    except ImportError:  # pragma: no cover - every torch flashattn supports has the module
        return None
    needed = ("register_flash_attention_impl", "activate_flash_attention_impl", "restore_flash_attention_impl",
              "current_flash_attention_impl", "list_flash_attention_impls")
    return attention if all(hasattr(attention, name) for name in needed) else None


def registry_available() -> bool:
    """True when the installed torch has torch.nn.attention's flash-attention implementation registry."""
    return _registry() is not None


# ==== checks ======================================================================================


def _unsupported(op: str, message: str) -> NotImplementedError:
    return NotImplementedError(f"flashattn ({op}): {message}")


def _is_packed(op: str, cum_seq_q: torch.Tensor | None, cum_seq_k: torch.Tensor | None) -> bool:
    """Whether the call is a packed variable-length batch: both cumulative lengths given (torch's
    kernels take the varlen path on cum_seq_q); one without the other is refused."""
    if cum_seq_q is None and cum_seq_k is None:
        return False
    if cum_seq_q is None or cum_seq_k is None:
        given, missing = ("cum_seq_q", "cum_seq_k") if cum_seq_k is None else ("cum_seq_k", "cum_seq_q")
        raise ValueError(
            f"flashattn ({op}): {missing} must be given with {given} (a packed batch has cumulative query and "
            f"key lengths, int32 [B + 1]); pass both, or neither for dense [B, S, H, D] tensors"
        )
    return True


def _check_dropout(op: str, dropout_p: float) -> None:
    if dropout_p != 0.0:
        raise _unsupported(op, f"dropout_p must be 0.0 (flashattn has no dropout), got {dropout_p}")


def _mask(is_causal: bool, window_size_left: int | None, window_size_right: int | None,
          seqlen_k: int) -> tuple[int, int, int]:
    """(causal_mode, window_left, window_right) for flashattn's kernels giving the masks of torch's
    FlashAttention-2 kernels; seqlen_k is Sk for dense tensors and max_k for packed batches (the
    bound those kernels normalize against):
      * None, a negative value or one >= seqlen_k is unbounded (-1);
      * is_causal sets the right edge to 0 (window_size_right is then ignored), and (unbounded, 0)
        is causal;
      * a left edge with an unbounded right one gets the right edge seqlen_k, as torch's kernels set
        it: where Sq > Sk + 1 (per sequence) that keeps the first rows from the last keys;
      * aligned bottom-right (per sequence for packed batches): key j is visible to query i iff
        i + Sk - Sq - left <= j <= i + Sk - Sq + right, which is flashattn's window_size."""
    left = -1 if window_size_left is None or window_size_left < 0 or window_size_left >= seqlen_k else window_size_left
    right = -1 if window_size_right is None or window_size_right < 0 or window_size_right >= seqlen_k else window_size_right
    if is_causal or (left < 0 and right == 0):
        return _ops.CAUSAL_BOTTOM_RIGHT, left, -1  # the causal mask is the right edge on the diagonal
    if left >= 0 and right < 0:
        right = seqlen_k
    return _ops.CAUSAL_NONE, left, right


def _check_forward_options(op: str, dropout_p: float, return_debug_mask: bool,
                           **optional: torch.Tensor | int | None) -> None:
    _check_dropout(op, dropout_p)
    if return_debug_mask:
        raise _unsupported(op, "return_debug_mask must be False (flashattn does not return attention probabilities)")
    for name, value in optional.items():
        if name == "num_splits":
            if value is not None and value > 1:
                raise _unsupported(
                    op, f"num_splits must be None, 0 or 1 (flashattn does not split the keys here), got {value}"
                )
        elif value is not None:
            what = {
                "alibi_slopes": "ALiBi biases",
                "seqused_k": "per-batch key lengths (seqused_k)",
                "block_table": "a paged KV cache (block_table)",
            }[name]
            raise _unsupported(op, f"{what} are not supported: {name} must be None")


def _check_backward(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    out: torch.Tensor, logsumexp: torch.Tensor) -> None:
    """The backward's tensors (FlashAttention's layout); grad_out may have any strides (a loss like
    out.sum() hands a stride-0 one: the binding copies what it cannot load)."""
    _validate.aten_dense(query, key, value)
    _validate.like_query(query, grad_out=grad_out, out=out)
    b, sq, hq, _ = query.shape
    _validate.logsumexp(logsumexp, query, "[B, Hq, Sq]", (b, hq, sq))


_scale = _validate.softmax_scale


# ==== the shared cores ============================================================================


def _laid_out_like(result: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """result with the strides of torch.empty_like(like), as torch's kernels and meta functions lay
    out out and the gradients (a compiled graph asserts them). The kernels write [B, S, H, D]
    buffers, which already are that layout for [B, S, H, D]-ordered inputs; otherwise one copy."""
    if result.stride() == like.stride():  # result is dense, so like is too: empty_like keeps its strides
        return result
    target = torch.empty_like(like)
    if target.stride() == result.stride():  # a non-dense like (e.g. a slice of a packed QKV) in that order
        return result
    return target.copy_(result)


def _forward_dense(op: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, is_causal: bool,
                   scale: float | None, window_size_left: int | None = None,
                   window_size_right: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """query [B, Sq, Hq, D], key/value [B, Sk, Hk, D] -> (out like empty_like(query), lse [B, Hq, Sq])."""
    _validate.aten_dense(query, key, value)
    causal_mode, left, right = _mask(is_causal, window_size_left, window_size_right, key.shape[1])
    out, lse = _ops.fwd(query, key, value, _scale(scale, query.shape[-1]), causal_mode, interface.get_backend(),
                        left, right)
    return _laid_out_like(out, query), lse


def _no_dropout_state(query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """rng_state (uint64 [2]), the philox offset (uint64 []) and the debug mask (empty) that torch's
    flash ops return without dropout."""
    rng_state = torch.zeros((2,), dtype=torch.uint64, device=query.device)
    offset = torch.zeros((), dtype=torch.uint64, device=query.device)
    debug_mask = torch.empty(0, dtype=query.dtype, device=query.device)
    return rng_state, offset, debug_mask


def _backward_dense(op: str, grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    out: torch.Tensor, logsumexp: torch.Tensor, is_causal: bool, scale: float | None,
                    window_size_left: int | None = None,
                    window_size_right: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashAttention's layout -> (dq, dk, dv), each laid out like empty_like of its input."""
    _check_backward(grad_out, query, key, value, out, logsumexp)
    causal_mode, left, right = _mask(is_causal, window_size_left, window_size_right, key.shape[1])
    dq, dk, dv = _ops.bwd(
        grad_out, query, key, value, out, logsumexp, _scale(scale, query.shape[-1]), causal_mode,
        _ops.deterministic_backward(), interface.get_backend(), left, right,
    )
    return _laid_out_like(dq, query), _laid_out_like(dk, key), _laid_out_like(dv, value)


def _packed_backend(op: str) -> str:
    backend = interface.get_backend()
    _validate.varlen_backend(f"flashattn ({op})", backend)
    return backend


def _forward_packed(op: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cum_seq_q: torch.Tensor,
                    cum_seq_k: torch.Tensor, max_q: int, max_k: int, is_causal: bool, scale: float | None,
                    window_size_left: int | None = None,
                    window_size_right: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """query [total_q, Hq, D], key/value [total_k, Hk, D], cum_seq int32 [B + 1] -> (out like
    empty_like(query), lse float32 [Hq, total_q]); masks aligned per sequence."""
    max_q, max_k = _validate.aten_packed(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k)
    causal_mode, left, right = _mask(is_causal, window_size_left, window_size_right, max_k)
    out, lse = _ops.fwd_varlen(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k,
                               _scale(scale, query.shape[-1]), causal_mode, _packed_backend(op), left, right)
    return _laid_out_like(out, query), lse


def _backward_packed(op: str, grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     out: torch.Tensor, logsumexp: torch.Tensor, cum_seq_q: torch.Tensor, cum_seq_k: torch.Tensor,
                     max_q: int, max_k: int, is_causal: bool, scale: float | None, window_size_left: int | None = None,
                     window_size_right: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The packed batch's gradients (see _forward_packed), each laid out like empty_like of its input."""
    max_q, max_k = _validate.aten_packed(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k)
    _validate.like_query(query, grad_out=grad_out, out=out)
    _validate.logsumexp(logsumexp, query, "[Hq, total_q]", (query.shape[1], query.shape[0]))
    if grad_out.stride(-1) != 1:  # e.g. the expanded (stride-0) gradient of out.sum(): rows are loaded whole
        grad_out = grad_out.contiguous()
    causal_mode, left, right = _mask(is_causal, window_size_left, window_size_right, max_k)
    dq, dk, dv = _ops.bwd_varlen(
        grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
        _scale(scale, query.shape[-1]), causal_mode, _ops.deterministic_backward(), _packed_backend(op), left, right,
    )
    return _laid_out_like(dq, query), _laid_out_like(dk, key), _laid_out_like(dv, value)


def _flash_forward(op: str, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cum_seq_q: torch.Tensor | None,
                   cum_seq_k: torch.Tensor | None, max_q: int, max_k: int, dropout_p: float, is_causal: bool,
                   return_debug_mask: bool, scale: float | None, window_size_left: int | None,
                   window_size_right: int | None,
                   **optional: torch.Tensor | int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The _flash_attention_forward ops: every refusal, then the packed or the dense forward."""
    _check_forward_options(op, dropout_p, return_debug_mask, **optional)
    if _is_packed(op, cum_seq_q, cum_seq_k):
        if TYPE_CHECKING:  # both given (_is_packed)
            assert cum_seq_q is not None and cum_seq_k is not None
        return _forward_packed(op, query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, is_causal, scale,
                               window_size_left, window_size_right)
    return _forward_dense(op, query, key, value, is_causal, scale, window_size_left, window_size_right)


# ==== the aten implementations (signatures: the union of torch 2.11's and 2.13's schemas) =========


def flash_attention_forward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cum_seq_q: torch.Tensor | None,
    cum_seq_k: torch.Tensor | None,
    max_q: int,
    max_k: int,
    dropout_p: float,
    is_causal: bool,
    return_debug_mask: bool,
    *,
    scale: float | None = None,
    window_size_left: int | None = None,
    window_size_right: int | None = None,
    seqused_k: torch.Tensor | None = None,
    alibi_slopes: torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,  # torch >= 2.13
    num_splits: int | None = None,  # torch >= 2.13
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """aten::_flash_attention_forward on flashattn's kernels (float16/bfloat16, CUDA, last dim
    contiguous; is_causal and windows bottom-right aligned, see _mask).

    Dense (cum_seq_q and cum_seq_k None): query [B, Sq, Hq, D], key/value [B, Sk, Hk, D], max_q /
    max_k unused; returns output [B, Sq, Hq, D] and softmax_logsumexp float32 [B, Hq, Sq].
    Packed batch (both given, int32 [B + 1]; what torch.nn.attention.varlen and nested jagged
    tensors call): query [total_q, Hq, D], key/value [total_k, Hk, D], sequence b rows
    cum_seq_q[b] .. cum_seq_q[b + 1] of query and cum_seq_k[b] .. cum_seq_k[b + 1] of key/value,
    max_q / max_k bounds on every sequence's lengths, masks aligned per sequence (query i of
    sequence b sees keys j <= i + Sk_b - Sq_b under is_causal); returns output [total_q, Hq, D] and
    softmax_logsumexp float32 [Hq, total_q] (one column per packed query row).
    Both return the output laid out like empty_like(query), then rng_state uint64 [2], unused
    uint64 [] (zeros: no dropout) and debug_attn_mask (empty)."""
    out, lse = _flash_forward(
        "aten::_flash_attention_forward", query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
        return_debug_mask, scale, window_size_left, window_size_right, seqused_k=seqused_k,
        alibi_slopes=alibi_slopes, block_table=block_table, num_splits=num_splits,
    )
    return (out, lse, *_no_dropout_state(query))


def flash_attention_forward_no_dropout_inplace(
    out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cum_seq_q: torch.Tensor | None,
    cum_seq_k: torch.Tensor | None,
    max_q: int,
    max_k: int,
    dropout_p: float,
    is_causal: bool,
    return_debug_mask: bool,
    *,
    scale: float | None = None,
    window_size_left: int | None = None,
    window_size_right: int | None = None,
    seqused_k: torch.Tensor | None = None,
    alibi_slopes: torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,
    num_splits: int | None = None,
) -> torch.Tensor:
    """aten::_flash_attention_forward_no_dropout_inplace (torch >= 2.13; varlen_attn_out calls it
    with a packed batch) on flashattn's kernels: flash_attention_forward's output written into
    `out` (query's shape and dtype); returns the softmax_logsumexp, float32 [B, Hq, Sq] (dense) or
    [Hq, total_q] (packed)."""
    if out.shape != query.shape or out.dtype != query.dtype:
        raise ValueError(
            f"out must have query's shape {tuple(query.shape)} and dtype {query.dtype}, "
            f"got {tuple(out.shape)} {out.dtype}"
        )
    result, lse = _flash_forward(
        "aten::_flash_attention_forward_no_dropout_inplace", query, key, value, cum_seq_q, cum_seq_k, max_q, max_k,
        dropout_p, is_causal, return_debug_mask, scale, window_size_left, window_size_right, seqused_k=seqused_k,
        alibi_slopes=alibi_slopes, block_table=block_table, num_splits=num_splits,
    )
    out.copy_(result)
    return lse


def flash_attention_backward(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    out: torch.Tensor,
    logsumexp: torch.Tensor,
    cum_seq_q: torch.Tensor | None,
    cum_seq_k: torch.Tensor | None,
    max_q: int,
    max_k: int,
    dropout_p: float,
    is_causal: bool,
    rng_state: torch.Tensor,
    unused: torch.Tensor,
    *,
    scale: float | None = None,
    window_size_left: int | None = None,
    window_size_right: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """aten::_flash_attention_backward on flashattn's kernels: the layouts of flash_attention_forward,
    dense or packed (cum_seq_q / cum_seq_k, max_q / max_k those of the forward), logsumexp as the
    forward returned it; rng_state and unused are not read (no dropout). Returns (grad_query,
    grad_key, grad_value) laid out like empty_like(query / key / value)."""
    op = "aten::_flash_attention_backward"
    _check_dropout(op, dropout_p)
    if _is_packed(op, cum_seq_q, cum_seq_k):
        if TYPE_CHECKING:  # both given (_is_packed)
            assert cum_seq_q is not None and cum_seq_k is not None
        return _backward_packed(op, grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
                                is_causal, scale, window_size_left, window_size_right)
    return _backward_dense(op, grad_out, query, key, value, out, logsumexp, is_causal, scale,
                           window_size_left, window_size_right)


def _check_rank4(**tensors: torch.Tensor) -> None:
    """The torch-layout ops' tensors are 4-D [B, H, S, D] (checked before taking [B, S, H, D] views)."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D [B, H, S, D], got shape {tuple(t.shape)}")


def _bshd(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(t.transpose(1, 2) for t in tensors)


def scaled_dot_product_flash_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    return_debug_mask: bool = False,
    *,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, None, None, int, int, torch.Tensor, torch.Tensor, torch.Tensor]:
    """aten::_scaled_dot_product_flash_attention on flashattn's kernels (what SDPA's flash backend calls).

    query [B, Hq, Sq, D], key/value [B, Hk, Sk, D] (float16/bfloat16, CUDA, last dim contiguous);
    is_causal bottom-right aligned (SDPA uses it only with Sq == Sk). Returns (output [B, Hq, Sq, D]
    laid out like empty_like(query), logsumexp float32 [B, Hq, Sq], cum_seq_q None, cum_seq_k None,
    max_q Sq, max_k Sk, rng_state uint64 [2], unused uint64 [], debug_attn_mask empty)."""
    op = "aten::_scaled_dot_product_flash_attention"
    _check_forward_options(op, dropout_p, return_debug_mask)
    _check_rank4(query=query, key=key, value=value)
    q_bshd, k_bshd, v_bshd = _bshd(query, key, value)
    out, lse = _forward_dense(op, q_bshd, k_bshd, v_bshd, is_causal, scale)
    rng_state, offset, debug_mask = _no_dropout_state(query)
    return (_laid_out_like(out.transpose(1, 2), query), lse, None, None, query.shape[2], key.shape[2],
            rng_state, offset, debug_mask)


def scaled_dot_product_flash_attention_backward(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    out: torch.Tensor,
    logsumexp: torch.Tensor,
    cum_seq_q: torch.Tensor | None,
    cum_seq_k: torch.Tensor | None,
    max_q: int,
    max_k: int,
    dropout_p: float,
    is_causal: bool,
    philox_seed: torch.Tensor,
    philox_offset: torch.Tensor,
    *,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """aten::_scaled_dot_product_flash_attention_backward on flashattn's kernels: the torch layout
    (see scaled_dot_product_flash_attention). Returns (grad_query, grad_key, grad_value) laid out
    like empty_like(query / key / value)."""
    op = "aten::_scaled_dot_product_flash_attention_backward"
    if cum_seq_q is not None or cum_seq_k is not None:
        raise _unsupported(
            op,
            "cum_seq_q and cum_seq_k must be None: this op takes dense [B, H, S, D] tensors (its forward never "
            "returns them); packed variable-length batches go through aten::_flash_attention_forward / "
            "_flash_attention_backward",
        )
    _check_dropout(op, dropout_p)
    _check_rank4(grad_out=grad_out, query=query, key=key, value=value, out=out)
    grad_out_bshd, q_bshd, k_bshd, v_bshd, out_bshd = _bshd(grad_out, query, key, value, out)
    dq, dk, dv = _backward_dense(op, grad_out_bshd, q_bshd, k_bshd, v_bshd, out_bshd, logsumexp, is_causal, scale)
    dq, dk, dv = _bshd(dq, dk, dv)  # back to [B, H, S, D]
    return _laid_out_like(dq, query), _laid_out_like(dk, key), _laid_out_like(dv, value)


IMPLEMENTATIONS = {
    "_flash_attention_forward": flash_attention_forward,
    "_flash_attention_backward": flash_attention_backward,
    "_scaled_dot_product_flash_attention": scaled_dot_product_flash_attention,
    "_scaled_dot_product_flash_attention_backward": scaled_dot_product_flash_attention_backward,
    "_flash_attention_forward_no_dropout_inplace": flash_attention_forward_no_dropout_inplace,
}


def installed_ops() -> tuple[str, ...]:
    """The ops this implementation overrides in the installed torch: OPS, and each of
    OPTIONAL_OPS that the installed torch defines."""
    return OPS + tuple(name for name in OPTIONAL_OPS if hasattr(torch.ops.aten, name))


# ==== registration ================================================================================


@dataclass
class FlashattnHandle:
    """What activation returns to torch's registry: the Library holding the overrides; remove()
    deregisters them, which brings torch's own kernels back."""

    library: torch.library.Library | None

    def remove(self) -> None:
        if self.library is not None:
            self.library._destroy()
            self.library = None


def register_kernels(dispatch_key: str = "CUDA") -> FlashattnHandle:
    """Overrides the aten flash-attention ops for `dispatch_key` with flashattn's implementations
    (the registry's register_fn calls this with "CUDA"; the CPU tests use "CPU" with stand-in
    kernels). Returns the handle whose remove() undoes it."""
    lib = torch.library.Library("aten", "IMPL", dispatch_key)
    try:
        for name in installed_ops():
            lib.impl(name, IMPLEMENTATIONS[name], dispatch_key)
    except BaseException:
        lib._destroy()
        raise
    return FlashattnHandle(lib)


def _check_can_run() -> None:
    _ext.require_extension()  # RuntimeError with flashattn.extension_error()'s text
    if not torch.cuda.is_available():
        raise RuntimeError("flashattn cannot be activated: no CUDA device is available")


def _register_fn() -> FlashattnHandle:
    """torch's registry calls this on activate_flash_attention_impl("flashattn")."""
    _check_can_run()
    return register_kernels("CUDA")


def _require_registry() -> ModuleType:
    attention = _registry()
    if attention is None:
        raise RuntimeError(
            f"flashattn cannot be activated as PyTorch's flash-attention implementation: torch {torch.__version__} "
            "has no torch.nn.attention.register_flash_attention_impl / activate_flash_attention_impl "
            "(added in torch 2.11). Call flashattn.scaled_dot_product_attention directly instead."
        )
    return attention


def activate() -> None:
    """Make flashattn the implementation behind torch's flash-attention ops (SDPA's flash backend),
    in this process, until `deactivate()`. The same as
    `torch.nn.attention.activate_flash_attention_impl("flashattn")`; activating replaces any other
    activated implementation (torch's registry holds one at a time).

    Raises RuntimeError when the installed torch has no implementation registry, when the CUDA
    extension is not built (with `flashattn.extension_error()`'s message) or no CUDA device is
    available. See the module docstring for what is covered and what raises."""
    attention = _require_registry()
    _check_can_run()  # before the registry restores whichever implementation was active
    attention.activate_flash_attention_impl(IMPL_NAME)


def deactivate() -> None:
    """Give torch's own flash-attention kernels back (`restore_flash_attention_impl()`) if flashattn
    is the active implementation; otherwise do nothing (another activated implementation stays)."""
    attention = _registry()
    if attention is not None and attention.current_flash_attention_impl() == IMPL_NAME:
        attention.restore_flash_attention_impl()


def is_active() -> bool:
    """Whether flashattn is the activated flash-attention implementation of torch."""
    attention = _registry()
    return attention is not None and attention.current_flash_attention_impl() == IMPL_NAME


def _register_with_torch() -> None:
    """At import: make "flashattn" known to torch's registry (never activated here)."""
    attention = _registry()
    if attention is not None:
        attention.register_flash_attention_impl(IMPL_NAME, register_fn=_register_fn)


_register_with_torch()

__all__ = ["activate", "deactivate", "is_active", "registry_available", "IMPL_NAME"]
