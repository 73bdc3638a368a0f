"""Bad device-side indices on the GPU (issue 25): packed batches' cu_seqlens, decoding's
cache_seqlens, seqused_k and block_table.

  * checked mode (flashattn.check_indices()): each bad index raises a ValueError naming the argument,
    before any kernel runs;
  * unchecked (the default): the call returns without a CUDA error and touches nothing outside the
    tensors it was given. The inputs are slices of larger buffers whose tail (the guard) holds NaN:
    a read past the tensors would put NaN into the outputs, a write would change the guard. The
    documented clamping (docs/varlen.md and docs/decode.md, "Bad device-side indices") is checked
    where it defines the result: packed rows owned by exactly one clamped sequence equal a dense
    call on that sequence.
memcheck over the same cases is in lab/sanitize_small.py (--bad-indices).
"""

from __future__ import annotations

import pytest
import torch

import flashattn
from flashattn import _ops

pytestmark = pytest.mark.gpu

I32 = torch.int32
GUARD = 16  # NaN rows (or pages) after every tensor handed to a kernel


def guarded(rows: int, *shape: int, device, dtype=torch.float16) -> tuple[torch.Tensor, torch.Tensor]:
    """(t, buffer): t = buffer[:rows] filled with randn; buffer[rows:] NaN."""
    buf = torch.full((rows + GUARD, *shape), float("nan"), device=device, dtype=dtype)
    t = buf[:rows]
    t.copy_(torch.randn(t.shape, device=device, dtype=dtype))
    return t, buf


def assert_guard_untouched(buf: torch.Tensor, rows: int, what: str) -> None:
    assert bool(torch.isnan(buf[rows:]).all()), f"{what}: a kernel wrote past the tensor (guard changed)"


def clamp_spans(cu: list[int], total: int) -> list[tuple[int, int]]:
    """The kernels' rule (packed_span in csrc/common/packed_span.cuh)."""
    spans = []
    for b in range(len(cu) - 1):
        r0 = min(max(cu[b], 0), total)
        spans.append((r0, min(max(cu[b + 1], r0), total)))
    return spans


# ==== packed batches ================================================================================

TOTAL_Q, TOTAL_K, HQ, HK, D = 40, 48, 4, 2, 64
GOOD_Q, GOOD_K = [0, 10, 25, 40], [0, 12, 30, 48]

# (id, cu_q, cu_k, max_q, max_k, message of the checked mode)
VARLEN_CASES = [
    ("q-decreasing", [0, 25, 10, 40], GOOD_K, TOTAL_Q, TOTAL_K, r"cu_seqlens_q must be nondecreasing, got cu_seqlens_q\[1\] = 25 > cu_seqlens_q\[2\] = 10"),
    ("q-past-end", [0, 10, 25, 47], GOOD_K, TOTAL_Q, TOTAL_K, r"cu_seqlens_q\[-1\] must be <= the packed rows of q \(40\), got cu_seqlens_q\[-1\] = 47"),
    ("q-negative-start", [-5, 10, 25, 40], GOOD_K, TOTAL_Q, TOTAL_K, r"cu_seqlens_q\[0\] must be 0 \(cumulative sequence lengths\), got -5"),
    ("k-decreasing", GOOD_Q, [0, 30, 12, 48], TOTAL_Q, TOTAL_K, r"cu_seqlens_k must be nondecreasing, got cu_seqlens_k\[1\] = 30 > cu_seqlens_k\[2\] = 12"),
    ("k-past-end", GOOD_Q, [0, 12, 30, 60], TOTAL_Q, TOTAL_K, r"cu_seqlens_k\[-1\] must be <= the packed rows of k/v \(48\), got cu_seqlens_k\[-1\] = 60"),
    ("k-huge", GOOD_Q, [0, 12, 2**30, 2**31 - 1], TOTAL_Q, TOTAL_K, r"cu_seqlens_k\[-1\] must be <= the packed rows of k/v \(48\)"),
]
LONGER_THAN_MAX = ("q-longer-than-max", GOOD_Q, GOOD_K, 10, 18, r"sequence 1 is longer than max_seqlen_q = 10: cu_seqlens_q\[2\] - cu_seqlens_q\[1\] = 15")


def _varlen_inputs(device):
    torch.manual_seed(0)
    q, qb = guarded(TOTAL_Q, HQ, D, device=device)
    k, kb = guarded(TOTAL_K, HK, D, device=device)
    v, vb = guarded(TOTAL_K, HK, D, device=device)
    return (q, k, v), (qb, kb, vb)


@pytest.mark.parametrize(("cu_q", "cu_k", "max_q", "max_k", "message"),
                         [pytest.param(*c[1:], id=c[0]) for c in VARLEN_CASES + [LONGER_THAN_MAX]])
def test_checked_mode_names_the_bad_cu_seqlens(cu_q, cu_k, max_q, max_k, message, device) -> None:
    (q, k, v), _ = _varlen_inputs(device)
    cq, ck = torch.tensor(cu_q, dtype=I32, device=device), torch.tensor(cu_k, dtype=I32, device=device)
    with flashattn.check_indices():
        with pytest.raises(ValueError, match="fwd_varlen: " + message):
            flashattn.flash_attn_varlen_func(q, k, v, cq, ck, max_q, max_k)
        lse = torch.zeros(HQ, TOTAL_Q, device=device)
        with pytest.raises(ValueError, match="bwd_varlen: " + message):
            _ops.bwd_varlen(q, q, k, v, q, lse, cq, ck, max_q, max_k, D**-0.5, 0, False, "auto")
    torch.cuda.synchronize()


@pytest.mark.parametrize("deterministic", [False, True], ids=["default", "deterministic"])
@pytest.mark.parametrize(("cu_q", "cu_k", "max_q", "max_k"), [pytest.param(*c[1:5], id=c[0]) for c in VARLEN_CASES])
def test_unchecked_bad_cu_seqlens_stay_inside_the_tensors(cu_q, cu_k, max_q, max_k, deterministic, device) -> None:
    (q, k, v), (qb, kb, vb) = _varlen_inputs(device)
    cq, ck = torch.tensor(cu_q, dtype=I32, device=device), torch.tensor(cu_k, dtype=I32, device=device)
    out, lse = flashattn.flash_attn_varlen_func(q, k, v, cq, ck, max_q, max_k, return_lse=True)
    dout = torch.randn_like(out)
    dq, dk, dv = _ops.bwd_varlen(dout, q, k, v, out, lse, cq, ck, max_q, max_k, D**-0.5, flashattn.CAUSAL_NONE,
                                 deterministic, "auto")
    torch.cuda.synchronize()  # a CUDA error (an illegal address) would surface here
    for buf, rows, name in ((qb, TOTAL_Q, "q"), (kb, TOTAL_K, "k"), (vb, TOTAL_K, "v")):
        assert_guard_untouched(buf, rows, name)
    # Every q row belongs to some clamped sequence in these cases, so every output row is written
    # from in-bounds rows only (a read of the NaN guard would show here).
    assert bool(torch.isfinite(out).all()), "out has NaN/inf: a read outside q/k/v, or a row left unwritten"
    for name, g in (("dq", dq), ("dk", dk), ("dv", dv)):
        assert bool(torch.isfinite(g).all()), f"{name} has NaN/inf: a read outside the tensors"
    spans_q, spans_k = clamp_spans(cu_q, TOTAL_Q), clamp_spans(cu_k, TOTAL_K)
    owners = torch.zeros(TOTAL_Q, dtype=torch.int32)
    for r0, r1 in spans_q:
        owners[r0:r1] += 1
    for (r0, r1), (k0, k1) in zip(spans_q, spans_k):
        rows = [r for r in range(r0, r1) if owners[r] == 1]
        if not rows:
            continue
        if k1 == k0:  # queries with no key: output 0
            assert bool((out[rows] == 0).all()), f"rows {r0}..{r1 - 1} see no key and must be 0"
            continue
        ref = flashattn.flash_attn_func(q[None, r0:r1], k[None, k0:k1], v[None, k0:k1])[0]
        torch.testing.assert_close(out[rows], ref[[r - r0 for r in rows]], atol=2e-3, rtol=1e-2,
                                   msg=lambda m: f"sequence rows {r0}..{r1 - 1}, keys {k0}..{k1 - 1}: {m}")


# ==== decoding ======================================================================================

B, SQ, DHQ, DHK, DD, PAGE, PAGES_PER_SEQ, NUM_PAGES = 2, 1, 4, 2, 64, 16, 4, 9
SK_MAX = PAGE * PAGES_PER_SEQ
GOOD_TABLE = [[0, 1, 2, 3], [4, 5, 6, 7]]

# (id, paged, cache_seqlens, seqused_k, block_table, new rows, message of the checked mode)
DECODE_CASES = [
    ("seqlens-negative", False, [-3, 10], None, None, 2, r"cache_seqlens\[b\] must be in \[0, Sk_max - Sq_new = 64 - 2\], got cache_seqlens\[0\] = -3"),
    ("seqlens-append-past-cache", False, [63, 70], None, None, 2, r"cache_seqlens\[b\] must be in \[0, Sk_max - Sq_new = 64 - 2\], got cache_seqlens\[0\] = 63"),
    ("seqlens-huge", False, [2**31 - 1, 5], None, None, 2, r"cache_seqlens\[b\] must be in \[0, Sk_max - Sq_new = 64 - 2\], got cache_seqlens\[0\] = 2147483647"),
    ("seqused-k-past-cache", False, [10, 10], [100, 5], None, 0, r"seqused_k\[b\] must be in \[0, Sk_max = 64\], got seqused_k\[0\] = 100"),
    ("paged-seqlens-append-past-cache", True, [62, 70], None, GOOD_TABLE, 3, r"cache_seqlens\[b\] must be in \[0, Sk_max - Sq_new = 64 - 3\], got cache_seqlens\[0\] = 62"),
    ("paged-table-minus-one", True, [20, 40], None, [[0, -1, -1, -1], [4, 5, 6, -1]], 1, r"block_table\[0, 1\] = -1 is outside the page pool \[0, num_pages = 9\)"),
    ("paged-table-past-pool", True, [5, 50], None, [[0, 1, 2, 3], [4, 5, 6, 12]], 0, r"block_table\[1, 3\] = 12 is outside the page pool"),
    ("paged-append-on-bad-page", True, [31, 3], None, [[0, 1, 9, 3], [4, 5, 6, 7]], 2, r"block_table\[0, 2\] = 9 is outside the page pool"),
    ("paged-seqused-k-beyond-pages", True, [10, 3], [40, 3], [[2, -1, -1, -1], [4, -1, -1, -1]], 0, r"block_table\[0, 1\] = -1 is outside the page pool \[0, num_pages = 9\) and is read: sequence 0 uses 40 keys \(seqused_k\[0\] = 40"),
]


def _decode_call(paged, cache_seqlens, seqused_k, block_table, sq_new, num_splits, device):
    torch.manual_seed(1)
    q = torch.randn(B, SQ, DHQ, DD, device=device, dtype=torch.float16)
    if paged:
        kc, kbuf = guarded(NUM_PAGES, PAGE, DHK, DD, device=device)
        vc, vbuf = guarded(NUM_PAGES, PAGE, DHK, DD, device=device)
        rows = NUM_PAGES
    else:
        # [B, Sk_max + GUARD, Hk, D] buffers, the cache their first Sk_max rows of each batch
        kbuf = torch.full((B, SK_MAX + GUARD, DHK, DD), float("nan"), device=device, dtype=torch.float16)
        vbuf = torch.full_like(kbuf, float("nan"))
        kc, vc = kbuf[:, :SK_MAX], vbuf[:, :SK_MAX]
        kc.copy_(torch.randn(kc.shape, device=device, dtype=torch.float16))
        vc.copy_(torch.randn(vc.shape, device=device, dtype=torch.float16))
        rows = None
    new = torch.randn(B, sq_new, DHK, DD, device=device, dtype=torch.float16) if sq_new else None
    new_v = torch.randn_like(new) if sq_new else None
    kwargs = dict(k=new, v=new_v, cache_seqlens=torch.tensor(cache_seqlens, dtype=I32, device=device),
                  num_splits=num_splits, return_lse=True)
    if seqused_k is not None:
        kwargs["seqused_k"] = torch.tensor(seqused_k, dtype=I32, device=device)
    if block_table is not None:
        kwargs["block_table"] = torch.tensor(block_table, dtype=I32, device=device)

    def call():
        with torch.no_grad():
            return flashattn.flash_attn_with_kvcache(q, kc, vc, **kwargs)

    return call, (kbuf, vbuf, rows)


@pytest.mark.parametrize(("paged", "cache_seqlens", "seqused_k", "block_table", "sq_new", "message"),
                         [pytest.param(*c[1:], id=c[0]) for c in DECODE_CASES])
def test_checked_mode_names_the_bad_decode_index(paged, cache_seqlens, seqused_k, block_table, sq_new, message,
                                                 device) -> None:
    call, (kbuf, _, _) = _decode_call(paged, cache_seqlens, seqused_k, block_table, sq_new, 0, device)
    before = kbuf.clone()
    with flashattn.check_indices(), pytest.raises(ValueError, match="flash_attn_with_kvcache: " + message):
        call()
    torch.cuda.synchronize()
    assert torch.equal(kbuf.nan_to_num(), before.nan_to_num()), "the checked mode raised after the append ran"


@pytest.mark.parametrize("num_splits", [1, 3], ids=["splits-1", "splits-3"])
@pytest.mark.parametrize(("paged", "cache_seqlens", "seqused_k", "block_table", "sq_new"),
                         [pytest.param(*c[1:6], id=c[0]) for c in DECODE_CASES])
def test_unchecked_bad_decode_index_stays_inside_the_caches(paged, cache_seqlens, seqused_k, block_table, sq_new,
                                                            num_splits, device) -> None:
    call, (kbuf, vbuf, pages) = _decode_call(paged, cache_seqlens, seqused_k, block_table, sq_new, num_splits, device)
    out, lse = call()
    torch.cuda.synchronize()  # a CUDA error (an illegal address) would surface here
    for buf, name in ((kbuf, "k_cache"), (vbuf, "v_cache")):
        guard = buf[pages:] if paged else buf[:, SK_MAX:]
        assert bool(torch.isnan(guard).all()), f"{name}: a kernel wrote past the cache (guard changed)"
    # Reads are clamped into the caches, whose every row is finite: a read of the guard shows as NaN.
    assert bool(torch.isfinite(out).all()), "out has NaN/inf: a read outside the caches"
    assert not bool(torch.isnan(lse).any()), "lse has NaN: a read outside the caches"
