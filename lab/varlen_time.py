#!/usr/bin/env python3
"""Forward and backward of packed variable-length batches through flash_attn_varlen_func (bf16,
H = 2048 / D, D 64/128, causal on/off): medians in ms. Run it under two builds (PYTHONPATH) to
compare kernels.

Mixes (--mix, repeatable; default bench):
  bench   16384 tokens from lengths 128..4096 as benchmarks/test_bench_varlen.py draws them;
  short   one 2048-token sequence among 56 of 128..640 tokens: a long bound over mostly short
          sequences, where a config chosen by the bound serves tiles it was not chosen for.
usage: python lab/varlen_time.py [--mix bench] [--mix short] [--cells 64:1,64:0] [--forward-only]"""

from __future__ import annotations

import argparse
import os
import random
import sys

import torch
import triton.testing

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))

import flashattn  # noqa: E402
from test_bench_varlen import packed_lengths  # noqa: E402


def short_lengths() -> list[int]:
    rng = random.Random(2027)
    return [rng.randint(128, 640) for _ in range(28)] + [2048] + [rng.randint(128, 640) for _ in range(28)]


MIXES = {"bench": packed_lengths, "short": short_lengths}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mix", action="append", choices=sorted(MIXES), help="packing (repeatable; default bench)")
    ap.add_argument("--cells", default="64:0,64:1,128:0,128:1", help="D:causal pairs, comma-separated")
    ap.add_argument("--forward-only", action="store_true", help="no backward timing")
    args = ap.parse_args()
    cells = [(int(c.split(":")[0]), c.split(":")[1] == "1") for c in args.cells.split(",")]
    print(f"flashattn from {os.path.dirname(flashattn.__file__)}")
    print(f"{'mix':>6} {'D':>4} {'causal':>6} {'fwd ms':>8} {'bwd ms':>8}")
    for mix in args.mix or ["bench"]:
        lens = MIXES[mix]()
        cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), device="cuda", dtype=torch.int32)
        total, max_len = int(cu[-1]), max(lens)
        print(f"# {mix}: {len(lens)} sequences, {total} tokens, longest {max_len}")
        for d, causal in cells:
            h = 2048 // d
            g = torch.Generator(device="cuda").manual_seed(7)
            q, k, v = (torch.randn(total, h, d, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
                       for _ in range(3))
            dout = torch.randn(total, h, d, device="cuda", dtype=torch.bfloat16, generator=g)

            def fwd():
                return flashattn.flash_attn_varlen_func(q, k, v, cu, cu, max_len, max_len, causal=causal)

            out = fwd()
            t_f = triton.testing.do_bench(fwd, warmup=30, rep=200, return_mode="median")
            t_b = float("nan")
            if not args.forward_only:
                t_b = triton.testing.do_bench(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True),
                                              warmup=30, rep=200, return_mode="median")
            print(f"{mix:>6} {d:>4} {str(causal):>6} {t_f:8.3f} {t_b:8.3f}")


if __name__ == "__main__":
    main()
