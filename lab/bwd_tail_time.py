#!/usr/bin/env python3
"""The Hopper backward's split of the grid's last wave (csrc/flash_bwd_sm90/tail_split.h: the last
wave's units run in pieces of consecutive steps that fill the GPU, dK/dV summed in float32) against
no split (FLASHATTN_BWD_TAIL=0), side by side in alternating rounds, with cuDNN's backward on the
same tensors. bf16: the standard grid without a mask (B*S = 16k tokens, H*D = 2048, S 512..16k,
D 64/128/256; MHA and GQA 4:1), and small grids (B=1, H 1..8) without a mask and causal (the masked
rule splits grids of at most half a wave).
ms per call of the op alone (triton do_bench medians, then the median over rounds).
usage: python lab/bwd_tail_time.py [--rounds N] [--dims 64,128,256] [--small-only | --grid-only]"""

from __future__ import annotations

import argparse
import os

import torch

import flashattn  # noqa: F401  (registers torch.ops.flashattn)
from gpu_timing import cudnn_backward_ms
from gpu_timing import do_bench_ms as timed
from gpu_timing import geomean

BWD = torch.ops.flashattn.bwd.default
FWD = torch.ops.flashattn.fwd.default


def shapes(dims: list[int], grid: bool, small: bool):
    for d in dims:
        h = 2048 // d
        if grid:
            for s in (512, 1024, 2048, 4096, 8192, 16384):
                yield "grid", 16384 // s, s, h, h, d
            for s in (2048, 16384):
                yield "gqa", 16384 // s, s, h, h // 4, d
        if small:
            for causal in (False, True):
                for s, hq in ((512, 1), (2048, 1), (4096, 2), (8192, 8)):
                    yield ("small-causal" if causal else "small"), 1, s, hq, hq, d


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--small-only", action="store_true")
    ap.add_argument("--grid-only", action="store_true")
    args = ap.parse_args()
    dims = [int(x) for x in args.dims.split(",")]
    gains: dict[str, list[float]] = {}
    vs_cudnn: dict[str, list[float]] = {"split": [], "none": []}
    dtype = torch.bfloat16
    print("bf16: ms; x cudnn = cuDNN's time / ours; gain = no split's time / the split's; "
          "TFLOP/s of the split column (2.5 x the forward's 4 B Hq S^2 D)")
    print(f"{'set':>12} {'D':>4} {'B':>3} {'S':>6} {'Hq:Hk':>6} {'cudnn':>8} {'split':>8} {'x cudnn':>7} {'none':>8} "
          f"{'x cudnn':>7} {'gain':>6} {'TFLOP/s':>7}")
    for kind, b, s, hq, hk, d in shapes(dims, not args.small_only, not args.grid_only):
        q, dout = (torch.randn(b, s, hq, d, device="cuda", dtype=dtype) for _ in range(2))
        k, v = (torch.randn(b, s, hk, d, device="cuda", dtype=dtype) for _ in range(2))
        scale, cm = d**-0.5, int(kind.endswith("causal"))
        out, lse = FWD(q, k, v, scale, cm, "auto")
        t: dict[str, list[float]] = {"split": [], "none": []}
        for _ in range(args.rounds):
            for name in ("split", "none"):
                if name == "none":
                    os.environ["FLASHATTN_BWD_TAIL"] = "0"
                else:
                    os.environ.pop("FLASHATTN_BWD_TAIL", None)
                t[name].append(timed(lambda: BWD(dout, q, k, v, out, lse, scale, cm, False, "auto")))
        os.environ.pop("FLASHATTN_BWD_TAIL", None)
        t_cudnn = cudnn_backward_ms(q, k, v, dout, bool(cm))
        med = {name: sorted(ts)[len(ts) // 2] for name, ts in t.items()}
        gains.setdefault(kind, []).append(med["none"] / med["split"])
        if not kind.startswith("small") and t_cudnn == t_cudnn:
            for name in med:
                vs_cudnn[name].append(t_cudnn / med[name])
        tflops = 2.5 * 4 * b * hq * s * s * d / (2 if cm else 1) / (med["split"] * 1e-3) / 1e12
        print(f"{kind:>12} {d:>4} {b:>3} {s:>6} {f'{hq}:{hk}':>6} {t_cudnn:8.3f} {med['split']:8.3f} "
              f"{t_cudnn / med['split']:7.3f} {med['none']:8.3f} {t_cudnn / med['none']:7.3f} "
              f"{gains[kind][-1]:6.3f} {tflops:7.1f}", flush=True)
    for kind, g in gains.items():
        print(f"geomean gain of the split over none, {kind}: {geomean(g):.3f} ({len(g)} shapes)")
    for name, r in vs_cudnn.items():
        if r:
            print(f"geomean x cudnn (grid and gqa), {name}: {geomean(r):.3f} ({len(r)} shapes)")


if __name__ == "__main__":
    main()
