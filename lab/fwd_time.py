#!/usr/bin/env python3
"""The forward on chosen cells of the standard grid (B*S = 16k, H = 2048 / D), flashattn against
SDPA's default (cuDNN on an H100) and FlashAttention-3 (the tokenspeed-fa3 wheel, where it imports),
timed by the benchmark suite's own method (benchmarks/bench_common.measure_interleaved: rounds of
back-to-back calls between CUDA events, the implementations interleaved in rotating order). A
minute for a handful of cells, so that a kernel change can be timed on both sides of an A/B
(lab/ab/run_ab.sh AB_CMD="python3 lab/fwd_time.py ...") without the whole suite.
A cell D:S:causal:B:H takes that batch and head count instead (a grid off the standard one, e.g.
a tile count that fills whole waves of the SMs: lab/gpu_run.sh waveprobe).
--pass bwd (or fwd+bwd) times the backward alone (or a training step's attention) the way the
training grid does (bench_common.make_training_callable: the same autograd call for every
implementation; FlashAttention-3's wheel has no backward, so it drops out).
A line "  host-bound: IMPL ..." after a cell's row says that IMPL's host time per call reached
bench_common.HOST_BOUND_FRACTION of its GPU time: its back-to-back calls ran at the host's launch
rate, so its figure there is partly host time (and an A/B of two builds compares their processes).
usage: python3 lab/fwd_time.py [--dtype bf16|fp16] [--rounds N] [--pass fwd|bwd|fwd+bwd] D:S:causal[:B:H] ...
       (default cells: 64:1024:1 64:4096:0 128:1024:1 128:4096:0 128:4096:1 128:16384:1 256:4096:1 256:16384:0)
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import bench_common as bc  # noqa: E402

DEFAULT_CELLS = "64:1024:1 64:4096:0 128:1024:1 128:4096:0 128:4096:1 128:16384:1 256:4096:1 256:16384:0"
IMPLS = ("flashattn", "sdpa-default", "fa3")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cells", nargs="*", default=DEFAULT_CELLS.split())
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--pass", dest="pass_", default="fwd", choices=bc.PASSES)
    args = ap.parse_args(argv)
    import torch

    settings = bc.Settings(args.rounds, 2, 2.0, 1000, 0, host_probe_calls=16)
    print(f"{args.dtype} {args.pass_}, B*S = 16k, H = 2048 / D unless a cell says B:H, TFLOP/s (median of "
          f"{args.rounds} interleaved rounds); x = their time / flashattn's")
    print(f"{'D':>4} {'S':>6} {'causal':>6} " + " ".join(f"{n:>13}" for n in IMPLS) + "  x cudnn   x fa3   B   H")
    ratios: dict[str, list[float]] = {"sdpa-default": [], "fa3": []}
    for cell in args.cells:
        fields = [int(x) for x in cell.split(":")]
        if len(fields) not in (3, 5):
            ap.error(f"cell {cell!r}: D:S:causal or D:S:causal:B:H")
        d, s, causal = fields[:3]
        b, h = fields[3:] if len(fields) == 5 else (16384 // s, 2048 // d)
        shape = bc.Shape("standard", args.dtype, b, h, h, s, s, d, bool(causal), pass_=args.pass_)
        q, k, v = bc.make_inputs(shape)
        dout = None
        if args.pass_ != "fwd":
            q, k, v = (t.requires_grad_() for t in (q, k, v))
            dout = torch.randn_like(q)
        runnables, times = {}, {}
        for impl in IMPLS if dout is None else IMPLS[:2]:
            try:
                if dout is None:
                    fn, ctx = bc.make_callable(impl, shape, q, k, v)
                else:
                    fn, ctx = bc.make_training_callable(impl, shape, q, k, v, dout)
                with ctx():
                    fn()
                runnables[impl] = bc.Runnable(fn, ctx)
            except bc.Unavailable as exc:
                print(f"  {impl}: {exc}")
        host_bound = []
        for impl, timing in bc.measure_interleaved(runnables, settings).items():
            times[impl] = statistics.median(timing.samples_ms)
            if bc.is_host_bound(timing.host_ms, times[impl]):
                host_bound.append(f"  host-bound: {impl} (host {timing.host_ms * 1e3:.1f} us a call, "
                                  f"GPU {times[impl] * 1e3:.1f} us)")
        torch.cuda.synchronize()
        tf = {n: shape.flops / (times[n] * 1e-3) / 1e12 if n in times else float("nan") for n in IMPLS}
        x = {n: times[n] / times["flashattn"] if n in times else float("nan") for n in ratios}
        for n in ratios:
            if n in times:
                ratios[n].append(x[n])
        print(f"{d:>4} {s:>6} {causal:>6} " + " ".join(f"{tf[n]:13.1f}" for n in IMPLS) +
              f"  {x['sdpa-default']:7.3f} {x['fa3']:7.3f} {b:3d} {h:3d}")
        for line in host_bound:
            print(line)
        del q, k, v, dout
    for n, r in ratios.items():
        if r:
            print(f"geomean x {n}: {math.exp(sum(map(math.log, r)) / len(r)):.3f} ({len(r)} cells)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
