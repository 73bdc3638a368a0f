"""Helpers for the GPU tests: output poisoning, backend selection, Hopper-path availability."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

import torch

import flashattn

# 0xFF bytes are NaN in float16 (0xFFFF), bfloat16 (0xFFFF) and float32 (0xFFFFFFFF) alike.
POISON_BYTE = 0xFF
_LARGE_POOL_BYTES = 256 << 20
_SMALL_POOL_BLOCKS = 32  # of 1 MiB: allocations <= 1 MiB come from 2 MiB small-pool segments


def poison_cuda_allocator(device: torch.device | str = "cuda") -> None:
    """Make every block the caching allocator hands out next hold NaN bytes.

    flashattn allocates its own outputs, so a kernel that forgets to write some element would
    return whatever the allocator's block held: often a correct value from an earlier call. This
    releases the allocator's cached blocks, allocates fresh segments in both of its pools (large
    and small), fills them with NaN and frees them back to the cache, so the next allocations are
    carved from NaN. Call it after building the inputs and right before the call under test.
    """
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    blocks = [torch.empty(_LARGE_POOL_BYTES, dtype=torch.uint8, device=device)]
    blocks += [torch.empty(1 << 20, dtype=torch.uint8, device=device) for _ in range(_SMALL_POOL_BLOCKS)]
    for block in blocks:
        block.fill_(POISON_BYTE)
    del blocks


@contextmanager
def using_backend(name: str) -> Iterator[None]:
    """flashattn.set_backend(name) for the duration of the block, then the previous backend."""
    previous = flashattn.get_backend()
    flashattn.set_backend(name)
    try:
        yield
    finally:
        flashattn.set_backend(previous)


@functools.lru_cache(maxsize=None)
def backend_unavailable_reason(name: str) -> str | None:
    """Why `name` cannot run on the current GPU with this build, or None when it can.

    Asks the extension itself: a tiny call with that backend, which the binding refuses with a
    RuntimeError when the path is not built or does not apply to this device.
    """
    if name in ("auto", "portable"):
        return None
    q = torch.zeros(1, 256, 1, 64, dtype=torch.bfloat16, device="cuda")  # a few whole tiles
    try:
        torch.ops.flashattn.fwd(q, q, q, 1.0, flashattn.CAUSAL_NONE, name)
        torch.cuda.synchronize()
    except RuntimeError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"{name} backend unavailable: {first_line}"
    return None
