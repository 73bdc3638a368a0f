"""The one place where flashattn's operators are registered with torch.library.

The schema and the fake (meta) kernel live here so that `torch.compile(fullgraph=True)`
traces through the op on any machine; the CUDA kernel is registered by the compiled
extension (`csrc/binding.cpp`) against this schema.
"""

from __future__ import annotations

import torch

from . import _ext

# causal_mode values shared with csrc/flash_fwd/params.h
CAUSAL_NONE = 0
CAUSAL_TOP_LEFT = 1  # query i sees keys j <= i                (SDPA's is_causal)
CAUSAL_BOTTOM_RIGHT = 2  # query i sees keys j <= i + Sk - Sq  (FlashAttention, KV cache)

BACKENDS = ("auto", "portable", "hopper")

_lib = torch.library.Library("flashattn", "DEF")
_FWD_SIGNATURE = (
    "(Tensor q, Tensor k, Tensor v, float softmax_scale, int causal_mode, str backend) -> (Tensor out, Tensor lse)"
)
_lib.define("fwd" + _FWD_SIGNATURE)


@torch.library.register_fake("flashattn::fwd")
def _fwd_fake(q, k, v, softmax_scale, causal_mode, backend):
    b, sq, hq, d = q.shape
    out = q.new_empty((b, sq, hq, d))
    lse = q.new_empty((b, hq, sq), dtype=torch.float32)
    return out, lse


# The same op on the torch layout (SDPA's [B, H, S, D]); out comes back in that layout, as the
# transposed view of a [B, S, H, D] buffer that the fake kernel reproduces stride for stride.
_lib.define("fwd_bhsd" + _FWD_SIGNATURE)


@torch.library.register_fake("flashattn::fwd_bhsd")
def _fwd_bhsd_fake(q, k, v, softmax_scale, causal_mode, backend):
    out, lse = _fwd_fake(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), softmax_scale, causal_mode, backend)
    return out.transpose(1, 2), lse


# Registers the CUDA implementations when the extension is built.
_ext._load()

# The overloads themselves: calling them skips the packet's overload resolution on every call.
_fwd = torch.ops.flashattn.fwd.default
_fwd_bhsd = torch.ops.flashattn.fwd_bhsd.default


def fwd(q, k, v, softmax_scale: float, causal_mode: int, backend: str):
    """q [B, Sq, Hq, D], k/v [B, Sk, Hk, D] (any strides, unit last stride) -> (out [B, Sq, Hq, D], lse [B, Hq, Sq])."""
    return _fwd(q, k, v, softmax_scale, causal_mode, backend)


def fwd_bhsd(q, k, v, softmax_scale: float, causal_mode: int, backend: str):
    """q [B, Hq, Sq, D], k/v [B, Hk, Sk, D] (any strides, unit last stride) -> (out [B, Hq, Sq, D] (a view
    of a [B, Sq, Hq, D] buffer), lse [B, Hq, Sq])."""
    return _fwd_bhsd(q, k, v, softmax_scale, causal_mode, backend)


# ==== KV-cache decoding (issue 7): flashattn::fwd_kvcache =======================================
# Owned by the decode path (flashattn/kvcache.py, csrc/binding_decode.cpp, csrc/flash_decode/).
# k_cache and v_cache are annotated as mutated (Tensor(a!), Tensor(b!)): with k/v given, the op
# writes them into the caches in place (rows cache_seqlens[b] .. + Sq_new - 1) before attending.
# cache_seqlens (Tensor?, int32 [B]) wins over cache_seqlen (the same count for every batch).
_lib.define(
    "fwd_kvcache(Tensor q, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor? k, Tensor? v, "
    "Tensor? cache_seqlens, int cache_seqlen, float softmax_scale, bool causal, int num_splits) "
    "-> (Tensor out, Tensor lse)"
)


@torch.library.register_fake("flashattn::fwd_kvcache")
def _fwd_kvcache_fake(q, k_cache, v_cache, k, v, cache_seqlens, cache_seqlen, softmax_scale, causal, num_splits):
    b, sq, hq, d = q.shape
    out = q.new_empty((b, sq, hq, d))
    lse = q.new_empty((b, hq, sq), dtype=torch.float32)
    return out, lse


def fwd_kvcache_overload():
    """The op's OpOverload, for callers that call it on every decode step (skips the packet lookup)."""
    return torch.ops.flashattn.fwd_kvcache.default


def fwd_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, cache_seqlen: int, softmax_scale: float, causal: bool, num_splits: int):
    """q [B, Sq, Hq, D], caches [B, Sk_max, Hk, D] (appended to in place when k/v are given)
    -> (out [B, Sq, Hq, D], lse float32 [B, Hq, Sq]). No validation here: see flashattn.kvcache."""
    return torch.ops.flashattn.fwd_kvcache(
        q, k_cache, v_cache, k, v, cache_seqlens, cache_seqlen, softmax_scale, causal, num_splits
    )
