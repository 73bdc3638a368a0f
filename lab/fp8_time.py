#!/usr/bin/env python3
"""The FP8 forward (issue 29) against FlashAttention-3's FP8 forward and flashattn's bf16 forward on
an H100: TFLOP/s (kernel time of each call replayed from a CUDA graph, triton's do_bench_cudagraph;
flashattn's FP8 time includes its V transpose launch) at D 128/256, S 4k/16k (B x S = 32k tokens,
16 query heads, GQA 16:16), causal off/on, float8_e4m3fn inputs with per-(batch, KV head) descales.
With --check first the error of both FP8 kernels against the float64 reference on the dequantized
inputs (a 1k-token slice of each shape): ours must be within FlashAttention-3's (the acceptance bar)
and within the suite's FP8 criterion (tests/numerics.py).
FlashAttention-3: the tokenspeed-fa3 wheel, module flash_attn_interface
(`flash_attn_func(q, k, v, causal=..., q_descale=..., k_descale=..., v_descale=...)`).
With --breakdown, also each FP8 call's kernels from torch.profiler (ours: the V transpose and the
forward; FlashAttention-3: its one kernel), their times and the transpose's share of ours: the most
an in-kernel transpose (FlashAttention-3's form) could take off.
usage: python lab/fp8_time.py [--check] [--breakdown]"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import triton.testing

import flashattn
from gpu_timing import kernel_table

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

FP8 = torch.float8_e4m3fn


def fa3():
    try:
        import flash_attn_interface  # tokenspeed-fa3
    except ImportError as exc:
        print(f"FlashAttention-3 not importable ({exc}): its columns are left out")
        return None
    return flash_attn_interface


def graph_ms(fn) -> float:
    return triton.testing.do_bench_cudagraph(fn, rep=50, return_mode="median")


def tflops(b: int, s: int, h: int, d: int, causal: bool, ms: float) -> float:
    flops = 4 * b * s * s * h * d * (0.5 if causal else 1.0)
    return flops / ms / 1e9


def inputs(b, s, h, hk, d, device="cuda", seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    q, k, v = (torch.randn(b, s, hh, d, device=device, generator=g, dtype=torch.bfloat16) for hh in (h, hk, hk))
    qd, kd, vd = (torch.rand(b, hk, device=device, generator=g) * 0.5 + 0.05 for _ in range(3))
    return q, k, v, qd, kd, vd


def timing_grid():
    """The timed shapes (B x S = 32k tokens, 16 heads, GQA 16:16), each with its bf16 inputs, their
    FP8 casts and the descales: (d, s, causal, b, h, (q, k, v), (q8, k8, v8, qd, kd, vd))."""
    for d in (128, 256):
        for s in (4096, 16384):
            for causal in (False, True):
                b, h = 32768 // s, 16
                q, k, v, qd, kd, vd = inputs(b, s, h, h, d)
                q8, k8, v8 = (x.to(FP8) for x in (q, k, v))
                yield d, s, causal, b, h, (q, k, v), (q8, k8, v8, qd, kd, vd)


def ours_fp8(q8, k8, v8, qd, kd, vd, causal):
    return flashattn.flash_attn_func(q8, k8, v8, causal=causal, q_descale=qd, k_descale=kd, v_descale=vd)


def fa3_call(mod, q8, k8, v8, qd, kd, vd, causal):
    r = mod.flash_attn_func(q8, k8, v8, causal=causal, q_descale=qd, k_descale=kd, v_descale=vd)
    return r[0] if isinstance(r, tuple) else r


def check(mod) -> bool:
    from numerics import assert_fp8_attention_matches, fp8_reference

    ok = True
    for d in (64, 128, 256):
        for causal in (False, True):
            b, s, h, hk = 1, 1024, 4, 2
            q, k, v, qd, kd, vd = inputs(b, s, h, hk, d, seed=d)
            q8, k8, v8 = (x.mul(3.0).to(FP8) for x in (q, k, v))
            mode = flashattn.CAUSAL_BOTTOM_RIGHT if causal else flashattn.CAUSAL_NONE
            ours = ours_fp8(q8, k8, v8, qd, kd, vd, causal)
            ref, _, _, _ = fp8_reference(q8, k8, v8, qd, kd, vd, None, mode)
            err = (ours.double() - ref).abs().max().item()
            line = f"D={d} causal={causal}: ours max|err| {err:.3e}"
            try:
                assert_fp8_attention_matches(ours, None, q8, k8, v8, qd, kd, vd, None, mode)
                line += " (criterion OK)"
            except AssertionError as e:
                ok = False
                line += f" (criterion FAILED: {str(e).splitlines()[-1]})"
            if mod is not None:
                theirs = fa3_call(mod, q8, k8, v8, qd, kd, vd, causal)
                fa3_err = (theirs.double() - ref).abs().max().item()
                line += f", FlashAttention-3 {fa3_err:.3e}, ratio {err / fa3_err:.2f}"
                ok &= err <= 1.25 * fa3_err
            print(line)
    return ok


def breakdown(mod) -> None:
    print("\nkernels of one call (torch.profiler, mean of 5), us; transpose share = its time / ours in all")
    for d, s, causal, _, _, _, fp8 in timing_grid():
        ours = [(name, n * t) for name, n, t in kernel_table(lambda: ours_fp8(*fp8, causal), calls=5)]
        total = sum(t for _, t in ours)
        tr = sum(t for name, t in ours if "transpose" in name)
        line = f"D={d} S={s} causal={causal}: ours {total:.1f} (transpose {tr:.1f}, {100 * tr / total:.1f}%)"
        if mod is not None:
            theirs = kernel_table(lambda: fa3_call(mod, *fp8, causal), calls=5)
            line += f"; FlashAttention-3 {sum(n * t for _, n, t in theirs):.1f}"
        print(line)
        for name, t in ours:
            print(f"    {t:9.1f}  {name[:110]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="errors against the reference first")
    ap.add_argument("--breakdown", action="store_true", help="each call's kernels from the profiler, after the table")
    args = ap.parse_args()
    mod = fa3()
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, flashattn {flashattn.__version__}")
    if args.check and not check(mod):
        print("FP8 check FAILED")
        return 1
    print(f"{'D':>4} {'S':>6} {'causal':>6} {'fp8 ours':>9} {'fp8 FA3':>9} {'bf16 ours':>9} {'ours/FA3':>8}  (TFLOP/s)")
    for d, s, causal, b, h, (q, k, v), fp8 in timing_grid():
        ours = tflops(b, s, h, d, causal, graph_ms(lambda: ours_fp8(*fp8, causal)))
        bf16 = tflops(b, s, h, d, causal, graph_ms(lambda: flashattn.flash_attn_func(q, k, v, causal=causal)))
        theirs = float("nan")
        if mod is not None:
            theirs = tflops(b, s, h, d, causal, graph_ms(lambda: fa3_call(mod, *fp8, causal)))
        print(f"{d:>4} {s:>6} {causal!s:>6} {ours:>9.0f} {theirs:>9.0f} {bf16:>9.0f} {ours / theirs:>8.2f}")
    if args.breakdown:
        breakdown(mod)
    return 0


if __name__ == "__main__":
    sys.exit(main())
