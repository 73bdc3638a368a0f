#!/usr/bin/env python3
"""What the forward's split over the keys costs a small call, three ways (issue 28): the seed shapes
that split (B=1 H=1 D=64 fp16, S 1024 and 2048, causal and not), each with the split the rule takes
merged in clusters (the default), the same split through the combine kernel
(FLASHATTN_FWD_SPLIT_MERGE=combine), and the split forced off (FLASHATTN_FWD_SPLITS=1), timed as
host work alone (the GPU held busy while the calls are enqueued), back to back (no sync: the
host's rate, or the GPU's where that is lower) and as single calls paired with SDPA's
(synchronized before and after: host + kernels), in us. Then a torch.profiler timeline of 200
back-to-back calls per shape and merge: each kernel's mean time, the mean gap on the GPU between
one kernel's end and the next one's start, the GPU's period per call, and the mean host time of
each CUDA runtime call.
usage: python3 lab/split_call_time.py [--calls 2000]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import flashattn  # noqa: E402
from host_profile_gpu import back_to_back_us, no_split, single_call_pair_us  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    dev = torch.device("cuda")
    host_alone = dict(calls=200, rounds=15, warmup=20, hold_gpu=True)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'S':>6} {'causal':>6} {'split':>8} {'host alone':>10} {'back to back':>12} {'sdpa b2b':>8} "
          f"{'single':>7} {'sdpa':>7} {'ratio':>6}")
    for causal in (False, True):
        for s in (1024, 2048):
            q, k, v = (torch.randn(1, 1, s, 64, device=dev, dtype=torch.float16) for _ in range(3))
            ours = lambda: flashattn.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
            ref = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
            for mode in ("cluster", "combine", "off"):
                with merge_mode(mode):
                    h = back_to_back_us(ours, **host_alone)
                    b = back_to_back_us(ours, args.calls)
                    br = back_to_back_us(ref, args.calls)
                    o1, r1, q1 = single_call_pair_us(ours, ref, args.calls // 10)
                print(f"{s:>6} {causal!s:>6} {mode:>8} {h:10.2f} {b:12.2f} {br:8.2f} "
                      f"{o1:7.2f} {r1:7.2f} {q1:6.2f}")
    for causal in (False, True):
        for s in (1024, 2048):
            q, k, v = (torch.randn(1, 1, s, 64, device=dev, dtype=torch.float16) for _ in range(3))
            for mode in ("cluster", "combine"):
                with merge_mode(mode):
                    timeline(lambda: flashattn.scaled_dot_product_attention(q, k, v, is_causal=causal),
                             f"S={s} causal={causal} {mode}")
    return 0


@contextlib.contextmanager
def merge_mode(mode: str):
    """cluster: the rule's split, merged in clusters (the default); combine: the same split through
    the float32 partials and the combine kernel (FLASHATTN_FWD_SPLIT_MERGE=combine); off: no split."""
    if mode == "off":
        with no_split():
            yield
        return
    if mode == "combine":
        os.environ["FLASHATTN_FWD_SPLIT_MERGE"] = "combine"
    try:
        yield
    finally:
        os.environ.pop("FLASHATTN_FWD_SPLIT_MERGE", None)


def timeline(fn, label: str, calls: int = 200) -> None:
    from torch.profiler import ProfilerActivity, profile

    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    kernels, runtime = [], {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels.append((e.time_range.start, e.time_range.end, e.name[:60]))
        elif e.name.startswith("cuda"):
            runtime.setdefault(e.name, []).append(e.time_range.end - e.time_range.start)
    kernels.sort()
    per_name: dict[str, list[float]] = {}
    for start, end, name in kernels:
        per_name.setdefault(name, []).append(end - start)
    gaps = [b[0] - a[1] for a, b in zip(kernels, kernels[1:])]
    period = (kernels[-1][1] - kernels[0][0]) / calls if kernels else 0.0
    print(f"\n{label}: {len(kernels)} kernels over {calls} calls, GPU period {period:.2f} us a call, "
          f"mean gap between kernels {sum(gaps) / max(1, len(gaps)):.2f} us")
    for name, d in per_name.items():
        print(f"  kernel {name:60} {sum(d) / len(d):7.2f} us x {len(d)}")
    for name, d in sorted(runtime.items()):
        print(f"  host   {name:60} {sum(d) / len(d):7.2f} us x {len(d)}")


if __name__ == "__main__":
    sys.exit(main())
