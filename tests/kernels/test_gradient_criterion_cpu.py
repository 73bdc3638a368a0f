"""The float64 gradient reference (flashattn.attention_reference_grads) and the gradient criterion
(tests/numerics.py, assert_gradients_match), on CPU:
  * the reference equals torch autograd, through torch's SDPA math backend and through the float64
    forward reference, over random problems (causal both alignments, GQA, rows that see no key,
    scale 0), and closed forms;
  * the criterion accepts what a correct flash backward computes (an emulation of
    FlashAttention-2's arithmetic), with local windows and the softcap too (the approximate
    tanh's error included), and rejects deliberately wrong gradients.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import flashattn
import strategies as fst
from numerics import (
    assert_gradients_match,
    causal_mask,
    emulated_tanh,
    empty_query_rows,
    resolve_scale,
    sdpa_same_dtype_grads,
)

F16, BF16, F64 = torch.float16, torch.bfloat16, torch.float64
NONE, TOP_LEFT, BOTTOM_RIGHT = flashattn.CAUSAL_NONE, flashattn.CAUSAL_TOP_LEFT, flashattn.CAUSAL_BOTTOM_RIGHT
MODES = {"none": NONE, "top-left": TOP_LEFT, "bottom-right": BOTTOM_RIGHT}

# Small enough for CPU half-precision matmuls: the criterion runs SDPA's backward and two float64 passes.
cpu_specs = fst.attention_specs(max_batch=2, max_seqlen=80, max_heads_q=4)


def upstream_grad(q: torch.Tensor, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(q.shape, generator=gen).to(q.dtype)


# ---- the float64 reference -------------------------------------------------------------------------


@given(problem=fst.float64_problems())
def test_reference_grads_match_autograd_of_torch_sdpa_in_float64(problem) -> None:
    """SDPA's math backend in float64, autograd, GQA heads repeated and summed back, rows that see
    no key left out of SDPA (sdpa_same_dtype_grads) and zero in the reference."""
    q, k, v, dout, scale, mode = problem
    got = flashattn.attention_reference_grads(q, k, v, dout, scale, mode)
    want = sdpa_same_dtype_grads(q, k, v, dout, scale, mode)
    for g, w, x, name in zip(got, want, (q, k, v), ("dq", "dk", "dv")):
        assert g.dtype == F64 and g.shape == x.shape, name
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9, msg=name)


@given(problem=fst.float64_problems())
def test_reference_grads_match_autograd_of_the_forward_reference(problem) -> None:
    q, k, v, dout, scale, mode = problem
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out, _ = flashattn.attention_reference(*leaves, scale, mode)
    want = torch.autograd.grad(out, leaves, dout)
    got = flashattn.attention_reference_grads(q, k, v, dout, scale, mode)
    for g, w, name in zip(got, want, ("dq", "dk", "dv")):
        assert torch.isfinite(g).all(), name
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9, msg=name)


def test_rows_that_see_no_key_have_zero_gradient_and_add_nothing() -> None:
    gen = torch.Generator().manual_seed(0)
    q, dout = torch.randn(2, 10, 4, 8, generator=gen, dtype=F64), torch.randn(2, 10, 4, 8, generator=gen, dtype=F64)
    k, v = torch.randn(2, 3, 2, 8, generator=gen, dtype=F64), torch.randn(2, 3, 2, 8, generator=gen, dtype=F64)
    dq, dk, dv = flashattn.attention_reference_grads(q, k, v, dout, 0.5, BOTTOM_RIGHT)
    assert empty_query_rows(10, 3, BOTTOM_RIGHT) == 7  # rows 0..6 see no key
    assert torch.equal(dq[:, :7], torch.zeros_like(dq[:, :7]))
    assert (dq[:, 8:].abs().sum(-1) > 0).all()  # (row 7 sees one key: its dq is 0 up to rounding)
    other = dout.clone()
    other[:, :7] = 1e6  # what flows into rows that see nothing changes nothing
    dq2, dk2, dv2 = flashattn.attention_reference_grads(q, k, v, other, 0.5, BOTTOM_RIGHT)
    assert torch.equal(dk, dk2) and torch.equal(dv, dv2) and torch.equal(dq, dq2)


def test_one_key_closed_form() -> None:
    """Sk = 1: P = 1, so dV is dO summed over the group, and dS = dP - rowsum(dO * V) = 0."""
    gen = torch.Generator().manual_seed(1)
    q, dout = (torch.randn(2, 5, 6, 16, generator=gen, dtype=F64) for _ in range(2))
    k, v = (torch.randn(2, 1, 2, 16, generator=gen, dtype=F64) for _ in range(2))
    dq, dk, dv = flashattn.attention_reference_grads(q, k, v, dout, 0.3, NONE)
    torch.testing.assert_close(dq, torch.zeros_like(dq), rtol=0, atol=1e-14)
    torch.testing.assert_close(dk, torch.zeros_like(dk), rtol=0, atol=1e-14)
    torch.testing.assert_close(dv, dout.view(2, 5, 2, 3, 16).sum(dim=(1, 3))[:, None], rtol=1e-14, atol=1e-14)


def test_scale_zero_closed_form() -> None:
    """scale 0: dQ = dK = 0 and P is uniform over the visible keys."""
    gen = torch.Generator().manual_seed(2)
    q, dout = (torch.randn(1, 4, 1, 8, generator=gen, dtype=F64) for _ in range(2))
    k, v = (torch.randn(1, 6, 1, 8, generator=gen, dtype=F64) for _ in range(2))
    dq, dk, dv = flashattn.attention_reference_grads(q, k, v, dout, 0.0, BOTTOM_RIGHT)
    assert torch.equal(dq, torch.zeros_like(dq)) and torch.equal(dk, torch.zeros_like(dk))
    want = torch.zeros_like(dv)
    for i in range(4):
        seen = i + 6 - 4 + 1  # keys 0..i+2
        want[0, :seen, 0] += dout[0, i, 0] / seen
    torch.testing.assert_close(dv, want, rtol=1e-14, atol=1e-14)


def test_gqa_gradients_are_the_group_sums_of_repeated_heads() -> None:
    gen = torch.Generator().manual_seed(3)
    q, dout = (torch.randn(1, 5, 6, 8, generator=gen, dtype=F64) for _ in range(2))
    k, v = (torch.randn(1, 7, 2, 8, generator=gen, dtype=F64) for _ in range(2))
    dq, dk, dv = flashattn.attention_reference_grads(q, k, v, dout, 0.3, TOP_LEFT)
    rq, rk, rv = flashattn.attention_reference_grads(
        q, k.repeat_interleave(3, dim=2), v.repeat_interleave(3, dim=2), dout, 0.3, TOP_LEFT
    )
    torch.testing.assert_close(dq, rq, rtol=0, atol=1e-14)
    torch.testing.assert_close(dk, rk.view(1, 7, 2, 3, 8).sum(3), rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(dv, rv.view(1, 7, 2, 3, 8).sum(3), rtol=1e-14, atol=1e-14)


# ---- the criterion accepts correct gradients -------------------------------------------------------


def flash_backward_emulation(q, k, v, dout, scale: float, visible: torch.Tensor | None, *, delta_from_o: bool = True,
                             softcap: float = 0.0, tanh_rel: float = 0.0, seed: int = 0,
                             softcap_derivative: bool = True):
    """What a correct FlashAttention-2-style backward returns for [B, S, H, D] inputs and a
    [Sq, Sk] visibility mask: float32 scores from the rounded inputs, P = exp(s - lse) from the
    float32 lse, O as the forward stored it (rounded to the input dtype), Delta = rowsum(dO * O),
    P and dS rounded to the input dtype before their matmuls (float32 accumulation), dK/dV summed
    over each GQA group in float32, each gradient rounded once at the end. Rows with no visible
    key give dq = 0. With a softcap c: scores c * t, t = tanh(x / c) with a relative error of up
    to tanh_rel (random sign per score, the same t in the forward and the backward, as the
    kernels' tanh.approx.f32), and dS times 1 - t^2."""
    dt = q.dtype
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    group = hq // hk
    qf, kf, vf, dof = (t.float().transpose(1, 2) for t in (q, k, v, dout))
    kf, vf = kf.repeat_interleave(group, 1), vf.repeat_interleave(group, 1)
    s = qf @ kf.transpose(-1, -2) * scale
    dcap = None
    if softcap:
        t = emulated_tanh(s / softcap, tanh_rel, seed)
        s = softcap * t
        dcap = 1.0 - t * t
    if visible is not None:
        s = s.masked_fill(~visible, -math.inf)
    m = s.amax(-1, keepdim=True)
    empty = torch.isneginf(m)
    p = torch.exp(s - torch.where(empty, torch.zeros_like(m), m))
    l = p.sum(-1, keepdim=True)
    lse = (torch.log(l) + m).masked_fill(empty, -math.inf)
    o = ((p.to(dt).float() @ vf) / torch.where(empty, torch.ones_like(l), l)).to(dt).float()
    p = torch.exp(s - lse.masked_fill(empty, 0.0)).masked_fill(empty, 0.0)
    dv = p.to(dt).float().transpose(-1, -2) @ dof
    dp = dof @ vf.transpose(-1, -2)
    delta = (dof * o).sum(-1, keepdim=True) if delta_from_o else torch.zeros_like(m)
    ds = p * (dp - delta)
    if dcap is not None and softcap_derivative:
        ds = ds * dcap
    ds = ds.to(dt).float()
    dq = ds @ kf * scale
    dk = ds.transpose(-1, -2) @ qf * scale
    dk, dv = dk.view(b, hk, group, sk, d).sum(2), dv.view(b, hk, group, sk, d).sum(2)
    return tuple(t.transpose(1, 2).to(dt) for t in (dq, dk, dv))


def emulate(q, k, v, dout, scale: float, mode: int):
    return flash_backward_emulation(q, k, v, dout, scale, causal_mask(q.shape[1], k.shape[1], mode, "cpu"))


@given(spec=cpu_specs)
def test_accepts_a_correct_flash_style_backward(spec: fst.AttentionSpec) -> None:
    """Kept as a property test: run with FLASHATTN_HYPOTHESIS_PROFILE=thorough it is the
    simulation behind the criterion's allowances (1500 random cases, none failed, worst ratio
    of error to SDPA's error 1.94, for dV with GQA and one query row)."""
    x = spec.make("cpu")
    dout = upstream_grad(x.q, spec.seed)
    grads = emulate(x.q, x.k, x.v, dout, resolve_scale(x.scale, spec.head_dim), x.causal_mode)
    assert_gradients_match(*grads, x.q, x.k, x.v, dout, x.scale, x.causal_mode)


@given(spec=cpu_specs, window=fst.windows(max_extent=80), softcap=fst.softcaps())
def test_accepts_a_correct_flash_style_backward_with_window_and_softcap(spec: fst.AttentionSpec, window, softcap) -> None:
    """Windows of every kind (empty rows anywhere in the sequence included) and softcaps from
    saturating to inert, with the approximate tanh's full error (2^-11 relative, random sign per
    score): the windowed same-dtype baseline and the documented allowances cover it."""
    x = spec.make("cpu")
    dout = upstream_grad(x.q, spec.seed)
    visible = causal_mask(spec.seqlen_q, spec.seqlen_k, x.causal_mode, "cpu", window)
    grads = flash_backward_emulation(x.q, x.k, x.v, dout, resolve_scale(x.scale, spec.head_dim), visible,
                                     softcap=softcap, tanh_rel=2.0**-11, seed=spec.seed)
    assert_gradients_match(*grads, x.q, x.k, x.v, dout, x.scale, x.causal_mode, window=window, softcap=softcap)


@given(problem=fst.float64_problems(), window=fst.windows(max_extent=40), softcap=st.sampled_from((0.0, 0.7, 5.0)))
def test_windowed_baseline_is_the_reference_in_float64(problem, window, softcap) -> None:
    """The windowed/softcapped same-dtype baseline (autograd through the forward's baseline, rows
    that see no key given a dummy key and no upstream gradient) is exact in float64 (up to the
    float32 the softcap's scores pass through): the harness itself adds no error."""
    q, k, v, dout, scale, mode = problem
    got = sdpa_same_dtype_grads(q, k, v, dout, scale, mode, window, softcap)
    want = flashattn.attention_reference_grads(q, k, v, dout, scale, mode, window, softcap)
    tol = 1e-9 if softcap == 0.0 else 1e-4
    for g, w, name in zip(got, want, ("dq", "dk", "dv")):
        assert g.dtype == F64 and torch.isfinite(g).all(), name
        torch.testing.assert_close(g, w, rtol=tol, atol=tol, msg=name)


@given(spec=cpu_specs)
def test_accepts_sdpa_itself(spec: fst.AttentionSpec) -> None:
    x = spec.make("cpu")
    dout = upstream_grad(x.q, spec.seed)
    grads = sdpa_same_dtype_grads(x.q, x.k, x.v, dout, x.scale, x.causal_mode)
    assert_gradients_match(*grads, x.q, x.k, x.v, dout, x.scale, x.causal_mode)


def test_needs_its_allowance_for_a_correct_backward() -> None:
    """The case that motivates the allowance: large logits and two keys in float16 (one dominant
    key per row, so dS cancels to ~0 in exact arithmetic and rowsum(dO * O) carries the rounding
    of the stored output). The emulated flash backward passes, and is several times SDPA's error."""
    spec = fst.AttentionSpec(2, 28, 2, 3, 1, 16, F16, BOTTOM_RIGHT, None, fst.Layout("bhsd"), fst.Layout("pad_dim", 5), 30.0, 5937)
    x = spec.make("cpu")
    dout = upstream_grad(x.q, spec.seed + 1)
    grads = emulate(x.q, x.k, x.v, dout, resolve_scale(None, 16), BOTTOM_RIGHT)
    errors = assert_gradients_match(*grads, x.q, x.k, x.v, dout, None, BOTTOM_RIGHT)
    assert errors.grads["dq"].err > 4 * errors.grads["dq"].sdpa_err
    assert errors.empty_rows == 2 * 3 * (28 - 2)


# ---- the criterion rejects wrong gradients ---------------------------------------------------------

Wrong = Callable[..., tuple]


def _shifted_mask(q, k, mode, shift: int) -> torch.Tensor:
    sq, sk = q.shape[1], k.shape[1]
    offset = 0 if mode == TOP_LEFT else sk - sq
    i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
    return j <= i + offset + shift


def perturbed_dq(q, k, v, dout, scale, mode):
    """One dq element off by 10 units of roundoff of the dtype, scaled to the gradient's size."""
    dq, dk, dv = emulate(q, k, v, dout, scale, mode)
    dq[0, -1, 1, 3] += 10 * torch.finfo(q.dtype).eps * float(dq.abs().max())
    return dq, dk, dv


def nan_dk(q, k, v, dout, scale, mode):
    dq, dk, dv = emulate(q, k, v, dout, scale, mode)
    dk[1, 2, 0, 7] = math.nan
    return dq, dk, dv


def scale_off_by_5_percent(q, k, v, dout, scale, mode):
    dq, dk, dv = emulate(q, k, v, dout, scale * 1.05, mode)
    return dq, dk, dv


def dq_not_scaled(q, k, v, dout, scale, mode):
    """dQ = dS K without the softmax scale (dK right)."""
    dq, dk, dv = emulate(q, k, v, dout, scale, mode)
    return dq / scale, dk, dv


def causal_diagonal_hidden(q, k, v, dout, scale, mode):
    return flash_backward_emulation(q, k, v, dout, scale, _shifted_mask(q, k, mode, -1))


def causal_one_key_too_many(q, k, v, dout, scale, mode):
    return flash_backward_emulation(q, k, v, dout, scale, _shifted_mask(q, k, mode, +1))


def dkdv_causal_one_key_too_many(q, k, v, dout, scale, mode):
    """The planted bug's kind: dq right, dK/dV computed with the causal bound off by one."""
    dq, _, _ = emulate(q, k, v, dout, scale, mode)
    _, dk, dv = causal_one_key_too_many(q, k, v, dout, scale, mode)
    return dq, dk, dv


def gqa_head_dropped(q, k, v, dout, scale, mode):
    """dK/dV summed over all but the last query head of each group."""
    group = q.shape[2] // k.shape[2]
    dq, dk, dv = emulate(q, k, v, dout, scale, mode)
    keep = torch.ones(q.shape[2], dtype=torch.bool)
    keep[group - 1 :: group] = False
    _, dk2, dv2 = emulate(q, k, v, dout * keep[:, None].to(dout.dtype), scale, mode)
    return dq, dk2, dv2


def gqa_heads_interleaved(q, k, v, dout, scale, mode):
    """Query head h reads and writes K/V head h % Hk instead of h // (Hq / Hk)."""
    group = q.shape[2] // k.shape[2]
    order = torch.arange(q.shape[2]).reshape(group, -1).T.reshape(-1)
    dq, dk, dv = emulate(q[:, :, order], k, v, dout[:, :, order], scale, mode)
    return dq[:, :, torch.argsort(order)].contiguous(), dk, dv


def last_key_block_dropped(q, k, v, dout, scale, mode):
    """dK/dV of the keys past 32 (a second key block) never written: left 0."""
    dq, dk, dv = emulate(q, k, v, dout, scale, mode)
    dk[:, 32:] = 0
    dv[:, 32:] = 0
    return dq, dk, dv


def delta_ignored(q, k, v, dout, scale, mode):
    """dS = P * dP: the rowsum(dO * O) term forgotten."""
    return flash_backward_emulation(q, k, v, dout, scale, causal_mask(q.shape[1], k.shape[1], mode, "cpu"), delta_from_o=False)


def dk_dv_swapped(q, k, v, dout, scale, mode):
    dq, dk, dv = emulate(q, k, v, dout, scale, mode)
    return dq, dv, dk


def empty_rows_dq_not_zero(q, k, v, dout, scale, mode):
    dq, dk, dv = emulate(q, k, v, dout, scale, mode)
    dq[:, : empty_query_rows(q.shape[1], k.shape[1], mode)] = 1e-6
    return dq, dk, dv


def empty_rows_nan(q, k, v, dout, scale, mode):
    """What a plain softmax backward gives for rows that see no key."""
    dq, dk, dv = emulate(q, k, v, dout, scale, mode)
    dq[:, : empty_query_rows(q.shape[1], k.shape[1], mode)] = math.nan
    return dq, dk, dv


def dq_missing(q, k, v, dout, scale, mode):
    _, dk, dv = emulate(q, k, v, dout, scale, mode)
    return None, dk, dv


def dk_in_bhsd_layout(q, k, v, dout, scale, mode):
    dq, dk, dv = emulate(q, k, v, dout, scale, mode)
    return dq, dk.transpose(1, 2).contiguous(), dv


def dv_in_float32(q, k, v, dout, scale, mode):
    dq, dk, dv = emulate(q, k, v, dout, scale, mode)
    return dq, dk, dv.float()


WRONG_GRADIENTS: list[tuple[Wrong, str, str]] = [
    # (wrong computation, part of the message expected, causal alignment of the case)
    (perturbed_dq, "dq exceeds 2 *", "none"),
    (nan_dk, "dk has 1 NaN/inf", "none"),
    (scale_off_by_5_percent, "exceeds 2 *", "none"),
    (dq_not_scaled, "dq exceeds 2 *", "none"),
    (causal_diagonal_hidden, "exceeds 2 *", "top-left"),
    (causal_diagonal_hidden, "exceeds 2 *", "bottom-right"),
    (causal_one_key_too_many, "exceeds 2 *", "top-left"),
    (causal_one_key_too_many, "exceeds 2 *", "bottom-right"),
    (dkdv_causal_one_key_too_many, "dk exceeds 2 *", "top-left"),
    (dkdv_causal_one_key_too_many, "dk exceeds 2 *", "bottom-right"),
    (gqa_head_dropped, "dk exceeds 2 *", "none"),
    (gqa_heads_interleaved, "exceeds 2 *", "none"),
    (last_key_block_dropped, "dk exceeds 2 *", "top-left"),
    (delta_ignored, "dq exceeds 2 *", "none"),
    (dk_dv_swapped, "dk exceeds 2 *", "none"),
    (empty_rows_dq_not_zero, "query rows that see no key are not 0", "bottom-right"),
    (empty_rows_nan, "dq has", "bottom-right"),
    (dq_missing, "dq is None", "none"),
    (dk_in_bhsd_layout, "dk shape", "none"),
    (dv_in_float32, "dv dtype", "none"),
]


def _rejection_case(dtype: torch.dtype):
    # Sq > Sk, so that bottom-right alignment leaves rows 0..Sq-Sk-1 with no key to see; Sk > 32.
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(2, 48, 4, 64, generator=gen).to(dtype)
    k, v = (torch.randn(2, 40, 2, 64, generator=gen).to(dtype) for _ in range(2))
    return q, k, v, upstream_grad(q, 2)


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["fp16", "bf16"])
@pytest.mark.parametrize(
    ("wrong", "message", "alignment"),
    [pytest.param(*row, id=f"{row[0].__name__}-{row[2]}") for row in WRONG_GRADIENTS],
)
def test_rejects_wrong_gradients(wrong: Wrong, message: str, alignment: str, dtype: torch.dtype) -> None:
    q, k, v, dout = _rejection_case(dtype)
    mode = MODES[alignment]
    grads = wrong(q, k, v, dout, 0.125, mode)
    with pytest.raises(AssertionError, match=message.replace("*", r"\*")) as info:
        assert_gradients_match(*grads, q, k, v, dout, 0.125, mode)
    assert "q [2, 48, 4, 64]" in str(info.value) and "k [2, 40, 2, 64]" in str(info.value)


def test_correct_gradients_of_the_rejection_case_pass() -> None:
    """The control for test_rejects_wrong_gradients: the uncorrupted computation is accepted."""
    for dtype in (F16, BF16):
        q, k, v, dout = _rejection_case(dtype)
        for mode in MODES.values():
            errors = assert_gradients_match(*emulate(q, k, v, dout, 0.125, mode), q, k, v, dout, 0.125, mode)
            assert all(0 < e.err for e in errors.grads.values())
            assert all(e.ratio <= 2 for e in errors.grads.values())


# ---- window and softcap: the criterion rejects their typical bugs ------------------------------------


def _windowed(q, k, v, dout, mode, window, softcap=0.0, **kw):
    visible = causal_mask(q.shape[1], k.shape[1], mode, "cpu", window)
    return flash_backward_emulation(q, k, v, dout, 0.125, visible, softcap=softcap, **kw)


WINDOW_BUGS = {
    # name: (the call's window, softcap, what the wrong backward computes)
    "left-edge-off-by-one": ((8, -1), 0.0, lambda *a: _windowed(*a, (9, -1))),
    "right-edge-off-by-one": ((8, 3), 0.0, lambda *a: _windowed(*a, (8, 4))),
    "window-ignored": ((8, 0), 0.0, lambda *a: _windowed(*a, (-1, 0))),
    "dkdv-window-ignored": ((8, 0), 0.0, lambda *a: _windowed(*a, (8, 0))[:1] + _windowed(*a, (-1, 0))[1:]),
    "softcap-derivative-missing": ((-1, -1), 5.0, lambda *a: _windowed(*a, (-1, -1), 5.0, softcap_derivative=False)),
    "softcap-ignored": ((-1, -1), 5.0, lambda *a: _windowed(*a, (-1, -1))),
    "softcap-wrong": ((16, -1), 5.0, lambda *a: _windowed(*a, (16, -1), 5.5)),
}


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("bug", list(WINDOW_BUGS))
def test_rejects_wrong_window_or_softcap_gradients(bug: str, dtype: torch.dtype) -> None:
    q, k, v, dout = _rejection_case(dtype)
    q, k = q * 3, k * 3  # logits of a few units: the softcap of 5 bends them
    window, softcap, wrong = WINDOW_BUGS[bug]
    right = _windowed(q, k, v, dout, NONE, window, softcap, tanh_rel=2.0**-11)
    assert_gradients_match(*right, q, k, v, dout, 0.125, NONE, window=window, softcap=softcap)  # the control
    with pytest.raises(AssertionError, match="exceeds 2 \\*"):
        assert_gradients_match(*wrong(q, k, v, dout, NONE), q, k, v, dout, 0.125, NONE, window=window, softcap=softcap)


def test_rows_that_see_no_key_anywhere_get_zero_dq() -> None:
    """With a window, rows that see no key are not a prefix (top-left (0, 0) with Sq > Sk: the last
    rows): the criterion checks them wherever they are."""
    q, k, v, dout = _rejection_case(F16)
    window = (0, 0)
    grads = _windowed(q, k, v, dout, TOP_LEFT, window)
    errors = assert_gradients_match(*grads, q, k, v, dout, 0.125, TOP_LEFT, window=window)
    assert errors.empty_rows == 2 * 4 * (48 - 40)
    dq = grads[0].clone()
    dq[:, -1] = 1e-3
    with pytest.raises(AssertionError, match="query rows that see no key are not 0"):
        assert_gradients_match(dq, *grads[1:], q, k, v, dout, 0.125, TOP_LEFT, window=window)


# ---- partial sums (context parallelism's ring) -------------------------------------------------------


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_partial_sums_allow_the_rings_rounding_but_not_a_dropped_partial(dtype: torch.dtype) -> None:
    """dv as torch's ring forms it: the key range's partial sums over query chunks, each rounded to
    the dtype, added in the dtype. With partial_sums = chunks the criterion accepts it (each
    addition rounds once more); a ring that dropped a chunk's partial fails even so."""
    gen = torch.Generator().manual_seed(3)
    b, s, h, d, chunks = 1, 64, 2, 32, 4
    q, k, v = (torch.randn(b, s, h, d, generator=gen).to(dtype) for _ in range(3))
    dout = torch.randn(b, s, h, d, generator=gen).to(dtype)
    dq, dk, dv = flashattn.attention_reference_grads(q, k, v, dout, None, NONE)
    # dv = sum over query chunks c of P_c^T dO_c: the reference's float64 pieces, rounded per chunk.
    scores = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double()) * resolve_scale(None, d)
    p = torch.softmax(scores, dim=-1)
    parts = [torch.einsum("bhqk,bqhd->bkhd", p[:, :, c::chunks], dout.double()[:, c::chunks]).to(dtype)
             for c in range(chunks)]
    ring_dv = parts[0]
    for part in parts[1:]:
        ring_dv = ring_dv + part  # in the dtype, as the ring adds
    dq, dk = dq.to(dtype), dk.to(dtype)
    assert_gradients_match(dq, dk, ring_dv, q, k, v, dout, None, NONE, partial_sums=chunks)
    dropped = parts[0] + parts[1] + parts[2]
    with pytest.raises(AssertionError, match="dv exceeds"):
        assert_gradients_match(dq, dk, dropped, q, k, v, dout, None, NONE, partial_sums=chunks)
