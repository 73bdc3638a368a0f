#!/usr/bin/env python3
"""Where a small call's host time goes, on a GPU machine (the latency grid is host-bound: the
kernels take a few microseconds, the calls tens). Times back-to-back calls with no sync inside the
loop (so the CPU side is what is measured; the GPU drains the queue at the end), each layer of a
call alone: the public entry points, the op through the dispatcher, the op with each backend, and
for comparison SDPA's backends and bare torch calls (an allocation, an elementwise launch).
Median of 7 x N calls. usage: python3 lab/host_profile_gpu.py [--calls 3000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import flashattn  # noqa: E402
from flashattn import _ops  # noqa: E402


def per_call_us(fn, calls: int) -> float:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        runs.append((t1 - t0) / calls * 1e6)
    return statistics.median(runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=3000)
    args = ap.parse_args()
    dev = torch.device("cuda")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; host time per call, no sync in the loop")
    for (b, h, s, d, causal) in [(1, 1, 128, 64, False), (1, 1, 128, 64, True), (8, 16, 512, 64, True)]:
        q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=torch.float16) for _ in range(3))
        qb, kb, vb = (t.transpose(1, 2) for t in (q, k, v))
        qc, kc, vc = (t.contiguous() for t in (qb, kb, vb))
        op = torch.ops.flashattn.fwd.default
        mode = _ops.CAUSAL_TOP_LEFT if causal else _ops.CAUSAL_NONE
        scale = d**-0.5
        rows = [
            ("flashattn.scaled_dot_product_attention", lambda: flashattn.scaled_dot_product_attention(q, k, v, is_causal=causal)),
            ("flashattn.flash_attn_func (BSHD views)", lambda: flashattn.flash_attn_func(qb, kb, vb, causal=causal)),
            ("torch.ops.flashattn.fwd.default auto", lambda: op(qc, kc, vc, scale, mode, "auto")),
            ("torch.ops.flashattn.fwd.default hopper", lambda: op(qc, kc, vc, scale, mode, "hopper")),
            ("torch.ops.flashattn.fwd.default portable", lambda: op(qc, kc, vc, scale, mode, "portable")),
            ("F.scaled_dot_product_attention (default)", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)),
            ("torch.empty x2 (the op's outputs)", lambda: (torch.empty_like(qc), torch.empty(b, h, s, device=dev))),
            ("q.add(1) (one dispatcher op + launch)", lambda: q.add(1)),
        ]
        print(f"\nB={b} H={h} S={s} D={d} fp16 causal={causal}")
        for name, fn in rows:
            print(f"  {name:44} {per_call_us(fn, args.calls):7.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
