#!/usr/bin/env python3
"""The Hopper backward under settings of its per-call lab switches, side by side in one process:
each mode a set of environment variables (NAME=VALUE, read by the extension at every call), all
modes and cuDNN's backward timed in interleaved rounds (gpu_timing.interleaved_ms) on the same
tensors; the standard grid (B*S = 16k tokens, H*D = 2048), bf16. ms per call of the op alone;
each mode's gain over the first (its time / the mode's), per cell and as geomeans by mask.

usage: python3 lab/bwd_switch_time.py --modes NAME:VAR=V[,VAR=V...] [NAME:...] [--dims 64,128,256]
                                      [--seqs 1024,4096,16384] [--causal 0,1] [--dtype bf16]
e.g.   --modes off:FLASHATTN_BWD_PREFETCH=0 ahead2:FLASHATTN_BWD_PREFETCH=2
"""

from __future__ import annotations

import argparse

import torch

import flashattn  # noqa: F401  (registers torch.ops.flashattn)
from gpu_timing import cudnn_backward_fn, env_vars, geomean, interleaved_ms

BWD = torch.ops.flashattn.bwd.default
FWD = torch.ops.flashattn.fwd.default


def parse_mode(text: str) -> tuple[str, dict[str, str]]:
    """"name:A=1,B=2" -> ("name", {"A": "1", "B": "2"})."""
    name, _, settings = text.partition(":")
    env = dict(kv.split("=", 1) for kv in settings.split(",") if kv)
    return name, env


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", nargs="+", required=True, help="NAME:VAR=V[,VAR=V...], the first the baseline")
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--seqs", default="1024,4096,16384")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    modes = [parse_mode(m) for m in args.modes]
    base = modes[0][0]
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    print(f"{torch.cuda.get_device_name(0)}, {args.dtype}; ms per call, interleaved rounds; gain = {base} / mode")
    for name, env in modes:
        print(f"  {name}: {env}")
    print(f"{'D':>4} {'S':>6} {'causal':>6} {'cudnn':>8} " + " ".join(f"{n:>10} {'gain':>6}" for n, _ in modes[1:])
          + f" {base:>10}")
    gains: dict[tuple[str, int], list[float]] = {}
    for d in (int(x) for x in args.dims.split(",")):
        for s in (int(x) for x in args.seqs.split(",")):
            b, h = max(1, 16384 // s), 2048 // d
            torch.manual_seed(0)
            q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=dtype) for _ in range(4))
            scale = d**-0.5
            for causal in (int(x) for x in args.causal.split(",")):
                out, lse = FWD(q, k, v, scale, causal, "auto")

                def call(env: dict[str, str], c: int = causal, o=out, l=lse):
                    def run():
                        with env_vars(**env):
                            return BWD(dout, q, k, v, o, l, scale, c, False, "auto")
                    return run

                fns = {name: call(env) for name, env in modes}
                ref = cudnn_backward_fn(q, k, v, dout, bool(causal))
                if ref is not None:
                    fns["cudnn"] = ref
                ms = interleaved_ms(fns, rounds=args.rounds)
                row = f"{d:>4} {s:>6} {causal:>6} {ms.get('cudnn', float('nan')):8.3f} "
                for name, _ in modes[1:]:
                    g = ms[base] / ms[name]
                    gains.setdefault((name, causal), []).append(g)
                    row += f"{ms[name]:10.3f} {g:6.3f} "
                print(row + f"{ms[base]:10.3f}", flush=True)
            del q, k, v, dout
            torch.cuda.empty_cache()
    for (name, causal), g in sorted(gains.items()):
        print(f"geomean gain of {name} over {base}, causal={causal}: {geomean(g):.3f} ({len(g)} cells)")


if __name__ == "__main__":
    main()
