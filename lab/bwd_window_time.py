#!/usr/bin/env python3
"""The backward of causal sliding-window attention on both paths (the op alone: portable vs the
Hopper backward), bf16, B=1, H=16, S=16k, D 64/128, window widths 256..8192 keys, against the
causal call without a window; ms per call and the time per useful FLOP relative to the causal call.
--wide: the Hopper backward's 64- and 80-query configs on every row (FLASHATTN_BWD_WIDE=0 and 3,
D=128) in alternating rounds, and the 80-query time over the 64-query one.
--flex: torch's FlexAttention beside them (compiled flex_attention, a block mask of the same causal
window, its backward through autograd after one forward): its ms and its own cost per useful FLOP
against its causal call, i.e. whether a peer's tiles pay the same geometry on narrow windows.
--hopper-only: the Hopper backward alone (the portable column nan), e.g. as an A/B command; --dims
picks the head dims (64,128).
usage: python lab/bwd_window_time.py [--wide] [--flex] [--hopper-only] [--dims 64,128]"""

from __future__ import annotations

import argparse
import os

import torch
import triton.testing

import flashattn  # noqa: F401  (registers torch.ops.flashattn)
from gpu_timing import flex_backward_ms

BWD = torch.ops.flashattn.bwd.default
FWD = torch.ops.flashattn.fwd.default
CAUSAL_BOTTOM_RIGHT = 2


def useful_pairs(s: int, window: int) -> float:
    # visible (query, key) pairs of a bottom-right causal mask with a left window edge (Sq = Sk)
    return sum(min(i + 1, window + 1) for i in range(s)) if window >= 0 else s * (s + 1) / 2


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--wide", action="store_true", help="also the 64- and 80-query configs side by side (D=128)")
    ap.add_argument("--rounds", type=int, default=7, help="alternating rounds of the --wide pair")
    ap.add_argument("--flex", action="store_true", help="also FlexAttention's backward with the same window")
    ap.add_argument("--hopper-only", action="store_true", help="time the Hopper backward alone")
    ap.add_argument("--dims", default="64,128", help="head dims, comma-separated")
    args = ap.parse_args()
    s, h = 16384, 16
    print(f"{'D':>4} {'window':>7} {'portable ms':>12} {'hopper ms':>10} {'hopper/port':>11} {'cost/FLOP vs causal (hopper)':>29}"
          + (f" {'64q ms':>8} {'80q ms':>8} {'80q/64q':>8}" if args.wide else "")
          + (f" {'flex ms':>8} {'hopper/flex':>11} {'flex cost/FLOP':>14}" if args.flex else ""))
    flex_base: dict[int, float] = {}
    for d in (int(x) for x in args.dims.split(",")):
        scale = d**-0.5
        q, k, v, dout = (torch.randn(1, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        base = None
        for window in (-1, 256, 512, 1024, 2048, 4096, 8192):
            out, lse = FWD(q, k, v, scale, CAUSAL_BOTTOM_RIGHT, "auto", window, 0, 0.0)
            t = {"portable": float("nan")}
            for backend in ("hopper",) if args.hopper_only else ("portable", "hopper"):
                t[backend] = triton.testing.do_bench(
                    lambda: BWD(dout, q, k, v, out, lse, scale, CAUSAL_BOTTOM_RIGHT, False, backend, window, 0, 0.0),
                    warmup=30, rep=200, return_mode="median")
            wide = ""
            if args.wide and d == 128:
                # The two configs in alternating rounds (timed one after the other, the same kernel
                # read 3.4% apart: runs/2026-11-27-h100-breakdown/bwd-window-wide.log's first row).
                rounds: dict[str, list[float]] = {"0": [], "3": []}
                for _ in range(args.rounds):
                    for mode in rounds:
                        os.environ["FLASHATTN_BWD_WIDE"] = mode  # 0: 64-query steps, 3: 80 on every window
                        rounds[mode].append(triton.testing.do_bench(
                            lambda: BWD(dout, q, k, v, out, lse, scale, CAUSAL_BOTTOM_RIGHT, False, "hopper", window, 0,
                                        0.0), warmup=10, rep=60, return_mode="median"))
                os.environ.pop("FLASHATTN_BWD_WIDE")
                t64, t80 = (sorted(ts)[len(ts) // 2] for ts in rounds.values())
                wide = f" {t64:8.3f} {t80:8.3f} {t80 / t64:8.3f}"
            per_pair = t["hopper"] / useful_pairs(s, window)
            if window < 0:
                base = per_pair
            flex = ""
            if args.flex:
                t_flex = flex_backward_ms(q, k, v, dout, mask_mod=window_mask(window), warmup=30, rep=200)
                flex_pair = t_flex / useful_pairs(s, window)
                flex_base.setdefault(d, flex_pair)  # the causal row comes first
                flex = f" {t_flex:8.3f} {t['hopper'] / t_flex:11.2f} {flex_pair / flex_base[d]:14.2f}"
            print(f"{d:>4} {window:>7} {t['portable']:12.3f} {t['hopper']:10.3f} {t['hopper'] / t['portable']:11.2f} "
                  f"{per_pair / base:29.2f}" + wide + flex)



def window_mask(window: int):
    """Causal (Sq = Sk: bottom-right = top-left) with the left window edge `window` (-1: none), as a
    FlexAttention mask_mod: the visibility of our window_size=(window, 0)."""

    def mask(b, h, q_idx, kv_idx):
        visible = q_idx >= kv_idx
        return visible & (q_idx - kv_idx <= window) if window >= 0 else visible

    return mask

if __name__ == "__main__":
    main()
