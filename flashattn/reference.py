"""Float64 references for the numerics criteria (forward and gradients); run on any device, CPU included."""

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


def attention_reference_grads(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dout: torch.Tensor,
    scale: float | None = None,
    causal_mode: int = CAUSAL_NONE,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of `attention_reference`'s out with respect to q, k, v for the upstream
    gradient dout [B, Sq, Hq, D] -> (dq [B, Sq, Hq, D], dk [B, Sk, Hk, D], dv [B, Sk, Hk, D]), float64.

    By the explicit formulas (P the softmax probabilities, O the output, per batch and query head):
        dV = P^T dO,  dP = dO V^T,  Delta = rowsum(dO * O),  dS = P * (dP - Delta),
        dQ = scale * dS K,  dK = scale * dS^T Q,
    with dK and dV summed over the query heads of each GQA group. Rows that see no key have P = 0,
    so their dQ is 0 and they add nothing to dK, dV.
    """
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    group = hq // hk
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    out, lse = attention_reference(q, k, v, scale, causal_mode)
    qd = q.double().transpose(1, 2)  # [B, Hq, Sq, D]
    kd = k.double().transpose(1, 2).repeat_interleave(group, dim=1)  # [B, Hq, Sk, D]
    vd = v.double().transpose(1, 2).repeat_interleave(group, dim=1)
    do = dout.double().transpose(1, 2)  # [B, Hq, Sq, D]
    o = out.transpose(1, 2)
    s = torch.matmul(qd, kd.transpose(-1, -2)) * scale
    empty = torch.isinf(lse)[..., None]  # rows that see no key
    p = torch.exp(s - lse[..., None].masked_fill(empty, 0.0))
    if causal_mode != CAUSAL_NONE:
        offset = 0 if causal_mode == CAUSAL_TOP_LEFT else sk - sq
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        p = p.masked_fill(j > i + offset, 0.0)
    p = p.masked_fill(empty, 0.0)
    dv = torch.matmul(p.transpose(-1, -2), do)  # [B, Hq, Sk, D]
    dp = torch.matmul(do, vd.transpose(-1, -2))
    delta = (do * o).sum(dim=-1, keepdim=True)
    ds = p * (dp - delta)
    dq = torch.matmul(ds, kd) * scale
    dk = torch.matmul(ds.transpose(-1, -2), qd) * scale
    dk = dk.view(b, hk, group, sk, d).sum(dim=2)
    dv = dv.view(b, hk, group, sk, d).sum(dim=2)
    return dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)
