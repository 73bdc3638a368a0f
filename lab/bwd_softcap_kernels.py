#!/usr/bin/env python3
"""Where the softcap's cost goes, kernel by kernel: the backward op (bf16, B*S = 16k tokens,
H*D = 2048, c = 30) with and without the softcap, each kernel's mean time over 20 calls under
torch.profiler, and the whole call's time by triton do_bench (L2 flushed before each call)
and by 20 calls back to back.
usage: python lab/bwd_softcap_kernels.py [D:S:causal ...]   (default 128:4096:0 128:16384:0 64:4096:0)"""

from __future__ import annotations

import sys

import torch
import triton.testing

import flashattn  # noqa: F401  (registers torch.ops.flashattn)
from gpu_timing import kernel_table

BWD = torch.ops.flashattn.bwd.default
FWD = torch.ops.flashattn.fwd.default


def main() -> None:
    shapes = sys.argv[1:] or ["128:4096:0", "128:16384:0", "64:4096:0"]
    for shape in shapes:
        d, s, causal = (int(x) for x in shape.split(":"))
        b, h = max(1, 16384 // s), 2048 // d
        q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        print(f"=== D={d} S={s} causal={causal} B={b} H={h}")
        for cap in (0.0, 30.0):
            out, lse = FWD(q, k, v, d**-0.5, bool(causal), "auto", -1, -1, cap)
            fn = lambda: BWD(dout, q, k, v, out, lse, d**-0.5, bool(causal), False, "hopper", -1, -1, cap)  # noqa: E731
            flushed = triton.testing.do_bench(fn, warmup=20, rep=150, return_mode="median")
            # ms per call of each kernel: launches per call x mean us per launch
            t = {name: n * us / 1000.0 for name, n, us in kernel_table(fn)}
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(20):
                fn()
            end.record()
            torch.cuda.synchronize()
            print(f"  softcap={cap:g}: kernels {sum(t.values()):.3f} ms, do_bench (L2 flushed) {flushed:.3f} ms, "
                  f"20 back to back {start.elapsed_time(end) / 20:.3f} ms")
            for name, ms in t.items():  # heaviest first (kernel_table's order)
                print(f"    {ms:8.3f} ms  {name[:90]}")


if __name__ == "__main__":
    main()
