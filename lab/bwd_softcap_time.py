#!/usr/bin/env python3
"""The backward with the logit softcap (c = 30) on both paths, against the same call without it:
bf16, B*S = 16k tokens, H*D = 2048, D 64/128/256, S 4k and 16k, causal off/on; ms per call (the
op alone, triton do_bench) and the softcap's cost on the Hopper backward (same FLOPs, so the time
ratio is the cost per useful FLOP).
--flex: FlexAttention's backward beside them (compiled flex_attention, the softcap as a score_mod, a
causal block mask; through autograd after one forward), with and without the softcap: its own
softcap cost, i.e. what a peer pays for the tanh and its derivative on the same shapes.
usage: python lab/bwd_softcap_time.py [--hopper-only] [--flex]   (--hopper-only: no portable column)"""

from __future__ import annotations

import sys

import torch
import triton.testing

import flashattn  # noqa: F401  (registers torch.ops.flashattn)
from gpu_timing import flex_backward_ms

BWD = torch.ops.flashattn.bwd.default
FWD = torch.ops.flashattn.fwd.default


def main() -> None:
    hopper_only = "--hopper-only" in sys.argv[1:]
    with_flex = "--flex" in sys.argv[1:]
    print(f"{'D':>4} {'S':>6} {'causal':>6} {'hopper ms':>10} {'+softcap':>9} {'portable+softcap':>17} {'softcap cost':>13}"
          + (f" {'flex ms':>8} {'+softcap':>9} {'flex cost':>10} {'ours/flex +cap':>15}" if with_flex else ""))
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
                flex = ""
                if with_flex:
                    mask = causal_mask if causal else None
                    f0, f1 = (flex_backward_ms(q, k, v, dout, mask_mod=mask, score_mod=mod, warmup=20, rep=150)
                              for mod in (None, softcap_mod(30.0)))
                    flex = f" {f0:8.3f} {f1:9.3f} {f1 / f0:10.2f} {t['cap'] / f1:15.2f}"
                print(f"{d:>4} {s:>6} {causal:>6} {t['dense']:10.3f} {t['cap']:9.3f} {t['port']:17.3f} "
                      f"{t['cap'] / t['dense']:13.2f}" + flex)



def causal_mask(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def softcap_mod(cap: float):
    """The softcap c * tanh(s / c) of the scaled score as a FlexAttention score_mod (FlashAttention's
    order, as ours)."""

    def softcap(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)

    return softcap

if __name__ == "__main__":
    main()
