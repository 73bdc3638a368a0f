"""Local (sliding-window) attention: cost proportional to the window, not to the sequence.

    python -m pytest benchmarks/test_bench_window.py -m "bench and window" -v --benchmark-json=window.json

One case per forward path (portable, and the Hopper path where it runs): bf16, B=1, Hq=16, Hk=4,
D=128, Sq = Sk = 32768, three calls of flash_attn_func timed in interleaved rounds
(bench_common.measure_interleaved, the standard grid's settings):
  window  causal=True, window_size=(4096, 0)   ~32k x 4k visible pairs
  causal  causal=True (dense causal)           ~32k^2 / 2: 4.3x the window's pairs
  dense   no mask                              32k^2: 8.5x the window's pairs
The window call walks only the key blocks inside the window (csrc/common/mask.cuh), so its time
should follow its pairs: the test asserts it is at least 4x faster than the dense call and at
least 3x faster than the dense causal one (ideal 4.3x; the tiles on the window's two edges
are masked blocks, about one extra key block per query tile), and records every median and ratio
in extra_info. Outputs are checked against SDPA before timing (the window as a boolean mask on the
last 512 query rows, which is what fits in memory).
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_common as bc

B, HQ, HK, D, S, WINDOW = 1, 16, 4, 128, 32768, 4096


def _check_window_rows(out, q, k, v) -> float:
    """Relative error of the last 512 query rows against SDPA with the window as a mask."""
    import torch
    import torch.nn.functional as F

    rows = 512
    qt = q[:, -rows:].transpose(1, 2)
    kt = k.transpose(1, 2).repeat_interleave(HQ // HK, dim=1)
    vt = v.transpose(1, 2).repeat_interleave(HQ // HK, dim=1)
    i = torch.arange(S - rows, S, device=q.device)[:, None]
    j = torch.arange(S, device=q.device)[None, :]
    mask = (j <= i) & (j >= i - WINDOW)
    ref = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask).transpose(1, 2)
    return bc.rel_err(out[:, -rows:], ref)


@pytest.mark.bench
@pytest.mark.window
@pytest.mark.parametrize("path", ["portable", "hopper"])
def test_sliding_window_cost_follows_the_window(benchmark, path: str) -> None:
    import torch

    import flashattn

    if path == "hopper" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the Hopper path needs an sm90 GPU")
    gen = torch.Generator(device="cuda").manual_seed(1234)
    q = torch.randn(B, S, HQ, D, generator=gen, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, S, HK, D, generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(2))

    calls = {
        "window": lambda: flashattn.flash_attn_func(q, k, v, causal=True, window_size=(WINDOW, 0)),
        "causal": lambda: flashattn.flash_attn_func(q, k, v, causal=True),
        "dense": lambda: flashattn.flash_attn_func(q, k, v),
    }
    with flashattn.use_backend(path):
        err = _check_window_rows(calls["window"](), q, k, v)
    assert err < bc.MAX_REL_ERR, f"window output differs from SDPA with the window mask: rel err {err:.3g}"

    runnables = {name: bc.Runnable(fn, lambda: flashattn.use_backend(path)) for name, fn in calls.items()}
    timings = bc.measure_interleaved(runnables, bc.settings_for("standard"))
    med = {name: bc.median(t.samples_ms) for name, t in timings.items()}
    benchmark.extra_info.update({f"{name}_ms": ms for name, ms in med.items()})
    benchmark.extra_info.update({
        "shape": f"B={B} Hq={HQ} Hk={HK} D={D} S={S} bf16 window=({WINDOW}, 0)",
        "backend": path,
        "speedup_vs_causal": med["causal"] / med["window"],
        "speedup_vs_dense": med["dense"] / med["window"],
        "window_rel_err": err,
    })
    bc.record_timing(benchmark, timings["window"], f"window-{path}")  # the window call's rounds
    assert med["dense"] / med["window"] >= 4.0, f"{path}: window {med['window']:.3f} ms vs dense {med['dense']:.3f} ms"
    assert med["causal"] / med["window"] >= 3.0, f"{path}: window {med['window']:.3f} ms vs causal {med['causal']:.3f} ms"
