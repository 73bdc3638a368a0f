"""Helpers for the GPU tests: output poisoning, the backward's modes, bitwise comparison, Hopper-path
availability."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import torch

import flashattn


def poison_cuda_allocator() -> None:
    """From now on, every uninitialized CUDA allocation holds NaN (integers: their max value).

    flashattn allocates its own outputs, so a kernel that forgets to write some element would
    return whatever the allocator's block held: often a correct value from an earlier call.
    Recycling NaN-filled blocks through the caching allocator is not reliable (cached blocks still
    held elsewhere, block splitting, expandable segments: seen on an H100, fresh tensors came back
    holding old values). torch's own switch is: with deterministic algorithms on and
    `torch.utils.deterministic.fill_uninitialized_memory`, `at::empty` fills every new tensor,
    the ones our C++ binding allocates included. `warn_only=True` keeps ops that have no
    deterministic implementation working (they warn). The setting stays on for the session.
    """
    torch.utils.deterministic.fill_uninitialized_memory = True
    if not torch.are_deterministic_algorithms_enabled():
        torch.use_deterministic_algorithms(True, warn_only=True)


@contextmanager
def nan_filled_allocations() -> Iterator[None]:
    """poison_cuda_allocator() for a block, then torch's previous settings again: for scripts that
    check numerics and then time kernels in one process (the fill is a kernel per allocation)."""
    fill = torch.utils.deterministic.fill_uninitialized_memory
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    poison_cuda_allocator()
    try:
        yield
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = fill
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)


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


def peak_extra_bytes(fn: Callable[[], object], device: torch.device) -> int:
    """Peak bytes allocated by fn() beyond what was allocated before it (outputs included)."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    result = fn()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    del result
    return peak


@contextmanager
def backward_mode(deterministic: bool) -> Iterator[None]:
    """Forwards (and their backwards) in the block run in the given mode; torch's and flashattn's
    switches are restored afterwards. Deterministic: torch's deterministic algorithms on through
    poison_cuda_allocator, so the gradients also come from NaN-filled memory (an element the
    kernels forget to write shows up). Default (atomic dQ accumulation): both switches off, so its
    outputs come from ordinary memory; the write paths of dK and dV are the same in both modes."""
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch_flag = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    ours = flashattn.get_deterministic()
    try:
        flashattn.set_deterministic(False)
        if deterministic:
            poison_cuda_allocator()  # torch's deterministic algorithms on: the deterministic backward
        else:
            torch.use_deterministic_algorithms(False)
        yield
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = fill
        torch.use_deterministic_algorithms(torch_flag, warn_only=warn_only)
        flashattn.set_deterministic(ours)


def finished_within(seconds: float, what: str) -> None:
    """Fails (instead of hanging the run) when the work queued so far has not finished: a
    deterministic backward whose dQ tickets never reach the count a key block waits for spins
    forever."""
    done = torch.cuda.Event()
    done.record()
    deadline = time.monotonic() + seconds
    while not done.query():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not finished after {seconds:.0f} s (a deterministic dQ ticket that never comes?); "
                        "the GPU is left spinning, restart the run after this report", pytrace=False)
        time.sleep(0.005)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({2: torch.int16, 4: torch.int32}[t.element_size()])


def assert_bitwise_equal(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, f"{what}: {got.shape}/{got.dtype} vs {want.shape}/{want.dtype}"
    differ = int((bits(got) != bits(want)).sum())
    assert differ == 0, f"{what}: {differ} of {got.numel()} elements differ bitwise"


def dense_calls_per_sequence(x, spec, backend: str = "portable"
                             ) -> Iterator[tuple[int, int, int, torch.Tensor, torch.Tensor]]:
    """Each sequence b of a packed batch (x = spec.make(...), tests/strategies.py VarlenSpec) that has
    queries and keys, as a dense flash_attn_func call on it alone on `backend`: (b, q0, q1, out_b,
    lse_b), out_b [Sq_b, Hq, D], lse_b [Hq, Sq_b] (the padded-equivalence property's other side)."""
    causal = spec.causal_mode == flashattn.CAUSAL_BOTTOM_RIGHT
    with flashattn.use_backend(backend):
        for b in range(len(x.cu_q) - 1):
            q0, q1, k0, k1 = x.cu_q[b], x.cu_q[b + 1], x.cu_k[b], x.cu_k[b + 1]
            if q1 == q0 or k1 == k0:
                continue
            o_b, lse_b = flashattn.flash_attn_func(
                x.q[None, q0:q1], x.k[None, k0:k1], x.v[None, k0:k1], softmax_scale=spec.scale, causal=causal,
                window_size=spec.window, softcap=spec.softcap, return_lse=True)
            yield b, q0, q1, o_b[0], lse_b[0]
