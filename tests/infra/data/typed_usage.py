"""What a user's type checker infers from flashattn's public calls (checked by mypy in
tests/infra/test_typing.py, never run): the output alone, or (out, lse) with return_lse=True."""

from __future__ import annotations

import torch
from typing_extensions import assert_type

from flashattn import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache, scaled_dot_product_attention


def usage(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor, flag: bool) -> None:
    assert_type(flash_attn_func(q, k, v), torch.Tensor)
    assert_type(flash_attn_func(q, k, v, causal=True, return_lse=False), torch.Tensor)
    assert_type(flash_attn_func(q, k, v, causal=True, return_lse=True), tuple[torch.Tensor, torch.Tensor])
    assert_type(flash_attn_func(q, k, v, return_lse=flag), torch.Tensor | tuple[torch.Tensor, torch.Tensor])
    assert_type(flash_attn_varlen_func(q, k, v, cu, cu, 8, 8), torch.Tensor)
    assert_type(flash_attn_varlen_func(q, k, v, cu, cu, 8, 8, return_lse=True), tuple[torch.Tensor, torch.Tensor])
    assert_type(flash_attn_with_kvcache(q, k, v, cache_seqlens=3), torch.Tensor)
    assert_type(flash_attn_with_kvcache(q, k, v, return_lse=True, num_splits=2), tuple[torch.Tensor, torch.Tensor])
    assert_type(scaled_dot_product_attention(q, k, v, is_causal=True), torch.Tensor)
