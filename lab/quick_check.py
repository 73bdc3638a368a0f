#!/usr/bin/env python3
"""Quick GPU smoke check: numerics on a small grid against the float64 reference and SDPA, then
ours vs each SDPA backend (bf16, D=64/128, S=1k..16k, causal on/off), side by side, CUDA events.
usage: python lab/quick_check.py [--speed-only|--numerics-only]
"""

from __future__ import annotations

import math
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a source checkout

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn
from flashattn import CAUSAL_BOTTOM_RIGHT, CAUSAL_NONE, CAUSAL_TOP_LEFT
from gpu_timing import median_ms


def sdpa_same_dtype(q, k, v, scale, mode):
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    kt = kt.repeat_interleave(hq // hk, 1)
    vt = vt.repeat_interleave(hq // hk, 1)
    mask = None
    if mode != CAUSAL_NONE:
        off = 0 if mode == CAUSAL_TOP_LEFT else sk - sq
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        mask = j <= i + off
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=scale)
    return o.transpose(1, 2)


# Sq x Sk pairs covering every S of issue 2's grid {1, 2, 17, 64, 65, 113, 128, 129, 339, 1024, 4097},
# equal and unequal both ways (Sq > Sk with bottom-right causal leaves rows that see no key).
SEQ_PAIRS = ((1, 1), (2, 2), (17, 17), (64, 64), (128, 128), (65, 129), (129, 65), (339, 1024), (1024, 339),
             (113, 4097), (4097, 113), (1, 4097), (2, 65))
LAYOUTS = ("bshd", "bhsd_view", "padded_slice")


def make_input(b, s, h, d, dtype, layout, gen):
    """[B, S, H, D]-shaped tensor in one of three memory layouts: contiguous; a transposed view of
    a contiguous [B, H, S, D] buffer; a slice of a buffer with extra heads and padded rows."""
    if layout == "bshd":
        return torch.randn(b, s, h, d, device="cuda", dtype=dtype, generator=gen)
    if layout == "bhsd_view":
        return torch.randn(b, h, s, d, device="cuda", dtype=dtype, generator=gen).transpose(1, 2)
    big = torch.randn(b, s, h + 1, d + 8, device="cuda", dtype=dtype, generator=gen)
    return big[:, :, 1:, :d]


def numerics() -> int:
    bad = 0
    gen = torch.Generator(device="cuda").manual_seed(0)
    cases = []
    for dtype in (torch.bfloat16, torch.float16):
        for d in (8, 32, 40, 64, 80, 96, 128, 160, 192, 256):
            for sq, sk in SEQ_PAIRS:
                for mode in (CAUSAL_NONE, CAUSAL_TOP_LEFT, CAUSAL_BOTTOM_RIGHT):
                    # rotate layouts across (pair, mode) so every mode meets every layout
                    cases.append((dtype, d, sq, sk, mode, LAYOUTS[(len(cases) // 3 + mode) % len(LAYOUTS)]))
    for dtype, d, sq, sk, mode, layout in cases:
        b, hq, hk = 2, 4, 2
        q = make_input(b, sq, hq, d, dtype, layout, gen)
        k = make_input(b, sk, hk, d, dtype, layout, gen)
        v = make_input(b, sk, hk, d, dtype, layout, gen)
        scale = 1 / math.sqrt(d)
        out, lse = torch.ops.flashattn.fwd(q, k, v, scale, mode, flashattn.get_backend())
        ref, ref_lse = flashattn.attention_reference(q, k, v, scale, mode)
        sd = sdpa_same_dtype(q, k, v, scale, mode)
        rows = torch.isfinite(ref_lse).transpose(1, 2)[..., None].expand_as(ref)
        err = (out.double() - ref).abs()[rows].max().item() if rows.any() else 0.0
        sd_err = (sd.double() - ref).abs()[rows].max().item() if rows.any() else 0.0
        empty_ok = bool((out[~rows] == 0).all()) and bool(torch.isneginf(lse.transpose(1, 2)[~rows[..., 0]]).all())
        lse_err = (lse.double() - ref_lse)[torch.isfinite(ref_lse)].abs().max().item() if rows.any() else 0.0
        ok = (err <= 2 * sd_err + 1e-5) and torch.isfinite(out).all().item() and empty_ok and lse_err < 1e-3
        if not ok:
            bad += 1
            print(f"FAIL {dtype} D={d} Sq={sq} Sk={sk} mode={mode} layout={layout}: err={err:.3g} sdpa={sd_err:.3g} lse={lse_err:.3g} empty_ok={empty_ok}")
    print(f"numerics: {len(cases) - bad}/{len(cases)} cases pass")
    return bad


def bench(fn):
    """Median ms per call over 15 samples of 10 back-to-back calls (gpu_timing.median_ms)."""
    return median_ms(fn, samples=15, reps=10, warmup=5)


def speed() -> None:
    print(f"{'dtype':5} {'D':>4} {'S':>6} {'causal':>6} {'ours':>8} {'flash':>8} {'cudnn':>8} {'default':>8}  TFLOP/s; ours/flash ours/cudnn")
    for dtype in (torch.bfloat16,):
        for d in (64, 128):
            for s in (1024, 2048, 4096, 8192, 16384):
                for causal in (False, True):
                    h, b = 2048 // d, 16384 // s
                    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype) for _ in range(3))
                    flops = 4 * b * h * s * s * d / (2 if causal else 1)
                    res = {}
                    res["ours"] = bench(lambda: flashattn.scaled_dot_product_attention(q, k, v, is_causal=causal))
                    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                        try:
                            with sdpa_kernel(be):
                                res[name] = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                        except RuntimeError:
                            res[name] = float("nan")
                    res["default"] = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                    tf = {n: flops / t / 1e9 for n, t in res.items()}
                    print(f"bf16  {d:>4} {s:>6} {int(causal):>6} {tf['ours']:8.1f} {tf['flash']:8.1f} {tf['cudnn']:8.1f} "
                          f"{tf['default']:8.1f}  {res['flash'] / res['ours']:.2f}x {res['cudnn'] / res['ours']:.2f}x")


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__, torch.version.cuda, flashattn.build_info())
    rc = 0
    if "--speed-only" not in sys.argv:
        rc = numerics()
    if "--numerics-only" not in sys.argv:
        speed()
    sys.exit(1 if rc else 0)
