#!/usr/bin/env python3
"""Hunts a rare CUDA error: draws packed batches as tests/kernels/test_varlen_gpu.py's
test_varlen_equals_per_sequence_dense_calls does (tests/strategies.py varlen_specs, NaN-filled
allocations) and runs that test's calls, each spec printed and flushed before its first kernel, so
that under CUDA_LAUNCH_BLOCKING=1 the last spec printed is the one whose call failed. A `misaligned
address` was seen once in that test on 2026-12-02 (H200) and not in 12 reruns; this loop named its
input the same day (a contiguous view at an unaligned address, since copied by the bindings:
docs/perf-notes.md, "An input at an unaligned address").

    CUDA_LAUNCH_BLOCKING=1 python3 lab/varlen_equivalence_loop.py [--iterations N] [--backend portable|auto]

Each iteration: the packed call on --backend, then one dense flash_attn_func call per sequence on the
portable path, compared bitwise where --backend is portable (as the test does). Exits 1 at the first
mismatch or CUDA error, with the spec.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import flashattn  # noqa: E402
from gpu_helpers import dense_calls_per_sequence, poison_cuda_allocator  # noqa: E402
from strategies import varlen_specs  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--backend", default="portable", choices=("portable", "auto"))
    args = ap.parse_args()
    warnings.simplefilter("ignore")  # .example() outside a test warns on every draw
    device = torch.device("cuda")
    poison_cuda_allocator()
    strategy = varlen_specs(max_seqlen=300)
    for it in range(args.iterations):
        spec = strategy.example()
        print(f"[{it}] {spec!r}", flush=True)
        try:
            x = spec.make(device)
            causal = spec.causal_mode == flashattn.CAUSAL_BOTTOM_RIGHT
            with flashattn.use_backend(args.backend):
                out, lse = flashattn.flash_attn_varlen_func(
                    x.q, x.k, x.v, x.cu_seqlens_q, x.cu_seqlens_k, spec.max_seqlen_q, spec.max_seqlen_k,
                    softmax_scale=spec.scale, causal=causal, window_size=spec.window, softcap=spec.softcap,
                    return_lse=True)
            for b, q0, q1, o_b, lse_b in dense_calls_per_sequence(x, spec):
                same = torch.equal(out[q0:q1], o_b) and torch.equal(lse[:, q0:q1], lse_b)
                if args.backend == "portable" and not same:
                    print(f"[{it}] sequence {b}: differs from the dense call", flush=True)
                    return 1
            torch.cuda.synchronize()
        except RuntimeError as exc:  # torch.AcceleratorError is a RuntimeError
            print(f"[{it}] FAILED: {type(exc).__name__}: {exc}", flush=True)
            return 1
    print(f"{args.iterations} iterations, no error", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
