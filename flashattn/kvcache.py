"""Decoding with a KV cache: `flash_attn_with_kvcache` (split-KV "flash-decoding" kernels).

Validation happens here, in Python, before the op is called, with errors that name the argument
(TypeError for a wrong dtype or type, ValueError for anything else), so bad inputs fail the same
way on any machine. Nothing here reads tensor values: no host-device synchronization, so the call
can be captured in a CUDA graph and traced by torch.compile.
"""

from __future__ import annotations

import torch

from . import _ext, _ops
from .interface import MAX_HEAD_DIM, MIN_HEAD_DIM, SUPPORTED_DTYPES, _scale, _softcap, _window

# Every check below reads tensor metadata once (shape, stride(), dtype, is_cuda): on a decode step
# the GPU work can be a few microseconds, so the Python side is kept to a few attribute reads per
# tensor (t.device.type alone costs ~1 us, t.stride(i) ~0.5 us each). Messages match
# flashattn.interface's.


def _meta(name: str, t) -> tuple[torch.Size, tuple[int, ...]]:
    """(shape, strides) of a 4-D fp16/bf16 CUDA tensor with a contiguous last dimension."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    shape = t.shape
    if len(shape) != 4:
        if len(shape) < 4:
            raise ValueError(f"{name} must have at least 4 dimensions, got shape {tuple(shape)}")
        raise ValueError(f"{name} must be 4-D [batch, seqlen, heads, head_dim], got shape {tuple(shape)}")
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name}.dtype must be torch.float16 or torch.bfloat16, got {t.dtype}")
    if not t.is_cuda:
        raise _ext.not_on_cuda(name, t)
    stride = t.stride()
    if shape[3] > 1 and stride[3] != 1:
        raise ValueError(f"{name} must have a contiguous last dimension (stride(-1) == 1), got strides {stride}")
    return shape, stride


def _check_cache_layout(name: str, t: torch.Tensor, shape, stride) -> None:
    # The caches are read and appended to in place, so a layout the kernels cannot stream 16 bytes
    # at a time cannot be fixed by a copy: refuse it. Under torch.compile the storage offset is not
    # traceable (a graph break); the binding still checks the data pointer's alignment there.
    offset = 0 if torch.compiler.is_compiling() else t.storage_offset()
    if (
        (shape[0] > 1 and stride[0] % 8)
        or (shape[1] > 1 and stride[1] % 8)
        or (shape[2] > 1 and stride[2] % 8)
        or offset % 8
    ):
        raise ValueError(
            f"{name} must have strides of dims 0-2 and a storage offset that are multiples of 8 elements "
            f"(16-byte aligned rows; the cache is used in place and cannot be copied), got strides "
            f"{stride} and storage offset {offset}"
        )


def _refuse_grad(q, k_cache, v_cache, k, v) -> None:
    """The decode op has no backward: an input that requires grad would get none, silently."""
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("k", k), ("v", v)):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            raise RuntimeError(
                f"flash_attn_with_kvcache is inference-only (no backward), but {name} requires grad: "
                "use flashattn.flash_attn_func (or scaled_dot_product_attention) to train, or call it "
                "under torch.no_grad() / torch.inference_mode()"
            )


# Paged caches: page sizes the kernels take (csrc/flash_decode/decode_traits.h, kDecodeMinPageSize).
PAGE_SIZE_MULTIPLE = 16
_INT32_MAX = 2**31 - 1


def _check_block_table(block_table, b: int, device, c_shape) -> int:
    """Validates a paged cache's block table against q and k_cache; returns Sk_max, the capacity of
    one sequence (max_blocks_per_seq * page_size). Reads metadata only: page indices are the
    caller's contract (checking them would synchronize with the GPU)."""
    if not isinstance(block_table, torch.Tensor):
        raise TypeError(f"block_table must be an int32 tensor or None, got {type(block_table).__name__}")
    if block_table.dtype != torch.int32:
        raise TypeError(f"block_table must be an int32 tensor, got dtype {block_table.dtype}")
    bt_shape = block_table.shape
    if len(bt_shape) != 2:
        raise ValueError(f"block_table must be 2-D [B, max_blocks_per_seq], got shape {list(bt_shape)}")
    if bt_shape[0] != b:
        raise ValueError(f"block_table batch size ({bt_shape[0]}) must equal q's ({b})")
    if bt_shape[1] < 1:
        raise ValueError("block_table must have at least one column (max_blocks_per_seq >= 1), got shape "
                         f"{list(bt_shape)}")
    if block_table.device != device:
        raise ValueError(f"block_table must be on q's device {device}, got {block_table.device}")
    num_blocks, page_size = c_shape[0], c_shape[1]
    if page_size < PAGE_SIZE_MULTIPLE or page_size % PAGE_SIZE_MULTIPLE:
        raise ValueError(
            f"with block_table, k_cache/v_cache are [num_blocks, page_size, Hk, D] and page_size (k_cache.shape[1]) "
            f"must be a positive multiple of {PAGE_SIZE_MULTIPLE}, got {page_size}"
        )
    if num_blocks < 1:
        raise ValueError("with block_table, k_cache/v_cache must hold at least one page (k_cache.shape[0] >= 1), got 0")
    sk_max = bt_shape[1] * page_size
    if sk_max > _INT32_MAX or num_blocks > _INT32_MAX:
        raise ValueError(
            f"block_table: max_blocks_per_seq * page_size = {bt_shape[1]} * {page_size} and the page count "
            f"{num_blocks} must fit in int32"
        )
    return sk_max


def _check_seqused_k(seqused_k, b: int, device) -> None:
    if not isinstance(seqused_k, torch.Tensor):
        raise TypeError(f"seqused_k must be an int32 tensor or None, got {type(seqused_k).__name__}")
    if seqused_k.dtype != torch.int32:
        raise TypeError(f"seqused_k must be an int32 tensor, got dtype {seqused_k.dtype}")
    shape = seqused_k.shape
    if len(shape) != 1 or shape[0] != b:
        raise ValueError(f"seqused_k must have shape [B] = [{b}], got {list(shape)}")
    if seqused_k.device != device:
        raise ValueError(f"seqused_k must be on q's device {device}, got {seqused_k.device}")


_FWD_KVCACHE = _ops.fwd_kvcache_overload()  # the OpOverload: no packet lookup per call


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
):
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
    if torch.is_grad_enabled():
        _refuse_grad(q, k_cache, v_cache, k, v)
    q_shape, _ = _meta("q", q)
    c_shape, c_stride = _meta("k_cache", k_cache)
    v_shape, v_stride = _meta("v_cache", v_cache)
    dtype, device = q.dtype, q.device
    if k_cache.dtype != dtype or v_cache.dtype != dtype:
        raise TypeError(f"q, k_cache and v_cache must share one dtype, got {dtype}, {k_cache.dtype}, {v_cache.dtype}")
    if k_cache.device != device or v_cache.device != device:
        raise ValueError(f"q, k_cache and v_cache must be on one device, got {device}, {k_cache.device}, {v_cache.device}")
    b, sq, hq, d = q_shape
    if d < MIN_HEAD_DIM or d > MAX_HEAD_DIM or d % 8 != 0:
        raise ValueError(f"head dim (q.shape[-1]) must be a multiple of 8 in [{MIN_HEAD_DIM}, {MAX_HEAD_DIM}], got {d}")
    if c_shape != v_shape:
        raise ValueError(f"k_cache and v_cache must have the same shape, got {tuple(c_shape)} and {tuple(v_shape)}")
    cache_b, sk_max, hk, cache_d = c_shape
    if block_table is None:
        if cache_b != b:
            raise ValueError(f"k_cache batch size ({cache_b}) must equal q's ({b})")
    else:
        sk_max = _check_block_table(block_table, b, device, c_shape)
    if cache_d != d:
        raise ValueError(f"k_cache head dim ({cache_d}) must equal q's ({d})")
    if hk == 0 or hq % hk != 0:
        raise ValueError(f"q heads ({hq}) must be a multiple of k_cache/v_cache heads ({hk})")
    _check_cache_layout("k_cache", k_cache, c_shape, c_stride)
    _check_cache_layout("v_cache", v_cache, v_shape, v_stride)

    if (k is None) != (v is None):
        raise ValueError(f"k and v must be given together (got k {'None' if k is None else 'a tensor'}, "
                         f"v {'None' if v is None else 'a tensor'})")
    sq_new = 0
    if k is not None:
        k_shape, _ = _meta("k", k)
        vn_shape, _ = _meta("v", v)
        if k.dtype != dtype or v.dtype != dtype:
            raise TypeError(f"k and v must have q's dtype {dtype}, got {k.dtype} and {v.dtype}")
        if k.device != device or v.device != device:
            raise ValueError(f"k and v must be on q's device {device}, got {k.device} and {v.device}")
        if k_shape[0] != b or k_shape[2] != hk or k_shape[3] != d:
            raise ValueError(f"k must be [B={b}, Sq_new, Hk={hk}, D={d}] to match the cache, got shape {tuple(k_shape)}")
        if vn_shape != k_shape:
            raise ValueError(f"v must have k's shape {tuple(k_shape)}, got {tuple(vn_shape)}")
        sq_new = k_shape[1]
        if sq_new > sk_max:
            raise ValueError(f"k/v have {sq_new} new rows but the cache holds only Sk_max = {sk_max}")

    seqlens_tensor = None
    seqlen_fixed = 0
    if cache_seqlens is None:
        if sq_new > 0:
            raise ValueError(
                "cache_seqlens is required when appending k/v: its default (the whole cache, "
                f"Sk_max = {sk_max}) leaves no room for {sq_new} new rows"
            )
        seqlen_fixed = sk_max
    elif isinstance(cache_seqlens, torch.Tensor):
        if cache_seqlens.dtype != torch.int32:
            raise TypeError(f"cache_seqlens must be an int32 tensor, got dtype {cache_seqlens.dtype}")
        cs_shape = cache_seqlens.shape
        if len(cs_shape) != 1 or cs_shape[0] != b:
            raise ValueError(f"cache_seqlens must have shape [B] = [{b}], got {list(cs_shape)}")
        if cache_seqlens.device != device:
            raise ValueError(f"cache_seqlens must be on q's device {device}, got {cache_seqlens.device}")
        seqlens_tensor = cache_seqlens
    elif isinstance(cache_seqlens, bool) or not isinstance(cache_seqlens, int):
        raise TypeError(f"cache_seqlens must be an int32 tensor, an int or None, got {type(cache_seqlens).__name__}")
    else:
        if not 0 <= cache_seqlens <= sk_max - sq_new:
            what = f"Sk_max - Sq_new = {sk_max} - {sq_new}" if sq_new else f"Sk_max = {sk_max}"
            raise ValueError(f"cache_seqlens must be in [0, {what}], got {cache_seqlens}")
        seqlen_fixed = cache_seqlens

    scale = _scale(softmax_scale, d)
    window = _window(window_size) if window_size != (-1, -1) else (-1, -1)
    softcap = _softcap(softcap) if softcap != 0.0 or isinstance(softcap, bool) else 0.0
    if isinstance(num_splits, bool) or not isinstance(num_splits, int):
        raise TypeError(f"num_splits must be an int, got {type(num_splits).__name__}")
    if num_splits < 0:
        raise ValueError(f"num_splits must be >= 0 (0: heuristic, 1: no split), got {num_splits}")

    if seqused_k is not None:
        _check_seqused_k(seqused_k, b, device)

    if _ops._check_indices:  # the debug mode of flashattn.set_check_indices (one synchronization)
        _ops.check_kvcache_indices(seqlens_tensor, seqlen_fixed, sq_new, sk_max, block_table, c_shape[1],
                                   c_shape[0], seqused_k)
    if not torch.compiler.is_compiling():
        _ext.require_extension()
    if block_table is not None or seqused_k is not None:
        out, lse = _FWD_KVCACHE(
            q, k_cache, v_cache, k, v, seqlens_tensor, seqlen_fixed, scale, bool(causal), num_splits, window[0], window[1],
            softcap, block_table, seqused_k,
        )
    elif window == (-1, -1) and softcap == 0.0:
        out, lse = _FWD_KVCACHE(q, k_cache, v_cache, k, v, seqlens_tensor, seqlen_fixed, scale, bool(causal), num_splits)
    else:
        out, lse = _FWD_KVCACHE(
            q, k_cache, v_cache, k, v, seqlens_tensor, seqlen_fixed, scale, bool(causal), num_splits, window[0], window[1],
            softcap,
        )
    return (out, lse) if return_lse else out
