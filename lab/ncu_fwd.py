#!/usr/bin/env python3
"""One forward call of flashattn, of SDPA's cuDNN backend and of FlashAttention-3 (the tokenspeed-fa3
wheel's flash_attn_interface, where it imports) per shape, inside a profiler range, for Nsight
Compute to compare side by side (lab/ncu_fwd.sh runs it under ncu). Without ncu it just runs the
calls. Shapes: the standard grid's (B*S = 16k, H = 2048/D), given as D:S:causal.
With --fp8 first: the FP8 forward instead (lab/fp8_time.py's shapes: B*S = 32k, 16 heads,
float8_e4m3fn with [B, H] descales), flashattn's call (its V transpose kernel included where the
head dim has one) and FlashAttention-3's; no cuDNN.
usage: python lab/ncu_fwd.py [--fp8] 128:512:0 64:512:0 ...
"""

from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn


def sixteen_bit_cases(specs, fa3_mod, dtype_name: str = "bf16") -> list:
    """(label, calls) per shape: flashattn's, cuDNN's and FlashAttention-3's forward in bf16 or fp16,
    the inputs (and FlashAttention-3's [B, S, H, D] copies) made here, outside the profiled range."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    cases = []
    for d, s, causal in specs:
        b, h = 16384 // s, 2048 // d
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
        bshd = tuple(t.transpose(1, 2).contiguous() for t in (q, k, v))
        causal = bool(causal)

        def ours(q=q, k=k, v=v, causal=causal):
            return flashattn.scaled_dot_product_attention(q, k, v, is_causal=causal)

        def cudnn(q=q, k=k, v=v, causal=causal):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        calls = [ours, cudnn]
        if fa3_mod is not None:
            calls.append(lambda bshd=bshd, causal=causal: fa3_mod.flash_attn_func(*bshd, causal=causal))
        cases.append((f"{dtype_name} D={d} S={s} causal={int(causal)}", calls))
    return cases


def fp8_cases(specs, fa3_mod) -> list:
    """(label, calls) per shape: flashattn's and FlashAttention-3's FP8 forward, the inputs made
    here, outside the profiled range."""
    cases = []
    for d, s, causal in specs:
        b, h = 32768 // s, 16
        q8, k8, v8 = (torch.randn(b, s, h, d, device="cuda").to(torch.float8_e4m3fn) for _ in range(3))
        qd, kd, vd = (torch.rand(b, h, device="cuda") * 0.5 + 0.05 for _ in range(3))
        kw = dict(causal=bool(causal), q_descale=qd, k_descale=kd, v_descale=vd)
        calls = [lambda q8=q8, k8=k8, v8=v8, kw=kw: flashattn.flash_attn_func(q8, k8, v8, **kw)]
        if fa3_mod is not None:
            calls.append(lambda q8=q8, k8=k8, v8=v8, kw=kw: fa3_mod.flash_attn_func(q8, k8, v8, **kw))
        cases.append((f"FP8 D={d} S={s} causal={int(causal)}", calls))
    return cases


def main(argv: list[str]) -> int:
    fp8 = bool(argv) and argv[0] == "--fp8"
    argv = argv[1:] if fp8 else argv
    specs = [tuple(int(x) for x in a.split(":")) for a in argv] or [(128, 512, 0)]
    try:
        import flash_attn_interface as fa3_mod  # tokenspeed-fa3
    except ImportError as exc:
        print(f"FlashAttention-3 not importable ({exc}): profiled without it")
        fa3_mod = None
    dtype_name = os.environ.get("NCU_FWD_DTYPE", "bf16")
    cases = fp8_cases(specs, fa3_mod) if fp8 else sixteen_bit_cases(specs, fa3_mod, dtype_name)
    for _, calls in cases:  # warm up (and build cuDNN's plans) outside the profiled range
        for _ in range(3):
            for call in calls:
                call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for label, calls in cases:
        torch.cuda.nvtx.range_push(label)
        for call in calls:
            call()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    torch.cuda.cudart().cudaProfilerStop()
    print("profiled:", ", ".join(label for label, _ in cases))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
