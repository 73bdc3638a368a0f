"""The CUDA-event timer the GPU tools share (tools/ceilings.py, quick_check.py, sm90_check.py,
decode_check.py). The benchmark suite times with benchmarks/bench_common.py (time_calls_ms, the
same event pair around back-to-back calls, in interleaved rounds).
"""

from __future__ import annotations

from collections.abc import Callable

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
