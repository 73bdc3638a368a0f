"""The numerics criterion (tests/numerics.py) itself, on CPU: it accepts what a correct kernel
produces and rejects deliberately wrong outputs, so a pass on the GPU means something."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from hypothesis import given

import flashattn
import strategies as fst
from numerics import assert_attention_matches, causal_mask, resolve_scale, sdpa_same_dtype

F16, BF16 = torch.float16, torch.bfloat16
NONE, TOP_LEFT, BOTTOM_RIGHT = flashattn.CAUSAL_NONE, flashattn.CAUSAL_TOP_LEFT, flashattn.CAUSAL_BOTTOM_RIGHT

# Small enough for CPU half-precision matmuls: the criterion runs SDPA and the float64 reference.
cpu_specs = fst.attention_specs(max_batch=2, max_seqlen=80, max_heads_q=4)


def masked_attention(q, k, v, scale: float, visible: torch.Tensor | None, *, round_p: bool = False):
    """Attention over [B, S, H, D] inputs with an arbitrary [Sq, Sk] visibility mask, as a flash
    kernel computes it: float32 scores and sums, P rounded to the input dtype when `round_p`.
    Rows with no visible key give 0 and lse -inf. -> (out in q.dtype, lse float32 [B, Hq, Sq])."""
    group = q.shape[2] // k.shape[2]
    kf = k.float().repeat_interleave(group, dim=2)
    vf = v.float().repeat_interleave(group, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q.float(), kf) * scale
    if visible is not None:
        s = s.masked_fill(~visible, -math.inf)
    m = s.amax(dim=-1, keepdim=True)
    empty = torch.isinf(m) & (m < 0)
    p = torch.exp(s - torch.where(empty, torch.zeros_like(m), m))
    l = p.sum(dim=-1, keepdim=True)
    if round_p:
        p = p.to(q.dtype).float()
    o = torch.einsum("bhij,bjhd->bihd", p, vf) / torch.where(empty, torch.ones_like(l), l).transpose(1, 2)
    lse = (torch.log(l) + m)[..., 0].masked_fill(empty[..., 0], -math.inf)
    return o.to(q.dtype), lse


def flash_emulation(q, k, v, scale: float, mode: int):
    """What a correct flash-style kernel returns (P rounded to the input dtype before P V)."""
    return masked_attention(q, k, v, scale, causal_mask(q.shape[1], k.shape[1], mode, q.device), round_p=True)


# ---- accepts correct outputs --------------------------------------------------------------------


@given(spec=cpu_specs)
def test_accepts_sdpa_itself(spec: fst.AttentionSpec) -> None:
    x = spec.make("cpu")
    out = sdpa_same_dtype(x.q, x.k, x.v, x.scale, x.causal_mode)
    _, ref_lse = flashattn.attention_reference(x.q, x.k, x.v, resolve_scale(x.scale, spec.head_dim), x.causal_mode)
    # SDPA's rows that see no key may be NaN or 0; a kernel must give exactly 0 there.
    out = out.masked_fill(torch.isneginf(ref_lse).transpose(1, 2)[..., None], 0.0)
    assert_attention_matches(out, ref_lse.float(), x.q, x.k, x.v, x.scale, x.causal_mode)


@given(spec=cpu_specs)
def test_accepts_a_correct_flash_style_computation(spec: fst.AttentionSpec) -> None:
    x = spec.make("cpu")
    out, lse = flash_emulation(x.q, x.k, x.v, resolve_scale(x.scale, spec.head_dim), x.causal_mode)
    assert_attention_matches(out, lse, x.q, x.k, x.v, x.scale, x.causal_mode)


@given(spec=cpu_specs)
def test_accepts_the_correctly_rounded_reference(spec: fst.AttentionSpec) -> None:
    x = spec.make("cpu")
    ref, ref_lse = flashattn.attention_reference(x.q, x.k, x.v, resolve_scale(x.scale, spec.head_dim), x.causal_mode)
    assert_attention_matches(ref.to(spec.dtype), ref_lse.float(), x.q, x.k, x.v, x.scale, x.causal_mode)


def test_reports_what_it_measured() -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 40, 2, 64, generator=gen).to(F16) for _ in range(3))
    out, lse = flash_emulation(q, k, v, 0.125, BOTTOM_RIGHT)
    errors = assert_attention_matches(out, lse, q, k, v, 0.125, BOTTOM_RIGHT)
    assert 0 < errors.out_err <= errors.bound == 2 * errors.sdpa_err + 1e-5
    assert errors.visible_rows == 80 and errors.empty_rows == 0


# ---- rejects wrong outputs ----------------------------------------------------------------------

Wrong = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float, int], tuple[torch.Tensor, torch.Tensor]]


def correct(q, k, v, scale, mode):
    return flash_emulation(q, k, v, scale, mode)


def perturbed_element(q, k, v, scale, mode):
    """One element off by 10 units of roundoff of the dtype (1e-2 in fp16, 8e-2 in bf16)."""
    out, lse = correct(q, k, v, scale, mode)
    out[0, 5, 1, 3] += 10 * torch.finfo(q.dtype).eps
    return out, lse


def nan_element(q, k, v, scale, mode):
    out, lse = correct(q, k, v, scale, mode)
    out[1, 2, 0, 7] = math.nan
    return out, lse


def scale_off_by_5_percent(q, k, v, scale, mode):
    return flash_emulation(q, k, v, scale * 1.05, mode)


def default_scale_ignored(q, k, v, scale, mode):
    return flash_emulation(q, k, v, 1.0, mode)


def _shifted_mask(q, k, mode, shift: int) -> torch.Tensor:
    sq, sk = q.shape[1], k.shape[1]
    offset = 0 if mode == TOP_LEFT else sk - sq
    i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
    return j <= i + offset + shift


def causal_diagonal_hidden(q, k, v, scale, mode):
    return masked_attention(q, k, v, scale, _shifted_mask(q, k, mode, -1), round_p=True)


def causal_one_key_too_many(q, k, v, scale, mode):
    return masked_attention(q, k, v, scale, _shifted_mask(q, k, mode, +1), round_p=True)


def wrong_alignment(q, k, v, scale, mode):
    return flash_emulation(q, k, v, scale, TOP_LEFT if mode == BOTTOM_RIGHT else BOTTOM_RIGHT)


def gqa_heads_interleaved(q, k, v, scale, mode):
    """Query head h reads K/V head h % Hk instead of h // (Hq / Hk)."""
    group = q.shape[2] // k.shape[2]
    order = torch.arange(q.shape[2]).reshape(group, -1).T.reshape(-1)  # h // g <-> h % Hk relabeling
    out, lse = flash_emulation(q[:, :, order], k, v, scale, mode)
    inverse = torch.argsort(order)
    return out[:, :, inverse].contiguous(), lse[:, inverse].contiguous()


def empty_rows_not_zero(q, k, v, scale, mode):
    out, lse = correct(q, k, v, scale, mode)
    empty = torch.isneginf(lse).transpose(1, 2)
    return out.masked_fill(empty[..., None], 1e-6), lse


def empty_rows_nan(q, k, v, scale, mode):
    """What a plain softmax gives for rows that see no key."""
    out, lse = correct(q, k, v, scale, mode)
    empty = torch.isneginf(lse).transpose(1, 2)
    return out.masked_fill(empty[..., None], math.nan), lse


def empty_rows_lse_finite(q, k, v, scale, mode):
    out, lse = correct(q, k, v, scale, mode)
    return out, lse.masked_fill(torch.isneginf(lse), 0.0)


def lse_off_by_1e_3(q, k, v, scale, mode):
    out, lse = correct(q, k, v, scale, mode)
    return out, lse + 1e-3


def lse_in_log2_units(q, k, v, scale, mode):
    out, lse = correct(q, k, v, scale, mode)
    return out, lse / math.log(2)


def out_in_bhsd_layout(q, k, v, scale, mode):
    out, lse = correct(q, k, v, scale, mode)
    return out.transpose(1, 2).contiguous(), lse


def out_in_float32(q, k, v, scale, mode):
    out, lse = correct(q, k, v, scale, mode)
    return out.float(), lse


WRONG_OUTPUTS: list[tuple[Wrong, str, str]] = [
    # (wrong computation, part of the message expected, causal alignment of the case)
    (perturbed_element, "exceeds 2 *", "none"),
    (nan_element, "NaN/inf", "none"),
    (scale_off_by_5_percent, "lse differs", "none"),
    (default_scale_ignored, "exceeds 2 *", "none"),
    (causal_diagonal_hidden, "exceeds 2 *", "top-left"),
    (causal_diagonal_hidden, "exceeds 2 *", "bottom-right"),
    (causal_one_key_too_many, "exceeds 2 *", "top-left"),
    (causal_one_key_too_many, "exceeds 2 *", "bottom-right"),
    (wrong_alignment, "exceeds 2 *", "bottom-right"),
    (gqa_heads_interleaved, "exceeds 2 *", "none"),
    (empty_rows_not_zero, "rows that see no key are not 0", "bottom-right"),
    (empty_rows_nan, "NaN/inf", "bottom-right"),
    (empty_rows_lse_finite, "is not -inf", "bottom-right"),
    (lse_off_by_1e_3, "lse differs", "none"),
    (lse_in_log2_units, "lse differs", "none"),
    (out_in_bhsd_layout, "out shape", "none"),
    (out_in_float32, "out dtype", "none"),
]
MODES = {"none": NONE, "top-left": TOP_LEFT, "bottom-right": BOTTOM_RIGHT}


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["fp16", "bf16"])
@pytest.mark.parametrize(
    ("wrong", "message", "alignment"),
    [pytest.param(*row, id=f"{row[0].__name__}-{row[2]}") for row in WRONG_OUTPUTS],
)
def test_rejects_wrong_output(wrong: Wrong, message: str, alignment: str, dtype: torch.dtype) -> None:
    # Sq > Sk, so that bottom-right alignment leaves rows 0..Sq-Sk-1 with no key to see.
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(2, 48, 4, 64, generator=gen).to(dtype)
    k, v = (torch.randn(2, 40, 2, 64, generator=gen).to(dtype) for _ in range(2))
    mode = MODES[alignment]
    out, lse = wrong(q, k, v, 0.125, mode)
    with pytest.raises(AssertionError, match=message) as info:
        assert_attention_matches(out, lse, q, k, v, 0.125, mode)
    assert "q [2, 48, 4, 64]" in str(info.value) and "k [2, 40, 2, 64]" in str(info.value)


def test_correct_output_of_the_rejection_case_passes() -> None:
    """The control for test_rejects_wrong_output: the uncorrupted computation is accepted."""
    gen = torch.Generator().manual_seed(1)
    for dtype in (F16, BF16):
        q = torch.randn(2, 48, 4, 64, generator=gen).to(dtype)
        k, v = (torch.randn(2, 40, 2, 64, generator=gen).to(dtype) for _ in range(2))
        for mode in MODES.values():
            out, lse = correct(q, k, v, 0.125, mode)
            assert_attention_matches(out, lse, q, k, v, 0.125, mode)


def test_failure_message_names_shapes_strides_and_the_worst_element() -> None:
    q = torch.randn(1, 8, 2, 16).to(F16).transpose(1, 2).contiguous().transpose(1, 2)
    k = v = torch.randn(1, 8, 2, 16).to(F16)
    out, lse = correct(q, k, v, 0.25, NONE)
    out[0, 3, 1, 2] += 0.5
    with pytest.raises(AssertionError) as info:
        assert_attention_matches(out, lse, q, k, v, 0.25, NONE, context="case 7")
    text = str(info.value)
    assert text.startswith("case 7: q [1, 8, 2, 16] strides [256, 16, 128, 1]")
    assert "float16, scale 0.25, causal none" in text
    assert "worst at [b, i, h, d] = (0, 3, 1, 2)" in text
