#!/usr/bin/env python3
"""The ceilings the floors in docs/perf-notes.md are computed from, measured on the local GPU:
dense bf16/fp16 matmul rate (torch.matmul, cuBLAS), device-to-device copy bandwidth (bytes read
+ bytes written), and a read-only rate (a full reduction, torch.sum). On the H100 the latter came
out below the copy rate (2.87-2.88 vs 2.96 TB/s, docs/perf-notes.md): torch.sum is no clean read-rate
kernel, so the decode floor stays the copy rate and this line is reported only.
usage: python lab/ceilings.py
"""

from __future__ import annotations

import torch
from gpu_timing import median_ms


def main() -> None:
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} CUDA {torch.version.cuda}")
    # Two sizes: the rate cuBLAS sustains on random data (the clocks settle lower on larger
    # problems; the floors use the 8192^3 rate, as since 2026-11-22).
    for n in (8192, 16384):
        for dtype in (torch.bfloat16, torch.float16):
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype)
            ms = median_ms(lambda: torch.matmul(a, b), samples=20, reps=5)
            print(f"matmul {str(dtype):15} {n}^3: {2 * n**3 / ms / 1e9:7.1f} TFLOP/s")
            del a, b
    x = torch.randn(1 << 28, device="cuda", dtype=torch.bfloat16)  # 512 MiB, far past L2
    y = torch.empty_like(x)
    ms = median_ms(lambda: y.copy_(x), samples=20, reps=5)
    print(f"copy 512 MiB: {2 * x.numel() * 2 / ms / 1e6:7.1f} GB/s (read + write)")
    ms = median_ms(lambda: torch.sum(x, dtype=torch.float32), samples=20, reps=5)
    print(f"read 512 MiB (torch.sum): {x.numel() * 2 / ms / 1e6:7.1f} GB/s (read only)")


if __name__ == "__main__":
    main()
