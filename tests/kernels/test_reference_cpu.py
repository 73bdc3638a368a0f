"""flashattn.attention_reference, the float64 yardstick of the numerics criterion, checked on CPU
against torch's own SDPA math backend (float64, explicit causal masks, enable_gqa) and against
closed-form cases."""

from __future__ import annotations

import math

import torch
from hypothesis import given

import flashattn
import strategies as fst
from numerics import causal_mask

F64 = torch.float64


def independent_lse(q: torch.Tensor, k: torch.Tensor, scale: float, mode: int) -> torch.Tensor:
    """log sum_j exp(s_ij) over visible keys, by the max-shift formula, [B, Hq, Sq]."""
    group = q.shape[2] // k.shape[2]
    s = torch.einsum("bihd,bjhd->bhij", q, k.repeat_interleave(group, dim=2)) * scale
    mask = causal_mask(q.shape[1], k.shape[1], mode, "cpu")
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    m = s.amax(dim=-1, keepdim=True)
    safe_m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    return (torch.log(torch.exp(s - safe_m).sum(dim=-1)) + safe_m[..., 0]).masked_fill(torch.isinf(m[..., 0]), -math.inf)


@given(problem=fst.float64_problems())
def test_reference_matches_torch_sdpa_math_in_float64(problem) -> None:
    q, k, v, _, scale, mode = problem
    out, lse = flashattn.attention_reference(q, k, v, scale, mode)
    mask = causal_mask(q.shape[1], k.shape[1], mode, "cpu")
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        expected = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, scale=scale,
            enable_gqa=q.shape[2] != k.shape[2],
        ).transpose(1, 2)
    visible = torch.isfinite(lse).transpose(1, 2)  # [B, Sq, Hq]
    assert out.dtype == F64 and lse.dtype == F64
    assert out.shape == q.shape and lse.shape == (q.shape[0], q.shape[2], q.shape[1])
    torch.testing.assert_close(out[visible], expected[visible], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(lse, independent_lse(q, k, scale, mode), rtol=1e-10, atol=1e-10)


def test_rows_that_see_no_key_are_zero_with_lse_minus_inf() -> None:
    q, k, v = torch.randn(1, 10, 2, 8, dtype=F64), torch.randn(1, 3, 2, 8, dtype=F64), torch.randn(1, 3, 2, 8, dtype=F64)
    out, lse = flashattn.attention_reference(q, k, v, 0.5, flashattn.CAUSAL_BOTTOM_RIGHT)
    # bottom-right: query i sees keys j <= i + Sk - Sq = i - 7, so rows 0..6 see nothing
    assert torch.equal(out[:, :7], torch.zeros_like(out[:, :7]))
    assert torch.isneginf(lse[:, :, :7]).all()
    assert torch.isfinite(lse[:, :, 7:]).all() and torch.isfinite(out).all()


def test_top_left_alignment_always_shows_key_zero() -> None:
    q, k, v = (torch.randn(1, s, 1, 8, dtype=F64) for s in (10, 3, 3))
    out, lse = flashattn.attention_reference(q, k, v, 0.5, flashattn.CAUSAL_TOP_LEFT)
    assert torch.isfinite(lse).all()
    torch.testing.assert_close(out[0, 0, 0], v[0, 0, 0], rtol=0, atol=1e-15)  # row 0 sees key 0 only


def test_single_visible_key_returns_its_value_and_its_score() -> None:
    q, k, v = (torch.randn(2, 1, 3, 16, dtype=F64) for _ in range(3))
    out, lse = flashattn.attention_reference(q, k, v, 0.25, flashattn.CAUSAL_NONE)
    torch.testing.assert_close(out, v, rtol=0, atol=1e-15)
    torch.testing.assert_close(lse, (q * k).sum(-1).transpose(1, 2) * 0.25, rtol=1e-14, atol=1e-14)


def test_scale_zero_averages_the_visible_values() -> None:
    q, k, v = torch.randn(1, 4, 1, 8, dtype=F64), torch.randn(1, 6, 1, 8, dtype=F64), torch.randn(1, 6, 1, 8, dtype=F64)
    out, lse = flashattn.attention_reference(q, k, v, 0.0, flashattn.CAUSAL_BOTTOM_RIGHT)
    for i in range(4):
        seen = i + 6 - 4 + 1  # keys 0..i+2
        torch.testing.assert_close(out[0, i, 0], v[0, :seen, 0].mean(0), rtol=1e-14, atol=1e-14)
        assert math.isclose(float(lse[0, 0, i]), math.log(seen), rel_tol=1e-14)


def test_gqa_maps_query_head_to_key_head_by_integer_division() -> None:
    q = torch.randn(1, 5, 6, 8, dtype=F64)
    k, v = torch.randn(1, 7, 2, 8, dtype=F64), torch.randn(1, 7, 2, 8, dtype=F64)
    out, _ = flashattn.attention_reference(q, k, v, 0.3, flashattn.CAUSAL_NONE)
    for h in range(6):
        one, _ = flashattn.attention_reference(q[:, :, h : h + 1], k[:, :, h // 3 : h // 3 + 1], v[:, :, h // 3 : h // 3 + 1], 0.3)
        torch.testing.assert_close(out[:, :, h : h + 1], one, rtol=0, atol=0)


def test_low_precision_inputs_are_computed_in_float64() -> None:
    q = torch.randn(1, 9, 2, 32).to(torch.bfloat16)
    out, lse = flashattn.attention_reference(q, q, q, None, flashattn.CAUSAL_TOP_LEFT)
    expected, expected_lse = flashattn.attention_reference(q.double(), q.double(), q.double(), 1 / math.sqrt(32), 1)
    assert out.dtype == F64 and lse.dtype == F64
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    torch.testing.assert_close(lse, expected_lse, rtol=0, atol=0)
