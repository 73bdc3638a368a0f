#!/usr/bin/env python3
"""The Hopper backward's CTA order under a causal mask, side by side in one process: the grouped
longest-first order (csrc/flash_bwd_sm90/launch.cuh, bwd_lpt_heads) for each L2 budget given
(FLASHATTN_BWD_LPT=<MiB>) against the plain order (0), in alternating rounds, with cuDNN's backward
on the same tensors for the ratio. bf16 and fp16, B*S = 16k tokens, H*D = 2048, D 64/128/256, S 1k..16k, causal (bottom-right
= top-left here, Sq = Sk); ms per call, the op alone, medians of rounds.
--walks 1,2: instead, the default budget with each query-block walk (FLASHATTN_BWD_REVERSE values),
gains over the first.
usage: python lab/bwd_order_time.py [--rounds N] [--budgets 16,32,...] [--dims 128,256] [--reverse]
                                    [--walks 1,2]"""

from __future__ import annotations

import argparse
import math
import os

import torch
import torch.nn.functional as F
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn  # noqa: F401  (registers torch.ops.flashattn)

BWD = torch.ops.flashattn.bwd.default
FWD = torch.ops.flashattn.fwd.default


def timed(fn) -> float:
    return triton.testing.do_bench(fn, warmup=5, rep=40, return_mode="median")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budgets", default="8", help="L2 budgets in MiB, comma-separated")
    ap.add_argument("--dims", default="64,128,256", help="head dims, comma-separated")
    ap.add_argument("--reverse", action="store_true",
                    help="also each order with the query blocks walked from the last down (FLASHATTN_BWD_REVERSE=1)")
    ap.add_argument("--walks", default="", help="FLASHATTN_BWD_REVERSE values at the first budget, compared to the first")
    args = ap.parse_args()
    # (name, FLASHATTN_BWD_LPT, FLASHATTN_BWD_REVERSE)
    if args.walks:
        budget = args.budgets.split(",")[0]
        modes = [(f"walk{w}", budget, w) for w in args.walks.split(",")]
    else:
        modes = [("plain", "0", "0")] + [(f"{m}MiB", m, "0") for m in args.budgets.split(",")]
        if args.reverse:
            modes += [(name + "-rev", lpt, "1") for name, lpt, _ in list(modes)]
    base = modes[0][0]
    gains = {name: [] for name, _, _ in modes[1:]}
    for dtype in (torch.bfloat16, torch.float16):
        print(f"{dtype}: ms; x cudnn = cuDNN's time / ours")
        print(f"{'D':>4} {'S':>6} {'cudnn':>8} " + " ".join(f"{name:>10} {'x cudnn':>7}" for name, _, _ in modes))
        for d in (int(x) for x in args.dims.split(",")):
            for s in (1024, 2048, 4096, 8192, 16384):
                b, h = 16384 // s, 2048 // d
                q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=dtype) for _ in range(4))
                scale = d**-0.5
                out, lse = FWD(q, k, v, scale, 1, "auto")
                t = {name: [] for name, _, _ in modes}
                for _ in range(args.rounds):
                    for name, lpt, rev in modes:
                        os.environ["FLASHATTN_BWD_LPT"] = lpt
                        os.environ["FLASHATTN_BWD_REVERSE"] = rev
                        t[name].append(timed(lambda: BWD(dout, q, k, v, out, lse, scale, 1, False, "auto")))
                os.environ.pop("FLASHATTN_BWD_LPT")
                os.environ.pop("FLASHATTN_BWD_REVERSE")
                qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
                t_cudnn = timed(lambda: torch.autograd.grad(o, (qt, kt, vt), dout.transpose(1, 2), retain_graph=True))
                med = {name: sorted(ts)[len(ts) // 2] for name, ts in t.items()}
                for name in gains:
                    gains[name].append(med[base] / med[name])
                print(f"{d:>4} {s:>6} {t_cudnn:8.3f} " + " ".join(f"{med[name]:10.3f} {t_cudnn / med[name]:7.3f}" for name, _, _ in modes))
    for name, g in gains.items():
        print(f"geomean gain over {base}, {name}: {math.exp(sum(map(math.log, g)) / len(g)):.3f} ({len(g)} shapes)")


if __name__ == "__main__":
    main()
