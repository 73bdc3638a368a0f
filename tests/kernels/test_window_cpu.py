"""Local (sliding-window) attention and the logit softcap, CPU side (issue 16):

  * the one mask of every forward path (csrc/common/mask.cuh) and the host normalization of the
    window (FwdParams::set_mask, DecodeParams::set_mask), built with the host compiler: each row's
    visible key range equals flashattn.reference.visible_keys, and the key-block classification
    the kernels walk (which blocks, which of them need no mask) is checked element by element;
  * the float64 reference with window and softcap against independent computations (SDPA's math
    backend in float64 with an explicit mask, autograd through a plain implementation for the
    softcap's gradient);
  * the op schemas, the fake kernels and the autograd glue carry window_left / window_right /
    softcap through to the backward op (CPU stand-in kernels).
Validation of the public arguments is in tests/kernels/test_validation.py and tests/kernels/test_kvcache.py.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

import flashattn
import strategies as fst
from flashattn.reference import visible_keys
from numerics import emulated_tanh
from repo_modules import run_cpp_probe
from standin_kernels import allow_cpu_entry_points, cpu_standin_kernels

F64 = torch.float64
NONE, TOP_LEFT, BOTTOM_RIGHT = flashattn.CAUSAL_NONE, flashattn.CAUSAL_TOP_LEFT, flashattn.CAUSAL_BOTTOM_RIGHT

_PROBE = r"""
#include <cstdio>
#include <cstdint>
#include <initializer_list>
#include "common/mask.cuh"
#include "common/params.h"
#include "flash_decode/decode_params.h"
using namespace flashattn;
int main() {
  long errors = 0, cases = 0;
  // forward: every (Sq, Sk, mode, left, right): rows' [lo, hi) after set_mask, and the block
  // classification of every query tile checked against the per-element predicate.
  for (int sq : {1, 2, 5, 17, 64, 100})
    for (int sk : {1, 3, 16, 33, 100, 130})
      for (int mode : {0, 1, 2})
        for (int left : {-1, 0, 1, 7, 31, 64, 99, 200, 1 << 30})
          for (int right : {-1, 0, 1, 5, 40, 99, 2147483647}) {
            FwdParams p;
            p.seqlen_q = sq;
            p.seqlen_k = sk;
            p.set_mask(static_cast<CausalMode>(mode), left, right);
            const KeyWindow w = make_key_window(sk, p.causal_offset, p.window_left, p.window_right);
            std::printf("rows %d %d %d %d %d %d %d", sq, sk, mode, left, right, p.window_left, p.window_right);
            for (int i = 0; i < sq; ++i) std::printf(" %d:%d", w.lo(i), w.hi(i));
            std::printf("\n");
            for (int bm : {16, 64, 128})
              for (int bn : {16, 32, 64, 128, 176})
                for (int m0 = 0; m0 < sq; m0 += bm) {
                  ++cases;
                  const int m1 = m0 + bm < sq ? m0 + bm : sq;
                  const KeyBlocks b = key_blocks(w, m0, m1, bn);
                  for (int n = 0; n * bn < sk; ++n) {
                    bool any = false, all = true;
                    for (int i = m0; i < m1; ++i)
                      for (int j = n * bn; j < (n + 1) * bn; ++j) {
                        const bool vis = j < sk && w.visible(i, j);
                        any |= vis;
                        all &= vis;
                      }
                    const bool walked = n >= b.n_begin && n < b.n_end;
                    if (any && !walked) { ++errors; std::printf("ERR missed block %d %d %d %d %d bm%d bn%d m0 %d n %d\n", sq, sk, mode, left, right, bm, bn, m0, n); }
                    // The backward walks (n, m) iff a row of m sees a key of n, and its dQ tickets
                    // count the forward's walk of m: both must be exactly that relation.
                    const QueryBlocks qb = query_blocks(w, n * bn, (n + 1) * bn < sk ? (n + 1) * bn : sk, sq, bm);
                    const bool back = m0 / bm >= qb.m_begin && m0 / bm < qb.m_end;
                    if (back != any) { ++errors; std::printf("ERR backward query blocks %d %d %d %d %d bm%d bn%d m0 %d n %d\n", sq, sk, mode, left, right, bm, bn, m0, n); }
                    if (walked != any) { ++errors; std::printf("ERR forward walk not exact %d %d %d %d %d bm%d bn%d m0 %d n %d\n", sq, sk, mode, left, right, bm, bn, m0, n); }
                    if (walked && !b.masked(n) && !all) { ++errors; std::printf("ERR unmasked block not whole %d %d %d %d %d bm%d bn%d m0 %d n %d\n", sq, sk, mode, left, right, bm, bn, m0, n); }
                  }
                  if (b.count() > 0 && (b.full_begin < b.n_begin || b.full_end > b.n_end || b.full_begin > b.full_end)) ++errors;
                }
          }
  // decode: per batch offset seqlen_k(b) - Sq, normalization against Sk_max
  for (int sq : {1, 2, 4, 16})
    for (int skmax : {1, 40, 300})
      for (int causal : {0, 1})
        for (int left : {-1, 0, 3, 39, 299, 1000})
          for (int right : {-1, 0, 1, 3, 15, 100}) {
            DecodeParams p;
            p.seqlen_q = sq;
            p.seqlen_k_max = skmax;
            p.set_mask(causal != 0, left, right);
            for (int sk : {skmax, skmax / 2, 1}) {
              if (sk < 1) continue;
              const KeyWindow w = make_key_window(sk, sk - sq, p.window_left, p.window_right);
              std::printf("decode %d %d %d %d %d %d", sq, sk, causal, left, right, int(p.keys_needed()));
              for (int i = 0; i < sq; ++i) std::printf(" %d:%d", w.lo(i), w.hi(i));
              std::printf("\n");
            }
          }
  std::printf("checked %ld %ld\n", cases, errors);
}
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> list[str]:
    return run_cpp_probe(tmp_path_factory, "mask", _PROBE)


def _mask(sq: int, sk: int, mode: int, window: tuple[int, int]) -> torch.Tensor:
    m = visible_keys(sq, sk, mode, window)
    return torch.ones(sq, sk, dtype=torch.bool) if m is None else m


def _ranges_to_mask(ranges: list[str], sk: int) -> torch.Tensor:
    rows = []
    for r in ranges:
        lo, hi = (int(x) for x in r.split(":"))
        j = torch.arange(sk)
        rows.append((j >= lo) & (j < hi))
    return torch.stack(rows)


def test_block_classification_matches_the_element_mask(probe: list[str]) -> None:
    """Every key block with a visible key is walked, and every block walked without a mask is
    visible whole to every row of its tile (query tiles of 16/64/128 rows, key blocks of
    16..176 keys, windows from 0 to far beyond the sequences, all causal modes). The backward's
    side (query_blocks: the query blocks a key block walks) and the forward's walk are both
    exactly the tiles with a visible element, which the deterministic backward's dQ tickets
    (counted from the forward walk's first key block) rely on not to hang."""
    errors = [line for line in probe if line.startswith("ERR")]
    assert not errors, "\n".join(errors[:20])
    checked = [line for line in probe if line.startswith("checked")]
    assert checked and int(checked[0].split()[1]) > 100_000 and int(checked[0].split()[2]) == 0


def test_forward_rows_match_the_reference_mask(probe: list[str]) -> None:
    n = 0
    for line in probe:
        if not line.startswith("rows "):
            continue
        f = line.split()
        sq, sk, mode, left, right, nl, nr = (int(x) for x in f[1:8])
        got = _ranges_to_mask(f[8:], sk)
        want = _mask(sq, sk, mode, (left, right))
        assert torch.equal(got, want), f"Sq={sq} Sk={sk} mode={mode} window=({left}, {right}) -> ({nl}, {nr})"
        # a window edge the host turned into -1 is one no row reaches
        if left >= 0 and nl == -1:
            assert torch.equal(want, _mask(sq, sk, mode, (-1, right)))
        if right >= 0 and nr == -1:
            assert torch.equal(want, _mask(sq, sk, mode, (left, -1)))
        n += 1
    assert n > 1000


def test_decode_rows_match_the_reference_mask(probe: list[str]) -> None:
    """The decode path: bottom-right per batch (offset seqlen_k(b) - Sq), normalized against
    Sk_max; keys_needed() bounds what any tile needs (the split planner's key count)."""
    n = 0
    for line in probe:
        if not line.startswith("decode "):
            continue
        f = line.split()
        sq, sk, causal, left, right, keys_needed = (int(x) for x in f[1:7])
        got = _ranges_to_mask(f[7:], sk)
        want = _mask(sq, sk, BOTTOM_RIGHT if causal else NONE, (left, right))
        assert torch.equal(got, want), f"decode Sq={sq} Sk={sk} causal={causal} window=({left}, {right})"
        cols = want.any(dim=0).nonzero()
        if len(cols):
            assert int(cols.max() - cols.min()) + 1 <= keys_needed
        n += 1
    assert n > 500


# ---- the float64 reference ------------------------------------------------------------------------


@st.composite
def windowed_problems(draw):
    q, k, v, dout, scale, mode = draw(fst.float64_problems())
    window = draw(fst.windows(max_extent=80))
    softcap = draw(fst.softcaps())
    return q, k, v, dout, scale, mode, window, softcap


@given(problem=windowed_problems())
def test_reference_window_matches_sdpa_math_with_an_explicit_mask(problem) -> None:
    q, k, v, _, scale, mode, window, _ = problem
    out, lse = flashattn.attention_reference(q, k, v, scale, mode, window)
    mask = visible_keys(q.shape[1], k.shape[1], mode, window)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        expected = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, scale=scale,
            enable_gqa=q.shape[2] != k.shape[2],
        ).transpose(1, 2)
    visible = torch.isfinite(lse).transpose(1, 2)
    torch.testing.assert_close(out[visible], expected[visible], rtol=1e-10, atol=1e-10)
    # rows that see no key: 0 and -inf; exactly the rows whose mask row is empty
    assert torch.equal(out[~visible], torch.zeros_like(out[~visible]))
    if mask is not None:
        empty_rows = ~mask.any(dim=1)  # [Sq]
        assert torch.equal(torch.isinf(lse), empty_rows.expand_as(lse))


@given(problem=windowed_problems())
def test_reference_softcap_is_the_capped_softmax(problem) -> None:
    q, k, v, _, scale, mode, window, softcap = problem
    softcap = softcap or 5.0
    out, lse = flashattn.attention_reference(q, k, v, scale, mode, window, softcap)
    group = q.shape[2] // k.shape[2]
    x = torch.einsum("bihd,bjhd->bhij", q, k.repeat_interleave(group, dim=2)) * scale
    s = softcap * torch.tanh(x / softcap)
    mask = visible_keys(q.shape[1], k.shape[1], mode, window)
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    want_lse = torch.logsumexp(s, dim=-1)
    torch.testing.assert_close(lse, want_lse, rtol=1e-12, atol=1e-12)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    want = torch.einsum("bhij,bjhd->bihd", p, v.repeat_interleave(group, dim=2))
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-10)
    assert bool((lse[torch.isfinite(lse)].abs() <= softcap + math.log(k.shape[1]) + 1e-9).all())


@given(problem=windowed_problems())
def test_reference_gradients_with_window_and_softcap_match_autograd(problem) -> None:
    """attention_reference_grads' explicit formulas (incl. the softcap's 1 - tanh^2) against
    autograd through attention_reference (float64)."""
    q, k, v, dout, scale, mode, window, softcap = problem
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out, _ = flashattn.attention_reference(*leaves, scale, mode, window, softcap)
    want = torch.autograd.grad(out, leaves, dout, allow_unused=True)
    got = flashattn.attention_reference_grads(q, k, v, dout, scale, mode, window, softcap)
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        w = torch.zeros_like(g) if w is None else w.nan_to_num(0.0)
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-9, msg=lambda m, name=name: f"{name}: {m}")


def test_windows_wider_than_the_sequences_and_causal_right_edge_change_nothing() -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, s, 2, 16, generator=gen, dtype=F64) for s in (9, 13, 13))
    for mode in (NONE, TOP_LEFT, BOTTOM_RIGHT):
        plain = flashattn.attention_reference(q, k, v, 0.3, mode)
        for window in ((100, 100), (100, -1), (-1, 100), (12, 12) if mode == NONE else (-1, 100)):
            got = flashattn.attention_reference(q, k, v, 0.3, mode, window)
            assert all(torch.equal(a, b) for a, b in zip(got, plain)), (mode, window)
    causal = flashattn.attention_reference(q, k, v, 0.3, BOTTOM_RIGHT)
    for right in (0, 3, -1):  # causal is right = 0 on top of the window
        assert all(torch.equal(a, b) for a, b in zip(flashattn.attention_reference(q, k, v, 0.3, BOTTOM_RIGHT, (-1, right)), causal))
    # a non-causal right = 0 window is bottom-right causal masking
    assert all(torch.equal(a, b) for a, b in zip(flashattn.attention_reference(q, k, v, 0.3, NONE, (-1, 0)), causal))


def test_window_zero_zero_sees_only_the_diagonal_key() -> None:
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, s, 3, 8, generator=gen, dtype=F64) for s in (5, 8, 8))
    out, lse = flashattn.attention_reference(q, k, v, 0.5, NONE, (0, 0))
    # bottom-right: query i sees exactly key i + 3
    torch.testing.assert_close(out, v[:, 3:], rtol=0, atol=1e-12)
    s = torch.einsum("bihd,bihd->bhi", q, k[:, 3:]) * 0.5
    torch.testing.assert_close(lse, s, rtol=0, atol=1e-12)


# ---- op schemas, fake kernels, autograd glue ------------------------------------------------------


def test_schemas_carry_window_and_softcap_with_defaults() -> None:
    tail = "int window_left=-1, int window_right=-1, float softcap=0."
    for op in ("fwd", "fwd_bhsd", "bwd", "fwd_kvcache"):
        schema = str(getattr(torch.ops.flashattn, op).default._schema)
        # fwd_kvcache has more optional arguments after them (the paged cache's block table, seqused_k).
        end = ", Tensor? block_table=None, Tensor? seqused_k=None)" if op == "fwd_kvcache" else ")"
        assert tail + end in schema, schema


def test_fake_kernels_accept_window_and_softcap() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 7, 4, 64, dtype=torch.float16, device="cuda")
        k = torch.empty(2, 9, 2, 64, dtype=torch.float16, device="cuda")
        out, lse = torch.ops.flashattn.fwd(q, k, k, 0.1, BOTTOM_RIGHT, "auto", 3, 0, 30.0)
        assert out.shape == q.shape and lse.shape == (2, 4, 7)
        out, lse = torch.ops.flashattn.fwd_bhsd(q.transpose(1, 2), k.transpose(1, 2), k.transpose(1, 2), 0.1, NONE,
                                                "auto", 5, 5, 0.0)
        assert out.shape == (2, 4, 7, 64)
        dq, dk, dv = torch.ops.flashattn.bwd(q, q, k, k, q, lse, 0.1, NONE, False, "auto", 5, 5, 0.0)
        assert dq.shape == q.shape and dk.shape == k.shape


@pytest.mark.parametrize(("window", "softcap"), [((4, 0), 0.0), ((-1, -1), 20.0), ((2, 3), 7.5)])
def test_backward_with_window_or_softcap_passes_them_to_the_op(monkeypatch, window, softcap) -> None:
    """The backward op gets the forward's window and softcap (and the stand-in, the float64
    gradient reference, differentiates them): the gradients through flash_attn_func are the
    reference's, so nothing on the way drops or reorders them."""
    allow_cpu_entry_points(monkeypatch)
    with cpu_standin_kernels() as calls:
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, s, 2, 8, generator=gen, dtype=F64).requires_grad_(True) for s in (6, 9, 9))
        dout = torch.randn(1, 6, 2, 8, generator=gen, dtype=F64)
        mode = BOTTOM_RIGHT if window[1] == 0 else NONE
        out = flashattn.flash_attn_func(q, k, v, causal=window[1] == 0, window_size=window, softcap=softcap)
        out.backward(dout)
        assert calls[-1].window == window and calls[-1].softcap == softcap
        want = flashattn.attention_reference_grads(q.detach(), k.detach(), v.detach(), dout, None, mode, window,
                                                   softcap)
        for got, ref in zip((q.grad, k.grad, v.grad), want):
            torch.testing.assert_close(got, ref)


def test_backward_without_window_or_softcap_passes_the_defaults(monkeypatch) -> None:
    allow_cpu_entry_points(monkeypatch)
    with cpu_standin_kernels() as calls:
        q, k, v = (torch.randn(1, 5, 2, 8, dtype=F64).requires_grad_(True) for _ in range(3))
        flashattn.flash_attn_func(q, k, v, causal=True).sum().backward()
        assert calls[-1].window == (-1, -1) and calls[-1].softcap == 0.0
        assert q.grad is not None


# ---- the numerics criterion with window and softcap (tests/numerics.py) ---------------------------


def _flash_emulation(q, k, v, scale, mode, window, softcap, tanh_rel=0.0, seed=0):
    """What a correct flash kernel returns for a window/softcap call: float32 scores, the softcap
    through a tanh with relative error up to tanh_rel (random signs: a stand-in for
    tanh.approx.f32), P rounded to the input dtype before P V. -> (out, lse float32)."""
    group = q.shape[2] // k.shape[2]
    kf = k.float().repeat_interleave(group, dim=2)
    vf = v.float().repeat_interleave(group, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q.float(), kf) * scale
    if softcap:
        t = emulated_tanh(s / softcap, tanh_rel, seed)
        s = softcap * t
    visible = visible_keys(q.shape[1], k.shape[1], mode, window)
    if visible is not None:
        s = s.masked_fill(~visible, -math.inf)
    m = s.amax(dim=-1, keepdim=True)
    empty = torch.isneginf(m)
    p = torch.exp(s - torch.where(empty, torch.zeros_like(m), m))
    l = p.sum(dim=-1, keepdim=True)
    p = p.to(q.dtype).float()
    o = torch.einsum("bhij,bjhd->bihd", p, vf) / torch.where(empty, torch.ones_like(l), l).transpose(1, 2)
    lse = (torch.log(l) + m)[..., 0].masked_fill(empty[..., 0], -math.inf)
    return o.to(q.dtype), lse


cpu_window_specs = fst.attention_specs(max_batch=2, max_seqlen=80, max_heads_q=4)


@given(spec=cpu_window_specs, window=fst.windows(max_extent=80), softcap=fst.softcaps())
# Rows past the keys see none: the same-dtype baseline once carried their NaN into row 4
# (numerics.sdpa_same_dtype).
@example(
    spec=fst.AttentionSpec(batch=2, seqlen_q=31, seqlen_k=5, heads_q=1, heads_kv=1, head_dim=16, dtype=torch.bfloat16,
                           causal_mode=1, scale=None, layout_q=fst.Layout("contiguous", 0),
                           layout_kv=fst.Layout("contiguous", 0), magnitude=1.0, seed=0),
    window=(0, 0),
    softcap=1.0,
)
def test_criterion_accepts_a_correct_window_softcap_kernel(spec, window, softcap) -> None:
    """A flash-style kernel with the approximate tanh's full error (2^-11 relative, random sign per
    score) passes: the same-dtype baseline plus the documented tanh allowance cover it."""
    from numerics import assert_attention_matches, resolve_scale

    x = spec.make("cpu")
    scale = resolve_scale(x.scale, spec.head_dim)
    out, lse = _flash_emulation(x.q, x.k, x.v, scale, x.causal_mode, window, softcap, tanh_rel=2.0**-11, seed=spec.seed)
    assert_attention_matches(out, lse, x.q, x.k, x.v, x.scale, x.causal_mode, window=window, softcap=softcap)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("bug", ["window-off-by-one", "window-ignored", "softcap-ignored", "softcap-wrong"])
def test_criterion_rejects_a_wrong_window_or_softcap(dtype, bug) -> None:
    from numerics import assert_attention_matches

    spec = fst.AttentionSpec(1, 64, 80, 2, 2, 64, dtype, NONE, None, fst.Layout("contiguous"), fst.Layout("contiguous"),
                             1.0 if bug.startswith("window") else 30.0, 0)
    x = spec.make("cpu")
    scale = 1 / 8
    window, softcap = ((8, 0), 0.0) if bug.startswith("window") else ((-1, -1), 20.0)
    kernel_window, kernel_softcap = {
        "window-off-by-one": ((9, 0), 0.0),
        "window-ignored": ((-1, -1), 0.0),
        "softcap-ignored": ((-1, -1), 0.0),
        "softcap-wrong": ((-1, -1), 22.0),
    }[bug]
    out, lse = _flash_emulation(x.q, x.k, x.v, scale, NONE, kernel_window, kernel_softcap)
    with pytest.raises(AssertionError):
        assert_attention_matches(out, lse, x.q, x.k, x.v, None, NONE, window=window, softcap=softcap)
