#!/usr/bin/env python3
"""The Hopper backward on a persistent grid (csrc/flash_bwd_sm90/launch.cuh: bwd_persistent_ctas;
kernel.cuh kPersistent: one CTA an SM, each walking blocks blockIdx.x, + gridDim.x, ...) against a
CTA a block, side by side in one process: FLASHATTN_BWD_PERSISTENT=<SMs> / 0 set before each call,
cuDNN's backward (SDPA's default on an H100) in the same interleaved rounds (lab/gpu_timing.py
interleaved_ms). bf16, B*S = 16k tokens, H*D = 2048, S 512..16k, D 64 and 128 (FLASHATTN_BWD_WIDE
as the library picks, or --wide 0/3), non-causal and causal (a static stride over the causal
grid's blocks of unequal length: the library keeps those a CTA a block). ms per call of the op
alone; gain = the CTA-a-block time / the persistent one.
usage: python lab/bwd_persistent_time.py [--dims 64,128] [--seqs 512,...] [--causal 0,1] [--wide N] [--rounds N]"""

from __future__ import annotations

import argparse
import os

import torch

import flashattn  # noqa: F401  (registers torch.ops.flashattn)
from gpu_timing import cudnn_backward_fn, geomean, interleaved_ms

BWD = torch.ops.flashattn.bwd.default
FWD = torch.ops.flashattn.fwd.default


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--seqs", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--wide", default="", help="FLASHATTN_BWD_WIDE for every call (default: the library's rule)")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if args.wide:
        os.environ["FLASHATTN_BWD_WIDE"] = args.wide
    dtype = torch.bfloat16
    gains: dict[int, list[float]] = {0: [], 1: []}
    print(f"{dtype}, B*S = 16k, H = 2048 / D, {sms} SMs; ms per call; x cudnn = cuDNN's time / ours")
    print(f"{'D':>4} {'S':>6} {'causal':>6} {'cudnn':>8} {'a block':>8} {'x cudnn':>7} {'persist':>8} {'x cudnn':>7} {'gain':>6}")
    for d in (int(x) for x in args.dims.split(",")):
        for s in (int(x) for x in args.seqs.split(",")):
            for cm in (int(x) for x in args.causal.split(",")):
                h, b = 2048 // d, 16384 // s
                q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=dtype) for _ in range(4))
                scale = d**-0.5
                out, lse = FWD(q, k, v, scale, cm, "auto")

                def ours(switch: str):
                    def fn():
                        os.environ["FLASHATTN_BWD_PERSISTENT"] = switch
                        return BWD(dout, q, k, v, out, lse, scale, cm, False, "auto")
                    return fn

                fns = {"block": ours("0"), "persistent": ours(str(sms))}
                cudnn = cudnn_backward_fn(q, k, v, dout, bool(cm))
                if cudnn is not None:
                    fns["cudnn"] = cudnn
                t = interleaved_ms(fns, rounds=args.rounds)
                os.environ.pop("FLASHATTN_BWD_PERSISTENT")
                t.setdefault("cudnn", float("nan"))
                gain = t["block"] / t["persistent"]
                gains[cm].append(gain)
                print(f"{d:>4} {s:>6} {cm:>6} {t['cudnn']:8.3f} {t['block']:8.3f} {t['cudnn'] / t['block']:7.3f} "
                      f"{t['persistent']:8.3f} {t['cudnn'] / t['persistent']:7.3f} {gain:6.3f}", flush=True)
    for cm, g in gains.items():
        if g:
            print(f"geomean gain of the persistent grid, {'causal' if cm else 'non-causal'}: {geomean(g):.3f} ({len(g)} shapes)")


if __name__ == "__main__":
    main()
