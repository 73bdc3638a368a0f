"""Float64 references for the numerics criteria (forward and gradients); run on any device, CPU included."""

from __future__ import annotations

import math

import torch

from ._ops import CAUSAL_BOTTOM_RIGHT, CAUSAL_NONE, CAUSAL_TOP_LEFT


def visible_keys(
    seqlen_q: int,
    seqlen_k: int,
    causal_mode: int = CAUSAL_NONE,
    window: tuple[int, int] = (-1, -1),
    device: torch.device | str = "cpu",
) -> torch.Tensor | None:
    """Boolean [Sq, Sk], True where key j is visible to query i; None when every key is.

    offset = 0 for top-left causal alignment, Sk - Sq otherwise (bottom-right, also the window's
    alignment without causal masking, as FlashAttention's window_size); then j is visible iff
    j <= i + offset (causal), i + offset - left <= j (left >= 0) and j <= i + offset + right
    (right >= 0), window = (left, right) with -1 unbounded.
    """
    left, right = window
    assert causal_mode in (CAUSAL_NONE, CAUSAL_TOP_LEFT, CAUSAL_BOTTOM_RIGHT)
    if causal_mode == CAUSAL_NONE and left < 0 and right < 0:
        return None
    offset = 0 if causal_mode == CAUSAL_TOP_LEFT else seqlen_k - seqlen_q
    i = torch.arange(seqlen_q, device=device)[:, None]
    j = torch.arange(seqlen_k, device=device)[None, :]
    visible = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if causal_mode != CAUSAL_NONE:
        visible &= j <= i + offset
    if left >= 0:
        visible &= j >= i + offset - left
    if right >= 0:
        visible &= j <= i + offset + right
    return visible


def capped_scores(s: torch.Tensor, softcap: float) -> torch.Tensor:
    """The scaled scores after the logit softcap: c * tanh(s / c) for c > 0, s itself for c = 0."""
    return s if softcap == 0.0 else softcap * torch.tanh(s / softcap)


def attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None = None,
    causal_mode: int = CAUSAL_NONE,
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B, Sq, Hq, D], k/v [B, Sk, Hk, D] -> (out [B, Sq, Hq, D] float64, lse [B, Hq, Sq] float64).

    Computed in float64. GQA by repeating K/V heads. Rows with no visible key give out 0 and lse -inf.
    window = (left, right): local attention (see `visible_keys`); softcap c > 0: the scaled scores
    x become c * tanh(x / c) before the softmax, and lse is that of the capped scores.
    """
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    qd = q.double().transpose(1, 2)  # [B, Hq, Sq, D]
    kd = k.double().transpose(1, 2).repeat_interleave(hq // hk, dim=1)
    vd = v.double().transpose(1, 2).repeat_interleave(hq // hk, dim=1)
    s = capped_scores(torch.matmul(qd, kd.transpose(-1, -2)) * scale, softcap)
    visible = visible_keys(sq, sk, causal_mode, window, q.device)
    if visible is not None:
        s = s.masked_fill(~visible, float("-inf"))
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
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    *,
    out: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of `attention_reference`'s out with respect to q, k, v for the upstream
    gradient dout [B, Sq, Hq, D] -> (dq [B, Sq, Hq, D], dk [B, Sk, Hk, D], dv [B, Sk, Hk, D]), float64.

    out [B, Sq, Hq, D] and lse [B, Hq, Sq], when given, are the saved forward tensors a flash
    backward reads instead of recomputing them (P = exp(S - lse), Delta from out): under context
    parallelism those of the whole row, merged over the key chunks, while q, k, v are one chunk's.
    By default (None) they are `attention_reference`'s own. An lse of -inf or +inf marks a row that
    sees no key.

    By the explicit formulas (P the softmax probabilities, O the output, per batch and query head):
        dV = P^T dO,  dP = dO V^T,  Delta = rowsum(dO * O),  dS = P * (dP - Delta),
        dQ = scale * dS K,  dK = scale * dS^T Q,
    with dK and dV summed over the query heads of each GQA group. Rows that see no key have P = 0,
    so their dQ is 0 and they add nothing to dK, dV. With a softcap c, dS is that of the capped
    scores times their derivative 1 - tanh^2(x / c) (x the scaled score) before dQ and dK.
    """
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    group = hq // hk
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    if out is None or lse is None:
        ref_out, ref_lse = attention_reference(q, k, v, scale, causal_mode, window, softcap)
        out = ref_out if out is None else out
        lse = ref_lse if lse is None else lse
    out, lse = out.double(), lse.double()
    qd = q.double().transpose(1, 2)  # [B, Hq, Sq, D]
    kd = k.double().transpose(1, 2).repeat_interleave(group, dim=1)  # [B, Hq, Sk, D]
    vd = v.double().transpose(1, 2).repeat_interleave(group, dim=1)
    do = dout.double().transpose(1, 2)  # [B, Hq, Sq, D]
    o = out.transpose(1, 2)
    x = torch.matmul(qd, kd.transpose(-1, -2)) * scale
    s = capped_scores(x, softcap)
    empty = torch.isinf(lse)[..., None]  # rows that see no key
    p = torch.exp(s - lse[..., None].masked_fill(empty, 0.0))
    visible = visible_keys(sq, sk, causal_mode, window, q.device)
    if visible is not None:
        p = p.masked_fill(~visible, 0.0)
    p = p.masked_fill(empty, 0.0)
    dv = torch.matmul(p.transpose(-1, -2), do)  # [B, Hq, Sk, D]
    dp = torch.matmul(do, vd.transpose(-1, -2))
    delta = (do * o).sum(dim=-1, keepdim=True)
    ds = p * (dp - delta)
    if softcap != 0.0:
        ds = ds * (1.0 - torch.tanh(x / softcap) ** 2)
    dq = torch.matmul(ds, kd) * scale
    dk = torch.matmul(ds.transpose(-1, -2), qd) * scale
    dk = dk.view(b, hk, group, sk, d).sum(dim=2)
    dv = dv.view(b, hk, group, sk, d).sum(dim=2)
    return dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)


def attention_reference_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor | list[int],
    cu_seqlens_k: torch.Tensor | list[int],
    scale: float | None = None,
    causal_mode: int = CAUSAL_NONE,
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed variable-length batch: q [total_q, Hq, D], k/v [total_k, Hk, D], cu_seqlens [B + 1]
    -> (out [total_q, Hq, D] float64, lse [Hq, total_q] float64).

    `attention_reference` on each sequence alone (so causal masking and the window are aligned per
    sequence: offset Sk_b - Sq_b, or 0 top-left). A sequence with queries but no keys gives out 0
    and lse -inf. Rows of q past cu_seqlens_q[-1] are 0 in out and NaN in lse (no sequence owns them).
    """
    cq = [int(x) for x in (cu_seqlens_q.tolist() if isinstance(cu_seqlens_q, torch.Tensor) else cu_seqlens_q)]
    ck = [int(x) for x in (cu_seqlens_k.tolist() if isinstance(cu_seqlens_k, torch.Tensor) else cu_seqlens_k)]
    assert len(cq) == len(ck) >= 1
    total_q, hq, d = q.shape
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    out = torch.zeros(total_q, hq, d, dtype=torch.float64, device=q.device)
    lse = torch.full((hq, total_q), float("nan"), dtype=torch.float64, device=q.device)
    for b in range(len(cq) - 1):
        q0, q1, k0, k1 = cq[b], cq[b + 1], ck[b], ck[b + 1]
        if q1 == q0:
            continue
        if k1 == k0:
            lse[:, q0:q1] = float("-inf")
            continue
        o_b, lse_b = attention_reference(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], scale, causal_mode, window,
                                         softcap)
        out[q0:q1] = o_b[0]
        lse[:, q0:q1] = lse_b[0]
    return out, lse


def attention_reference_varlen_grads(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dout: torch.Tensor,
    cu_seqlens_q: torch.Tensor | list[int],
    cu_seqlens_k: torch.Tensor | list[int],
    scale: float | None = None,
    causal_mode: int = CAUSAL_NONE,
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    *,
    out: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of `attention_reference_varlen`'s out for the upstream gradient dout
    [total_q, Hq, D] -> (dq [total_q, Hq, D], dk [total_k, Hk, D], dv [total_k, Hk, D]), float64.

    `attention_reference_grads` on each sequence alone. out [total_q, Hq, D] and lse [Hq, total_q]
    (the varlen layout), when given, are the saved forward tensors read instead of recomputed.
    Rows no sequence owns (past cu_seqlens[-1]) get 0, as do the rows of a sequence that has
    queries but no keys (its out is the constant 0) and the keys of one that has no queries.
    """
    cq = [int(x) for x in (cu_seqlens_q.tolist() if isinstance(cu_seqlens_q, torch.Tensor) else cu_seqlens_q)]
    ck = [int(x) for x in (cu_seqlens_k.tolist() if isinstance(cu_seqlens_k, torch.Tensor) else cu_seqlens_k)]
    assert len(cq) == len(ck) >= 1
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    dq = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
    dk = torch.zeros(k.shape, dtype=torch.float64, device=k.device)
    dv = torch.zeros(v.shape, dtype=torch.float64, device=v.device)
    for b in range(len(cq) - 1):
        q0, q1, k0, k1 = cq[b], cq[b + 1], ck[b], ck[b + 1]
        if q1 == q0 or k1 == k0:
            continue
        saved = {}
        if out is not None:
            saved["out"] = out[None, q0:q1]
        if lse is not None:
            saved["lse"] = lse[None, :, q0:q1]
        dq_b, dk_b, dv_b = attention_reference_grads(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], dout[None, q0:q1],
                                                     scale, causal_mode, window, softcap, **saved)
        dq[q0:q1], dk[k0:k1], dv[k0:k1] = dq_b[0], dk_b[0], dv_b[0]
    return dq, dk, dv
