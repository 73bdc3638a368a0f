"""Tensor makers for the bad-input tables (tests/kernels/test_validation.py, tests/kernels/test_kvcache.py).

A table row is `call(mk)`: mk(*shape, dtype=float16, device="cuda", strides=None) makes each
tensor, fake ones on a CPU machine (where views of fake CUDA tensors other than transposes are
not available, hence `strides` rather than slicing) or real ones on a GPU.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Maker = Callable[..., torch.Tensor]


def fake_maker(*shape: int, dtype: torch.dtype = torch.float16, device: str = "cuda",
               strides: tuple[int, ...] | None = None) -> torch.Tensor:
    """Inside FakeTensorMode: a tensor with metadata only, CUDA ones included on a CPU machine."""
    if strides is None:
        return torch.empty(shape, dtype=dtype, device=device)
    return torch.empty_strided(shape, strides, dtype=dtype, device=device)


def real_maker(*shape: int, dtype: torch.dtype = torch.float16, device: str = "cuda",
               strides: tuple[int, ...] | None = None) -> torch.Tensor:
    """Random values (a bool tensor: all True), laid out with `strides` when given."""
    if dtype == torch.bool:
        return torch.ones(shape, dtype=dtype, device=device)
    values = torch.randn(shape, dtype=torch.float32, device=device).to(dtype)
    if strides is None:
        return values
    return torch.empty_strided(shape, strides, dtype=dtype, device=device).copy_(values)
