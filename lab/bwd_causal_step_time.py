#!/usr/bin/env python3
"""What a causal step of the Hopper backward costs against an unmasked one, with and without the
multi-wave dynamics: the main kernel's time (torch.profiler, the kernel alone) of ours and of
cuDNN's backward on B=1 calls with 1..16 heads, causal and not, and ours under a causal mask with
each query-block walk (FLASHATTN_BWD_REVERSE=1, the default, every CTA of a head at the same query
block; 0, each key block from its diagonal up, the CTAs of a head at different blocks).

With one head the grid is one wave (S/128 key blocks <= the SMs), so the causal call lasts its
longest CTA, which walks every query block: time / steps of that CTA against the non-causal call's
is a causal step's price without the scheduling. With 16 heads it is the grid's (the figure
docs/perf-notes.md reads from ncu, 2026-12-07: 3.54 us a step against 3.15). Per step = kernel
time x SMs busy / steps of the call (SMs busy = min(CTAs, SMs)); steps by traits.h's tiles (D=128:
80 x 128 from 2048 keys, D=64: 128 x 128) as lab/bwd_schedule_model.py counts them.

usage: python3 lab/bwd_causal_step_time.py [--dims 64,128] [--seq 16384] [--heads 1,2,16] [--walks 1,0]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bwd_schedule_model as model  # noqa: E402
from gpu_timing import cudnn_backward_fn, env_vars, kernel_table  # noqa: E402

import flashattn  # noqa: E402,F401  (registers torch.ops.flashattn)

BWD = torch.ops.flashattn.bwd.default
FWD = torch.ops.flashattn.fwd.default


def main_kernel_us(fn, marker: str) -> float:
    """Mean µs of the call's kernel whose name holds `marker` (the backward's main kernel)."""
    rows = [r for r in kernel_table(fn, calls=10) if marker in r[0]]
    return rows[0][2] if rows else float("nan")


def steps(s: int, d: int, causal: bool, heads: int) -> tuple[int, int, int]:
    """(steps of the call, steps of its longest CTA, CTAs) for B=1 with `heads` query/key heads."""
    per = [len(model.query_blocks(s, d, causal, n)) for n in range(-(-s // model.tiles(s, d, causal)[1]))]
    return heads * sum(per), max(per), heads * len(per)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--seq", type=int, default=16384)
    ap.add_argument("--heads", default="1,2,16")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--walks", default="1,0", help="FLASHATTN_BWD_REVERSE values of our causal rows")
    args = ap.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    s = args.seq
    print(f"{torch.cuda.get_device_name(0)}, {sms} SMs, {args.dtype}, B=1, S={s}; main kernels only (us)")
    print("per step = time x min(CTAs, SMs) / steps; 'longest' = time / the longest CTA's steps; "
          "c/nc = the causal call's time over the non-causal one's (work ratio alongside)")
    hdr = f"{'D':>4} {'H':>3} {'impl':>14} {'causal us':>10} {'non-c us':>9} {'c/nc':>6} {'work':>6} {'c/step':>7} {'nc/step':>7} {'c longest':>9} {'nc longest':>10}"
    print(hdr)
    for d in (int(x) for x in args.dims.split(",")):
        for h in (int(x) for x in args.heads.split(",")):
            torch.manual_seed(0)
            q, k, v, dout = (torch.randn(1, s, h, d, device="cuda", dtype=dtype) for _ in range(4))
            scale = d**-0.5
            fw = {c: FWD(q, k, v, scale, c, "auto") for c in (0, 1)}
            sc, lc, cc = steps(s, d, True, h)
            sn, ln, cn = steps(s, d, False, h)
            work = sc / sn

            def ours(c: int):
                out, lse = fw[c]
                return lambda: BWD(dout, q, k, v, out, lse, scale, c, False, "auto")

            t_nc = main_kernel_us(ours(0), "flash_bwd_sm90_kernel")
            rows = []
            for rev in args.walks.split(","):
                with env_vars(FLASHATTN_BWD_REVERSE=rev):
                    rows.append((f"ours rev={rev}", main_kernel_us(ours(1), "flash_bwd_sm90_kernel"), t_nc))
            fc, fn_ = cudnn_backward_fn(q, k, v, dout, True), cudnn_backward_fn(q, k, v, dout, False)
            if fc is not None and fn_ is not None:
                rows.append(("cudnn", main_kernel_us(fc, "bprop"), main_kernel_us(fn_, "bprop")))
            for name, tc, tn in rows:
                print(f"{d:>4} {h:>3} {name:>14} {tc:>10.1f} {tn:>9.1f} {tc / tn:>6.3f} {work:>6.3f} "
                      f"{tc * min(cc, sms) / sc:>7.3f} {tn * min(cn, sms) / sn:>7.3f} {tc / lc:>9.3f} {tn / ln:>10.3f}")
            del q, k, v, dout, fw
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
