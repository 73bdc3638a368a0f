"""flashattn: exact, fast attention kernels for NVIDIA GPUs as PyTorch custom ops."""

from __future__ import annotations

from ._ext import build_info, extension_available, extension_error
from ._ops import CAUSAL_BOTTOM_RIGHT, CAUSAL_NONE, CAUSAL_TOP_LEFT
from .interface import (
    check_indices,
    flash_attn_func,
    flash_attn_varlen_func,
    get_backend,
    get_check_indices,
    get_deterministic,
    scaled_dot_product_attention,
    set_backend,
    set_check_indices,
    set_deterministic,
    use_backend,
)
from .kvcache import flash_attn_with_kvcache
from .reference import (
    attention_reference,
    attention_reference_grads,
    attention_reference_varlen,
    attention_reference_varlen_grads,
)
from .torch_impl import activate, deactivate  # registers "flashattn" with torch's registry; never activates

__version__ = "0.1.0"

__all__ = [
    "scaled_dot_product_attention",
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "attention_reference",
    "attention_reference_grads",
    "attention_reference_varlen",
    "attention_reference_varlen_grads",
    "set_backend",
    "get_backend",
    "use_backend",
    "set_deterministic",
    "get_deterministic",
    "set_check_indices",
    "get_check_indices",
    "check_indices",
    "extension_available",
    "extension_error",
    "build_info",
    "CAUSAL_NONE",
    "CAUSAL_TOP_LEFT",
    "CAUSAL_BOTTOM_RIGHT",
    "activate",
    "deactivate",
]
