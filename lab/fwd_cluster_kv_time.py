#!/usr/bin/env python3
"""The Hopper forward's 2-CTA K/V multicast (a tree with lab/ab/fwd_cluster_kv.diff applied) against
the same call unclustered, in one process: the diff reads FLASHATTN_FWD_CLUSTER_KV (0: off) and
FLASHATTN_FWD_CLUSTER_KV_CLUSTERS (a cluster count in place of cudaOccupancyMaxActiveClusters')
per call, so each variant is the same callable with its environment set around its timed batches
(benchmarks/bench_common.measure_interleaved: rounds interleaved in rotating order), SDPA's default
alongside. Prints the occupancy query's answer first (FLASHATTN_FWD_CLUSTER_KV_VERBOSE=1).
usage: python3 lab/fwd_cluster_kv_time.py [--rounds N] [--clusters N,N,...] S:B:H ...
       (D=128 non-causal bf16; default cells 512:32:16 1024:16:16 4096:4:16 16384:1:16,
       default forced counts 66,64,48)
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import bench_common as bc  # noqa: E402
from gpu_timing import env_vars  # noqa: E402

DEFAULT_CELLS = "512:32:16 1024:16:16 4096:4:16 16384:1:16"


@contextlib.contextmanager
def _batch_ctx(env: dict[str, str | None], ctx) -> Iterator[None]:
    """A variant's timed batches: its environment, then the implementation's own context."""
    with env_vars(**env), ctx():
        yield


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cells", nargs="*", default=DEFAULT_CELLS.split())
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--clusters", default="66,64,48")
    args = ap.parse_args(argv)
    import torch

    variants: dict[str, dict[str, str | None]] = {
        "off": {"FLASHATTN_FWD_CLUSTER_KV": "0", "FLASHATTN_FWD_CLUSTER_KV_CLUSTERS": None},
        "query": {"FLASHATTN_FWD_CLUSTER_KV": None, "FLASHATTN_FWD_CLUSTER_KV_CLUSTERS": None},
    }
    for n in filter(None, args.clusters.split(",")):
        variants[f"forced-{int(n)}"] = {"FLASHATTN_FWD_CLUSTER_KV": None, "FLASHATTN_FWD_CLUSTER_KV_CLUSTERS": str(int(n))}
    settings = bc.Settings(args.rounds, 2, 2.0, 1000, 0)
    names = [*variants, "sdpa-default"]
    print(f"D=128 non-causal bf16, TFLOP/s (median of {args.rounds} interleaved rounds); x off = off's time / its")
    print(f"{'S':>6} {'B':>3} {'H':>3} " + " ".join(f"{n:>11}" for n in names) + "  " +
          " ".join(f"{'x ' + n:>11}" for n in variants if n != "off"))
    for cell in args.cells:
        s, b, h = (int(x) for x in cell.split(":"))
        shape = bc.Shape("standard", "bf16", b, h, h, s, s, 128, False)
        q, k, v = bc.make_inputs(shape)
        fn, ctx = bc.make_callable("flashattn", shape, q, k, v)
        runnables = {}
        for name, env in variants.items():
            if name == "query":
                with _batch_ctx({**env, "FLASHATTN_FWD_CLUSTER_KV_VERBOSE": "1"}, ctx):
                    fn()
                    torch.cuda.synchronize()
            runnables[name] = bc.Runnable(fn, functools.partial(_batch_ctx, env, ctx))
        sfn, sctx = bc.make_callable("sdpa-default", shape, q, k, v)
        runnables["sdpa-default"] = bc.Runnable(sfn, sctx)
        ref = None
        for name, r in runnables.items():  # the variants' outputs agree bitwise (the diff's test asks it too)
            with r.ctx():
                out = r.fn()
            if name == "sdpa-default":
                continue
            out = out[0] if isinstance(out, tuple) else out
            if ref is None:
                ref = out.clone()
            elif not torch.equal(out, ref):
                print(f"  {name}: output differs from off's")
        times = {n: statistics.median(t.samples_ms) for n, t in bc.measure_interleaved(runnables, settings).items()}
        tf = {n: shape.flops / (times[n] * 1e-3) / 1e12 for n in names}
        print(f"{s:>6} {b:>3} {h:>3} " + " ".join(f"{tf[n]:11.1f}" for n in names) + "  " +
              " ".join(f"{times['off'] / times[n]:11.3f}" for n in variants if n != "off"))
        del q, k, v
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
