"""Numerics on the GPU: every entry point against the float64 reference, by the one criterion of
tests/numerics.py, over Hypothesis-drawn problems and explicit edge cases. Outputs are allocated
from NaN-poisoned memory, so an element the kernel forgets to write shows up."""

from __future__ import annotations


import pytest
import torch
from hypothesis import given

import flashattn
from gpu_helpers import poison_cuda_allocator
from numerics import assert_attention_matches
from strategies import AttentionInputs, AttentionSpec, Edge, Layout, attention_specs

pytestmark = pytest.mark.gpu

NONE, TOP_LEFT, BOTTOM_RIGHT = flashattn.CAUSAL_NONE, flashattn.CAUSAL_TOP_LEFT, flashattn.CAUSAL_BOTTOM_RIGHT
MODE_IDS = {NONE: "none", TOP_LEFT: "top-left", BOTTOM_RIGHT: "bottom-right"}
DTYPES = [pytest.param(torch.float16, id="fp16"), pytest.param(torch.bfloat16, id="bf16")]


def run_op(x: AttentionInputs, backend: str) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.ops.flashattn.fwd on fresh NaN-poisoned memory."""
    scale = 1.0 / x.q.shape[-1] ** 0.5 if x.scale is None else x.scale
    poison_cuda_allocator()
    return torch.ops.flashattn.fwd(x.q, x.k, x.v, scale, x.causal_mode, backend)


# ---- Hypothesis properties, one per entry point --------------------------------------------------


@given(spec=attention_specs())
def test_op_matches_reference(spec: AttentionSpec, backend: str, device: torch.device) -> None:
    x = spec.make(device)
    out, lse = run_op(x, backend)
    assert_attention_matches(out, lse, x.q, x.k, x.v, x.scale, x.causal_mode, context=f"backend {backend}")


@given(spec=attention_specs(causal_choices=(NONE, BOTTOM_RIGHT)))
def test_flash_attn_func_matches_reference(spec: AttentionSpec, backend: str, device: torch.device) -> None:
    x = spec.make(device)
    poison_cuda_allocator()
    with flashattn.use_backend(backend):
        out, lse = flashattn.flash_attn_func(
            x.q, x.k, x.v, softmax_scale=x.scale, causal=x.causal_mode == BOTTOM_RIGHT, return_lse=True
        )
    assert_attention_matches(out, lse, x.q, x.k, x.v, x.scale, x.causal_mode, context=f"backend {backend}")


@given(spec=attention_specs(causal_choices=(NONE, TOP_LEFT)))
def test_sdpa_matches_reference(spec: AttentionSpec, backend: str, device: torch.device) -> None:
    x = spec.make(device)
    query, key, value = (t.transpose(1, 2) for t in (x.q, x.k, x.v))  # torch layout [B, H, S, D]
    poison_cuda_allocator()
    with flashattn.use_backend(backend):
        out = flashattn.scaled_dot_product_attention(
            query, key, value, is_causal=x.causal_mode == TOP_LEFT, scale=x.scale, enable_gqa=spec.heads_q != spec.heads_kv
        )
    assert out.shape == query.shape
    assert_attention_matches(out.transpose(1, 2), None, x.q, x.k, x.v, x.scale, x.causal_mode, context=f"backend {backend}")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_default_backend_matches_reference(causal: bool, device: torch.device) -> None:
    """Whatever get_backend() says (FLASHATTN_BACKEND, default "auto") is right too."""
    spec = AttentionSpec(2, 200, 333, 8, 2, 128, torch.bfloat16, BOTTOM_RIGHT if causal else NONE, None,
                         Layout("contiguous"), Layout("contiguous"), 1.0, 0)
    x = spec.make(device)
    out, lse = flashattn.flash_attn_func(x.q, x.k, x.v, causal=causal, return_lse=True)
    assert_attention_matches(out, lse, x.q, x.k, x.v, None, x.causal_mode, context=f"backend {flashattn.get_backend()}")


# ---- explicit edge cases ------------------------------------------------------------------------


EDGES = [
    Edge("S=1", 1, 1, 1, 1, 1, 64),
    Edge("Sq=1,Sk=16k+7", 2, 1, 16391, 8, 2, 128),
    Edge("Sq=1,Sk=64k", 1, 1, 65536, 4, 1, 64, modes=(NONE, BOTTOM_RIGHT)),
    Edge("Sq=300>>Sk=17", 2, 300, 17, 4, 4, 64),  # bottom-right: rows 0..282 see no key
    Edge("Sq=1000,Sk=1", 1, 1000, 1, 2, 1, 32),
    Edge("Sq=17<<Sk=1000", 2, 17, 1000, 4, 2, 64),
    Edge("B*H=65544,GQA", 1, 3, 5, 65544, 8, 8),
    Edge("B*H=80000", 2, 2, 2, 40000, 40000, 8, modes=(NONE, BOTTOM_RIGHT)),
    Edge("D=8", 2, 130, 130, 4, 2, 8),
    Edge("D=256", 2, 130, 130, 4, 2, 256),
    Edge("D=256,Sq>Sk", 1, 200, 70, 2, 1, 256, modes=(BOTTOM_RIGHT,)),
    # Head dims 72..96 and 136..192 on the Hopper path: their own configs (Sm90DefaultConfig<96>, whose
    # second chunk plane is half used, and <192>).
    Edge("D=96,GQA", 2, 130, 130, 6, 2, 96),
    Edge("D=80,Sq>Sk", 1, 200, 70, 2, 1, 80, modes=(BOTTOM_RIGHT,)),
    Edge("full-480-tiles,D=96,GQA", 2, 1000, 1000, 30, 6, 96, modes=(NONE,)),
    Edge("D=192", 2, 130, 130, 4, 2, 192),
    Edge("D=152,Sq>Sk,GQA", 1, 200, 70, 6, 2, 152, modes=(BOTTOM_RIGHT,)),
    Edge("MQA", 2, 65, 257, 8, 1, 128),
    Edge("scale=0", 2, 70, 90, 4, 2, 64, scale=0.0),
    Edge("scale<0", 2, 70, 90, 4, 2, 64, scale=-0.7),
    Edge("logits-x30", 2, 129, 129, 2, 2, 64, magnitude=30.0),
    Edge("kv-rows-unaligned", 2, 100, 100, 4, 2, 64, layout_kv=Layout("pad_dim", 5)),
    # Contiguous by torch's rule at an address 6 bytes past 16: a copy is needed (contiguous() makes none);
    # one row of one head is the shape a sliced packed batch hands a dense call.
    Edge("kv-address-unaligned", 2, 100, 100, 4, 2, 64, layout_kv=Layout("offset", 3)),
    Edge("kv-address-unaligned,Sk=1", 1, 5, 1, 2, 1, 96, layout_kv=Layout("offset", 3)),
    Edge("causal-2k", 1, 2048, 2048, 2, 1, 128, modes=(TOP_LEFT, BOTTOM_RIGHT)),
    # Sk >= 4096 at D <= 64: the Hopper path's long-keys config (three warpgroups, 192-row tiles), ragged last block.
    Edge("long-keys,D=40,GQA", 2, 333, 4100, 6, 2, 40),
    Edge("long-keys,D=64,Sq>Sk", 1, 4500, 4096, 4, 4, 64, modes=(TOP_LEFT, BOTTOM_RIGHT)),
    # 4096 rows in 192-row tiles: the partial query tile first (Sm90Params::q_row_shift = 128): tile 0
    # owns rows 0-63 but computes 0-191, the next tile's first 128, which it must not store.
    Edge("long-keys,causal-4k,partial-tile-first", 2, 4096, 4096, 3, 1, 64, modes=(TOP_LEFT,)),
    Edge("causal-8k", 1, 8192, 8192, 1, 1, 64, modes=(BOTTOM_RIGHT,), slow=True),
    # Causal with far more query tiles than SMs: on an H100 the Hopper path hands these tiles out
    # through its per-call atomic counter (dynamic schedule), incl. tiles with no visible key.
    Edge("causal-1296-tiles,GQA", 3, 1100, 1300, 48, 8, 128, modes=(TOP_LEFT, BOTTOM_RIGHT)),
    Edge("causal-960-tiles,Sq>Sk", 2, 1500, 700, 40, 8, 64, modes=(BOTTOM_RIGHT,)),
    Edge("causal-400-tiles,D=256", 1, 1200, 1200, 40, 40, 256, modes=(TOP_LEFT,)),
    Edge("causal-400-tiles,D=192", 1, 1200, 1200, 40, 20, 192, modes=(TOP_LEFT, BOTTOM_RIGHT)),
    # Without a mask, several tiles of several key blocks per CTA (the static schedule's rounds).
    Edge("full-480-tiles,D=64,GQA", 2, 1000, 1000, 40, 8, 64, modes=(NONE,)),
    Edge("full-480-tiles,D=128,GQA", 2, 1000, 1000, 30, 6, 128, modes=(NONE,)),
    Edge("full-480-tiles,D=176,GQA", 2, 1000, 1000, 30, 6, 176, modes=(NONE,)),
]
EDGE_PARAMS = [
    pytest.param(edge, mode, id=f"{edge.id}-{MODE_IDS[mode]}", marks=[pytest.mark.slow] if edge.slow else [])
    for edge in EDGES
    for mode in edge.modes
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("edge", "mode"), EDGE_PARAMS)
def test_edge_case(edge: Edge, mode: int, dtype: torch.dtype, backend: str, device: torch.device) -> None:
    spec = edge.spec(dtype, mode)
    x = spec.make(device)
    out, lse = run_op(x, backend)
    errors = assert_attention_matches(out, lse, x.q, x.k, x.v, x.scale, x.causal_mode, context=f"backend {backend} {spec!r}")
    if edge.id == "Sq=300>>Sk=17" and mode == BOTTOM_RIGHT:
        assert errors.empty_rows == 2 * 4 * (300 - 17)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", [NONE, BOTTOM_RIGHT], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 96, 128, 192, 256])
@pytest.mark.parametrize("rise", [20.0, 150.0], ids=["rise-20", "rise-150"])
def test_row_max_rising_past_the_held_max(
    rise: float, head_dim: int, mode: int, dtype: torch.dtype, backend: str, device: torch.device
) -> None:
    """The Hopper forward walks a tile's key blocks from the last one down and, past the first, holds
    each row's max from the blocks before (the configs with traits.h kHoldLog2 >= 0, D=96 and D=128
    today: csrc/flash_fwd_sm90/softmax.cuh, update_held; the other head dims run update() and check it): a
    block whose scores rise above it by more than 2^8 scales its exponentials down, by more than
    2^120 (in log2 units) has its scores recomputed. Here every key before key 336 scores `rise`
    (natural-log units) above the others: 29 and 216 in log2 units. With key blocks of 64 to 128 keys
    the first block walked (the last, partial) has none of them and the second has some: the rise
    meets a held max."""
    batch, seqlen, heads, last_block = 2, 421, 3, 336
    gen = torch.Generator(device=device).manual_seed(11)
    q, k, v = (torch.randn(batch, seqlen, heads, head_dim, device=device, generator=gen) for _ in range(3))
    q[..., 0] = 1.0
    k[..., 0] = 0.0
    k[:, :last_block, :, 0] = rise * head_dim**0.5  # + rise on every score against these keys
    q, k, v = (t.to(dtype) for t in (q, k, v))
    poison_cuda_allocator()
    out, lse = torch.ops.flashattn.fwd(q, k, v, 1.0 / head_dim**0.5, mode, backend)
    assert_attention_matches(out, lse, q, k, v, None, mode, context=f"backend {backend} rise {rise} D={head_dim}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", [NONE, BOTTOM_RIGHT], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [96, 128, 192, 256])
def test_a_row_is_independent_of_the_other_rows(
    head_dim: int, mode: int, dtype: torch.dtype, backend: str, device: torch.device
) -> None:
    """A row's output and LSE are a function of its own query: bitwise the same when other rows of
    its tile (its warp's, its quad's) are changed so that they take update_held's other cases (a
    rise past 2^8 and past 2^120, NaN) in the blocks where this row takes the common one. Packed
    batches rely on it (a neighbour's rows share a tile)."""
    batch, seqlen, heads, last_block = 1, 421, 2, 336  # as in the test above: the rise meets a held max
    gen = torch.Generator(device=device).manual_seed(5)
    q, k, v = (torch.randn(batch, seqlen, heads, head_dim, device=device, generator=gen) for _ in range(3))
    q[..., 0] = 1.0
    k[..., 0] = 0.0
    k[:, :last_block, :, 0] = 3.0 * head_dim**0.5  # every row's max rises by ~3 past the first block walked
    changed = torch.zeros(seqlen, dtype=torch.bool, device=device)
    changed[1::3] = True
    q2 = q.clone()
    q2[:, 1::3, :, 0] = 60.0  # these rows rise by ~180 natural-log units: their scores recomputed
    q2[:, 4::9, :, 0] = 4.0  # ~12: scaled down
    q2[:, 7::27] = float("nan")
    q, k, v, q2 = (t.to(dtype) for t in (q, k, v, q2))
    scale = 1.0 / head_dim**0.5
    poison_cuda_allocator()
    out, lse = torch.ops.flashattn.fwd(q, k, v, scale, mode, backend)
    poison_cuda_allocator()
    out2, lse2 = torch.ops.flashattn.fwd(q2, k, v, scale, mode, backend)
    keep = ~changed
    assert torch.equal(out[:, keep], out2[:, keep]), "a row's output changed with the other rows of its tile"
    assert torch.equal(lse[:, :, keep], lse2[:, :, keep]), "a row's LSE changed with the other rows of its tile"


def test_empty_batch(backend: str, device: torch.device) -> None:
    q = torch.randn(0, 7, 4, 64, device=device, dtype=torch.float16)
    k = torch.randn(0, 9, 2, 64, device=device, dtype=torch.float16)
    out, lse = torch.ops.flashattn.fwd(q, k, k, 0.125, BOTTOM_RIGHT, backend)
    assert out.shape == (0, 7, 4, 64) and out.dtype == torch.float16
    assert lse.shape == (0, 4, 7) and lse.dtype == torch.float32
    with flashattn.use_backend(backend):
        out, lse = flashattn.flash_attn_func(q, k, k, causal=True, return_lse=True)
        assert out.shape == (0, 7, 4, 64) and lse.shape == (0, 4, 7)
        out = flashattn.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), k.transpose(1, 2), enable_gqa=True)
        assert out.shape == (0, 4, 7, 64)
    torch.cuda.synchronize()


# ---- scaled_dot_product_attention ranks ---------------------------------------------------------


def _bshd(t: torch.Tensor) -> torch.Tensor:
    """torch layout [..., H, S, D] (rank 2: [S, D]) as the [B, S, H, D] view the criterion takes."""
    if t.dim() == 2:
        return t[None, :, None, :]
    if t.dim() == 3:
        return t.transpose(0, 1)[None]
    return t.flatten(0, -4).transpose(1, 2)


@pytest.mark.parametrize(
    ("q_shape", "kv_shape"),
    [((100, 64), (70, 64)), ((4, 100, 64), (4, 70, 64)), ((3, 4, 100, 64), (3, 4, 70, 64)), ((3, 4, 100, 64), (3, 2, 70, 64)),
     ((2, 3, 4, 100, 64), (2, 3, 4, 70, 64)), ((2, 3, 4, 100, 64), (2, 3, 2, 70, 64))],
    ids=["rank2", "rank3", "rank4", "rank4-gqa", "rank5", "rank5-gqa"],
)
@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_sdpa_any_rank(q_shape, kv_shape, is_causal: bool, backend: str, device: torch.device) -> None:
    gen = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(q_shape, generator=gen, device=device).to(torch.bfloat16)
    k, v = (torch.randn(kv_shape, generator=gen, device=device).to(torch.bfloat16) for _ in range(2))
    gqa = len(q_shape) > 2 and q_shape[-3] != kv_shape[-3]
    poison_cuda_allocator()
    with flashattn.use_backend(backend):
        out = flashattn.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=gqa)
    assert out.shape == q.shape
    if q.dim() == 4:  # flashattn::fwd_bhsd: the strides its fake kernel promises a compiled graph
        b, h, s, d = q.shape
        assert out.stride() == (s * h * d, d, h * d, 1)
    mode = TOP_LEFT if is_causal else NONE
    assert_attention_matches(_bshd(out), None, _bshd(q), _bshd(k), _bshd(v), None, mode, context=f"backend {backend}")


def test_sdpa_is_top_left_and_flash_attn_func_bottom_right(backend: str, device: torch.device) -> None:
    """With Sq != Sk the two causal alignments differ; each entry point uses its documented one."""
    gen = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(1, 50, 2, 64, generator=gen, device=device).half()
    k, v = (torch.randn(1, 80, 2, 64, generator=gen, device=device).half() for _ in range(2))
    with flashattn.use_backend(backend):
        sdpa_out = flashattn.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        fa_out = flashattn.flash_attn_func(q, k, v, causal=True)
    assert_attention_matches(sdpa_out.transpose(1, 2), None, q, k, v, None, TOP_LEFT)
    assert_attention_matches(fa_out, None, q, k, v, None, BOTTOM_RIGHT)
    assert not torch.equal(sdpa_out.transpose(1, 2), fa_out)
