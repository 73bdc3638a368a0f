#!/usr/bin/env python3
"""The Hopper forward's split over the keys on the seed shapes (B=1 H=1 D=64 fp16) for Nsight
Compute: one call per case inside a profiler range (lab/ncu_split.sh runs it under ncu). Cases:
S=256 non-causal unsplit against SDPA's cuDNN kernel (our kernel is 0.90x its time, nothing to
split); S=512 in 2 splits merged in a cluster against the same 2 splits through the combine kernel
(the cluster's extra 1.2-1.5 us at 2-3 splits); S=1024 in 8 splits, both merges (equal there).
Without ncu it just runs the calls.
usage: python lab/ncu_split.py
"""

from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn

FWD = torch.ops.flashattn.fwd.default
# name, S, forced split count (None: the rule's), merge (None: the plan's), or "cudnn"
CASES = [
    ("S=256 ours unsplit", 256, None, None),
    ("S=256 cudnn", 256, None, "cudnn"),
    ("S=512 2 splits cluster", 512, "2", None),
    ("S=512 2 splits combine", 512, "2", "combine"),
    ("S=1024 8 splits cluster", 1024, "8", None),
    ("S=1024 8 splits combine", 1024, "8", "combine"),
]


def call(s: int, splits: str | None, merge: str | None, t: dict) -> None:
    q, k, v = t[s]
    if merge == "cudnn":
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return
    for name, value in (("FLASHATTN_FWD_SPLITS", splits), ("FLASHATTN_FWD_SPLIT_MERGE", merge)):
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    FWD(q, k, v, None, flashattn.CAUSAL_NONE, "hopper")


def main() -> int:
    t = {s: tuple(torch.randn(1, s, 1, 64, device="cuda", dtype=torch.float16) for _ in range(3))
         for s in {c[1] for c in CASES}}
    for _, s, splits, merge in CASES:  # warm up (cuDNN's plans, the occupancy queries) outside the range
        for _ in range(3):
            call(s, splits, merge, t)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for name, s, splits, merge in CASES:
        torch.cuda.nvtx.range_push(name)
        call(s, splits, merge, t)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    torch.cuda.cudart().cudaProfilerStop()
    print("profiled:", ", ".join(c[0] for c in CASES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
