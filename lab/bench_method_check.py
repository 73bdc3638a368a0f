#!/usr/bin/env python3
"""Why the benchmark suite's training timings differ from lab/bwd_check.py's: times the suite's
own backward callables (benchmarks/bench_common.make_training_callable: the SDPA-layout forward,
then torch.autograd.grad) for flashattn and SDPA's default (cuDNN) four ways, side by side:
single calls between CUDA events from an idle GPU (host time counted: the suite's method at one
call per round before 2026-12-03), single calls led by a GPU spin (the suite's method since),
ten back-to-back led calls, and triton's do_bench (bwd_check's method: L2 flushed before each call).
Then one single call of each under the torch profiler: every GPU kernel's start and length from
the first one's start, and the host time of the call, to show where a single call's extra time is.
usage: python3 lab/bench_method_check.py [D:S:causal ...]   (default 128:4096:0 128:16384:0)
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import bench_common as bc  # noqa: E402


def main(argv: list[str]) -> int:
    specs = [tuple(int(x) for x in a.split(":")) for a in argv] or [(128, 4096, 0), (128, 16384, 0)]
    traces = []
    print(f"{'shape':>22} {'impl':>13} {'1 call idle':>11} {'1 call led':>10} {'10 calls led':>12} {'do_bench':>9}  (ms)")
    for d, s, causal in specs:
        b, h = 16384 // s, 2048 // d
        shape = bc.Shape("standard", "bf16", b, h, h, s, s, d, bool(causal), pass_="bwd")
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, dout = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
        for t in (q, k, v):
            t.requires_grad_(True)
        for impl in ("flashattn", "sdpa-default"):
            fn, ctx = bc.make_training_callable(impl, shape, q, k, v, dout)
            with ctx():
                for _ in range(3):
                    fn()
                idle = statistics.median(bc.time_calls_ms(fn, 1, lead=False) for _ in range(20))
                one = statistics.median(bc.time_calls_ms(fn, 1) for _ in range(20))
                ten = statistics.median(bc.time_calls_ms(fn, 10) / 10 for _ in range(5))
                db = triton.testing.do_bench(fn, warmup=50, rep=300)
            print(f"{f'D={d} S={s} c={causal}':>22} {impl:>13} {idle:11.3f} {one:10.3f} {ten:12.3f} {db:9.3f}")
            traces.append((f"D={d} S={s} c={causal} {impl}", fn, ctx))
    for label, fn, ctx in traces:
        with ctx():
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                    torch.profiler.ProfilerActivity.CUDA]) as prof:
                fn()
                torch.cuda.synchronize()
        events = prof.events()
        kernels = sorted((e for e in events if e.device_type == torch.autograd.DeviceType.CUDA),
                         key=lambda e: e.time_range.start)
        cpu = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU]
        t0 = min(e.time_range.start for e in cpu)
        print(f"--- {label}: host span of the call {max(e.time_range.end for e in cpu) - t0:.0f} us")
        for e in kernels:
            print(f"  +{e.time_range.start - t0:8.0f} us  {e.time_range.end - e.time_range.start:8.0f} us  {e.name[:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
