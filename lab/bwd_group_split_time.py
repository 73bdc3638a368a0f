#!/usr/bin/env python3
"""The Hopper backward's GQA group split (csrc/flash_bwd_sm90/dispatch.cu group_split_of: a grid of
few K/V heads shares each group's query heads out over several CTAs, dK/dV summed in float32)
against no split (FLASHATTN_BWD_GROUP_SPLIT=1), side by side in alternating rounds, with cuDNN's
backward on the same tensors. bf16, B*S = 16k tokens, H*D = 2048, GQA 4:1 and MQA, S 2k..16k,
causal and not, D 64/128/256. ms per call of the op alone (triton do_bench medians, then the median
over rounds); the split column is the rule's count for the shape.
--force / --against: FLASHATTN_BWD_GROUP_SPLIT for the two columns (a count, w<n>: the default with n
waves for masked calls, r<n>: the wave rule alone, m: group_split.h's dispatch model alone), e.g.
--force w4 --against w2 compares two wave targets, --against r4 the default against the wave rule it
raises. A value with "=" is a list of environment settings instead (NAME=VALUE[,NAME=VALUE...]), e.g.
--force FLASHATTN_BWD_HEAD_WALK=1 --against FLASHATTN_BWD_HEAD_WALK=0 for the GQA heads' walk at the
default split (in a copy with lab/ab/bwd_gqa_heads_interleaved.diff: bash lab/gpu_run.sh gqawalk).
usage: python lab/bwd_group_split_time.py [--rounds N] [--dims 64,128,256] [--force N|wN|rN|m|NAME=V,...]
                                          [--against N|wN|rN|m|NAME=V,...]"""

from __future__ import annotations

import argparse

import torch

import flashattn  # noqa: F401  (registers torch.ops.flashattn)
from gpu_timing import cudnn_backward_ms
from gpu_timing import do_bench_ms as timed
from gpu_timing import env_vars
from gpu_timing import geomean

BWD = torch.ops.flashattn.bwd.default
FWD = torch.ops.flashattn.fwd.default


def settings(value: str) -> dict[str, str]:
    """A column's environment: NAME=VALUE pairs, or a FLASHATTN_BWD_GROUP_SPLIT value ("" = unset)."""
    if "=" in value:
        return dict(item.split("=", 1) for item in value.split(","))
    return {"FLASHATTN_BWD_GROUP_SPLIT": value} if value else {}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--force", default="", help="FLASHATTN_BWD_GROUP_SPLIT for the split column (default: the rule)")
    ap.add_argument("--against", default="1", help="FLASHATTN_BWD_GROUP_SPLIT for the other column (default 1: none)")
    args = ap.parse_args()
    columns = {"split": settings(args.force), "none": settings(args.against)}
    names = {"FLASHATTN_BWD_GROUP_SPLIT"} | set(columns["split"]) | set(columns["none"])
    # Each column sets every name either column names (the other column's unset), for env_vars.
    envs = {col: {n: env.get(n) for n in names} for col, env in columns.items()}
    gains: list[float] = []
    vs_cudnn: dict[str, list[float]] = {"split": [], "none": []}
    dtype = torch.bfloat16
    print("bf16: ms; x cudnn = cuDNN's time / ours; gain = no split's time / the split's")
    print(f"{'D':>4} {'S':>6} {'Hq:Hk':>6} {'causal':>6} {'cudnn':>8} {'split':>8} {'x cudnn':>7} {'none':>8} {'x cudnn':>7} {'gain':>6}")
    for d in (int(x) for x in args.dims.split(",")):
        h = 2048 // d
        for s in (2048, 4096, 16384):
            for hk in (h // 4, 1):
                for causal in (True, False):
                    b = 16384 // s
                    q, dout = (torch.randn(b, s, h, d, device="cuda", dtype=dtype) for _ in range(2))
                    k, v = (torch.randn(b, s, hk, d, device="cuda", dtype=dtype) for _ in range(2))
                    scale, cm = d**-0.5, int(causal)
                    out, lse = FWD(q, k, v, scale, cm, "auto")
                    t = {"split": [], "none": []}
                    for _ in range(args.rounds):
                        for name, env in envs.items():
                            with env_vars(**env):
                                t[name].append(timed(lambda: BWD(dout, q, k, v, out, lse, scale, cm, False, "auto")))
                    t_cudnn = cudnn_backward_ms(q, k, v, dout, causal)
                    med = {name: sorted(ts)[len(ts) // 2] for name, ts in t.items()}
                    gains.append(med["none"] / med["split"])
                    for name in med:
                        if t_cudnn == t_cudnn:
                            vs_cudnn[name].append(t_cudnn / med[name])
                    print(f"{d:>4} {s:>6} {f'{h}:{hk}':>6} {str(causal):>6} {t_cudnn:8.3f} {med['split']:8.3f} "
                          f"{t_cudnn / med['split']:7.3f} {med['none']:8.3f} {t_cudnn / med['none']:7.3f} {gains[-1]:6.3f}")
    print(f"geomean gain of the split over none: {geomean(gains):.3f} ({len(gains)} shapes)")
    for name, r in vs_cudnn.items():
        print(f"geomean x cudnn, {name}: {geomean(r):.3f} ({len(r)} shapes)")


if __name__ == "__main__":
    main()
