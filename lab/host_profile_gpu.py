#!/usr/bin/env python3
"""Where a small call's host time goes, on a GPU machine, flashattn side by side with SDPA (the
latency grid and small decode steps are host-bound: the kernels take a few microseconds, a call's
host work tens).

1. Back to back, no sync inside the loop (so the CPU side is what is measured; the GPU drains the
   queue at the end), per layer of a call: the public entry points (their direct path, and the
   checked path forced), the op through the dispatcher, the op's builtin, each backend, the Hopper
   one with its split over the keys forced off (what a split costs where the rule takes one); SDPA and
   bare torch calls (an allocation, an elementwise launch) for scale.
2. The issue-28 grids, each call timed as a user makes it (synchronized before and after, wall
   time; ours and SDPA's calls interleaved one by one, the ratio the median of the rounds' paired
   ratios) and back to back (ours and SDPA's rounds interleaved, 21 of each): the seed shapes (B=1
   H=1 D=64 fp16, S 32..2048) through flashattn.scaled_dot_product_attention vs F.scaled_dot_product_attention; decode at B=1 (GQA
   32:8, D=128, bf16) through flash_attn_with_kvcache vs SDPA; one training step's attention
   (forward + backward, B=1 S=256) through flashattn.scaled_dot_product_attention vs SDPA, and its
   host time alone (the calls enqueued while a sleep kernel holds the GPU: no kernel time, no
   waiting on the GPU; ours and SDPA's rounds of 40 steps interleaved, 75 of each).
3. torch.profiler over a few hundred calls of the smallest seed shape and of S=1024 with and
   without its split: host time per op and per CUDA runtime call (allocation, launch), kernel times.
Single calls: medians of 7 rounds; back to back: 21 rounds a side, interleaved.
usage: python3 lab/host_profile_gpu.py [--calls 2000] [--no-profiler]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import flashattn  # noqa: E402
from flashattn import _ops, interface, kvcache  # noqa: E402

ROUNDS = 7


def back_to_back_us(fn: Callable[[], object], calls: int, rounds: int = ROUNDS, warmup: int = 100,
                    hold_gpu: bool = False) -> float:
    """Calls enqueued back to back, no sync inside the loop: CPU time per call, median over rounds.
    hold_gpu: a sleep kernel queued first holds the GPU busy through the enqueueing, so no call
    waits on the GPU (a full launch queue, a synchronizing allocation): the call's host time alone."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(rounds):
        if hold_gpu:
            torch.cuda._sleep(50_000_000)  # ~25-30 ms of GPU time at 1.7-2 GHz, well past the enqueueing
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        runs.append((t1 - t0) / calls * 1e6)
    return statistics.median(runs)


def back_to_back_pair_us(ours: Callable[[], object], ref: Callable[[], object], calls: int, rounds: int = 3 * ROUNDS,
                         warmup: int = 20, hold_gpu: bool = False) -> tuple[float, float, float]:
    """Two callables timed back to back (back_to_back_us), interleaved round by round (A B, then
    B A, ...): the host's drift (clocks, other processes) within a few milliseconds hits both
    alike. hold_gpu: the host time alone. (ours us, ref us, ref / ours): medians over rounds, the
    ratio the median of the rounds' ratios."""
    for fn in (ours, ref):
        back_to_back_us(fn, calls=warmup, rounds=1, warmup=warmup)
    pairs = []
    for i in range(rounds):
        t = {}
        for side in ((0, 1) if i % 2 == 0 else (1, 0)):
            t[side] = back_to_back_us(ours if side == 0 else ref, calls=calls, rounds=1, warmup=0, hold_gpu=hold_gpu)
        pairs.append((t[0], t[1]))
    return (statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs),
            statistics.median(p[1] / p[0] for p in pairs))


def single_call_pair_us(ours: Callable[[], object], ref: Callable[[], object], calls: int) -> tuple[float, float, float]:
    """Two callables each timed as a user times a call (synchronized before and after, wall time:
    host + launch + kernel), interleaved call by call (A B, then B A, ...) so that a drift of the
    host or the clocks hits both sides alike: (ours us, ref us, ref / ours), each the median
    over rounds, the ratio the median of the rounds' ratios (one ratio per round of paired calls)."""
    for _ in range(50):
        ours()
        ref()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(ROUNDS):
        total = [0.0, 0.0]
        for i in range(calls):
            for side in ((0, 1) if i % 2 == 0 else (1, 0)):
                fn = ours if side == 0 else ref
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                fn()
                torch.cuda.synchronize()
                total[side] += time.perf_counter() - t0
        rounds.append((total[0] / calls * 1e6, total[1] / calls * 1e6))
    return (statistics.median(r[0] for r in rounds), statistics.median(r[1] for r in rounds),
            statistics.median(r[1] / r[0] for r in rounds))


def checked_path(fn: Callable[[], object]) -> Callable[[], object]:
    """fn with the entry points' direct path off: the Python checks on every call."""
    def run():
        interface._DIRECT = kvcache._DIRECT = False
        try:
            return fn()
        finally:
            interface._DIRECT = kvcache._DIRECT = _DIRECT

    return run


_DIRECT = interface._DIRECT


@contextlib.contextmanager
def no_split() -> Iterator[None]:
    """The forward's split over the keys off (FLASHATTN_FWD_SPLITS=1, read at each call) inside the
    block: set once around a row's measurement, so the row pays no environment writes."""
    os.environ["FLASHATTN_FWD_SPLITS"] = "1"
    try:
        yield
    finally:
        del os.environ["FLASHATTN_FWD_SPLITS"]


def layers(calls: int) -> None:
    dev = torch.device("cuda")
    print("\n## 1. Layers of a call, back to back (us per call)")
    for b, h, s, d, causal in [(1, 1, 128, 64, False), (1, 1, 128, 64, True), (1, 1, 1024, 64, False), (8, 16, 512, 64, True)]:
        q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=torch.float16) for _ in range(3))
        qb, kb, vb = (t.transpose(1, 2) for t in (q, k, v))
        op = torch.ops.flashattn.fwd_bhsd.default
        builtin = _ops.eager_callable(op)
        mode = _ops.CAUSAL_TOP_LEFT if causal else _ops.CAUSAL_NONE
        sdpa = lambda: flashattn.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
        rows = [
            ("flashattn.scaled_dot_product_attention", sdpa),
            ("  the same, checked path forced", checked_path(sdpa)),
            ("flashattn.flash_attn_func (BSHD views)", lambda: flashattn.flash_attn_func(qb, kb, vb, causal=causal)),
            ("torch.ops.flashattn.fwd_bhsd.default auto", lambda: op(q, k, v, None, mode, "auto")),
            ("  its builtin (OpOverload._op) auto", lambda: builtin(q, k, v, None, mode, "auto")),
            ("  its builtin, hopper", lambda: builtin(q, k, v, None, mode, "hopper")),
            ("  its builtin, portable", lambda: builtin(q, k, v, None, mode, "portable")),
            ("F.scaled_dot_product_attention (default)", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)),
            ("torch.empty x2 (the op's outputs)", lambda: (torch.empty(b, s, h, d, device=dev, dtype=torch.float16),
                                                          torch.empty(b, h, s, device=dev))),
            ("q.add(1) (one dispatcher op + launch)", lambda: q.add(1)),
        ]
        print(f"\nB={b} H={h} S={s} D={d} fp16 causal={causal}")
        for name, fn in rows:
            print(f"  {name:44} {back_to_back_us(fn, calls):7.2f}")
        with no_split():
            t = back_to_back_us(lambda: builtin(q, k, v, None, mode, "hopper"), calls)
        print(f"  {'  its builtin, hopper, no split over the keys':44} {t:7.2f}")
        # The same two with the GPU held busy: host work alone, no waiting on a kernel.
        host_alone = dict(calls=200, rounds=15, warmup=20, hold_gpu=True)
        t = back_to_back_us(lambda: builtin(q, k, v, None, mode, "hopper"), **host_alone)
        print(f"  {'  its builtin, hopper, host alone':44} {t:7.2f}")
        with no_split():
            t = back_to_back_us(lambda: builtin(q, k, v, None, mode, "hopper"), **host_alone)
        print(f"  {'  its builtin, hopper, no split, host alone':44} {t:7.2f}")


def grids(calls: int) -> None:
    dev = torch.device("cuda")
    print("\n## 2. Issue-28 grids: ours vs SDPA (us per call; ratio = SDPA / ours, > 1 ours faster)")
    print(f"\n{'seed shapes B=1 H=1 D=64 fp16':34} {'single call':>24} {'back to back':>24}")
    print(f"{'S':>6} {'causal':>6} {'':21} {'ours':>7} {'sdpa':>7} {'ratio':>6}   {'ours':>7} {'sdpa':>7} {'ratio':>6}")
    ratios = []
    for causal in (False, True):
        for s in (32, 64, 128, 256, 512, 1024, 2048):
            q, k, v = (torch.randn(1, 1, s, 64, device=dev, dtype=torch.float16) for _ in range(3))
            ours = lambda: flashattn.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
            ref = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
            o1, r1, q1 = single_call_pair_us(ours, ref, calls // 10)
            o2, r2, q2 = back_to_back_pair_us(ours, ref, calls // 10)
            ratios.append(q1)
            print(f"{s:>6} {causal!s:>6} {'':21} {o1:7.2f} {r1:7.2f} {q1:6.2f}   {o2:7.2f} {r2:7.2f} {q2:6.2f}")
            if s >= 1024:  # the shapes whose calls split their keys: the same call unsplit
                with no_split():
                    o1, r1, q1 = single_call_pair_us(ours, ref, calls // 10)
                    o2, r2, q2 = back_to_back_pair_us(ours, ref, calls // 10)
                print(f"{s:>6} {causal!s:>6} {'  (no split)':21} {o1:7.2f} {r1:7.2f} {q1:6.2f}   {o2:7.2f} {r2:7.2f} "
                      f"{q2:6.2f}")
    print(f"  single-call geomean ratio: {statistics.geometric_mean(ratios):.3f}")

    print(f"\n{'decode B=1 Sq=1 GQA 32:8 D=128 bf16':34} {'single call':>24} {'back to back':>24}")
    for sk in (1024, 4096, 16384):
        q = torch.randn(1, 1, 32, 128, device=dev, dtype=torch.bfloat16)
        kc, vc = (torch.randn(1, sk, 8, 128, device=dev, dtype=torch.bfloat16) for _ in range(2))
        qt, kt, vt = (t.transpose(1, 2) for t in (q, kc, vc))
        ours = lambda: flashattn.flash_attn_with_kvcache(q, kc, vc)  # noqa: E731
        ref = lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)  # noqa: E731
        o1, r1, q1 = single_call_pair_us(ours, ref, calls // 10)
        o2, r2, q2 = back_to_back_pair_us(ours, ref, calls // 10)
        print(f"{'Sk=' + str(sk):>13} {'':21} {o1:7.2f} {r1:7.2f} {q1:6.2f}   {o2:7.2f} {r2:7.2f} {q2:6.2f}")

    steps = []
    for h, d in ((1, 64), (8, 64), (16, 128)):
        leaves = [torch.randn(1, h, 256, d, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3)]
        grad = torch.ones(1, h, 256, d, device=dev, dtype=torch.bfloat16)
        ours = lambda x=leaves, g=grad: flashattn.scaled_dot_product_attention(*x, is_causal=True).backward(g)  # noqa: E731
        ref = lambda x=leaves, g=grad: F.scaled_dot_product_attention(*x, is_causal=True).backward(g)  # noqa: E731
        steps.append((f"B=1 S=256 H={h} D={d} causal", ours, ref))
    print(f"\n{'training step: attention fwd+bwd':34} {'single call':>24} {'back to back':>24}")
    for label, ours, ref in steps:
        o1, r1, q1 = single_call_pair_us(ours, ref, calls // 10)
        o2, r2, q2 = back_to_back_pair_us(ours, ref, calls // 40)
        print(f"{label:>34} {o1:7.2f} {r1:7.2f} {q1:6.2f}   {o2:7.2f} {r2:7.2f} {q2:6.2f}")
    # Issue 28's acceptance for the training step: the host time attention costs it, forward and
    # backward, without the kernels (the GPU held busy while the calls are enqueued).
    print(f"\n{'training step: host time alone (us)':34} {'flashattn':>9} {'SDPA':>9} {'ratio':>6}")
    for label, ours, ref in steps:
        o, r, q = back_to_back_pair_us(ours, ref, calls=40, rounds=75, hold_gpu=True)
        print(f"{label:>34} {o:9.2f} {r:9.2f} {q:6.2f}")


def profile() -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    dev = torch.device("cuda")
    # The smallest seed shape, and S=1024 with and without its split over the keys (what the split
    # adds to a call on the host, runtime call by runtime call, and on the GPU, kernel by kernel).
    for s, split in ((128, True), (1024, True), (1024, False)):
        q, k, v = (torch.randn(1, 1, s, 64, device=dev, dtype=torch.float16) for _ in range(3))
        with contextlib.nullcontext() if split else no_split():
            for _ in range(100):
                flashattn.scaled_dot_product_attention(q, k, v)
            torch.cuda.synchronize()
            with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(300):
                    flashattn.scaled_dot_product_attention(q, k, v)
                torch.cuda.synchronize()
        print(f"\n## 3. torch.profiler, 300 calls of flashattn.scaled_dot_product_attention B=1 H=1 S={s} D=64"
              f"{'' if split else ', no split over the keys'} (per-call host time: CPU total / 300)")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--no-profiler", action="store_true")
    args = ap.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, direct path "
          f"{'on' if interface._DIRECT else 'OFF (extension not loaded)'}; build {flashattn.build_info()}")
    layers(args.calls)
    grids(args.calls)
    if not args.no_profiler:
        profile()
    return 0


if __name__ == "__main__":
    sys.exit(main())
