#!/usr/bin/env python3
"""The Hopper forward's split over the keys on small grids: kernel time (each call replayed from a
CUDA graph, triton's do_bench_cudagraph) without a split (FLASHATTN_FWD_SPLITS=1), with the rule's
split count, and SDPA's default and FlashAttention-2 on the same tensors; then the eager single
call (host included) of the rule against SDPA's. Shapes: the seed's (B=1 H=1 D=64 fp16, S 32..8k,
causal off/on) and short prefills (B=1, H 8/16, D 128, bf16).
--counts: instead, the seed shapes' kernel time at every forced split count (FLASHATTN_FWD_SPLITS),
each merged in a cluster where it fits and through the combine kernel
(FLASHATTN_FWD_SPLIT_MERGE=combine), against the rule's and SDPA's: which count each shape wants.
--small-grid: instead, the one-consumer config of small grids (dispatch.cu small_grid_launcher: D <= 64,
at most 1024 keys, 64-row tiles on at most half the SMs) against the call without it
(FLASHATTN_FWD_SMALL_GRID=0), kernel time in alternating rounds, SDPA's beside: to 256 keys.
--small-grid-keys: the same config past 256 keys (FLASHATTN_FWD_SMALL_GRID=65536, split by the rule on
its 64-row tiles) against the 128-row default config, split (FLASHATTN_FWD_SMALL_GRID=256, the bound
before it moved to 1024), to 4096 keys: where the bound belongs.
usage: python lab/fwd_split_time.py [--counts | --small-grid | --small-grid-keys]"""

from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.nn.functional as F
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn
from gpu_timing import env_vars, geomean

FWD = torch.ops.flashattn.fwd.default


def graph_ms(fn) -> float:
    return triton.testing.do_bench_cudagraph(fn, rep=50, return_mode="median")


def single_call_us(fn, samples: int = 40) -> float:
    ts = []
    for _ in range(samples):
        torch.cuda.synchronize()
        time.sleep(2e-4)
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(ts)


def with_env(fn, **env: str | None) -> float:
    """fn's graph-replayed time (ms) with the environment variables set (None: unset) around it."""
    with env_vars(**env):
        return graph_ms(fn)


def counts() -> None:
    forced = ("1", "2", "3", "4", "5", "6", "7", "8", "16")
    print("kernel us, B=1 H=1 D=64 fp16; cl: merged in a cluster where it fits, co: the combine kernel")
    print(f"{'S':>5} {'causal':>6} {'sdpa':>7} {'rule':>7} {'rule co':>7} | " + " ".join(f"{n + ' cl':>7} {n + ' co':>7}" for n in forced))
    for s in (256, 512, 1024, 2048, 4096):
        for causal in (False, True):
            q, k, v = (torch.randn(1, s, 1, 64, device="cuda", dtype=torch.float16) for _ in range(3))
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
            cm = flashattn.CAUSAL_TOP_LEFT if causal else flashattn.CAUSAL_NONE
            ours = lambda: FWD(q, k, v, None, cm, "hopper")  # noqa: E731
            t_sdpa = graph_ms(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal))
            row = [with_env(ours, FLASHATTN_FWD_SPLITS=None, FLASHATTN_FWD_SPLIT_MERGE=None),
                   with_env(ours, FLASHATTN_FWD_SPLITS=None, FLASHATTN_FWD_SPLIT_MERGE="combine")]
            for n in forced:
                row.append(with_env(ours, FLASHATTN_FWD_SPLITS=n, FLASHATTN_FWD_SPLIT_MERGE=None))
                row.append(with_env(ours, FLASHATTN_FWD_SPLITS=n, FLASHATTN_FWD_SPLIT_MERGE="combine"))
            print(f"{s:>5} {str(causal):>6} {t_sdpa * 1e3:7.2f} " + " ".join(f"{t * 1e3:7.2f}" for t in row[:2]) + " | "
                  + " ".join(f"{t * 1e3:7.2f}" for t in row[2:]))


def small_grid(rounds: int = 4, past_256: bool = False) -> None:
    if past_256:
        shapes = [(1, 1, s, s, 64, torch.float16, c) for s in (384, 512, 768, 1024, 2048, 4096) for c in (False, True)]
        shapes += [(1, 8, s, s, 64, torch.bfloat16, c) for s in (512, 1024) for c in (False, True)]
        off_env, on_env = "256", "65536"
    else:
        shapes = [(1, 1, s, s, 64, torch.float16, c) for s in (96, 128, 192, 256) for c in (False, True)]
        shapes += [(1, 8, 256, 256, 64, torch.bfloat16, c) for c in (False, True)]
        shapes += [(1, 1, 1000, 256, 64, torch.float16, False), (2, 4, 256, 256, 32, torch.bfloat16, True),
                   (1, 16, 128, 128, 64, torch.bfloat16, False)]
        off_env, on_env = "0", None
    print(f"kernel us, median of {rounds} alternating rounds; off: FLASHATTN_FWD_SMALL_GRID={off_env}, "
          f"on: FLASHATTN_FWD_SMALL_GRID={on_env} (None: unset, the tree's rule)")
    print(f"{'B':>2} {'H':>3} {'Sq':>5} {'Sk':>5} {'D':>3} {'dtype':>8} {'causal':>6} | {'off':>7} {'on':>7} {'on/off':>7} "
          f"| {'sdpa':>7} {'x sdpa off':>10} {'x sdpa on':>10}")
    gains, vs_sdpa = [], []
    for b, h, sq, sk, d, dtype, causal in shapes:
        q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype)
        k, v = (torch.randn(b, sk, h, d, device="cuda", dtype=dtype) for _ in range(2))
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        cm = flashattn.CAUSAL_TOP_LEFT if causal else flashattn.CAUSAL_NONE
        ours = lambda: FWD(q, k, v, None, cm, "auto")  # noqa: E731
        off, on, sdpa = [], [], []
        for _ in range(rounds):
            off.append(with_env(ours, FLASHATTN_FWD_SMALL_GRID=off_env))
            on.append(with_env(ours, FLASHATTN_FWD_SMALL_GRID=on_env))
            sdpa.append(graph_ms(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)))
        t_off, t_on, t_sdpa = (statistics.median(x) * 1e3 for x in (off, on, sdpa))
        gains.append(t_off / t_on)
        vs_sdpa.append(t_sdpa / t_on)
        print(f"{b:>2} {h:>3} {sq:>5} {sk:>5} {d:>3} {str(dtype)[6:]:>8} {str(causal):>6} | {t_off:7.2f} {t_on:7.2f} "
              f"{t_off / t_on:7.3f} | {t_sdpa:7.2f} {t_sdpa / t_off:10.2f} {t_sdpa / t_on:10.2f}")
    print(f"geomean off/on {geomean(gains):.3f}, x sdpa with it {geomean(vs_sdpa):.3f} ({len(shapes)} shapes)")


def main() -> None:
    if "--counts" in sys.argv[1:]:
        counts()
        return
    if "--small-grid" in sys.argv[1:] or "--small-grid-keys" in sys.argv[1:]:
        small_grid(past_256="--small-grid-keys" in sys.argv[1:])
        return
    shapes = [(1, 1, s, 64, torch.float16, c) for s in (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
              for c in (False, True)]
    shapes += [(1, h, s, 128, torch.bfloat16, c) for h in (8, 16) for s in (1024, 4096) for c in (False, True)]
    print(f"{'B':>2} {'H':>3} {'S':>5} {'D':>4} {'dtype':>8} {'causal':>6} | kernel us: {'nosplit':>8} {'rule':>8} "
          f"{'port':>8} {'sdpa':>8} {'fa2':>8} {'gain':>6} {'x sdpa':>7} | single call us: {'ours':>7} {'sdpa':>7} {'x sdpa':>7}")
    ratios_kernel, ratios_call = [], []
    for b, h, s, d, dtype, causal in shapes:
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dtype) for _ in range(3))
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        cm = flashattn.CAUSAL_TOP_LEFT if causal else flashattn.CAUSAL_NONE
        ours = lambda: FWD(q, k, v, None, cm, "auto")  # noqa: E731
        t_nosplit = with_env(ours, FLASHATTN_FWD_SPLITS="1")
        t_rule = with_env(ours, FLASHATTN_FWD_SPLITS=None)
        t_port = graph_ms(lambda: FWD(q, k, v, None, cm, "portable"))
        sdpa = lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)  # noqa: E731
        t_sdpa = graph_ms(sdpa)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            t_fa2 = graph_ms(sdpa)
        call_ours = single_call_us(lambda: flashattn.scaled_dot_product_attention(qt, kt, vt, is_causal=causal))
        call_sdpa = single_call_us(sdpa)
        ratios_kernel.append(t_sdpa / t_rule)
        ratios_call.append(call_sdpa / call_ours)
        print(f"{b:>2} {h:>3} {s:>5} {d:>4} {str(dtype)[6:]:>8} {str(causal):>6} | {'':>10} {t_nosplit * 1e3:8.2f} "
              f"{t_rule * 1e3:8.2f} {t_port * 1e3:8.2f} {t_sdpa * 1e3:8.2f} {t_fa2 * 1e3:8.2f} {t_nosplit / t_rule:6.2f} "
              f"{t_sdpa / t_rule:7.2f} | {'':>15} {call_ours:7.1f} {call_sdpa:7.1f} {call_sdpa / call_ours:7.2f}")
    print(f"geomean x sdpa: kernel {geomean(ratios_kernel):.3f}, single call {geomean(ratios_call):.3f} "
          f"({len(shapes)} shapes)")


if __name__ == "__main__":
    main()
