"""Decoding with a KV cache: `flash_attn_with_kvcache` (split-KV "flash-decoding" kernels).

As flashattn.interface: eagerly, with the compiled extension, a call in its common form goes
straight to the op (the C++ binding checks it, the C++ autograd kernel refuses inputs that require
grad); every other call, and any the binding refused, takes the checked path, where
flashattn._validate raises the error that names the argument (TypeError for a wrong dtype or type,
ValueError for anything else). Nothing here reads tensor values: no host-device synchronization,
so the call can be captured in a CUDA graph and traced by torch.compile.
"""

from __future__ import annotations

from typing import Literal, overload

import torch

from . import _ext, _ops, _validate
from ._validate import PAGE_SIZE_MULTIPLE

__all__ = ["PAGE_SIZE_MULTIPLE", "flash_attn_with_kvcache"]

_FWD_KVCACHE = _ops._fwd_kvcache
_FWD_KVCACHE_DIRECT = _ops.eager_callable(_ops._fwd_kvcache)
_DIRECT = _ext._EXT is not None and _ops.DIRECT_PATH
_Tensor = torch.Tensor
_tracing = torch.compiler.is_compiling


# The return type follows return_lse as the call site spells it (tests/infra/data/typed_usage.py).
@overload
def flash_attn_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: torch.Tensor | None = None,
    v: torch.Tensor | None = None,
    cache_seqlens: torch.Tensor | int | None = None,
    softmax_scale: float | None = None,
    causal: bool = False,
    num_splits: int = 0,
    return_lse: Literal[False] = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    block_table: torch.Tensor | None = None,
    seqused_k: torch.Tensor | None = None,
) -> torch.Tensor: ...


@overload
def flash_attn_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: torch.Tensor | None = None,
    v: torch.Tensor | None = None,
    cache_seqlens: torch.Tensor | int | None = None,
    softmax_scale: float | None = None,
    causal: bool = False,
    num_splits: int = 0,
    *,
    return_lse: Literal[True],
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    block_table: torch.Tensor | None = None,
    seqused_k: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]: ...


@overload
def flash_attn_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: torch.Tensor | None = None,
    v: torch.Tensor | None = None,
    cache_seqlens: torch.Tensor | int | None = None,
    softmax_scale: float | None = None,
    causal: bool = False,
    num_splits: int = 0,
    return_lse: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    block_table: torch.Tensor | None = None,
    seqused_k: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]: ...


def flash_attn_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: torch.Tensor | None = None,
    v: torch.Tensor | None = None,
    cache_seqlens: torch.Tensor | int | None = None,
    softmax_scale: float | None = None,
    causal: bool = False,
    num_splits: int = 0,
    return_lse: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    block_table: torch.Tensor | None = None,
    seqused_k: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention of new queries against a KV cache, optionally appending new keys/values first.

    Shapes (FlashAttention's layout, heads before head_dim):
      q            [B, Sq, Hq, D]           the new queries (Sq is small in decoding: 1..16 typical,
                                            any Sq works)
      k_cache,     [B, Sk_max, Hk, D]       the caches; Hq must be a multiple of Hk (GQA / MQA:
      v_cache                               the Hq/Hk query heads of a group share one K/V head
                                            and each K/V byte is read once per split)
      k, v         [B, Sq_new, Hk, D]       optional new entries, written IN PLACE into the caches
                                            at rows cache_seqlens[b] .. cache_seqlens[b]+Sq_new-1
                                            of batch b (nothing else in the caches is touched);
                                            give both or neither
      cache_seqlens  int32 tensor [B] on q's device, or a Python int for every batch, or None
                   (= Sk_max, the whole cache): the number of valid entries per batch BEFORE the
                   append. Attention of batch b then sees its first seqlen_k(b) =
                   cache_seqlens[b] + Sq_new keys.
    dtype float16 or bfloat16 (one for all), one CUDA device, D a multiple of 8 in [8, 256] (the
    kernels exist for D = 64, 128, 256; other D run the next one up), last dimension contiguous.
    q, k, v may have any other strides. The caches must have strides (dims 0-2) that are
    multiples of 8 elements, e.g. a contiguous [B, S, H, D] buffer or a transposed contiguous
    [B, H, S, D] one.

    Paged cache (block_table given): block_table is an int32 tensor [B, max_blocks_per_seq] on q's
    device (any strides), and k_cache / v_cache are [num_blocks, page_size, Hk, D] pools of pages
    shared by the batch: logical key position j of batch b lives in page block_table[b, j //
    page_size], row j % page_size. page_size = k_cache.shape[1] must be a multiple of 16 (16, 32,
    48, 64, ..., 256, ...; any multiple works with every head dim, and a page may be smaller than the
    kernels' key tiles). Sk_max is then max_blocks_per_seq * page_size: cache_seqlens, the default
    cache_seqlens=None (= Sk_max) and the append are as above on that logical cache, and new k/v
    rows are written through the table into their pages (possibly across a page boundary). Only
    the table entries of pages that hold a key of seqlen_k(b) (after the append) are read; the
    rest may hold anything (e.g. -1). Contract, not checked (it would need the values on the host):
    every entry read is in [0, num_blocks), and no two sequences append into the same page rows.
    An out-of-range entry never makes a kernel touch memory outside the caches (reads are clamped
    to a valid page, appends to an invalid page are dropped), but the result is then meaningless.

    seqused_k: int32 tensor [B] on q's device, or None: the number of keys batch b's attention uses,
    its first seqused_k[b] (FlashAttention's varlen seqused_k, and the per-sequence context
    lengths a serving engine keeps that already count the new token). It replaces cache_seqlens[b]
    + Sq_new as seqlen_k(b) everywhere below (causal alignment, windows); an append still writes at
    cache_seqlens[b]. Contract, not checked: 0 <= seqused_k[b] <= Sk_max (values outside are
    clamped to that range).

    causal=True is bottom-right aligned per batch: query i attends to keys
    j <= i + seqlen_k(b) - Sq. Query rows that see no key give output 0 and LSE -inf.
    softmax_scale defaults to 1/sqrt(D).

    window_size=(left, right): local (sliding-window) attention, aligned like causal (per batch):
    query i attends to keys j with i + seqlen_k(b) - Sq - left <= j <= i + seqlen_k(b) - Sq + right,
    -1 unbounded on that side; causal=True is right = 0 on top of it. Only the key blocks inside
    the window are read. softcap=c > 0 replaces each scaled score x by c * tanh(x / c) before the
    softmax (approximate GPU tanh, ~2^-11 relative error).

    num_splits: how many thread blocks share one sequence's keys (flash-decoding). 0 (default)
    lets a heuristic choose from the shape and the GPU's SM count; 1 disables splitting; n > 1
    forces up to n (clamped to 128 and to the number of key blocks of Sk_max: 64 keys per block,
    32 for D > 128, 128 for 64 < D <= 128 on sm90 GPUs, which run an 8-warp tile config). Results for different counts agree up to rounding (the fp16/bf16 rounding of the
    softmax probabilities depends on where the key range is cut).

    Returns out [B, Sq, Hq, D] (q's dtype), and with return_lse=True also the natural-log
    log-sum-exp of the scaled scores, float32 [B, Hq, Sq].

    Inference only: not differentiable. Called with grad mode on and any of q, k_cache, v_cache,
    k, v requiring grad, it raises a RuntimeError naming the argument (use flash_attn_func, which
    has a backward, to train; or call this under torch.no_grad() / torch.inference_mode()).

    Contract (not checked, because checking values would synchronize with the GPU): every
    cache_seqlens[b] is in [0, Sk_max - Sq_new]. Out-of-range values do not make the kernels touch
    memory outside the caches (they are clamped, and appends past the end are dropped), but the
    result is then meaningless. Python-int cache_seqlens are checked. With the checked indices mode on
    (flashattn.set_check_indices(True) or FLASHATTN_CHECK_INDICES=1) the tensors cache_seqlens,
    seqused_k and the block_table entries the call reads are validated on the device first (one
    synchronization), with a ValueError naming the argument and the first bad entry.
    """
    if (_DIRECT and not _ops._check_indices and type(q) is _Tensor and window_size == (-1, -1) and softcap == 0.0
            and softcap is not False and type(num_splits) is int and not _tracing()):
        try:
            if cache_seqlens is None:  # the whole cache (a paged one: the table's pages)
                seqlens, seqlen = None, k_cache.shape[1] * (1 if block_table is None else block_table.shape[1])
            elif type(cache_seqlens) is int:
                seqlens, seqlen = None, cache_seqlens
            else:
                seqlens, seqlen = cache_seqlens, 0
            if block_table is None and seqused_k is None:
                out, lse = _FWD_KVCACHE_DIRECT(q, k_cache, v_cache, k, v, seqlens, seqlen, softmax_scale,
                                               bool(causal), num_splits)
            else:
                out, lse = _FWD_KVCACHE_DIRECT(q, k_cache, v_cache, k, v, seqlens, seqlen, softmax_scale,
                                               bool(causal), num_splits, -1, -1, 0.0, block_table, seqused_k)
            return (out, lse) if return_lse else out
        except Exception:
            pass  # the checked call below says what was refused, or raises the op's own error again
    c = _validate.kvcache(q, k_cache, v_cache, k, v, cache_seqlens, softmax_scale, window_size, softcap, num_splits,
                          block_table, seqused_k)
    if _ops._check_indices:  # the debug mode of flashattn.set_check_indices (one synchronization)
        _ops.check_kvcache_indices(c.seqlens, c.seqlen, c.sq_new, c.sk_max, block_table, c.page_size, c.num_pages,
                                   seqused_k)
    if not _tracing():
        _ext.require_extension()
    window, softcap = c.window, c.softcap
    if block_table is not None or seqused_k is not None:
        out, lse = _FWD_KVCACHE(q, k_cache, v_cache, k, v, c.seqlens, c.seqlen, c.scale, bool(causal), num_splits,
                                window[0], window[1], softcap, block_table, seqused_k)
    elif window == (-1, -1) and softcap == 0.0:
        out, lse = _FWD_KVCACHE(q, k_cache, v_cache, k, v, c.seqlens, c.seqlen, c.scale, bool(causal), num_splits)
    else:
        out, lse = _FWD_KVCACHE(q, k_cache, v_cache, k, v, c.seqlens, c.seqlen, c.scale, bool(causal), num_splits,
                                window[0], window[1], softcap)
    return (out, lse) if return_lse else out
