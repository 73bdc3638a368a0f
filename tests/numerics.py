"""The one numerics criterion of the suite, and the same-dtype SDPA baseline it is measured against.

Criterion (`assert_attention_matches`), for out [B, Sq, Hq, D] and lse [B, Hq, Sq] of one call:
  * shapes, dtypes (out: the input dtype; lse: float32) and device are right;
  * no NaN or inf anywhere in out; lse is finite on every row that sees a key;
  * rows that see no key (possible under causal masking when Sq > Sk) are exactly 0 with lse -inf;
  * over the rows that see at least one key,
        max |out - ref| <= 2 * max |sdpa - ref| + ATOL
    where ref is `flashattn.attention_reference` (float64) and sdpa is torch's SDPA math backend
    computed in the input dtype (`sdpa_same_dtype`);
  * |lse - ref_lse| <= LSE_ATOL + LSE_RTOL * |ref_lse| on those rows.

Why the SDPA baseline runs with `allow_fp16_bf16_reduction_math_sdp(True)`: since torch 2.5 the
math backend upcasts fp16/bf16 inputs to float32 internally unless that flag is set, so by default
its error is only the final rounding of the output, not that of an attention computed in the
input dtype. A correct flash kernel rounds the probabilities P to the input dtype before the P V
product (so do SDPA's own flash and cuDNN backends); simulated on CPU over 5000 random small
cases, such a kernel exceeds 2x the upcast baseline's error in ~0.1% of them (worst ratio 1.24)
and stays within 2x the same-dtype baseline in all (worst 0.75). tests/test_criterion_cpu.py
keeps that simulation as a property test.

Why ATOL = 1e-5: where the reference is exactly representable in the input dtype (a row that sees
one key, Sk = 1, scale 0 over equal values) SDPA's error can be exactly 0; ours is computed in
float32 and may then differ by float32-level noise that is far below one fp16/bf16 ulp at any
output magnitude above ~2^-7. 1e-5 forgives exactly that and nothing a real bug produces.

Why LSE_ATOL = 1e-4, LSE_RTOL = 1e-5: lse is float32 computed from float32 scores (the products
of the same rounded inputs the reference sees), with the scale rounded to float32 and ex2/log2
approximations of ~2^-22 relative error; the float32 error of a score s is ~1e-7 |s| per
operation, so a few 1e-7 relative plus 1e-6 absolute is the honest budget; the chosen tolerances
leave a 10x margin and still catch any wrong scale, mask or normalization.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn

ATOL = 1e-5
LSE_ATOL = 1e-4
LSE_RTOL = 1e-5
CAUSAL_NAMES = {flashattn.CAUSAL_NONE: "none", flashattn.CAUSAL_TOP_LEFT: "top-left", flashattn.CAUSAL_BOTTOM_RIGHT: "bottom-right"}


def resolve_scale(scale: float | None, head_dim: int) -> float:
    """The softmax scale a call uses: `scale`, or 1/sqrt(D) when None."""
    return 1.0 / math.sqrt(head_dim) if scale is None else float(scale)


def causal_mask(seqlen_q: int, seqlen_k: int, causal_mode: int, device: torch.device | str) -> torch.Tensor | None:
    """Boolean [Sq, Sk] mask, True where key j is visible to query i; None without causal masking."""
    if causal_mode == flashattn.CAUSAL_NONE:
        return None
    offset = 0 if causal_mode == flashattn.CAUSAL_TOP_LEFT else seqlen_k - seqlen_q
    i = torch.arange(seqlen_q, device=device)[:, None]
    j = torch.arange(seqlen_k, device=device)[None, :]
    return j <= i + offset


@contextmanager
def same_dtype_math_sdpa() -> Iterator[None]:
    """SDPA's math backend, computing in the input dtype (see the module docstring)."""
    previous = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
    torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)
    try:
        with sdpa_kernel(SDPBackend.MATH):
            yield
    finally:
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(previous)


def sdpa_same_dtype(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None, causal_mode: int) -> torch.Tensor:
    """torch SDPA (math backend, input dtype) on [B, S, H, D] inputs -> [B, Sq, Hq, D].

    Causal alignments through an explicit boolean mask, GQA by repeat_interleave of K/V heads.
    Rows that see no key come out as 0 or NaN depending on the torch version: exclude them.
    """
    hq, hk = q.shape[2], k.shape[2]
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    if hq != hk:
        kt = kt.repeat_interleave(hq // hk, dim=1)
        vt = vt.repeat_interleave(hq // hk, dim=1)
    mask = causal_mask(q.shape[1], k.shape[1], causal_mode, q.device)
    with same_dtype_math_sdpa():
        out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=resolve_scale(scale, q.shape[-1]))
    return out.transpose(1, 2)


def describe_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None, causal_mode: int) -> str:
    """One line naming shapes, strides, dtype, scale and causal alignment, for failure messages."""

    def t(name: str, x: torch.Tensor) -> str:
        return f"{name} {list(x.shape)} strides {list(x.stride())}"

    dtype = str(q.dtype).replace("torch.", "")
    return (
        f"{t('q', q)}, {t('k', k)}, {t('v', v)}, {dtype}, scale {resolve_scale(scale, q.shape[-1]):.6g}"
        f"{' (default)' if scale is None else ''}, causal {CAUSAL_NAMES.get(causal_mode, causal_mode)}"
    )


@dataclass(frozen=True)
class AttentionErrors:
    """What `assert_attention_matches` measured (errors over rows that see at least one key)."""

    out_err: float
    sdpa_err: float
    bound: float
    lse_err: float
    visible_rows: int
    empty_rows: int


def assert_attention_matches(
    out: torch.Tensor,
    lse: torch.Tensor | None,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None,
    causal_mode: int,
    *,
    context: str = "",
) -> AttentionErrors:
    """Assert the numerics criterion (module docstring) for out [B, Sq, Hq, D] and lse
    [B, Hq, Sq] (None: out only) computed from q [B, Sq, Hq, D], k/v [B, Sk, Hk, D].

    Raises AssertionError listing every violated part, with the inputs' shapes and strides.
    """
    b, sq, hq, d = q.shape
    problems: list[str] = []
    if tuple(out.shape) != (b, sq, hq, d):
        problems.append(f"out shape {list(out.shape)}, expected {[b, sq, hq, d]}")
    if out.dtype != q.dtype:
        problems.append(f"out dtype {out.dtype}, expected {q.dtype}")
    if out.device != q.device:
        problems.append(f"out on {out.device}, expected {q.device}")
    if lse is not None:
        if tuple(lse.shape) != (b, hq, sq):
            problems.append(f"lse shape {list(lse.shape)}, expected {[b, hq, sq]}")
        if lse.dtype != torch.float32:
            problems.append(f"lse dtype {lse.dtype}, expected torch.float32")
    if problems:
        _fail(problems, q, k, v, scale, causal_mode, context)

    sc = resolve_scale(scale, d)
    ref, ref_lse = flashattn.attention_reference(q, k, v, sc, causal_mode)
    visible = torch.isfinite(ref_lse)  # [B, Hq, Sq]
    visible_rows = visible.transpose(1, 2)  # [B, Sq, Hq]
    n_visible = int(visible.sum())
    n_empty = visible.numel() - n_visible

    nonfinite = int((~torch.isfinite(out)).sum())
    if nonfinite:
        problems.append(f"out has {nonfinite} NaN/inf elements")
    if n_empty:
        empty_out = out[~visible_rows]
        nonzero = int((empty_out != 0).sum())
        if nonzero:
            problems.append(f"{nonzero} elements of the {n_empty} rows that see no key are not 0")
        if lse is not None:
            not_neg_inf = int((lse[~visible] != float("-inf")).sum())
            if not_neg_inf:
                problems.append(f"lse of {not_neg_inf} of the {n_empty} rows that see no key is not -inf")

    out_err = sdpa_err = bound = lse_err = 0.0
    if n_visible:
        diff = (out.double() - ref).abs()
        diff_visible = diff.masked_fill(~visible_rows[..., None], 0.0)
        out_err = float(diff[visible_rows].max())
        baseline = sdpa_same_dtype(q, k, v, sc, causal_mode)
        sdpa_err = float((baseline.double() - ref).abs()[visible_rows].max())
        if not math.isfinite(sdpa_err):
            problems.append(f"the SDPA same-dtype baseline is not finite on visible rows (err {sdpa_err}): harness problem")
        bound = 2.0 * sdpa_err + ATOL
        if not out_err <= bound:  # NaN fails too
            where = _unravel(int(diff_visible.nan_to_num(nan=math.inf).argmax()), diff.shape)
            problems.append(
                f"max |out - ref| = {out_err:.4g} exceeds 2 * {sdpa_err:.4g} (SDPA same-dtype error) + {ATOL:g} = "
                f"{bound:.4g}; worst at [b, i, h, d] = {where}: out {float(out[where]):.6g}, ref {float(ref[where]):.6g}"
            )
        if lse is not None:
            lse_visible = lse.double()[visible]
            ref_visible = ref_lse[visible]
            lse_diff = (lse_visible - ref_visible).abs()
            lse_err = float(lse_diff.max())
            allowed = LSE_ATOL + LSE_RTOL * ref_visible.abs()
            bad = int((~(lse_diff <= allowed)).sum())
            if bad:
                problems.append(
                    f"lse differs from the reference on {bad} of {n_visible} rows beyond {LSE_ATOL:g} + "
                    f"{LSE_RTOL:g} * |ref| (max |lse - ref| = {lse_err:.4g})"
                )
    if problems:
        _fail(problems, q, k, v, scale, causal_mode, context)
    return AttentionErrors(out_err, sdpa_err, bound, lse_err, n_visible, n_empty)


def _unravel(index: int, shape: torch.Size) -> tuple[int, ...]:
    out = []
    for size in reversed(shape):
        out.append(index % size)
        index //= size
    return tuple(reversed(out))


def _fail(problems: list[str], q, k, v, scale, causal_mode, context: str) -> None:
    head = f"{context}: " if context else ""
    raise AssertionError(f"{head}{describe_inputs(q, k, v, scale, causal_mode)}\n  - " + "\n  - ".join(problems))
