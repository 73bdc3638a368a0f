"""The numerics criteria of the suite (one for outputs, one for gradients), and the same-dtype SDPA
baseline both are measured against.

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
and stays within 2x the same-dtype baseline in all (worst 0.75). tests/kernels/test_criterion_cpu.py
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

Local attention and softcap (`window`, `softcap` arguments of the forward criterion): the reference
applies both (flashattn.attention_reference). The baseline:
  * window without softcap: SDPA's math backend in the input dtype, as above, with the window as a
    boolean attn_mask (the same mask the reference uses, `causal_mask(..., window=)`);
  * softcap: SDPA cannot express it, so the baseline is the math backend's own computation
    written out in the input dtype with the softcap inserted where it belongs: S = Q K^T in the
    input dtype (a float32-accumulating matmul rounded to the dtype, as SDPA math's), the capped
    scores c * tanh(S * scale / c) computed in float32 from those and rounded to the dtype (what an
    elementwise op on fp16/bf16 tensors does), the boolean mask, softmax in the dtype, P V in the
    dtype (`softcap_math_same_dtype`). Its error includes the rounding of the scores, like SDPA's.
  * the kernels compute tanh with the GPU's tanh.approx.f32, whose relative error the PTX ISA
    gives as about 2^-11 (2^-10.987): each capped logit c tanh(x / c) may be off by up to
    TANH_REL * |c tanh(x / c)|, TANH_REL = 2^-10 (twice that, for margin). That error is systematic
    rather than a rounding the baseline shares, so the criterion allows for it explicitly, per row
    i with delta_i = TANH_REL * max_j |capped logit_ij| over visible keys j: a logit perturbation
    of at most delta_i changes each probability by a factor within exp(+-2 delta_i), hence
        |out_id - ref_id| <= 2 * max |sdpa - ref| + ATOL + (exp(2 delta_i) - 1) * (P |V|)_id
    elementwise, and |lse_i - ref_lse_i| <= LSE_ATOL + LSE_RTOL * |ref_lse_i| + delta_i. Without a
    softcap both allowances are 0 and the criterion is exactly the one above.

Gradient criterion (`assert_gradients_match`), for dq, dk, dv of one backward with upstream dout:
  * shapes (q's, k's, v's), dtype (the input dtype) and device are right;
  * no NaN or inf anywhere;
  * the dq rows of query rows that see no key are exactly 0;
  * for each gradient g of dq, dk, dv:
        max |g - ref| <= 2 * max |g_sdpa - ref| + GRAD_ATOL * max(terms(g))
    where ref is `flashattn.attention_reference_grads` (float64, the explicit formulas), g_sdpa the
    gradient of torch's SDPA math backend in the input dtype (`sdpa_same_dtype_grads`, the same
    same-dtype baseline as the forward's, for the same reason), GQA through K/V heads repeated for
    SDPA and their dK/dV summed back over each group in float64, and terms(g) the sum of the
    absolute values of the terms that make up each element (`gradient_term_sums`: |P|^T |dO| for
    dV; |scale| (P * (|dO| |V|^T + rowsum|dO * O|)) |K| for dQ, the same transposed with |Q| for dK).

Why an atol, and why relative to the terms: SDPA's gradient error can be exactly 0 where a
correct flash backward's is not. With one dominant key per row (large logits, Sk = 1) the exact
dS = P * (dP - rowsum(dO * O)) is 0; SDPA's softmax backward forms it as P * (dP - sum(P * dP))
and cancels exactly, while a flash kernel (FlashAttention-2 and ours) takes rowsum(dO * O) from
the stored output, so dP - rowsum(dO * O) is the float32 rounding noise of two dot products of
length D, ~1e-7 of sum |dO| |V|, which dQ and dK then multiply by |scale| |K| and |scale| |Q|.
A float32 sum is accurate to a few units of 2^-24 (6e-8) of the sum of its terms' magnitudes,
so GRAD_ATOL = 1e-5 (~170 units, for the two dot products and the accumulations over D and S)
of that is the honest allowance. It is not an allowance relative to the result: where terms do
not cancel it is ~1e-5 of the gradient itself, 40x below one bfloat16 ulp (3.9e-3 relative) and
50x below one float16 ulp (4.9e-4); a wrong mask, scale, GQA mapping or a dropped block moves
gradients by far more. Simulated on CPU (tests/kernels/test_gradient_criterion_cpu.py keeps the simulation as a
property test), a FlashAttention-2-style backward (float32 accumulation, P and dS rounded to the
input dtype before their matmuls) passes this criterion, and fails it without the atol.

Gradients with local attention and softcap (`window`, `softcap` arguments of the gradient
criterion): the reference differentiates both (flashattn.attention_reference_grads), and the
baseline is the forward's, differentiated by autograd in the input dtype: SDPA's math backend with
the window as a boolean mask, or, with a softcap, `softcap_math_same_dtype` (whose tanh backward
runs on the rounded scores like every other elementwise op of the math path). Rows that see no key
(anywhere in the sequence with a window, not only a prefix) get dq = 0 in the baseline and add
nothing to its dk, dv (they are given a dummy visible key and a zero upstream gradient, which in
exact arithmetic contributes 0). The allowances grow by the softcap's derivative 1 - t^2 (t =
tanh(x / c)) on the terms of dS, and by the approximate tanh (TANH_REL, as in the forward): each
capped logit off by up to delta_i changes P by a factor within exp(+-2 delta_i) (eps_i =
exp(2 delta_i) - 1), O and so rowsum(dO * O) by up to eps_i rowsum(|dO| (P |V|)), and 1 - t^2 by
up to 2.1 TANH_REL t^2, so each dS element may move by
    P (eps_i (|dO| |V|^T + 2 rowsum(|dO| (P |V|))) (1 - t^2) + 2.1 TANH_REL t^2 (|dO| |V|^T + rowsum(|dO| (P |V|))))
which dQ and dK carry through |scale| |K| and |scale| |Q|, and dV moves by eps_i P^T |dO|. Without
a window and a softcap the criterion is exactly the one above.
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
from flashattn.reference import capped_scores, visible_keys

ATOL = 1e-5
GRAD_ATOL = 1e-5
LSE_ATOL = 1e-4
LSE_RTOL = 1e-5
TANH_REL = 2.0**-10  # tanh.approx.f32's relative error (~2^-11, PTX ISA) with a 2x margin
CAUSAL_NAMES = {flashattn.CAUSAL_NONE: "none", flashattn.CAUSAL_TOP_LEFT: "top-left", flashattn.CAUSAL_BOTTOM_RIGHT: "bottom-right"}


def resolve_scale(scale: float | None, head_dim: int) -> float:
    """The softmax scale a call uses: `scale`, or 1/sqrt(D) when None."""
    return 1.0 / math.sqrt(head_dim) if scale is None else float(scale)


def causal_mask(
    seqlen_q: int, seqlen_k: int, causal_mode: int, device: torch.device | str, window: tuple[int, int] = (-1, -1)
) -> torch.Tensor | None:
    """Boolean [Sq, Sk] mask, True where key j is visible to query i (causal alignment and local
    window, flashattn.reference.visible_keys); None when every key is visible."""
    return visible_keys(seqlen_q, seqlen_k, causal_mode, window, device)


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


def with_dummy_key(mask: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The [Sq, Sk] visibility `mask` with key 0 made visible to the rows that see no key, and
    those rows ([Sq] bool; None without a mask). A same-dtype baseline's results for them are then
    finite, and the caller leaves them out. Fully masked, their softmax is NaN, and the CPU's
    16-bit P V GEMM (torch 2.13) carried that NaN into a neighbouring visible row (2026-11-30:
    Sq=31, Sk=5, top-left causal, window (0, 0), bf16: row 4 NaN)."""
    if mask is None:
        return None, None
    empty = ~mask.any(dim=-1)
    mask = mask.clone()
    mask[empty, 0] = True
    return mask, empty


def sdpa_same_dtype(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None,
    causal_mode: int,
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
) -> torch.Tensor:
    """torch SDPA (math backend, input dtype) on [B, S, H, D] inputs -> [B, Sq, Hq, D].

    Causal alignments and the local window through an explicit boolean mask, GQA by
    repeat_interleave of K/V heads. With a softcap, `softcap_math_same_dtype` (module docstring).
    Rows that see no key get a dummy key (`with_dummy_key`): their output is meaningless (callers
    exclude those rows), but finite.
    """
    hq, hk = q.shape[2], k.shape[2]
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    if hq != hk:
        kt = kt.repeat_interleave(hq // hk, dim=1)
        vt = vt.repeat_interleave(hq // hk, dim=1)
    mask, _ = with_dummy_key(causal_mask(q.shape[1], k.shape[1], causal_mode, q.device, window))
    if softcap != 0.0:
        out = softcap_math_same_dtype(qt, kt, vt, resolve_scale(scale, q.shape[-1]), mask, softcap)
    else:
        with same_dtype_math_sdpa():
            out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=resolve_scale(scale, q.shape[-1]))
    return out.transpose(1, 2)


def softcap_math_same_dtype(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, mask: torch.Tensor | None, softcap: float
) -> torch.Tensor:
    """SDPA math's computation in the input dtype with the logit softcap inserted (module
    docstring), [B, H, S, D] inputs -> [B, Hq, Sq, D]: S = Q K^T rounded to the dtype, the capped
    scaled scores computed in float32 from S and rounded to the dtype, masked, softmax and P V in
    the dtype."""
    s = torch.matmul(q, k.transpose(-1, -2))
    s = capped_scores(s.float() * scale, softcap).to(q.dtype)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.matmul(p, v)


def describe_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None,
    causal_mode: int,
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
) -> str:
    """One line naming shapes, strides, dtype, scale, causal alignment, window and softcap, for
    failure messages."""

    def t(name: str, x: torch.Tensor) -> str:
        return f"{name} {list(x.shape)} strides {list(x.stride())}"

    dtype = str(q.dtype).replace("torch.", "")
    return (
        f"{t('q', q)}, {t('k', k)}, {t('v', v)}, {dtype}, scale {resolve_scale(scale, q.shape[-1]):.6g}"
        f"{' (default)' if scale is None else ''}, causal {CAUSAL_NAMES.get(causal_mode, causal_mode)}"
        + (f", window {tuple(window)}" if tuple(window) != (-1, -1) else "")
        + (f", softcap {softcap:g}" if softcap else "")
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
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    context: str = "",
) -> AttentionErrors:
    """Assert the numerics criterion (module docstring) for out [B, Sq, Hq, D] and lse
    [B, Hq, Sq] (None: out only) computed from q [B, Sq, Hq, D], k/v [B, Sk, Hk, D], with the
    call's local window (left, right) and logit softcap.

    Raises AssertionError listing every violated part, with the inputs' shapes and strides.
    """
    window = tuple(window)

    def fail(problems: list[str]) -> None:
        _fail(problems, q, k, v, scale, causal_mode, context, window, softcap)

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
        fail(problems)

    sc = resolve_scale(scale, d)
    ref, ref_lse = flashattn.attention_reference(q, k, v, sc, causal_mode, window, softcap)
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
        out_allow, lse_allow = softcap_allowances(q, k, v, sc, causal_mode, window, softcap)
        excess = (diff - out_allow).masked_fill(~visible_rows[..., None], -math.inf)
        out_err = float(diff[visible_rows].max())
        baseline = sdpa_same_dtype(q, k, v, sc, causal_mode, window, softcap)
        sdpa_err = float((baseline.double() - ref).abs()[visible_rows].max())
        if not math.isfinite(sdpa_err):
            problems.append(f"the SDPA same-dtype baseline is not finite on visible rows (err {sdpa_err}): harness problem")
        bound = 2.0 * sdpa_err + ATOL
        worst = float(excess.nan_to_num(nan=math.inf).max())
        if not worst <= bound:  # NaN fails too
            where = _unravel(int(excess.nan_to_num(nan=math.inf).argmax()), diff.shape)
            allow = f" beyond its tanh allowance {float(out_allow[where]):.4g}" if softcap else ""
            problems.append(
                f"max |out - ref| = {out_err:.4g}{' (elementwise' + allow + ')' if softcap else ''} exceeds 2 * "
                f"{sdpa_err:.4g} (SDPA same-dtype error) + {ATOL:g} = {bound:.4g}; worst at [b, i, h, d] = {where}: "
                f"out {float(out[where]):.6g}, ref {float(ref[where]):.6g}"
            )
        if lse is not None:
            lse_visible = lse.double()[visible]
            ref_visible = ref_lse[visible]
            lse_diff = (lse_visible - ref_visible).abs()
            lse_err = float(lse_diff.max())
            allowed = LSE_ATOL + LSE_RTOL * ref_visible.abs() + lse_allow[visible]
            bad = int((~(lse_diff <= allowed)).sum())
            if bad:
                problems.append(
                    f"lse differs from the reference on {bad} of {n_visible} rows beyond {LSE_ATOL:g} + "
                    f"{LSE_RTOL:g} * |ref| (max |lse - ref| = {lse_err:.4g})"
                )
    if problems:
        fail(problems)
    return AttentionErrors(out_err, sdpa_err, bound, lse_err, n_visible, n_empty)


def _unravel(index: int, shape: torch.Size) -> tuple[int, ...]:
    out = []
    for size in reversed(shape):
        out.append(index % size)
        index //= size
    return tuple(reversed(out))


def _fail(problems: list[str], q, k, v, scale, causal_mode, context: str, window=(-1, -1), softcap: float = 0.0) -> None:
    head = f"{context}: " if context else ""
    raise AssertionError(
        f"{head}{describe_inputs(q, k, v, scale, causal_mode, window, softcap)}\n  - " + "\n  - ".join(problems)
    )


def softcap_allowances(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    causal_mode: int,
    window: tuple[int, int],
    softcap: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The criterion's allowances for the kernels' approximate tanh (module docstring): per element
    of out (float64 [B, Sq, Hq, D]) (exp(2 delta_i) - 1) * (P |V|)_id, and per row of lse (float64
    [B, Hq, Sq]) delta_i = TANH_REL * max_j |capped logit_ij| over visible keys. Zeros without a
    softcap."""
    b, sq, hq, d = q.shape
    if softcap == 0.0:
        return torch.zeros(q.shape, dtype=torch.float64, device=q.device), torch.zeros(
            b, hq, sq, dtype=torch.float64, device=q.device)
    sk, hk = k.shape[1], k.shape[2]
    qd = q.double().transpose(1, 2)
    kd = k.double().transpose(1, 2).repeat_interleave(hq // hk, dim=1)
    va = v.double().abs().transpose(1, 2).repeat_interleave(hq // hk, dim=1)
    s = capped_scores(torch.matmul(qd, kd.transpose(-1, -2)) * scale, softcap)
    visible = visible_keys(sq, sk, causal_mode, window, q.device)
    if visible is not None:
        s = s.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    empty = torch.isinf(lse)
    p = torch.exp(s - lse.masked_fill(empty, 0.0)).masked_fill(empty, 0.0)
    magnitude = s.abs().masked_fill(torch.isinf(s), 0.0).amax(dim=-1)  # [B, Hq, Sq]
    delta = TANH_REL * magnitude
    out_allow = torch.expm1(2.0 * delta)[..., None] * torch.matmul(p, va)  # [B, Hq, Sq, D]
    return out_allow.transpose(1, 2), delta


# ---- gradients ------------------------------------------------------------------------------------


def empty_query_rows(seqlen_q: int, seqlen_k: int, causal_mode: int) -> int:
    """How many leading query rows see no key: Sq - Sk under bottom-right causal with Sq > Sk
    (those rows are always a prefix), else 0 (Sk >= 1)."""
    if causal_mode == flashattn.CAUSAL_BOTTOM_RIGHT:
        return max(0, seqlen_q - seqlen_k)
    return 0


def emulated_tanh(x: torch.Tensor, rel: float = 0.0, seed: int = 0) -> torch.Tensor:
    """tanh(x), off by a relative error of +-rel with a random sign per element (seeded): the
    test emulations' stand-in for the kernels' tanh.approx.f32 (rel 2^-11)."""
    t = torch.tanh(x)
    if rel:
        gen = torch.Generator().manual_seed(seed)
        t = t * (1.0 + rel * (2.0 * torch.randint(0, 2, t.shape, generator=gen) - 1.0))
    return t


def sdpa_same_dtype_grads(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dout: torch.Tensor,
    scale: float | None,
    causal_mode: int,
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of torch SDPA (math backend, input dtype) on [B, S, H, D] inputs for upstream
    dout -> (dq, dk, dv) in the input dtype, shaped like q, k, v.

    GQA: SDPA sees K/V heads repeated (leaf tensors), and their gradients are summed back over
    each query-head group in float64, then rounded once to the input dtype (as a kernel's output
    is: a baseline without that last rounding would be more exact than any kernel can be). Query rows that see no key (a prefix, see
    empty_query_rows) are left out of the SDPA call (SDPA gives them 0 or NaN depending on the
    torch version) and get dq = 0: in exact arithmetic they contribute nothing to dk, dv.
    """
    if tuple(window) != (-1, -1) or softcap != 0.0:
        return _same_dtype_grads_windowed(q, k, v, dout, scale, causal_mode, tuple(window), softcap)
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    group = hq // hk
    skip = empty_query_rows(sq, sk, causal_mode)
    dq = torch.zeros_like(q, memory_format=torch.contiguous_format)
    if skip == sq:
        return dq, torch.zeros(k.shape, dtype=k.dtype, device=k.device), torch.zeros(v.shape, dtype=v.dtype, device=v.device)
    qt = q[:, skip:].transpose(1, 2).detach().requires_grad_(True)
    kt = k.transpose(1, 2).repeat_interleave(group, dim=1).detach().requires_grad_(True)
    vt = v.transpose(1, 2).repeat_interleave(group, dim=1).detach().requires_grad_(True)
    mask = causal_mask(sq - skip, sk, causal_mode, q.device)
    with torch.enable_grad(), same_dtype_math_sdpa():
        out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=resolve_scale(scale, d))
        gq, gk, gv = torch.autograd.grad(out, (qt, kt, vt), dout[:, skip:].transpose(1, 2))
    dq[:, skip:] = gq.transpose(1, 2)

    def fold(g: torch.Tensor) -> torch.Tensor:  # [B, Hq, Sk, D] -> [B, Sk, Hk, D], rounded like a kernel's output
        return g.double().view(b, hk, group, sk, d).sum(dim=2).transpose(1, 2).to(g.dtype)

    return dq, fold(gk), fold(gv)


def _same_dtype_grads_windowed(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dout: torch.Tensor,
    scale: float | None,
    causal_mode: int,
    window: tuple[int, int],
    softcap: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """sdpa_same_dtype_grads with a window and/or softcap (module docstring): the forward's
    baseline differentiated by autograd in the input dtype; rows that see no key get a dummy
    visible key and a zero upstream gradient, and dq = 0."""
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    group = hq // hk
    sc = resolve_scale(scale, d)
    mask, empty = with_dummy_key(causal_mask(sq, sk, causal_mode, q.device, window))
    qt = q.transpose(1, 2).detach().requires_grad_(True)
    kt = k.transpose(1, 2).repeat_interleave(group, dim=1).detach().requires_grad_(True)
    vt = v.transpose(1, 2).repeat_interleave(group, dim=1).detach().requires_grad_(True)
    do = dout.transpose(1, 2)
    if empty is not None:
        do = do.masked_fill(empty[:, None], 0.0)
    with torch.enable_grad():
        if softcap != 0.0:
            out = softcap_math_same_dtype(qt, kt, vt, sc, mask, softcap)
        else:
            with same_dtype_math_sdpa():
                out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=sc)
        gq, gk, gv = torch.autograd.grad(out, (qt, kt, vt), do)
    dq = gq.transpose(1, 2)
    if empty is not None:
        dq = dq.masked_fill(empty[:, None, None], 0.0)

    def fold(g: torch.Tensor) -> torch.Tensor:  # [B, Hq, Sk, D] -> [B, Sk, Hk, D], rounded like a kernel's output
        return g.double().view(b, hk, group, sk, d).sum(dim=2).transpose(1, 2).to(g.dtype)

    return dq, fold(gk), fold(gv)


def gradient_allowances(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dout: torch.Tensor,
    scale: float,
    causal_mode: int,
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For each element of dq, dk, dv (float64, shaped like q, k, v), the criterion's allowance
    beyond 2x SDPA's error: GRAD_ATOL times the sum of the absolute values of the terms the
    formulas add up to it (float32 rounding noise), plus, for dq and dk, the effect of the stored
    output's rounding to the input dtype on rowsum(dO * O), plus, with a softcap, the approximate
    tanh's (module docstring)."""
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    group = hq // hk
    out, lse = flashattn.attention_reference(q, k, v, scale, causal_mode, window, softcap)
    qa = q.double().abs().transpose(1, 2)
    ka = k.double().abs().transpose(1, 2).repeat_interleave(group, dim=1)
    va = v.double().abs().transpose(1, 2).repeat_interleave(group, dim=1)
    qd = q.double().transpose(1, 2)
    kd = k.double().transpose(1, 2).repeat_interleave(group, dim=1)
    doa = dout.double().abs().transpose(1, 2)
    empty = torch.isinf(lse)[..., None]
    x = torch.matmul(qd, kd.transpose(-1, -2)) * scale
    s = capped_scores(x, softcap)
    p = torch.exp(s - lse[..., None].masked_fill(empty, 0.0))
    visible = causal_mask(sq, sk, causal_mode, q.device, window)
    if visible is not None:
        p = p.masked_fill(~visible, 0.0)
    p = p.masked_fill(empty, 0.0)
    delta_terms = (doa * out.abs().transpose(1, 2)).sum(-1, keepdim=True)  # rowsum |dO * O|
    dp_terms = torch.matmul(doa, va.transpose(-1, -2))  # |dO| |V|^T
    ds_terms = p * (dp_terms + delta_terms)
    unit = torch.finfo(q.dtype).eps / 2 if q.dtype in (torch.float16, torch.bfloat16) else 0.0
    ds_terms = ds_terms * GRAD_ATOL + p * delta_terms * unit
    dv_terms = torch.matmul(p.transpose(-1, -2), doa) * GRAD_ATOL
    if softcap != 0.0:
        t2 = torch.tanh(x / softcap) ** 2
        ds_terms = ds_terms * (1.0 - t2)
        magnitude = s.abs().masked_fill(p == 0, 0.0).amax(dim=-1, keepdim=True)  # [B, Hq, Sq, 1]
        eps = torch.expm1(2.0 * TANH_REL * magnitude)
        o_terms = (doa * torch.matmul(p, va)).sum(-1, keepdim=True)  # rowsum(|dO| (P |V|))
        ds_terms = ds_terms + p * (eps * (dp_terms + 2.0 * o_terms) * (1.0 - t2)
                                   + 2.1 * TANH_REL * t2 * (dp_terms + o_terms))
        dv_terms = dv_terms + torch.matmul((eps * p).transpose(-1, -2), doa)
    dq_t = torch.matmul(ds_terms, ka) * abs(scale)
    dk_t = (torch.matmul(ds_terms.transpose(-1, -2), qa) * abs(scale)).view(b, hk, group, sk, d).sum(dim=2)
    dv_t = dv_terms.view(b, hk, group, sk, d).sum(dim=2)
    return dq_t.transpose(1, 2), dk_t.transpose(1, 2), dv_t.transpose(1, 2)


@dataclass(frozen=True)
class GradientError:
    """One gradient's measurement: max |ours - ref|, SDPA's, the largest allowance, and the ratio
    max(|ours - ref| - allowance) / (SDPA's error) that the criterion bounds by 2."""

    err: float
    sdpa_err: float
    allowance: float
    ratio: float


@dataclass(frozen=True)
class GradientErrors:
    """What `assert_gradients_match` measured, per gradient name ("dq", "dk", "dv")."""

    grads: dict[str, GradientError]
    empty_rows: int


def assert_gradients_match(
    dq: torch.Tensor | None,
    dk: torch.Tensor | None,
    dv: torch.Tensor | None,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dout: torch.Tensor,
    scale: float | None,
    causal_mode: int,
    *,
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    context: str = "",
    partial_sums: int = 1,
) -> GradientErrors:
    """Assert the gradient criterion (module docstring) for dq [B, Sq, Hq, D], dk/dv [B, Sk, Hk, D]
    computed from q [B, Sq, Hq, D], k/v [B, Sk, Hk, D] and the upstream gradient dout (out's
    shape), with the forward's local window (left, right) and logit softcap. A None gradient
    fails (a backward that silently dropped it).

    partial_sums: each gradient is the sum of that many partial results already rounded to the
    dtype, added in the dtype by the caller's harness (context parallelism: torch's ring adds one
    partial dK/dV per rank), so each of the partial_sums - 1 additions may round once more: the
    allowance grows by (partial_sums - 1) * u * max |ref| (u the dtype's unit roundoff). A ring
    that dropped or doubled a partial is still off by a partial's size, far above that.

    Raises AssertionError listing every violated part, with the inputs' shapes and strides.
    """
    grads = {"dq": dq, "dk": dk, "dv": dv}
    inputs = {"dq": q, "dk": k, "dv": v}
    problems: list[str] = []
    for name, g in grads.items():
        x = inputs[name]
        if g is None:
            problems.append(f"{name} is None (no gradient computed)")
            continue
        if tuple(g.shape) != tuple(x.shape):
            problems.append(f"{name} shape {list(g.shape)}, expected {list(x.shape)}")
        if g.dtype != q.dtype:
            problems.append(f"{name} dtype {g.dtype}, expected {q.dtype}")
        if g.device != q.device:
            problems.append(f"{name} on {g.device}, expected {q.device}")
    window = tuple(window)

    def fail(problems: list[str]) -> None:
        _fail(problems, q, k, v, scale, causal_mode, context, window, softcap)

    if problems:
        fail(problems)

    sc = resolve_scale(scale, q.shape[-1])
    refs = dict(zip(grads, flashattn.attention_reference_grads(q, k, v, dout, sc, causal_mode, window, softcap)))
    sdpa = dict(zip(grads, sdpa_same_dtype_grads(q, k, v, dout, sc, causal_mode, window, softcap)))
    allowances = dict(zip(grads, gradient_allowances(q, k, v, dout, sc, causal_mode, window, softcap)))
    if partial_sums > 1:
        u = torch.finfo(q.dtype).eps / 2
        for name in grads:
            allowances[name] = allowances[name] + (partial_sums - 1) * u * float(refs[name].abs().max())
    visible = causal_mask(q.shape[1], k.shape[1], causal_mode, q.device, window)
    empty_rows = torch.zeros(q.shape[1], dtype=torch.bool, device=q.device) if visible is None else ~visible.any(-1)
    n_empty = int(empty_rows.sum()) * q.shape[0] * q.shape[2]
    errors: dict[str, GradientError] = {}
    for name, g in grads.items():
        nonfinite = int((~torch.isfinite(g)).sum())
        if nonfinite:
            problems.append(f"{name} has {nonfinite} NaN/inf elements of {g.numel()}")
        if g.numel() == 0:
            errors[name] = GradientError(0.0, 0.0, 0.0, 0.0)
            continue
        ref = refs[name]
        diff = (g.double() - ref).abs()
        err = float(diff.max())
        sdpa_err = float((sdpa[name].double() - ref).abs().max())
        if not math.isfinite(sdpa_err):
            problems.append(f"the SDPA same-dtype {name} is not finite (err {sdpa_err}): harness problem")
        # Each element against 2x SDPA's max error plus that element's own allowance.
        excess = (diff - allowances[name]).nan_to_num(nan=math.inf)
        worst = float(excess.max())
        ratio = worst / sdpa_err if sdpa_err > 0 else (0.0 if worst <= 0 else math.inf)
        errors[name] = GradientError(err, sdpa_err, float(allowances[name].max()), max(ratio, 0.0))
        if not worst <= 2.0 * sdpa_err:
            where = _unravel(int(excess.argmax()), diff.shape)
            problems.append(
                f"{name} exceeds 2 * {sdpa_err:.4g} (SDPA same-dtype max error) + its allowance: worst at {where}: "
                f"ours {float(g[where]):.6g}, ref {float(ref[where]):.6g}, SDPA {float(sdpa[name][where]):.6g}, "
                f"error {float(diff[where]):.4g}, allowance {float(allowances[name][where]):.4g} "
                f"(max |{name} - ref| = {err:.4g})"
            )
    if n_empty and dq.numel():
        nonzero = int((dq[:, empty_rows] != 0).sum())
        if nonzero:
            problems.append(f"{nonzero} dq elements of the {n_empty} query rows that see no key are not 0")
    if problems:
        fail(problems)
    return GradientErrors(errors, n_empty)


def assert_varlen_attention_matches(
    out: torch.Tensor,
    lse: torch.Tensor | None,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_q: list[int],
    cu_k: list[int],
    scale: float | None,
    causal_mode: int,
    *,
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    context: str = "",
) -> list[AttentionErrors]:
    """The criterion for a packed batch: out [total_q, Hq, D], lse [Hq, total_q] (None: out only)
    from q [total_q, Hq, D], k/v [total_k, Hk, D] and the cumulative lengths cu_q / cu_k.

    No criterion of its own: `assert_attention_matches` on each sequence alone (the varlen call's
    semantics: every sequence is its own attention problem, masks aligned per sequence), after the
    packed shapes. A sequence with queries but no keys must give out 0 and lse -inf."""
    total_q, hq, d = q.shape
    problems = []
    if tuple(out.shape) != (total_q, hq, d):
        problems.append(f"out shape {list(out.shape)}, expected [total_q, Hq, D] = {[total_q, hq, d]}")
    if out.dtype != q.dtype:
        problems.append(f"out dtype {out.dtype}, expected {q.dtype}")
    if lse is not None and (tuple(lse.shape) != (hq, total_q) or lse.dtype != torch.float32):
        problems.append(f"lse {list(lse.shape)} {lse.dtype}, expected float32 [Hq, total_q] = {[hq, total_q]}")
    if cu_q[-1] != total_q:
        problems.append(f"harness: cu_seqlens_q ends at {cu_q[-1]}, not at total_q = {total_q}")
    if problems:
        raise AssertionError(f"{context}: " + "; ".join(problems))
    results = []
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
        where = f"{context}: sequence {b} of {len(cu_q) - 1} (rows {q0}..{q1} of q, {k0}..{k1} of k/v)"
        if q1 == q0:
            continue
        if k1 == k0:
            if not bool((out[q0:q1] == 0).all()):
                raise AssertionError(f"{where}: a sequence with no keys must give out 0")
            if lse is not None and not bool((lse[:, q0:q1] == float("-inf")).all()):
                raise AssertionError(f"{where}: a sequence with no keys must give lse -inf")
            continue
        results.append(assert_attention_matches(
            out[None, q0:q1], None if lse is None else lse[None, :, q0:q1], q[None, q0:q1], k[None, k0:k1],
            v[None, k0:k1], scale, causal_mode, window=window, softcap=softcap, context=where))
    return results


def assert_varlen_gradients_match(
    dq: torch.Tensor | None,
    dk: torch.Tensor | None,
    dv: torch.Tensor | None,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dout: torch.Tensor,
    cu_q: list[int],
    cu_k: list[int],
    scale: float | None,
    causal_mode: int,
    *,
    window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    context: str = "",
) -> list[GradientErrors]:
    """The gradient criterion for a packed batch: dq [total_q, Hq, D], dk/dv [total_k, Hk, D] from
    q [total_q, Hq, D], k/v [total_k, Hk, D], the upstream gradient dout (out's shape) and the
    cumulative lengths cu_q / cu_k.

    No criterion of its own: `assert_gradients_match` on each sequence alone, after the packed
    shapes. Exact zeros where the gradient is exactly 0: dq of a sequence with queries but no keys,
    dk/dv of one with keys but no queries, and the rows no sequence owns (past cu_q[-1], cu_k[-1])."""
    problems = []
    for name, g, x in (("dq", dq, q), ("dk", dk, k), ("dv", dv, v)):
        if g is None:
            problems.append(f"{name} is None (no gradient computed)")
        elif tuple(g.shape) != tuple(x.shape) or g.dtype != q.dtype:
            problems.append(f"{name} {list(g.shape)} {g.dtype}, expected {list(x.shape)} {q.dtype}")
    if problems:
        raise AssertionError(f"{context}: " + "; ".join(problems))
    results = []
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
        where = f"{context}: sequence {b} of {len(cu_q) - 1} (rows {q0}..{q1} of q, {k0}..{k1} of k/v)"
        if q1 == q0 or k1 == k0:
            for name, g in (("dq", dq[q0:q1]), ("dk", dk[k0:k1]), ("dv", dv[k0:k1])):
                if not bool((g == 0).all()):
                    raise AssertionError(f"{where}: a sequence without {'keys' if k1 == k0 else 'queries'} must give "
                                         f"{name} 0, got {int((g != 0).sum())} other elements")
            continue
        results.append(assert_gradients_match(
            dq[None, q0:q1], dk[None, k0:k1], dv[None, k0:k1], q[None, q0:q1], k[None, k0:k1], v[None, k0:k1],
            dout[None, q0:q1], scale, causal_mode, window=window, softcap=softcap, context=where))
    for name, g, end in (("dq", dq, cu_q[-1]), ("dk", dk, cu_k[-1]), ("dv", dv, cu_k[-1])):
        if not bool((g[end:] == 0).all()):
            raise AssertionError(f"{context}: {name} rows past cu_seqlens[-1] = {end} (no sequence's) must be 0, got "
                                 f"{int((g[end:] != 0).sum())} other elements")
    return results


# ---- FP8 forward (issue 29) -------------------------------------------------------------------------
# The FP8 criterion (`assert_fp8_attention_matches`), for out (bfloat16) and lse of the FP8 forward on
# float8_e4m3fn q8, k8, v8 with float32 [B, Hk] descales: the reference is
# `flashattn.attention_reference` (float64) on the dequantized inputs q8.double() * q_descale (per
# batch and KV head; a query head uses its group's KV head's factor), so the quantization of the
# inputs is not error, and
#   * shapes, dtypes (out bfloat16, lse float32), no NaN/inf, rows that see no key 0 / -inf;
#   * elementwise over rows that see a key:
#         |out_id - ref_id| <= FP8_P_REL * (P |V|)_id + FP8_P_ABS * (sum_j visible |V_jd|) / l_i
#                              + BF16_REL * |ref_id| + ATOL
#     with P the reference's normalized probabilities, l_i its row sum of exp(s - max), V the
#     dequantized values;
#   * |lse_i - ref_lse_i| <= LSE_ATOL + LSE_RTOL * |ref_lse_i|
#                             + FP8_ACC_STEP * (D / 32) * max_j visible scale * sum_d |q_id k_jd|.
# Why the LSE term: Hopper's FP8 tensor cores do not accumulate in full float32. Products are
# aligned to the largest exponent of the step and about 14 bits survive (measured on the H100
# 2026-11-26: LSE off by 2.6e-3 at D=256, by 3e-3 at D=128 S=2048, with the output within the
# allowance below and FlashAttention-3's FP8 error on the same inputs equal to ours). S = Q K^T takes
# D / 32 k32 steps, each losing at most ~2^-12 of sum_d |q_d k_d| (FP8_ACC_STEP, a factor 2 over the
# 2^-13 of 14 kept bits); an error of delta in every score moves the LSE by at most delta.
# Why the output allowance: the kernel computes S, the row max and the row sums in float32 from the
# e4m3 inputs, then rounds the unnormalized probabilities to e4m3 for the P V product (the A operand
# of the FP8 wgmma) while the normalization uses the float32 sums. The probabilities are
# exp(s - max + 8 ln 2), in [0, 256] (csrc/flash_fwd_sm90/softmax.cuh, kMaxOffset), so they stay
# normal numbers down to p = 2^-14. e4m3 has 3 mantissa bits: round-to-nearest of a normal value
# errs by at most 2^-4 relative; the subnormal spacing is 2^-9, an absolute error of at most 2^-10
# (2^-18 in units of p once scaled: FP8_P_ABS keeps the unscaled bound, an upper bound either way).
# So each output element is off by at most sum_j (2^-4 p_ij + 2^-10) |v_jd| / l_i from the P rounding
# (FP8_P_REL, FP8_P_ABS), then rounded to bfloat16 (2^-8 relative, BF16_REL); the score error
# above moves p by under 2^-7 relative at these head dims, inside the 2^-4. The P rounding dominates, as in FlashAttention-3's FP8 forward. That is a
# worst case over the rounding of every probability, so it passes any kernel that computes what the
# FP8 path is specified to compute, while a wrong key permutation, descale or mask moves an element
# by a sizeable fraction of (P|V|) and fails it. The acceptance bar beyond this criterion is
# FlashAttention-3's FP8 error on the same inputs (measured on the GPU, lab/fp8_time.py --check).
FP8_P_REL = 2.0**-4
FP8_P_ABS = 2.0**-10
BF16_REL = 2.0**-8
FP8_ACC_STEP = 2.0**-12


def dequantize_fp8(t: torch.Tensor, descale: torch.Tensor) -> torch.Tensor:
    """t float8 [B, S, H, D] (H = Hk, or Hq for q: heads of a GQA group share their KV head's
    factor), descale float32 [B, Hk] -> float64 t * descale."""
    b, _, h, _ = t.shape
    hk = descale.shape[1]
    factor = descale.double().repeat_interleave(h // hk, dim=1)  # [B, H]
    return t.double() * factor[:, None, :, None].to(t.device)


@dataclass
class Fp8Errors:
    """What `assert_fp8_attention_matches` measured (over rows that see at least one key)."""

    out_err: float
    worst_ratio: float  # max over elements of |out - ref| / allowance
    lse_err: float
    visible_rows: int


def fp8_reference(q8, k8, v8, q_descale, k_descale, v_descale, scale: float | None, causal_mode: int):
    """(ref_out, ref_lse, allowance, lse_allowance) of the FP8 criterion: float64, [B, Sq, Hq, D],
    [B, Hq, Sq], the elementwise bound on |out - ref| and the per-row bound on |lse - ref_lse|
    (module section "FP8 forward")."""
    q, k, v = dequantize_fp8(q8, q_descale), dequantize_fp8(k8, k_descale), dequantize_fp8(v8, v_descale)
    ref, ref_lse = flashattn.attention_reference(q, k, v, scale, causal_mode)
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    s = resolve_scale(scale, d)
    kr, vr = k.repeat_interleave(hq // hk, dim=2), v.repeat_interleave(hq // hk, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, kr) * s
    vis = visible_keys(sq, sk, causal_mode, device=q.device)  # [Sq, Sk] bool; None: all visible
    if vis is None:
        vis = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    scores = scores.masked_fill(~vis, -math.inf)
    m = scores.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(scores - m)  # unnormalized probabilities, 0 where masked
    l = e.sum(-1, keepdim=True)
    l_safe = torch.where(l > 0, l, torch.ones_like(l))
    p = e / l_safe
    va = vr.abs().permute(0, 2, 1, 3)  # [B, Hq, Sk, D]
    p_abs_v = p @ va
    vis_abs_v = vis.to(va.dtype) @ va / l_safe
    allow = FP8_P_REL * p_abs_v + FP8_P_ABS * vis_abs_v
    allow = allow.permute(0, 2, 1, 3) + BF16_REL * ref.abs() + ATOL
    abs_scores = torch.einsum("bqhd,bkhd->bhqk", q.abs(), kr.abs()) * s
    abs_scores = abs_scores.masked_fill(~vis, 0.0).amax(-1)  # [B, Hq, Sq]
    lse_allow = LSE_ATOL + LSE_RTOL * ref_lse.abs().nan_to_num(posinf=0.0, neginf=0.0) \
        + FP8_ACC_STEP * (d / 32) * abs_scores
    return ref, ref_lse, allow, lse_allow


def assert_fp8_attention_matches(out, lse, q8, k8, v8, q_descale, k_descale, v_descale, scale: float | None,
                                 causal_mode: int, *, context: str = "") -> Fp8Errors:
    """Assert the FP8 criterion (section above) for out [B, Sq, Hq, D] bfloat16 and lse [B, Hq, Sq]."""
    problems: list[str] = []
    b, sq, hq, d = q8.shape
    sk = k8.shape[1]
    if out.shape != q8.shape or out.dtype != torch.bfloat16:
        problems.append(f"out is {out.dtype} {tuple(out.shape)}, expected bfloat16 {tuple(q8.shape)}")
    if lse is not None and (lse.shape != (b, hq, sq) or lse.dtype != torch.float32):
        problems.append(f"lse is {lse.dtype} {tuple(lse.shape)}, expected float32 {(b, hq, sq)}")
    if problems:
        raise AssertionError(f"{context}: " + "; ".join(problems))
    ref, ref_lse, allow, lse_allow = fp8_reference(q8, k8, v8, q_descale, k_descale, v_descale, scale, causal_mode)
    o = out.double().cpu()
    ref, ref_lse, allow, lse_allow = ref.cpu(), ref_lse.cpu(), allow.cpu(), lse_allow.cpu()
    if not torch.isfinite(o).all():
        problems.append(f"out has {int((~torch.isfinite(o)).sum())} non-finite entries")
    empty = empty_query_rows(sq, sk, causal_mode)
    if empty and o[:, :empty].abs().max() != 0:
        problems.append(f"rows 0..{empty - 1} see no key but out is not 0 there")
    err = (o - ref).abs()[:, empty:]
    ratio = (err / allow[:, empty:]) if err.numel() else err
    worst = float(ratio.max()) if ratio.numel() else 0.0
    if worst > 1.0:
        i = _unravel(int(ratio.argmax()), ratio.shape)
        problems.append(f"out error {float(err.max()):.3g} exceeds the FP8 allowance at [b, q - {empty}, h, d] = {i}: "
                        f"|out - ref| = {float(err[i]):.3g} > {float(allow[:, empty:][i]):.3g} (ratio {worst:.3g})")
    lse_err = 0.0
    if lse is not None:
        l64 = lse.double().cpu()
        if empty and not torch.isneginf(l64[:, :, :empty]).all():
            problems.append("lse is not -inf on rows that see no key")
        lerr = (l64[:, :, empty:] - ref_lse[:, :, empty:]).abs()
        lse_err = float(lerr.max()) if lerr.numel() else 0.0
        lbound = lse_allow[:, :, empty:]
        if lerr.numel() and not (lerr <= lbound).all():
            i = _unravel(int((lerr / lbound).argmax()), lerr.shape)
            problems.append(f"lse error {lse_err:.3g} exceeds the FP8 allowance at [b, h, q - {empty}] = {i}: "
                            f"{float(lerr[i]):.3g} > {float(lbound[i]):.3g}")
    if problems:
        raise AssertionError(
            f"{context + ': ' if context else ''}FP8 B={b} Sq={sq} Sk={sk} Hq={hq} Hk={k8.shape[2]} D={d} "
            f"scale={scale} causal={CAUSAL_NAMES[causal_mode]}\n  - " + "\n  - ".join(problems)
        )
    return Fp8Errors(float(err.max()) if err.numel() else 0.0, worst, lse_err, (sq - empty) * b * hq)
