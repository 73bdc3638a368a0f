#!/usr/bin/env python3
"""One forward call of flashattn, of SDPA's cuDNN backend and of FlashAttention-3 (the tokenspeed-fa3
wheel's flash_attn_interface, where it imports) per shape, inside a profiler range, for Nsight
Compute to compare side by side (lab/ncu_fwd.sh runs it under ncu). Without ncu it just runs the
calls. Shapes: the standard grid's (B*S = 16k, H = 2048/D), given as D:S:causal.
usage: python lab/ncu_fwd.py 128:512:0 64:512:0 ...
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn


def main(argv: list[str]) -> int:
    specs = [tuple(int(x) for x in a.split(":")) for a in argv] or [(128, 512, 0)]
    try:
        import flash_attn_interface as fa3_mod  # tokenspeed-fa3
    except ImportError as exc:
        print(f"FlashAttention-3 not importable ({exc}): profiled without it")
        fa3_mod = None
    cases = []
    for d, s, causal in specs:
        b, h = 16384 // s, 2048 // d
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        # FlashAttention-3 takes (B, S, H, D): the copies are made here, outside the profiled range.
        bshd = tuple(t.transpose(1, 2).contiguous() for t in (q, k, v))
        cases.append((d, s, bool(causal), q, k, v, bshd))
    def ours(c):
        return flashattn.scaled_dot_product_attention(c[3], c[4], c[5], is_causal=c[2])
    def cudnn(c):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(c[3], c[4], c[5], is_causal=c[2])
    def fa3(c):
        if fa3_mod is not None:
            fa3_mod.flash_attn_func(*c[6], causal=c[2])
    for c in cases:  # warm up (and build cuDNN's plans) outside the profiled range
        for _ in range(3):
            ours(c), cudnn(c), fa3(c)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for c in cases:
        torch.cuda.nvtx.range_push(f"D={c[0]} S={c[1]} causal={int(c[2])}")
        ours(c)
        cudnn(c)
        fa3(c)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    torch.cuda.cudart().cudaProfilerStop()
    print("profiled:", ", ".join(f"D={c[0]} S={c[1]} causal={int(c[2])}" for c in cases))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
