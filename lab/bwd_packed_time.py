#!/usr/bin/env python3
"""The backward of packed variable-length batches against the dense backward, per useful FLOP
(bf16, H = 2048 / D, 16384 tokens; medians of triton's do_bench, backward only:
torch.autograd.grad after one forward).

  equal:  8 sequences of 2048 tokens packed, against flash_attn_func on [8, 2048] (the same
          tensors, the same useful FLOPs): the packed kernels' own cost.
  mixed:  lengths 128..4096 as benchmarks/test_bench_varlen.py draws them, in TFLOP/s of useful
          work (the visible (query, key) pairs), under "auto" (the Hopper backward on an H100) and
          "portable" (the portable packed kernels), against the dense [8, 2048] call's TFLOP/s.

usage: python lab/bwd_packed_time.py [--dims 64,128,256]"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import triton.testing

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))

import flashattn  # noqa: E402
from test_bench_varlen import packed_lengths  # noqa: E402


def pairs(lens: list[int], causal: bool) -> int:
    """Visible (query, key) pairs of equal query and key lengths (bottom-right causal = top-left)."""
    return sum(n * (n + 1) // 2 if causal else n * n for n in lens)


def bwd_ms(fwd, leaves, dout) -> float:
    out = fwd()
    return triton.testing.do_bench(lambda: torch.autograd.grad(out, leaves, dout, retain_graph=True), warmup=30,
                                   rep=200, return_mode="median")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", default="64,128,256")
    args = ap.parse_args()
    dev = torch.device("cuda")
    print(f"flashattn from {os.path.dirname(flashattn.__file__)}; {torch.cuda.get_device_name(dev)}")
    print(f"{'D':>4} {'causal':>6} | {'dense ms':>8} {'packed ms':>9} {'ratio':>6} | "
          f"{'dense TF/s':>10} {'mixed auto':>10} {'mixed port':>10} {'auto/dense':>10}")
    mixed = packed_lengths()
    for d in (int(x) for x in args.dims.split(",")):
        h = 2048 // d
        for causal in (False, True):
            g = torch.Generator(device=dev).manual_seed(7)

            def randn(*shape):
                return torch.randn(*shape, device=dev, dtype=torch.bfloat16, generator=g)

            # equal lengths: one tensor seen dense [8, 2048, H, D] and packed [16384, H, D]
            qd, kd, vd = (randn(8, 2048, h, d).requires_grad_() for _ in range(3))
            dout_d = randn(8, 2048, h, d)
            t_dense = bwd_ms(lambda: flashattn.flash_attn_func(qd, kd, vd, causal=causal), (qd, kd, vd), dout_d)
            qp, kp, vp = (t.detach().reshape(-1, h, d).requires_grad_() for t in (qd, kd, vd))
            cu = torch.arange(0, 16385, 2048, device=dev, dtype=torch.int32)
            t_packed = bwd_ms(lambda: flashattn.flash_attn_varlen_func(qp, kp, vp, cu, cu, 2048, 2048, causal=causal),
                              (qp, kp, vp), dout_d.reshape(-1, h, d))
            flops_equal = 2.5 * 4 * pairs([2048] * 8, causal) * h * d

            cu_m = torch.tensor([0] + list(torch.tensor(mixed).cumsum(0)), device=dev, dtype=torch.int32)
            total, max_len = int(cu_m[-1]), max(mixed)
            qm, km, vm = (randn(total, h, d).requires_grad_() for _ in range(3))
            dout_m = randn(total, h, d)
            flops_mixed = 2.5 * 4 * pairs(mixed, causal) * h * d
            t_mixed = {}
            for backend in ("auto", "portable"):
                with flashattn.use_backend(backend):
                    t_mixed[backend] = bwd_ms(
                        lambda: flashattn.flash_attn_varlen_func(qm, km, vm, cu_m, cu_m, max_len, max_len, causal=causal),
                        (qm, km, vm), dout_m)
            tf_dense = flops_equal / t_dense / 1e9
            tf_auto = flops_mixed / t_mixed["auto"] / 1e9
            tf_port = flops_mixed / t_mixed["portable"] / 1e9
            print(f"{d:>4} {str(causal):>6} | {t_dense:8.3f} {t_packed:9.3f} {t_packed / t_dense:6.3f} | "
                  f"{tf_dense:10.1f} {tf_auto:10.1f} {tf_port:10.1f} {tf_auto / tf_dense:10.3f}", flush=True)


if __name__ == "__main__":
    main()
