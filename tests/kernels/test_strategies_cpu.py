"""The Hypothesis strategies generate valid, varied inputs (on CPU; the GPU tests draw the same)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from hypothesis import Phase, find, given, settings

import flashattn
import strategies as fst
from strategies import AttentionSpec, Layout


@given(spec=fst.attention_specs())
def test_specs_are_within_the_supported_envelope(spec: AttentionSpec) -> None:
    assert 1 <= spec.batch <= 3 and 1 <= spec.seqlen_q <= 300 and 1 <= spec.seqlen_k <= 300
    assert spec.heads_q % spec.heads_kv == 0 and spec.heads_q <= 8
    assert spec.head_dim % 8 == 0 and 8 <= spec.head_dim <= 256
    assert spec.dtype in (torch.float16, torch.bfloat16)
    assert spec.causal_mode in (flashattn.CAUSAL_NONE, flashattn.CAUSAL_TOP_LEFT, flashattn.CAUSAL_BOTTOM_RIGHT)
    assert spec.scale is None or -1.0 <= spec.scale <= 1.0


@given(spec=fst.attention_specs(max_seqlen=64, max_heads_q=4))
def test_materialized_inputs_are_valid_views(spec: AttentionSpec) -> None:
    x = spec.make("cpu")
    assert x.q.shape == (spec.batch, spec.seqlen_q, spec.heads_q, spec.head_dim)
    assert x.k.shape == x.v.shape == (spec.batch, spec.seqlen_k, spec.heads_kv, spec.head_dim)
    for t, layout in ((x.q, spec.layout_q), (x.k, spec.layout_kv), (x.v, spec.layout_kv)):
        assert t.dtype == spec.dtype
        assert t.stride(-1) == 1, "the last dimension must be contiguous"
        assert torch.isfinite(t).all()
        if layout.kind == "contiguous":
            assert t.is_contiguous()
        if layout.kind == "pad_dim":
            assert t.stride(2) == spec.head_dim + layout.pad
        if layout.kind == "bhsd" and spec.seqlen_q > 1 and t is x.q:
            assert t.stride(2) == spec.seqlen_q * spec.head_dim


@given(spec=fst.attention_specs(max_seqlen=32, max_heads_q=2))
def test_materialization_is_deterministic(spec: AttentionSpec) -> None:
    a, b = spec.make("cpu"), spec.make("cpu")
    for x, y in ((a.q, b.q), (a.k, b.k), (a.v, b.v)):
        assert torch.equal(x, y) and x.stride() == y.stride()


@pytest.mark.parametrize(
    "layout",
    [Layout("contiguous"), Layout("bhsd"), Layout("pad_dim", 5), Layout("pad_dim", 8), Layout("slice_heads", 2), Layout("slice_seq", 3),
     Layout("offset", 3)],
    ids=str,
)
def test_each_layout_holds_the_same_kind_of_values(layout: Layout) -> None:
    gen = torch.Generator().manual_seed(0)
    t = fst.make_operand((2, 50, 3, 16), layout, torch.float16, "cpu", gen, magnitude=30.0)
    assert t.shape == (2, 50, 3, 16) and t.stride(-1) == 1
    assert 20 < float(t.float().std()) < 40  # N(0, 30^2)
    if layout.kind == "offset":  # the kind exists for this: contiguous to torch, not 16-byte aligned
        assert t.is_contiguous() and t.data_ptr() % 16 != 0


def test_spec_repr_names_the_shape() -> None:
    spec = AttentionSpec(1, 1, 65, 2, 1, 8, torch.float16, flashattn.CAUSAL_BOTTOM_RIGHT, None, Layout("contiguous"), Layout("pad_dim", 5), 1.0, 0)
    assert repr(spec) == (
        "AttentionSpec(B=1 Sq=1 Sk=65 Hq=2 Hk=1 D=8 float16 causal=bottom-right scale=default "
        "q=contiguous kv=pad_dim+5 logits=x1 seed=0)"
    )


# Every input family reaches its interesting values (each `find` stops at the first example).
COVERAGE: list[tuple[str, Callable[[AttentionSpec], bool]]] = [
    ("GQA", lambda s: s.heads_q > s.heads_kv > 1),
    ("MQA", lambda s: s.heads_kv == 1 and s.heads_q > 1),
    ("Sq > Sk bottom-right (rows with no key)", lambda s: s.seqlen_q > s.seqlen_k and s.causal_mode == flashattn.CAUSAL_BOTTOM_RIGHT),
    ("Sq = 1, Sk at a tile edge", lambda s: s.seqlen_q == 1 and s.seqlen_k in fst.TILE_EDGES),
    ("Sq at a tile edge", lambda s: s.seqlen_q in (127, 128, 129)),
    ("D = 8", lambda s: s.head_dim == 8),
    ("D = 256", lambda s: s.head_dim == 256),
    ("scale 0", lambda s: s.scale == 0.0),
    ("negative scale", lambda s: s.scale is not None and s.scale < 0),
    ("logits x30", lambda s: s.magnitude == 30.0),
    ("bf16 top-left", lambda s: s.dtype == torch.bfloat16 and s.causal_mode == flashattn.CAUSAL_TOP_LEFT),
    ("transposed q", lambda s: s.layout_q.kind == "bhsd"),
    ("kv rows not 16-byte aligned", lambda s: s.layout_kv.kind == "pad_dim" and s.layout_kv.pad % 8 != 0),
    ("sliced heads", lambda s: s.layout_kv.kind == "slice_heads"),
    ("offset sequence", lambda s: s.layout_q.kind == "slice_seq"),
    ("contiguous q at an unaligned address", lambda s: s.layout_q.kind == "offset" and s.layout_q.pad % 8 != 0),
]


@pytest.mark.parametrize("predicate", [pytest.param(p, id=name) for name, p in COVERAGE])
def test_strategies_reach(predicate: Callable[[AttentionSpec], bool]) -> None:
    find(fst.attention_specs(), predicate, settings=settings(max_examples=2000, database=None, derandomize=True, phases=[Phase.generate]))
