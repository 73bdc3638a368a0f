#!/usr/bin/env python3
"""Where a decode call's time goes, ours against SDPA's default and FlashAttention-3 (the
tokenspeed-fa3 wheel, where it imports), on the decode-kv grid's inputs (bf16, D=128, Hq:Hk = 32:8,
Sq=1, full caches given as cache_seqlens; benchmarks/test_bench_decode.py):

  * per shape, each implementation's kernels (torch.profiler over eager calls: name, launches per
    call, mean device µs), the sum of its kernels, and its CUDA-graph-replayed time per call: the
    difference is the gaps between kernels (launch and drain), which the kernel sum does not show;
  * with --ncu: one call of each per shape inside a profiler range and an NVTX range, for Nsight
    Compute (lab/ncu_decode.sh runs it so).

usage: python3 lab/decode_profile.py [--ncu] [--heads HQ:HK] [B:Sk ...]     default: 1:1024 1:4096 8:1024 64:16384
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch
import torch.nn.functional as F

import flashattn
from gpu_timing import kernel_table

HQ, HK, D = 32, 8, 128


def make_inputs(b: int, sk: int, hq: int = HQ, hk: int = HK):
    g = torch.Generator(device="cuda").manual_seed(b * 1_000_003 + sk)
    q = torch.randn(b, 1, hq, D, device="cuda", dtype=torch.bfloat16, generator=g)
    kc = torch.randn(b, sk, hk, D, device="cuda", dtype=torch.bfloat16, generator=g)
    vc = torch.randn(b, sk, hk, D, device="cuda", dtype=torch.bfloat16, generator=g)
    seqlens = torch.full((b,), sk, device="cuda", dtype=torch.int32)
    return q, kc, vc, seqlens


def implementations(q, kc, vc, seqlens) -> dict:
    impls = {"flashattn": lambda: flashattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens)}
    qt, kt, vt = q.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2)
    impls["sdpa-default"] = lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
    try:
        from flash_attn_interface import flash_attn_with_kvcache as fa3  # tokenspeed-fa3

        impls["fa3"] = lambda: fa3(q, kc, vc, cache_seqlens=seqlens)
    except ImportError:
        pass
    return impls


def graph_us(fns: list, reps: int = 30) -> float:
    """Median µs per call of the calls `fns` captured in order in one CUDA graph, replayed `reps`
    times (lab/decode_layers_time.py captures one call per layer's cache)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for fn in fns[:3]:
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for fn in fns:
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3 / len(fns))
    return statistics.median(times)


def graph_time_us(fn, calls: int = 20, reps: int = 30) -> float:
    """Median µs per call of `calls` calls captured in one CUDA graph, replayed `reps` times."""
    return graph_us([fn] * calls, reps)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ncu", action="store_true", help="one call of each inside a profiler range (for ncu)")
    ap.add_argument("--heads", default=f"{HQ}:{HK}", help="query heads : KV heads (default %(default)s)")
    ap.add_argument("shapes", nargs="*", default=["1:1024", "1:4096", "8:1024", "64:16384"])
    args = ap.parse_args(argv)
    hq, hk = (int(x) for x in args.heads.split(":"))
    shapes = [tuple(int(x) for x in s.split(":")) for s in args.shapes]
    print(f"{torch.cuda.get_device_name()} | torch {torch.__version__} | bf16 D={D} Hq:Hk={hq}:{hk} Sq=1, full caches")
    cases = []
    for b, sk in shapes:
        inputs = make_inputs(b, sk, hq, hk)
        impls = implementations(*inputs)
        ref = impls["sdpa-default"]().transpose(1, 2)
        for name, fn in impls.items():
            out = fn()
            out = out.transpose(1, 2) if name == "sdpa-default" else (out[0] if isinstance(out, tuple) else out)
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            if not err < 2e-2:
                print(f"B={b} Sk={sk} {name}: relative error {err:.3g} vs SDPA: WRONG")
                return 1
        cases.append((b, sk, inputs, impls))
    if args.ncu:
        for _, _, _, impls in cases:  # warm-up outside the range (cuDNN builds its plans here)
            for fn in impls.values():
                fn(), fn()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        for b, sk, _, impls in cases:
            for name, fn in impls.items():
                torch.cuda.nvtx.range_push(f"B={b} Sk={sk} {name}")
                fn()
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_pop()
        torch.cuda.cudart().cudaProfilerStop()
        print("profiled:", " ".join(f"{b}:{sk}" for b, sk, _, _ in cases))
        return 0
    for b, sk, _, impls in cases:
        kv_bytes = 2 * b * sk * hk * D * 2
        print(f"\nB={b} Sk={sk}: K/V {kv_bytes / 2**20:.1f} MiB")
        for name, fn in impls.items():
            g = graph_time_us(fn)
            rows = kernel_table(fn)
            ksum = sum(n * t for _, n, t in rows)
            print(f"  {name:<13} graph {g:8.2f} µs/call  kernels {ksum:8.2f} µs  gaps {g - ksum:6.2f} µs  "
                  f"read {kv_bytes / (g * 1e-6) / 1e9:6.0f} GB/s")
            for kname, n, t in rows:
                print(f"      {n:4.1f} x {t:8.2f} µs  {kname[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
