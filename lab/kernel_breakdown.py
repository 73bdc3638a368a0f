#!/usr/bin/env python3
"""Where a call's GPU time goes, kernel by kernel: flashattn's backward op (preprocess, scratch
memset, main kernel, dQ/dKV conversions) against cuDNN's backward (SDPA's default on an H100,
`torch.autograd.grad` of its output) on the same tensors; with --fwd the forward as training runs
it (flashattn's fwd op, which returns the LSE; cuDNN's forward on inputs that require grad). Each is profiled over --calls
back-to-back calls (torch.profiler, CUDA activity); per kernel name: microseconds per call, and
per implementation the sum of kernel times and the span from the first kernel's start to the last
one's end per call (span - sum = the gaps between kernels). bf16, B*S = 16k tokens, H*D = 2048.
--window W: flashattn's causal call with a left window of W keys (window_size (W, 0)) alone: cuDNN
has no window (where a short window's backward spends its time: the per-call passes over O, dO and
the float32 dQ against the main kernel).
usage: python lab/kernel_breakdown.py [--fwd] [--window W] [--dims 64,128,256] [--seqs 512,2048,16384] [--calls 10]"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn  # noqa: F401  (registers torch.ops.flashattn)

BWD = torch.ops.flashattn.bwd.default
FWD = torch.ops.flashattn.fwd.default


def profile(fn, calls: int) -> tuple[dict[str, float], float, float]:
    """Kernel name -> us per call; sum of kernel us per call; span us per call."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per_name: dict[str, float] = defaultdict(float)
    starts, ends = [], []
    for ev in prof.events():
        if ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        per_name[ev.name] += ev.device_time / calls
        starts.append(ev.time_range.start)
        ends.append(ev.time_range.end)
    total = sum(per_name.values())
    span = (max(ends) - min(starts)) / calls if starts else float("nan")
    return dict(per_name), total, span


def short(name: str) -> str:
    name = name.replace("void ", "").replace("flashattn::", "")
    return name[:70]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--seqs", default="512,2048,16384")
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--fwd", action="store_true", help="the forward (training form) instead of the backward")
    ap.add_argument("--window", type=int, default=-1, help="flashattn alone, causal, window_size (W, 0)")
    args = ap.parse_args()
    win = args.window
    wr = 0 if win >= 0 else -1  # window_size (W, 0), or no window
    dtype = torch.bfloat16
    summary: list[tuple[int, int, int, float, float]] = []
    for d in (int(x) for x in args.dims.split(",")):
        for s in (int(x) for x in args.seqs.split(",")):
            for cm in ((1,) if win >= 0 else (0, 1)):
                b, h = 16384 // s, 2048 // d
                q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=dtype) for _ in range(4))
                scale = d**-0.5
                out, lse = FWD(q, k, v, scale, cm, "auto", win, wr, 0.0)
                qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=bool(cm))
                do_t = dout.transpose(1, 2)
                impls = {
                    "flashattn": lambda: BWD(dout, q, k, v, out, lse, scale, cm, False, "auto"),
                    "cudnn": lambda: torch.autograd.grad(o, (qt, kt, vt), do_t, retain_graph=True),
                }
                if args.fwd:
                    del o

                    def cudnn_fwd():
                        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=bool(cm))

                    impls = {"flashattn": lambda: FWD(q, k, v, scale, cm, "auto"), "cudnn": cudnn_fwd}
                if win >= 0:
                    impls = {"flashattn": (lambda: FWD(q, k, v, scale, cm, "auto", win, wr, 0.0)) if args.fwd else
                             (lambda: BWD(dout, q, k, v, out, lse, scale, cm, False, "auto", win, wr, 0.0))}
                print(f"\n== {'forward' if args.fwd else 'backward'} D={d} S={s} B={b} H={h} "
                      f"{'causal' if cm else 'non-causal'}{f' window {win}' if win >= 0 else ''} bf16")
                totals = {}
                for name, fn in impls.items():
                    kernels, totals[name], span = profile(fn, args.calls)
                    print(f"  {name}: kernels {totals[name]:8.1f} us, span {span:8.1f} us per call")
                    for kname, us in sorted(kernels.items(), key=lambda kv: -kv[1]):
                        print(f"    {us:8.1f} us  {short(kname)}")
                summary.append((d, s, cm, totals["flashattn"], totals.get("cudnn", float("nan"))))
    print("\nkernel time per call, us (x cudnn = cuDNN's / ours)")
    print(f"{'D':>4} {'S':>6} {'causal':>6} {'flashattn':>10} {'cudnn':>10} {'x cudnn':>8}")
    for d, s, cm, ours, theirs in summary:
        print(f"{d:>4} {s:>6} {cm:>6} {ours:10.1f} {theirs:10.1f} {theirs / ours:8.3f}")


if __name__ == "__main__":
    main()
