"""NaN and inf inputs (issue 25): through the dense forward and every backward (portable and
Hopper, default and deterministic), the packed batch's forward and backward, and the paged decode
path, the pattern of NaN in outputs and gradients equals torch SDPA's on the same, unpacked inputs.

The reference is torch's fused SDPA (its FlashAttention-2 kernels) in the inputs' own dtype, not the
math backend: a fused kernel and the math softmax disagree by construction on where a non-finite key
spreads. The math softmax of a score row holding NaN is NaN everywhere, and its backward carries
that into every gradient the row touches; a FlashAttention-style online softmax takes the row
maximum with fmax (which drops NaN) and gives a -inf score the probability 0, so the same input
leaves different entries NaN. The issue asks for the pattern of the attention we implement, and the
fused kernel is that definition; where it cannot run (no CUDA, or a GPU or build of torch without
it) the comparison is skipped, not replaced by another kernel.

Placement: the non-finite value sits where every query row can see it (the last query row, which
under bottom-right causal masking sees every key, or key/value row 0), so that which tiles a kernel
skips under the causal mask does not decide the pattern.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.backends.cuda import SDPAParams, can_use_flash_attention, is_flash_attention_available
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

import flashattn
from gpu_helpers import backward_mode

pytestmark = pytest.mark.gpu

NAN, INF = float("nan"), float("inf")

# (id, tensor, row, value): row -1 is the last row; q / dout rows are query rows, k / v key rows.
POISONS = [
    ("q-nan-last-row", "q", -1, NAN),
    ("k-nan-row0", "k", 0, NAN),
    ("k-inf-row0", "k", 0, INF),
    ("k-minus-inf-row0", "k", 0, -INF),
    ("v-nan-row0", "v", 0, NAN),
    ("v-inf-row0", "v", 0, INF),
    ("dout-nan-last-row", "dout", -1, NAN),
]
POISON_PARAMS = [pytest.param(*p[1:], id=p[0]) for p in POISONS]


def poison(tensors: dict, name: str, row: int, value: float) -> None:
    """One element (head 0, dim 3) of one row, in [B, S, H, D] or [total, H, D] layout."""
    t = tensors[name]
    with torch.no_grad():
        if t.dim() == 4:
            t[:, row, 0, 3] = value
        else:
            t[row, 0, 3] = value


def sdpa_reference(q, k, v, dout, causal: bool):
    """torch's fused SDPA (FLASH_ATTENTION) in the inputs' dtype on [B, S, H, D] tensors, GQA by
    repeating k/v heads (the gradient of the repeat sums each group, as our kernels do), bottom-right
    causal; returns out, dq, dk, dv in [B, S, H, D]."""
    if q.device.type != "cuda" or not is_flash_attention_available():
        pytest.skip("torch's fused SDPA (FLASH_ATTENTION) is not available here, and it is the reference")
    qf, kf, vf = (t.detach().clone().requires_grad_() for t in (q, k, v))
    group = q.shape[2] // k.shape[2]
    qt = qf.transpose(1, 2)
    kt = kf.transpose(1, 2).repeat_interleave(group, 1)
    vt = vf.transpose(1, 2).repeat_interleave(group, 1)
    sq, sk = q.shape[1], k.shape[1]
    # SDPA's is_causal is top-left; where the lengths differ, causal_lower_right is the bottom-right
    # mask, and SDPA hands it to the same flash kernel (with only FLASH_ATTENTION enabled, never to
    # another one: it raises instead).
    mask = causal_lower_right(sq, sk) if causal and sq != sk else None
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        if not can_use_flash_attention(SDPAParams(qt, kt, vt, None, 0.0, causal and mask is None, False), True):
            pytest.skip("torch's FLASH_ATTENTION SDPA does not take these inputs here (the warning says why)")
        if mask is not None:
            out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask)
        else:
            out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    out = out.transpose(1, 2)
    dq, dk, dv = torch.autograd.grad(out, (qf, kf, vf), dout)
    return out, dq, dk, dv


def assert_same_nan_pattern(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    g, w = torch.isnan(got), torch.isnan(want)
    if not torch.equal(g, w):
        extra, missing = int((g & ~w).sum()), int((~g & w).sum())
        raise AssertionError(f"{what}: NaN pattern differs from SDPA's ({extra} NaN SDPA has not, {missing} NaN "
                             f"SDPA has that we do not, of {g.numel()})")


# ==== dense forward and backward, both paths ========================================================

@pytest.mark.parametrize("deterministic", [False, True], ids=["default", "deterministic"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("d", "hq", "hk"), [(64, 4, 2), (128, 2, 2)], ids=["d64-gqa", "d128"])
@pytest.mark.parametrize(("name", "row", "value"), POISON_PARAMS)
def test_dense_nan_pattern_equals_sdpa(name, row, value, d, hq, hk, causal, deterministic, backend, device) -> None:
    """backend: the project's fixture (portable and hopper, each skipped where unavailable)."""
    torch.manual_seed(0)
    b, sq, sk = 2, 77, 130
    x = dict(q=torch.randn(b, sq, hq, d, device=device, dtype=torch.bfloat16),
             k=torch.randn(b, sk, hk, d, device=device, dtype=torch.bfloat16),
             v=torch.randn(b, sk, hk, d, device=device, dtype=torch.bfloat16),
             dout=torch.randn(b, sq, hq, d, device=device, dtype=torch.bfloat16))
    poison(x, name, row, value)
    q, k, v = (x[n].clone().requires_grad_() for n in ("q", "k", "v"))
    with flashattn.use_backend(backend), backward_mode(deterministic):
        out = flashattn.flash_attn_func(q, k, v, causal=causal)
        dq, dk, dv = torch.autograd.grad(out, (q, k, v), x["dout"])
    ref = sdpa_reference(x["q"], x["k"], x["v"], x["dout"], causal)
    for what, got, want in zip(("out", "dq", "dk", "dv"), (out, dq, dk, dv), ref):
        assert_same_nan_pattern(got, want, f"{what} ({backend}, {name})")


# ==== packed batches ================================================================================

@pytest.mark.parametrize("deterministic", [False, True], ids=["default", "deterministic"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("name", "row", "value"), POISON_PARAMS)
def test_packed_nan_pattern_equals_per_sequence_sdpa(name, row, value, causal, deterministic, device) -> None:
    """The poison sits in sequence 1 only (its last query row, or its key row 0): the other
    sequences must stay finite, and sequence 1 has SDPA's pattern."""
    torch.manual_seed(0)
    q_lens, k_lens, hq, hk, d = [33, 70, 1, 50], [40, 90, 17, 50], 4, 2, 64
    cu_q = [0]
    cu_k = [0]
    for a, c in zip(q_lens, k_lens):
        cu_q.append(cu_q[-1] + a)
        cu_k.append(cu_k[-1] + c)
    x = dict(q=torch.randn(cu_q[-1], hq, d, device=device, dtype=torch.float16),
             k=torch.randn(cu_k[-1], hk, d, device=device, dtype=torch.float16),
             v=torch.randn(cu_k[-1], hk, d, device=device, dtype=torch.float16),
             dout=torch.randn(cu_q[-1], hq, d, device=device, dtype=torch.float16))
    seq_row = {"q": cu_q[2] - 1, "dout": cu_q[2] - 1, "k": cu_k[1], "v": cu_k[1]}[name]
    poison(x, name, seq_row, value)
    q, k, v = (x[n].clone().requires_grad_() for n in ("q", "k", "v"))
    cq, ck = (torch.tensor(c, dtype=torch.int32, device=device) for c in (cu_q, cu_k))
    with backward_mode(deterministic):
        out = flashattn.flash_attn_varlen_func(q, k, v, cq, ck, max(q_lens), max(k_lens), causal=causal)
        dq, dk, dv = torch.autograd.grad(out, (q, k, v), x["dout"])
    for s in range(len(q_lens)):
        rq, rk = slice(cu_q[s], cu_q[s + 1]), slice(cu_k[s], cu_k[s + 1])
        ref = sdpa_reference(x["q"][None, rq], x["k"][None, rk], x["v"][None, rk], x["dout"][None, rq], causal)
        for what, got, want in zip(("out", "dq", "dk", "dv"), (out[rq], dq[rq], dk[rk], dv[rk]), ref):
            assert_same_nan_pattern(got, want[0], f"{what} of sequence {s} ({name})")


# ==== paged decode ==================================================================================

@pytest.mark.parametrize("num_splits", [1, 4], ids=["splits-1", "splits-4"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("name", "row", "value"), [p for p in POISON_PARAMS if p.values[0] != "dout"])
def test_paged_decode_nan_pattern_equals_sdpa(name, row, value, causal, num_splits, device) -> None:
    """Batch 0's cache (gathered from its pages) or query carries the poison; the append's rows
    come from k/v new, so a poisoned row 0 of the cache is read through the table."""
    torch.manual_seed(0)
    b, sq, hq, hk, d, page, pages_per_seq, num_pages = 2, 2, 4, 2, 128, 16, 6, 14
    lens = [70, 33]
    table = torch.tensor([[3, 7, 1, 12, 0, 5], [2, 4, 6, 8, 9, 10]], dtype=torch.int32, device=device)
    k_pool = torch.randn(num_pages, page, hk, d, device=device, dtype=torch.float16)
    v_pool = torch.randn_like(k_pool)
    q = torch.randn(b, sq, hq, d, device=device, dtype=torch.float16)
    first_page = int(table[0, 0])
    with torch.no_grad():
        if name == "q":
            q[0, row, 0, 3] = value
        else:
            (k_pool if name == "k" else v_pool)[first_page, 0, 0, 3] = value
    with torch.no_grad():
        out = flashattn.flash_attn_with_kvcache(q, k_pool, v_pool, cache_seqlens=torch.tensor(lens, dtype=torch.int32, device=device),
                                                block_table=table, causal=causal, num_splits=num_splits)
    for s in range(b):
        pages = [int(p) for p in table[s, : -(-lens[s] // page)]]
        ks = torch.cat([k_pool[p] for p in pages])[: lens[s]][None]
        vs = torch.cat([v_pool[p] for p in pages])[: lens[s]][None]
        ref = sdpa_reference(q[s : s + 1], ks, vs, torch.zeros_like(q[s : s + 1]), causal)[0]
        assert_same_nan_pattern(out[s : s + 1], ref, f"out of batch {s} ({name}, splits {num_splits})")
