"""Hypothesis strategies for attention inputs, one per input family, and their materialization.

A drawn `AttentionSpec` is a small, printable description (shapes, dtype, causal alignment, scale,
memory layout of q and of k/v, logit magnitude, seed); `spec.make(device)` builds the tensors.
Hypothesis prints the shrunk spec of a failing example, e.g.
    AttentionSpec(B=1 Sq=1 Sk=65 Hq=2 Hk=1 D=8 float16 causal=bottom-right scale=default
                  q=contiguous kv=pad_dim+5 logits=x1 seed=0)
Sizes are bounded so that one example stays small (the float64 reference materializes the
[B, Hq, Sq, Sk] scores): by default B <= 3, Hq <= 8, S <= 300, D <= 256.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

import flashattn
from numerics import CAUSAL_NAMES

DTYPES = (torch.float16, torch.bfloat16)
CAUSAL_MODES = (flashattn.CAUSAL_NONE, flashattn.CAUSAL_TOP_LEFT, flashattn.CAUSAL_BOTTOM_RIGHT)
HEAD_DIMS = tuple(range(8, 257, 8))
# Sequence lengths around the kernels' tile sizes (query blocks of 64/128 rows, key blocks of 32/64/128).
TILE_EDGES = (31, 32, 33, 63, 64, 65, 127, 128, 129, 191, 255, 256, 257)
LAYOUT_KINDS = ("contiguous", "bhsd", "pad_dim", "slice_heads", "slice_seq", "offset")
MAGNITUDES = (1.0, 30.0)


@dataclass(frozen=True)
class Layout:
    """How a [B, S, H, D] operand sits in memory (always unit stride in D):

    contiguous   a contiguous [B, S, H, D] tensor
    bhsd         a transposed view of a contiguous [B, H, S, D] tensor (torch's SDPA layout)
    pad_dim      [..., :D] of a [B, S, H, D + pad] tensor: row/head strides padded by `pad`
                 (pad not a multiple of 8 gives strides the kernel cannot load 16 bytes at a time)
    slice_heads  [:, :, pad:] of a [B, S, H + pad, D] tensor: offset base pointer, head stride D
    slice_seq    [:, pad:] of a [B, S + pad, H, D] tensor: offset base pointer
    offset       a contiguous [B, S, H, D] view `pad` elements into a flat buffer: torch calls it
                 contiguous, its base is not 16-byte aligned for pad % 8 != 0 (the kernels' loads
                 need a copy that contiguous() does not make)
    """

    kind: str
    pad: int = 0

    def __str__(self) -> str:
        return self.kind if self.pad == 0 else f"{self.kind}+{self.pad}"


def make_operand(
    shape: tuple[int, int, int, int],
    layout: Layout,
    dtype: torch.dtype,
    device: torch.device | str,
    generator: torch.Generator,
    magnitude: float = 1.0,
) -> torch.Tensor:
    """A [B, S, H, D] tensor of N(0, magnitude^2) values (rounded to `dtype`) laid out as `layout`."""
    b, s, h, d = shape
    pad = layout.pad

    def randn(*size: int) -> torch.Tensor:
        x = torch.randn(*size, generator=generator, device=device, dtype=torch.float32)
        return (x * magnitude).to(dtype)

    if layout.kind == "contiguous":
        return randn(b, s, h, d)
    if layout.kind == "bhsd":
        return randn(b, h, s, d).transpose(1, 2)
    if layout.kind == "pad_dim":
        return randn(b, s, h, d + pad)[..., :d]
    if layout.kind == "slice_heads":
        return randn(b, s, h + pad, d)[:, :, pad:]
    if layout.kind == "slice_seq":
        return randn(b, s + pad, h, d)[:, pad:]
    if layout.kind == "offset":
        return randn(pad + b * s * h * d)[pad:].view(b, s, h, d)
    raise ValueError(f"unknown layout {layout.kind!r}")


@dataclass(frozen=True)
class AttentionInputs:
    """Materialized operands, [B, S, H, D] views, with the call's scale and causal alignment."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    scale: float | None
    causal_mode: int


@dataclass(frozen=True)
class AttentionSpec:
    """One attention problem, small and printable; `make(device)` builds its tensors."""

    batch: int
    seqlen_q: int
    seqlen_k: int
    heads_q: int
    heads_kv: int
    head_dim: int
    dtype: torch.dtype
    causal_mode: int
    scale: float | None  # None: the default 1/sqrt(D)
    layout_q: Layout
    layout_kv: Layout
    magnitude: float  # q is scaled by this: 30 gives logits ~30x larger than unit inputs
    seed: int

    @property
    def resolved_scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim) if self.scale is None else self.scale

    def make(self, device: torch.device | str) -> AttentionInputs:
        gen = torch.Generator(device=device).manual_seed(self.seed)
        q = make_operand(
            (self.batch, self.seqlen_q, self.heads_q, self.head_dim), self.layout_q, self.dtype, device, gen, self.magnitude
        )
        kv_shape = (self.batch, self.seqlen_k, self.heads_kv, self.head_dim)
        k = make_operand(kv_shape, self.layout_kv, self.dtype, device, gen)
        v = make_operand(kv_shape, self.layout_kv, self.dtype, device, gen)
        return AttentionInputs(q, k, v, self.scale, self.causal_mode)

    def __repr__(self) -> str:
        scale = "default" if self.scale is None else f"{self.scale:.6g}"
        return (
            f"AttentionSpec(B={self.batch} Sq={self.seqlen_q} Sk={self.seqlen_k} Hq={self.heads_q} "
            f"Hk={self.heads_kv} D={self.head_dim} {str(self.dtype).replace('torch.', '')} "
            f"causal={CAUSAL_NAMES[self.causal_mode]} scale={scale} q={self.layout_q} kv={self.layout_kv} "
            f"logits=x{self.magnitude:g} seed={self.seed})"
        )


@dataclass(frozen=True)
class Edge:
    """A named edge-case problem shape for explicit parametrized tests; `spec(dtype, mode)` is the
    AttentionSpec (q contiguous, seed 0) for one dtype and causal alignment of `modes`."""

    id: str
    batch: int
    seqlen_q: int
    seqlen_k: int
    heads_q: int
    heads_kv: int
    head_dim: int
    modes: tuple[int, ...] = CAUSAL_MODES
    scale: float | None = None
    layout_kv: Layout = Layout("contiguous")
    magnitude: float = 1.0
    slow: bool = False

    def spec(self, dtype: torch.dtype, mode: int) -> AttentionSpec:
        return AttentionSpec(self.batch, self.seqlen_q, self.seqlen_k, self.heads_q, self.heads_kv, self.head_dim, dtype,
                             mode, self.scale, Layout("contiguous"), self.layout_kv, self.magnitude, seed=0)


# ---- one strategy per input family -------------------------------------------------------------


def batch_sizes(max_batch: int = 3) -> st.SearchStrategy[int]:
    return st.integers(1, max_batch)


@st.composite
def head_counts(draw: st.DrawFn, max_heads_q: int = 8, gqa: bool = True) -> tuple[int, int]:
    """(Hq, Hk) with Hq a multiple of Hk: MHA, GQA and MQA (Hk = 1)."""
    heads_kv = draw(st.integers(1, max_heads_q))
    group = draw(st.integers(1, max_heads_q // heads_kv)) if gqa else 1
    return heads_kv * group, heads_kv


def seqlens(max_seqlen: int = 300) -> st.SearchStrategy[int]:
    """1..max_seqlen, weighted toward short lengths and the kernels' tile edges."""
    edges = [s for s in TILE_EDGES if s <= max_seqlen]
    parts = [st.integers(1, min(16, max_seqlen)), st.integers(1, max_seqlen)]
    if edges:
        parts.insert(1, st.sampled_from(edges))
    return st.one_of(*parts)


def head_dims() -> st.SearchStrategy[int]:
    """Every supported head dim: multiples of 8 in [8, 256] (the kernels round up internally)."""
    return st.sampled_from(HEAD_DIMS)


def dtypes() -> st.SearchStrategy[torch.dtype]:
    return st.sampled_from(DTYPES)


def causal_modes(modes: tuple[int, ...] = CAUSAL_MODES) -> st.SearchStrategy[int]:
    return st.sampled_from(modes)


def scales() -> st.SearchStrategy[float | None]:
    """None (default 1/sqrt(D)), 0, or any float32 in [-1, 1] (negative scales are legal)."""
    return st.one_of(st.none(), st.just(0.0), st.floats(-1.0, 1.0, allow_nan=False, allow_infinity=False, width=32))


def layouts() -> st.SearchStrategy[Layout]:
    return st.one_of(
        st.just(Layout("contiguous")),
        st.just(Layout("bhsd")),
        st.builds(Layout, st.just("pad_dim"), st.sampled_from((8, 5, 64))),
        st.builds(Layout, st.just("slice_heads"), st.integers(1, 3)),
        st.builds(Layout, st.just("slice_seq"), st.integers(1, 5)),
        st.builds(Layout, st.just("offset"), st.integers(1, 7)),
    )


def magnitudes() -> st.SearchStrategy[float]:
    """Logit magnitude: unit inputs, or q scaled x30 (nearly one-hot softmax, large LSE)."""
    return st.sampled_from(MAGNITUDES)


def windows(max_extent: int = 300) -> st.SearchStrategy[tuple[int, int]]:
    """Local-attention windows (left, right), -1 unbounded: (0, 0), one-sided (left, -1) and
    (-1, right), two-sided, and windows wider than any drawn sequence (max_extent and beyond)."""
    side = st.one_of(st.just(0), st.integers(1, 16), st.integers(0, max_extent), st.just(max_extent + 50))
    return st.one_of(
        st.just((0, 0)),
        st.tuples(side, st.just(-1)),
        st.tuples(st.just(-1), side),
        st.tuples(side, side),
    )


def softcaps() -> st.SearchStrategy[float]:
    """0 (off), or a cap from far below to far above typical logits (with magnitude-30 inputs the
    scores reach ~100: caps of 1..50 saturate tanh)."""
    return st.one_of(st.just(0.0), st.sampled_from((1.0, 5.0, 30.0, 50.0)), st.floats(0.5, 100.0, width=32))


def seeds() -> st.SearchStrategy[int]:
    return st.integers(0, 2**31 - 1)


@st.composite
def attention_specs(
    draw: st.DrawFn,
    *,
    max_batch: int = 3,
    max_seqlen: int = 300,
    max_heads_q: int = 8,
    gqa: bool = True,
    dtype_choices: tuple[torch.dtype, ...] = DTYPES,
    causal_choices: tuple[int, ...] = CAUSAL_MODES,
) -> AttentionSpec:
    """A whole attention problem drawn from the per-family strategies above."""
    heads_q, heads_kv = draw(head_counts(max_heads_q, gqa))
    return AttentionSpec(
        batch=draw(batch_sizes(max_batch)),
        seqlen_q=draw(seqlens(max_seqlen)),
        seqlen_k=draw(seqlens(max_seqlen)),
        heads_q=heads_q,
        heads_kv=heads_kv,
        head_dim=draw(head_dims()),
        dtype=draw(st.sampled_from(dtype_choices)),
        causal_mode=draw(causal_modes(causal_choices)),
        scale=draw(scales()),
        layout_q=draw(layouts()),
        layout_kv=draw(layouts()),
        magnitude=draw(magnitudes()),
        seed=draw(seeds()),
    )


@st.composite
def float64_problems(draw: st.DrawFn):
    """A small float64 problem on the CPU for the references' own checks: (q, k, v, dout, scale,
    mode), [B, S, H, D] tensors (GQA, both causal alignments, rows that see no key, scale 0)."""
    b = draw(batch_sizes(2))
    hq, hk = draw(head_counts(6))
    sq, sk = draw(seqlens(70)), draw(seqlens(70))
    d = draw(st.sampled_from((8, 16, 40, 64)))
    mode = draw(causal_modes())
    scale = draw(scales())
    gen = torch.Generator().manual_seed(draw(seeds()))
    f64 = torch.float64
    q = torch.randn(b, sq, hq, d, generator=gen, dtype=f64) * draw(magnitudes())
    k = torch.randn(b, sk, hk, d, generator=gen, dtype=f64)
    v = torch.randn(b, sk, hk, d, generator=gen, dtype=f64)
    dout = torch.randn(b, sq, hq, d, generator=gen, dtype=f64)
    return q, k, v, dout, (1 / math.sqrt(d) if scale is None else scale), mode


# ---- packed variable-length batches (flash_attn_varlen_func) -----------------------------------


@dataclass(frozen=True)
class VarlenInputs:
    """Materialized packed operands: q [total_q, Hq, D], k/v [total_k, Hk, D] (views laid out as the
    spec says), cu_seqlens int32 [B + 1] on the device, and the lengths as Python lists."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    cu_seqlens_q: torch.Tensor
    cu_seqlens_k: torch.Tensor
    cu_q: list[int]
    cu_k: list[int]
    scale: float | None


def cumulative(lengths: tuple[int, ...]) -> list[int]:
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    return cu


@dataclass(frozen=True)
class VarlenSpec:
    """One packed batch, small and printable; `make(device)` builds its tensors. q_lens / k_lens are
    the per-sequence lengths (0 allowed); the packed rows are their concatenation."""

    q_lens: tuple[int, ...]
    k_lens: tuple[int, ...]
    heads_q: int
    heads_kv: int
    head_dim: int
    dtype: torch.dtype
    causal_mode: int
    window: tuple[int, int]
    softcap: float
    scale: float | None
    layout_q: Layout
    layout_kv: Layout
    magnitude: float
    seed: int

    @property
    def max_seqlen_q(self) -> int:
        return max(self.q_lens)

    @property
    def max_seqlen_k(self) -> int:
        return max(self.k_lens)

    def make(self, device: torch.device | str) -> VarlenInputs:
        gen = torch.Generator(device=device).manual_seed(self.seed)
        cu_q, cu_k = cumulative(self.q_lens), cumulative(self.k_lens)
        # [1, S, H, D] operands of the dense layouts, batch dim dropped: the same strides per row/head
        q = make_operand((1, cu_q[-1], self.heads_q, self.head_dim), self.layout_q, self.dtype, device, gen,
                         self.magnitude)[0]
        kv_shape = (1, cu_k[-1], self.heads_kv, self.head_dim)
        k = make_operand(kv_shape, self.layout_kv, self.dtype, device, gen)[0]
        v = make_operand(kv_shape, self.layout_kv, self.dtype, device, gen)[0]
        as_tensor = lambda cu: torch.tensor(cu, dtype=torch.int32, device=device)  # noqa: E731
        return VarlenInputs(q, k, v, as_tensor(cu_q), as_tensor(cu_k), cu_q, cu_k, self.scale)

    def __repr__(self) -> str:
        scale = "default" if self.scale is None else f"{self.scale:.6g}"
        return (
            f"VarlenSpec(q_lens={list(self.q_lens)} k_lens={list(self.k_lens)} Hq={self.heads_q} Hk={self.heads_kv} "
            f"D={self.head_dim} {str(self.dtype).replace('torch.', '')} causal={CAUSAL_NAMES[self.causal_mode]} "
            f"window={self.window} softcap={self.softcap:g} scale={scale} q={self.layout_q} kv={self.layout_kv} "
            f"logits=x{self.magnitude:g} seed={self.seed})"
        )


def packed_lengths(max_seqlen: int = 300) -> st.SearchStrategy[int]:
    """One sequence's length: 0 and 1 often, short ones, tile edges, anything up to max_seqlen."""
    return st.one_of(st.sampled_from((0, 1)), seqlens(max_seqlen))


@st.composite
def varlen_specs(
    draw: st.DrawFn,
    *,
    max_batch: int = 5,
    max_seqlen: int = 300,
    max_heads_q: int = 8,
    causal_choices: tuple[int, ...] = (flashattn.CAUSAL_NONE, flashattn.CAUSAL_BOTTOM_RIGHT),
    with_window: bool = True,
    with_softcap: bool = True,
) -> VarlenSpec:
    """A packed batch: B sequences with independent query and key lengths (or equal ones, as in
    packed self-attention), at least one query row in all; GQA; every head dim; the causal modes,
    windows and softcaps of the dense strategies; the dense layouts' row/head strides."""
    batch = draw(st.integers(1, max_batch))
    q_lens = tuple(draw(st.lists(packed_lengths(max_seqlen), min_size=batch, max_size=batch)))
    if sum(q_lens) == 0:
        q_lens = (draw(st.integers(1, max_seqlen)),) + q_lens[1:]
    same = draw(st.booleans())
    k_lens = q_lens if same else tuple(draw(st.lists(packed_lengths(max_seqlen), min_size=batch, max_size=batch)))
    heads_q, heads_kv = draw(head_counts(max_heads_q))
    return VarlenSpec(
        q_lens=q_lens,
        k_lens=k_lens,
        heads_q=heads_q,
        heads_kv=heads_kv,
        head_dim=draw(head_dims()),
        dtype=draw(dtypes()),
        causal_mode=draw(causal_modes(causal_choices)),
        window=draw(st.one_of(st.just((-1, -1)), windows(max_seqlen))) if with_window else (-1, -1),
        softcap=draw(st.one_of(st.just(0.0), softcaps())) if with_softcap else 0.0,
        scale=draw(scales()),
        layout_q=draw(layouts()),
        layout_kv=draw(layouts()),
        magnitude=draw(magnitudes()),
        seed=draw(seeds()),
    )
