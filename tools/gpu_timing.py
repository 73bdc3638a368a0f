"""The CUDA-event timers the GPU tools share (tools/ceilings.py, quick_check.py, sm90_check.py,
decode_check.py). The benchmark suite times with benchmarks/bench_common.py (time_calls_ms, the
same event pair around back-to-back calls, in interleaved rounds).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def median_ms(fn: Callable[[], object], samples: int, reps: int, warmup: int = 3) -> float:
    """Median ms per call: each sample times `reps` back-to-back calls between two CUDA events,
    so the host cost of one Python call hides behind the GPU queue as it does in a model."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(samples):
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / reps)
    return sorted(ts)[len(ts) // 2]


def interleaved_ms(fns: dict[Any, Callable[[], object]], round_ms: float = 2.0, rounds: int = 15) -> dict[Any, float]:
    """Median ms per call of each function, timed in interleaved rounds: every round times each
    function once (N back-to-back calls, N so that one takes >= round_ms), in an order that
    rotates from round to round and runs reversed on every other cycle of rotations, so the GPU's
    clock drift over the run hits every function alike (timing them one after the other biased
    the comparison by up to ~15% on the H100; docs/benchmarks.md)."""
    names = list(fns)
    reps = {}
    for name, fn in fns.items():
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        est = max(median_ms(fn, samples=1, reps=3, warmup=0), 1e-3)
        reps[name] = max(1, min(1000, -(-round_ms // est)))
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples: dict[Any, list[float]] = {n: [] for n in names}
    n = len(names)
    for r in range(rounds):
        order = names[r % n:] + names[: r % n]
        if (r // n) % 2:
            order.reverse()
        for name in order:
            fn, k = fns[name], int(reps[name])
            a.record()
            for _ in range(k):
                fn()
            b.record()
            b.synchronize()
            samples[name].append(a.elapsed_time(b) / k)
    return {name: sorted(ts)[len(ts) // 2] for name, ts in samples.items()}
