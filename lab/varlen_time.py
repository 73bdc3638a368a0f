#!/usr/bin/env python3
"""Forward and backward of a packed variable-length batch through flash_attn_varlen_func (bf16,
16384 tokens from lengths 128..4096 as benchmarks/test_bench_varlen.py draws them, H = 2048 / D,
D 64/128, causal on/off): medians in ms. Run it under two builds (PYTHONPATH) to compare kernels.
usage: python lab/varlen_time.py"""

from __future__ import annotations

import os
import sys

import torch
import triton.testing

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))

import flashattn  # noqa: E402
from test_bench_varlen import packed_lengths  # noqa: E402


def main() -> None:
    lens = packed_lengths()
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), device="cuda", dtype=torch.int32)
    total, max_len = int(cu[-1]), max(lens)
    print(f"flashattn from {os.path.dirname(flashattn.__file__)}; {len(lens)} sequences, {total} tokens")
    print(f"{'D':>4} {'causal':>6} {'fwd ms':>8} {'bwd ms':>8}")
    for d in (64, 128):
        h = 2048 // d
        for causal in (False, True):
            g = torch.Generator(device="cuda").manual_seed(7)
            q, k, v = (torch.randn(total, h, d, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
                       for _ in range(3))
            dout = torch.randn(total, h, d, device="cuda", dtype=torch.bfloat16, generator=g)

            def fwd():
                return flashattn.flash_attn_varlen_func(q, k, v, cu, cu, max_len, max_len, causal=causal)

            out = fwd()
            t_f = triton.testing.do_bench(fwd, warmup=30, rep=200, return_mode="median")
            t_b = triton.testing.do_bench(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True),
                                          warmup=30, rep=200, return_mode="median")
            print(f"{d:>4} {str(causal):>6} {t_f:8.3f} {t_b:8.3f}")


if __name__ == "__main__":
    main()
