#!/usr/bin/env python3
"""The backward with the logit softcap (c = 30) on both paths, against the same call without it:
bf16, B*S = 16k tokens, H*D = 2048, D 64/128/256, S 4k and 16k, causal off/on; ms per call (the
op alone, triton do_bench) and the softcap's cost on the Hopper backward (same FLOPs, so the time
ratio is the cost per useful FLOP).
usage: python lab/bwd_softcap_time.py [--hopper-only]   (--hopper-only: no portable column)"""

from __future__ import annotations

import sys

import torch
import triton.testing

import flashattn  # noqa: F401  (registers torch.ops.flashattn)

BWD = torch.ops.flashattn.bwd.default
FWD = torch.ops.flashattn.fwd.default


def main() -> None:
    hopper_only = "--hopper-only" in sys.argv[1:]
    print(f"{'D':>4} {'S':>6} {'causal':>6} {'hopper ms':>10} {'+softcap':>9} {'portable+softcap':>17} {'softcap cost':>13}")
    for d in (64, 128, 256):
        for s in (4096, 16384):
            b, h = 16384 // s, 2048 // d
            scale = d**-0.5
            q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
            for causal in (0, 1):
                t = {}
                for name, backend, cap in (("dense", "hopper", 0.0), ("cap", "hopper", 30.0), ("port", "portable", 30.0)):
                    if hopper_only and name == "port":
                        t[name] = float("nan")
                        continue
                    out, lse = FWD(q, k, v, scale, causal, "auto", -1, -1, cap)
                    t[name] = triton.testing.do_bench(
                        lambda: BWD(dout, q, k, v, out, lse, scale, causal, False, backend, -1, -1, cap),
                        warmup=20, rep=150, return_mode="median")
                print(f"{d:>4} {s:>6} {causal:>6} {t['dense']:10.3f} {t['cap']:9.3f} {t['port']:17.3f} "
                      f"{t['cap'] / t['dense']:13.2f}")


if __name__ == "__main__":
    main()
