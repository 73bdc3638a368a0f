"""Packed variable-length batches: the varlen forward against the dense kernel and SDPA on padding.

    python -m pytest benchmarks/test_bench_varlen.py -m "bench and varlen" -v --benchmark-json=varlen.json

One case per (head dim, causal): bf16, 16384 tokens packed from sequence lengths drawn uniformly
from 128..4096 (seed fixed; the last one takes what is left, at least 128), H = 2048 / D heads,
q and k/v packed alike (self-attention). Timed together in interleaved rounds
(bench_common.measure_interleaved, the standard grid's settings):
  varlen         flash_attn_varlen_func on the default backend (on an H100/H200 the Hopper
                 forward's packed flavour, elsewhere the portable kernel's)
  varlen-portable  the same call on the portable path (its packed kernel)
  dense          flash_attn_func on the portable path, [8, 2048, H, D]: 16384 tokens of the mean
                 length, the dense kernel's rate on comparable work (TFLOP/s, each from its own
                 exact FLOP count: 4 D per visible (query, key) pair)
  dense-default  the same dense call on the default backend (the Hopper forward on an H100/H200):
                 the rate varlen is measured against
  fa3-varlen     FlashAttention-3's flash_attn_varlen_func on the same packed tensors, where its
                 wheel is installed (tokenspeed-fa3; skipped with the reason elsewhere)
  per-sequence   one portable flash_attn_func call per sequence: exactly the same work as varlen,
                 what a caller without varlen would run (launch overhead included)
  sdpa-padded    torch SDPA (default backend choice) on the sequences padded to the longest:
                 causal through is_causal (exact on the real rows: padding is at the end), non-causal
                 with a boolean key-padding mask
extra_info records each median, TFLOP/s and the ratios varlen/dense-default and
varlen-portable/dense (TFLOP/s: each packed kernel against its dense one; the goal: within 5%),
fa3-varlen/varlen, per-sequence/varlen and sdpa-padded/varlen (time). Outputs are checked against SDPA
on the padded equivalent before timing (relative L2 error, bench_common.MAX_REL_ERR).
"""

from __future__ import annotations

import os
import random
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_common as bc

TOKENS, MODEL_DIM, MIN_LEN, MAX_LEN, SEED = 16384, 2048, 128, 4096, 2026
DENSE_B, DENSE_S = 8, 2048


def packed_lengths() -> list[int]:
    """Lengths drawn from MIN_LEN..MAX_LEN summing to TOKENS (the last one takes the rest)."""
    rng = random.Random(SEED)
    lens: list[int] = []
    while TOKENS - sum(lens) > MAX_LEN + MIN_LEN:
        lens.append(rng.randint(MIN_LEN, MAX_LEN))
    rest = TOKENS - sum(lens)
    if rest > MAX_LEN:  # two more, both within the range
        lens.append(rest // 2)
        rest -= rest // 2
    lens.append(rest)
    assert sum(lens) == TOKENS and all(MIN_LEN <= n <= MAX_LEN for n in lens), lens
    return lens


@pytest.mark.bench
@pytest.mark.varlen
@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
@pytest.mark.parametrize("d", [64, 128])
def test_varlen_against_dense_and_padded_sdpa(benchmark, d: int, causal: bool) -> None:
    import torch
    import torch.nn.functional as F

    import flashattn

    h = MODEL_DIM // d
    lens = packed_lengths()
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    mode = bc.CAUSAL_BOTTOM_RIGHT if causal else bc.CAUSAL_NONE
    gen = torch.Generator(device="cuda").manual_seed(1234)
    q, k, v = (torch.randn(TOKENS, h, d, generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda")
    max_len = max(lens)
    dq, dk, dv = (torch.randn(DENSE_B, DENSE_S, h, d, generator=gen, device="cuda", dtype=torch.bfloat16)
                  for _ in range(3))

    # SDPA's padded equivalent: [B, H, max_len, D], sequences at the front of each row
    def pad(t):
        out = t.new_zeros(len(lens), max_len, h, d)
        for b, n in enumerate(lens):
            out[b, :n] = t[cu[b]:cu[b + 1]]
        return out.transpose(1, 2)

    qp, kp, vp = pad(q), pad(k), pad(v)
    key_ok = torch.arange(max_len, device="cuda")[None, :] < torch.tensor(lens, device="cuda")[:, None]
    key_mask = None if causal else key_ok[:, None, None, :]

    def sdpa_padded():
        return F.scaled_dot_product_attention(qp, kp, vp, attn_mask=key_mask, is_causal=causal)

    calls = {
        "varlen": lambda: flashattn.flash_attn_varlen_func(q, k, v, cu_t, cu_t, max_len, max_len, causal=causal),
        "varlen-portable": lambda: flashattn.flash_attn_varlen_func(q, k, v, cu_t, cu_t, max_len, max_len,
                                                                    causal=causal),
        "dense": lambda: flashattn.flash_attn_func(dq, dk, dv, causal=causal),
        "per-sequence": lambda: [flashattn.flash_attn_func(q[None, cu[b]:cu[b + 1]], k[None, cu[b]:cu[b + 1]],
                                                           v[None, cu[b]:cu[b + 1]], causal=causal)
                                 for b in range(len(lens))],
        "sdpa-padded": sdpa_padded,
        "dense-default": lambda: flashattn.flash_attn_func(dq, dk, dv, causal=causal),
    }
    ref = sdpa_padded().transpose(1, 2)  # [B, max_len, H, D]
    ref_packed = torch.cat([ref[b, :n] for b, n in enumerate(lens)])
    err = bc.rel_err(calls["varlen"](), ref_packed)
    assert err < bc.MAX_REL_ERR, f"varlen output differs from SDPA on the padded batch: rel err {err:.3g}"
    with flashattn.use_backend("portable"):
        err_portable = bc.rel_err(calls["varlen-portable"](), ref_packed)
    assert err_portable < bc.MAX_REL_ERR, f"portable varlen output differs from SDPA: rel err {err_portable:.3g}"
    fa3_note = None
    try:
        fa3_varlen = bc.fa3_varlen_func()
    except bc.Unavailable as exc:
        fa3_note = str(exc)
    else:
        def fa3_call():
            res = fa3_varlen(q, k, v, cu_t, cu_t, max_len, max_len, causal=causal)
            return res[0] if isinstance(res, tuple) else res

        fa3_err = bc.rel_err(fa3_call(), ref_packed)
        if fa3_err < bc.MAX_REL_ERR:
            calls["fa3-varlen"] = fa3_call
        else:  # a peer's wrong result is reported, never timed
            fa3_note = f"FlashAttention-3's varlen output differs from SDPA on the padded batch: rel err {fa3_err:.3g}"

    portable = {"varlen-portable", "dense", "per-sequence"}
    runnables = {name: bc.Runnable(fn, (lambda: flashattn.use_backend("portable")) if name in portable else None)
                 for name, fn in calls.items()}
    timings = bc.measure_interleaved(runnables, bc.settings_for("standard"))
    med = {name: bc.median(t.samples_ms) for name, t in timings.items()}
    varlen_flops = sum(bc.attention_flops(1, h, n, n, d, mode) for n in lens)
    dense_flops = bc.attention_flops(DENSE_B, h, DENSE_S, DENSE_S, d, mode)
    tflops = {
        "varlen": varlen_flops / med["varlen"] / 1e9,
        "varlen-portable": varlen_flops / med["varlen-portable"] / 1e9,
        "dense": dense_flops / med["dense"] / 1e9,
        "per-sequence": varlen_flops / med["per-sequence"] / 1e9,
        "sdpa-padded": varlen_flops / med["sdpa-padded"] / 1e9,  # useful work only
        "dense-default": dense_flops / med["dense-default"] / 1e9,
    }
    if "fa3-varlen" in med:
        tflops["fa3-varlen"] = varlen_flops / med["fa3-varlen"] / 1e9
    benchmark.extra_info.update({f"{name}_ms": ms for name, ms in med.items()})
    benchmark.extra_info.update({f"{name}_tflops": t for name, t in tflops.items()})
    benchmark.extra_info.update({
        "shape": f"{len(lens)} sequences, {TOKENS} tokens, lengths {MIN_LEN}..{MAX_LEN} (max {max_len}), H={h} D={d} "
                 f"bf16 causal={causal}; dense [{DENSE_B}, {DENSE_S}]",
        "lengths": lens,
        "varlen_vs_dense_default_tflops": tflops["varlen"] / tflops["dense-default"],
        "varlen_portable_vs_dense_tflops": tflops["varlen-portable"] / tflops["dense"],
        "speedup_vs_fa3_varlen": med["fa3-varlen"] / med["varlen"] if "fa3-varlen" in med else None,
        "fa3_varlen": fa3_note or "timed",
        "speedup_vs_per_sequence": med["per-sequence"] / med["varlen"],
        "speedup_vs_sdpa_padded": med["sdpa-padded"] / med["varlen"],
        "varlen_rel_err": err,
        "varlen_portable_rel_err": err_portable,
    })
    print(f"\nvarlen D={d} causal={causal}: TFLOP/s " + ", ".join(f"{name} {tf:.0f}" for name, tf in tflops.items())
          + (f" ({fa3_note})" if fa3_note else ""))  # shown with -s (lab/gpu_run.sh fwdgrid)
    bc.record_timing(benchmark, timings["varlen"], f"varlen-d{d}-{'causal' if causal else 'noncausal'}")
