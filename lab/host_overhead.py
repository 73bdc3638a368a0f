#!/usr/bin/env python3
"""Host (CPU) time per call of flashattn's Python layer, without a GPU: the entry points run on
CPU tensors with the kernel stubbed out (the op returns preallocated outputs) and the CUDA-device
check skipped, so what is timed is exactly the Python work a call does before and after the op:
validation, layout views, the op lookup. On a GPU machine the dispatcher, the C++ binding and the
launch come on top (profile those there). Median of 5 x N calls.
usage: python lab/host_overhead.py [--calls 20000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import flashattn  # noqa: E402
from flashattn import _ext, _ops  # noqa: E402
from flashattn import interface as itf  # noqa: E402


def per_call_us(fn, calls: int) -> float:
    for _ in range(500):
        fn()
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    args = ap.parse_args()

    def check_tensor_on_cpu(name, t, rank_min):  # interface._check_tensor minus the CUDA-device test
        if not isinstance(t, torch.Tensor) or t.dim() < rank_min or t.dtype not in itf.SUPPORTED_DTYPES:
            raise ValueError(name)
        if t.shape[-1] > 1 and t.stride(-1) != 1:
            raise ValueError(name)

    itf._check_tensor = check_tensor_on_cpu
    _ext.require_extension = lambda: None
    b, h, s, d = 1, 1, 64, 64
    q, k, v = (torch.randn(b, h, s, d, dtype=torch.float16) for _ in range(3))
    out = torch.empty(b, s, h, d, dtype=torch.float16)
    lse = torch.empty(b, h, s)
    out_bhsd = out.transpose(1, 2)
    _ops.fwd = lambda *a: (out, lse)
    _ops.fwd_bhsd = lambda *a: (out_bhsd, lse)
    qb, kb, vb = (t.transpose(1, 2) for t in (q, k, v))
    print(f"Python layer per call (kernel stubbed), {torch.__version__}, shape B={b} H={h} S={s} D={d}:")
    print(f"  scaled_dot_product_attention  {per_call_us(lambda: flashattn.scaled_dot_product_attention(q, k, v), args.calls):6.2f} us")
    print(f"  flash_attn_func               {per_call_us(lambda: flashattn.flash_attn_func(qb, kb, vb), args.calls):6.2f} us")
    print(f"  (one tensor.transpose: {per_call_us(lambda: q.transpose(1, 2), args.calls):.2f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
