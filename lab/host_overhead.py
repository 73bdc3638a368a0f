#!/usr/bin/env python3
"""Host (CPU) time per call of flashattn's host path, without a GPU: the public entry points on CPU
tensors, with the CUDA kernels replaced by CPU stand-ins that only allocate the outputs
(lab/host_stub_kernels.cpp). What is timed is everything a call does on the host but the device
guard, the stream lookup and the launch: the Python layer, the dispatcher, the autograd layer, the
output allocation. The CUDA-device checks are relaxed for the CPU tensors (on the checked path).

Three setups, each in its own process:
  default        the tree with the C++ host layer (csrc/autograd.cpp, csrc/module.cpp) built for the
                 CPU (lab/host_cpu_build.py): what a GPU machine runs;
  --python-only  the tree without it: the Python autograd and the checked path (a machine without
                 the extension);
  --root DIR     another checkout (e.g. `git worktree add /tmp/before <commit>`), Python autograd
                 as it has it: the before of a change.
Min and median over interleaved rounds of N calls (a shared 2-core machine is noisy: the min is
the number to compare). usage: python3 lab/host_overhead.py [--calls 3000] [--rounds 9] [setup]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path

LAB = Path(__file__).resolve().parent
ROOT = LAB.parent


def per_call_us(fn, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def relax_device_checks(flashattn) -> None:
    """The checked path's CUDA-device tests skipped for CPU tensors (wherever this checkout keeps
    them), the rest of each check kept."""
    import torch

    dtypes = (torch.float16, torch.bfloat16)

    def tensor(name, t, rank_min):
        if not isinstance(t, torch.Tensor) or t.dim() < rank_min or t.dtype not in dtypes:
            raise ValueError(name)
        if t.shape[-1] > 1 and t.stride(-1) != 1:
            raise ValueError(name)

    def meta(name, t):
        if not isinstance(t, torch.Tensor) or t.dim() != 4 or t.dtype not in dtypes:
            raise ValueError(name)
        return t.shape, t.stride()

    validate = getattr(flashattn, "_validate", None)
    if validate is not None:
        validate.tensor, validate._meta = tensor, meta
    else:  # before flashattn/_validate.py
        flashattn.interface._check_tensor = tensor
        importlib.import_module("flashattn.kvcache")._meta = meta
    flashattn._ext.require_extension = lambda: None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=9)
    setup = ap.add_mutually_exclusive_group()
    setup.add_argument("--python-only", action="store_true")
    setup.add_argument("--root", type=Path)
    args = ap.parse_args()

    sys.path.insert(0, str(LAB))
    import host_cpu_build

    root = args.root.resolve() if args.root else ROOT
    sys.path.insert(0, str(root))
    if not (args.python_only or args.root):
        host_cpu_build.load_host_layer()
    import torch

    import flashattn

    host_cpu_build.load_stub_kernels()
    relax_device_checks(flashattn)
    torch.set_num_threads(1)

    f16 = torch.float16
    b, h, s, d = 1, 1, 128, 64
    q, k, v = (torch.randn(b, h, s, d, dtype=f16) for _ in range(3))
    qb, kb, vb = (t.transpose(1, 2) for t in (q, k, v))
    qg, kg, vg = (t.detach().clone().requires_grad_() for t in (qb, kb, vb))
    grad = torch.ones(b, s, h, d, dtype=f16)
    dq = torch.randn(1, 1, 32, 128, dtype=f16)  # decode: B=1, Sq=1, GQA 32:8, D=128, a 4k cache
    kc, vc = (torch.randn(1, 4096, 8, 128, dtype=f16) for _ in range(2))
    cu = torch.tensor([0, s], dtype=torch.int32)
    qp, kp, vp = (t[0] for t in (qb, kb, vb))
    fwd_bhsd = torch.ops.flashattn.fwd_bhsd.default
    scale = d**-0.5

    def train_step():
        flashattn.flash_attn_func(qg, kg, vg, causal=True).backward(grad)

    rows = [
        ("scaled_dot_product_attention B=1 H=1 S=128 D=64", lambda: flashattn.scaled_dot_product_attention(q, k, v)),
        ("  its op alone (dispatcher, autograd layer, outputs)", lambda: fwd_bhsd(q, k, v, scale, 0, "auto")),
        ("flash_attn_func, same shape", lambda: flashattn.flash_attn_func(qb, kb, vb, causal=True)),
        ("flash_attn_func forward + backward (requires grad)", train_step),
        ("flash_attn_varlen_func, one sequence", lambda: flashattn.flash_attn_varlen_func(qp, kp, vp, cu, cu, s, s)),
        ("flash_attn_with_kvcache B=1 32:8 D=128 Sk=4k", lambda: flashattn.flash_attn_with_kvcache(dq, kc, vc)),
        ("qg.mul(2).backward() (one aten op, forward + backward)", lambda: qg.mul(2).backward(grad)),
        ("torch.empty_like(q) (one allocation)", lambda: torch.empty_like(q)),
        ("q.add(q) (one aten op with its output)", lambda: q.add(q)),
    ]
    for _, fn in rows:  # warm-up (and a failing row fails here, not mid-table)
        for _ in range(200):
            fn()
    times: dict[str, list[float]] = {name: [] for name, _ in rows}
    for _ in range(args.rounds):
        for name, fn in rows:
            times[name].append(per_call_us(fn, args.calls))

    setup_name = f"--root {root}" if args.root else ("--python-only" if args.python_only else "C++ host layer")
    print(f"Host time per call, CPU stand-in kernels, torch {torch.__version__}, {setup_name}; "
          f"{args.rounds} rounds x {args.calls} calls")
    print(f"  {'call':54} {'min us':>8} {'median':>8}")
    for name, _ in rows:
        t = times[name]
        print(f"  {name:54} {min(t):8.2f} {statistics.median(t):8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
