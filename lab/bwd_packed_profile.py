#!/usr/bin/env python3
"""Where the packed backward's time goes against the dense one (8 x 2048 tokens, bf16, H = 2048 / D):
the CUDA kernels (and memsets) of one backward each, summed by name over 20 calls, from the profiler.

usage: python lab/bwd_packed_profile.py [--dims 64,128] [--causal]"""

from __future__ import annotations

import argparse
import collections

import torch

import flashattn


def kernel_us(fn, reps: int = 20) -> dict[str, float]:
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    total: dict[str, float] = collections.defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            total[e.name[:90]] += e.device_time / reps
    return dict(total)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--causal", action="store_true")
    args = ap.parse_args()
    dev = torch.device("cuda")
    for d in (int(x) for x in args.dims.split(",")):
        h = 2048 // d
        q, k, v = (torch.randn(8, 2048, h, d, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        dout = torch.randn(8, 2048, h, d, device=dev, dtype=torch.bfloat16)
        out = flashattn.flash_attn_func(q, k, v, causal=args.causal)
        qp, kp, vp = (t.detach().reshape(-1, h, d).requires_grad_() for t in (q, k, v))
        cu = torch.arange(0, 16385, 2048, device=dev, dtype=torch.int32)
        outp = flashattn.flash_attn_varlen_func(qp, kp, vp, cu, cu, 2048, 2048, causal=args.causal)
        dense = kernel_us(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
        packed = kernel_us(lambda: torch.autograd.grad(outp, (qp, kp, vp), dout.reshape(-1, h, d), retain_graph=True))
        print(f"D={d} causal={args.causal}: dense {sum(dense.values()):.1f} us, packed {sum(packed.values()):.1f} us")
        for name in sorted(set(dense) | set(packed), key=lambda n: -max(dense.get(n, 0), packed.get(n, 0))):
            print(f"  {dense.get(name, 0):9.1f} {packed.get(name, 0):9.1f}  {name}")


if __name__ == "__main__":
    main()
