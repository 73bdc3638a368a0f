#!/usr/bin/env python3
"""The Hopper backward's wide config (csrc/flash_bwd_sm90/traits.h: 80-query steps, dQ transposed)
against the 64-query config it replaces for D = 128 calls without a mask or softcap, side by side in
one process (FLASHATTN_BWD_WIDE=3 / 0, alternating rounds), with cuDNN's backward (SDPA's default on
an H100) on the same tensors. bf16 and fp16, B*S = 16k tokens, H*D = 2048 (and two GQA shapes),
S 1k..16k, non-causal; also each config's deterministic mode. --causal: the same under a causal
mask. FLASHATTN_BWD_WIDE=3 puts every call on the wide config, 0 none (wide_rule.h). ms per call of the
op alone (triton do_bench medians, then the median over rounds); TFLOP/s = 2.5 x the forward's
FLOPs / time (half under the mask).
--seqs 512,1024: those sequence lengths alone (B*S = 16k, no GQA shapes), e.g. the short calls the
wide rule (csrc/flash_bwd_sm90/wide_rule.h) was first measured without.
usage: python lab/bwd_wide_time.py [--rounds N] [--dims 128,96] [--causal] [--seqs 512,1024]"""

from __future__ import annotations

import argparse
import os

import torch

import flashattn  # noqa: F401  (registers torch.ops.flashattn)
from gpu_timing import cudnn_backward_ms
from gpu_timing import do_bench_ms as timed
from gpu_timing import geomean

BWD = torch.ops.flashattn.bwd.default
FWD = torch.ops.flashattn.fwd.default


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dims", default="128", help="head dims, comma-separated (96 and 80 run padded to 128)")
    ap.add_argument("--causal", action="store_true", help="causal calls")
    ap.add_argument("--seqs", default="", help="sequence lengths, comma-separated (default 1k..16k and two GQA shapes)")
    args = ap.parse_args()
    cm = 1 if args.causal else 0
    switch = {"wide": "3", "narrow": "0"}  # every call on the wide config, none on it
    modes = ("wide", "narrow")
    gains: list[float] = []
    vs_cudnn = {m: [] for m in modes}
    for dtype in (torch.bfloat16, torch.float16):
        print(f"{dtype}, {'causal' if cm else 'non-causal'}: ms; x cudnn = cuDNN's time / ours; det = the deterministic mode's time / the default's")
        print(f"{'D':>4} {'S':>6} {'Hq:Hk':>6} {'cudnn':>8} " +
              " ".join(f"{m:>8} {'TFLOP/s':>8} {'x cudnn':>7} {'det':>5}" for m in modes) + f" {'wide gain':>9}")
        for d in (int(x) for x in args.dims.split(",")):
            seqs = [int(x) for x in args.seqs.split(",")] if args.seqs else [1024, 2048, 4096, 8192, 16384]
            shapes = [(s, 2048 // d, 2048 // d) for s in seqs]
            if not args.seqs:
                shapes += [(4096, 2048 // d, 2048 // d // 4), (16384, 2048 // d, 1)]  # GQA 4:1, MQA
            for s, hq, hk in shapes:
                b = 16384 // s
                q, dout = (torch.randn(b, s, hq, d, device="cuda", dtype=dtype) for _ in range(2))
                k, v = (torch.randn(b, s, hk, d, device="cuda", dtype=dtype) for _ in range(2))
                scale = d**-0.5
                out, lse = FWD(q, k, v, scale, cm, "auto")
                t = {(m, det): [] for m in modes for det in (False, True)}
                for _ in range(args.rounds):
                    for m in modes:
                        os.environ["FLASHATTN_BWD_WIDE"] = switch[m]
                        for det in (False, True):
                            t[(m, det)].append(timed(lambda: BWD(dout, q, k, v, out, lse, scale, cm, det, "auto")))
                os.environ.pop("FLASHATTN_BWD_WIDE")
                t_cudnn = cudnn_backward_ms(q, k, v, dout, bool(cm))
                med = {key: sorted(ts)[len(ts) // 2] for key, ts in t.items()}
                flops = 4 * b * hq * s * s * d * 2.5 / (2 if cm else 1)
                gains.append(med[("narrow", False)] / med[("wide", False)])
                cells = []
                for m in modes:
                    ms = med[(m, False)]
                    if t_cudnn == t_cudnn:
                        vs_cudnn[m].append(t_cudnn / ms)
                    cells.append(f"{ms:8.3f} {flops / ms / 1e9:8.1f} {t_cudnn / ms:7.3f} {med[(m, True)] / ms:5.2f}")
                print(f"{d:>4} {s:>6} {f'{hq}:{hk}':>6} {t_cudnn:8.3f} " + " ".join(cells) + f" {gains[-1]:9.3f}")
    print(f"geomean gain of the wide config over the 64-query one: {geomean(gains):.3f} ({len(gains)} shapes)")
    for m in modes:
        print(f"geomean x cudnn, {m}: {geomean(vs_cudnn[m]):.3f} ({len(vs_cudnn[m])} shapes)")


if __name__ == "__main__":
    main()
