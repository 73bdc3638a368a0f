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
_lib.define(
    "fwd(Tensor q, Tensor k, Tensor v, float softmax_scale, int causal_mode, str backend) "
    "-> (Tensor out, Tensor lse)"
)


@torch.library.register_fake("flashattn::fwd")
def _fwd_fake(q, k, v, softmax_scale, causal_mode, backend):
    b, sq, hq, d = q.shape
    out = q.new_empty((b, sq, hq, d))
    lse = q.new_empty((b, hq, sq), dtype=torch.float32)
    return out, lse


# Registers the CUDA implementation of flashattn::fwd when the extension is built.
_ext._load()


def fwd(q, k, v, softmax_scale: float, causal_mode: int, backend: str):
    """q [B, Sq, Hq, D], k/v [B, Sk, Hk, D] (any strides, unit last stride) -> (out [B, Sq, Hq, D], lse [B, Hq, Sq])."""
    return torch.ops.flashattn.fwd(q, k, v, softmax_scale, causal_mode, backend)
