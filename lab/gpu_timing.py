"""The CUDA-event timers the GPU tools share (lab/ceilings.py, quick_check.py, sm90_check.py,
decode_check.py; do_bench_ms, cudnn_backward_ms, flex_backward_ms and geomean for the backward A/B
scripts; cudnn_backward_fn, the same callable for interleaved rounds), on top of
the benchmark suite's primitives (benchmarks/bench_common.py: time_calls_ms, one event pair around
back-to-back calls; measure_interleaved, the round schedule); and kernel_table, a call's kernels
under torch.profiler (decode_profile.py, fp8_time.py --breakdown, bwd_softcap_kernels.py); and
env_vars, the extension's per-call lab switches set around a timing (fwd_split_time.py,
fwd_cluster_kv_time.py, bwd_group_split_time.py, ncu_bwd.py).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import math
import pathlib
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import torch


def _bench_common():
    """benchmarks/bench_common.py (plain module; loaded by path, once)."""
    if "flashattn_bench_common" not in sys.modules:
        path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "bench_common.py"
        spec = importlib.util.spec_from_file_location("flashattn_bench_common", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return sys.modules["flashattn_bench_common"]


@contextlib.contextmanager
def env_vars(**values: str | None) -> Iterator[None]:
    """The environment variables set (None: unset) for the body, as they were after it: the lab
    switches the extension reads per call (FLASHATTN_FWD_SPLITS, FLASHATTN_FWD_CLUSTER_KV, ...)."""
    saved = {k: os.environ.get(k) for k in values}

    def apply(vals: dict[str, str | None]) -> None:
        for k, v in vals.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    try:
        apply(values)
        yield
    finally:
        apply(saved)


def median_ms(fn: Callable[[], object], samples: int, reps: int, warmup: int = 3) -> float:
    """Median ms per call: each sample times `reps` back-to-back calls between two CUDA events
    (the suite's time_calls_ms), so the host cost of one Python call hides behind the GPU queue
    as it does in a model."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = [_bench_common().time_calls_ms(fn, reps) / reps for _ in range(samples)]
    return sorted(ts)[len(ts) // 2]


def interleaved_ms(fns: dict[Any, Callable[[], object]], round_ms: float = 2.0, rounds: int = 15) -> dict[Any, float]:
    """Median ms per call of each function, timed by the benchmark suite's engine
    (benchmarks/bench_common.py, measure_interleaved: every round times each function once, N
    back-to-back calls with N so that one takes >= round_ms, in an order that rotates from round
    to round and reverses every other cycle), so the GPU's clock drift over the run hits every
    function alike; timed one after the other, ratios were biased by up to ~15% on the H100
    (docs/benchmarks.md)."""
    bc = _bench_common()
    settings = bc.Settings(rounds=rounds, warmup_rounds=1, round_ms=round_ms, max_calls_per_round=1000,
                           latency_samples=0, host_probe_calls=0)
    timings = bc.measure_interleaved({name: bc.Runnable(fn) for name, fn in fns.items()}, settings)
    return {name: statistics.median(t.samples_ms) for name, t in timings.items()}


def cudnn_backward_fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor,
                      causal: bool) -> Callable[[], object] | None:
    """cuDNN's backward (SDPA's cuDNN backend, the forward once, then torch.autograd.grad) on the
    same [B, S, H, D] tensors as ours, as a callable; None where cuDNN refuses the shape."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
    try:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=q.shape[2] != k.shape[2])
    except RuntimeError:  # cuDNN refuses the shape
        return None
    do_t = dout.transpose(1, 2)
    return lambda: torch.autograd.grad(o, (qt, kt, vt), do_t, retain_graph=True)


def cudnn_backward_ms(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor, causal: bool) -> float:
    """cudnn_backward_fn timed by do_bench_ms; nan where cuDNN refuses the shape. The backward A/B
    scripts' reference column."""
    fn = cudnn_backward_fn(q, k, v, dout, causal)
    if fn is None:
        return float("nan")
    try:
        return do_bench_ms(fn)
    except RuntimeError:  # cuDNN refuses the shape at its backward
        return float("nan")


def flex_backward_ms(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor, mask_mod=None,
                     score_mod=None, warmup: int = 5, rep: int = 40) -> float:
    """FlexAttention's backward (bench_common's compiled flex_attention, the forward once, then
    torch.autograd.grad) on the same [B, S, H, D] tensors as ours (Sq = Sk), mask_mod as a block
    mask, score_mod as given; triton's do_bench median with the caller's warmup and rep. The windowed
    and softcapped backward scripts' peer column (lab/bwd_window_time.py, bwd_softcap_time.py --flex)."""
    import triton.testing
    from torch.nn.attention.flex_attention import create_block_mask

    s = q.shape[1]
    block_mask = create_block_mask(mask_mod, B=None, H=None, Q_LEN=s, KV_LEN=s, device=q.device) if mask_mod else None
    qt, kt, vt = (x.transpose(1, 2).contiguous().requires_grad_(True) for x in (q, k, v))
    out = _bench_common().compiled_flex()(qt, kt, vt, block_mask=block_mask, score_mod=score_mod)
    grad = dout.transpose(1, 2).contiguous()
    return triton.testing.do_bench(lambda: torch.autograd.grad(out, (qt, kt, vt), grad, retain_graph=True),
                                   warmup=warmup, rep=rep, return_mode="median")


def do_bench_ms(fn: Callable[[], object]) -> float:
    """triton's do_bench median (L2 flushed before each call): the backward A/B scripts' timer
    (lab/bwd_wide_time.py, bwd_group_split_time.py), as lab/bwd_check.py's grid."""
    import triton.testing

    return triton.testing.do_bench(fn, warmup=5, rep=40, return_mode="median")


def geomean(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def kernel_table(fn: Callable[[], object], calls: int = 20) -> list[tuple[str, float, float]]:
    """(kernel name, launches per call, mean µs) of `calls` eager calls under torch.profiler, after a
    warm-up call; heaviest first (lab/decode_profile.py, lab/fp8_time.py --breakdown, lab/bwd_softcap_kernels.py)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    acc: dict[str, list[float]] = defaultdict(list)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            acc[ev.name].append(ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total)
    return sorted(((n, len(v) / calls, sum(v) / len(v)) for n, v in acc.items()), key=lambda r: -r[1] * r[2])
