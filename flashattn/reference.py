"""A float64 reference for the numerics criterion; runs on any device, CPU included."""

from __future__ import annotations

import math

import torch

from ._ops import CAUSAL_BOTTOM_RIGHT, CAUSAL_NONE, CAUSAL_TOP_LEFT


def attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None = None,
    causal_mode: int = CAUSAL_NONE,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B, Sq, Hq, D], k/v [B, Sk, Hk, D] -> (out [B, Sq, Hq, D] float64, lse [B, Hq, Sq] float64).

    Computed in float64. GQA by repeating K/V heads. Rows with no visible key give out 0 and lse -inf.
    """
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    qd = q.double().transpose(1, 2)  # [B, Hq, Sq, D]
    kd = k.double().transpose(1, 2).repeat_interleave(hq // hk, dim=1)
    vd = v.double().transpose(1, 2).repeat_interleave(hq // hk, dim=1)
    s = torch.matmul(qd, kd.transpose(-1, -2)) * scale
    if causal_mode != CAUSAL_NONE:
        offset = 0 if causal_mode == CAUSAL_TOP_LEFT else sk - sq
        assert causal_mode in (CAUSAL_TOP_LEFT, CAUSAL_BOTTOM_RIGHT)
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > i + offset, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None].masked_fill(torch.isinf(lse)[..., None], 0.0))
    p = p.masked_fill(torch.isinf(lse)[..., None], 0.0)
    out = torch.matmul(p, vd).transpose(1, 2)
    return out, lse
