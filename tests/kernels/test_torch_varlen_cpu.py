"""Packed variable-length batches through PyTorch's flash-attention ops (flashattn/torch_impl.py),
checked without a GPU.

Our aten implementations are registered for the CPU key around flashattn's CPU stand-in kernels
(tests/standin_kernels.py: the float64 reference), so that the packed calls run through the
dispatcher as they do on the GPU once flashattn is activated:
  * aten::_flash_attention_forward with cum_seq_q / cum_seq_k (query [total_q, Hq, D]) and its
    backward (torch's autograd formula), torch.nn.attention.varlen.varlen_attn (its custom ops call
    the same aten ops) and, where torch has it, varlen_attn_out (the in-place forward): out, the
    log-sum-exp [Hq, total_q] and the gradients against the float64 per-sequence reference;
  * the causal alignment of torch's FlashAttention-2 varlen kernels, bottom-right per sequence,
    against masks written out by hand; windows as those kernels normalize them against max_k;
  * the outputs' shapes, dtypes and strides against torch's meta kernels;
  * what reaches flashattn's varlen ops (mask, scale, bounds, deterministic switch), and
    torch.compile(fullgraph=True) of a module calling varlen_attn, forward and backward;
  * every unsupported or bad argument refused, naming it, before any kernel.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

import flashattn
from flashattn import _ops, torch_impl
from standin_kernels import allow_cpu_entry_points, cpu_standin_kernels

varlen_module = pytest.importorskip("torch.nn.attention.varlen")
varlen_attn = varlen_module.varlen_attn
NONE, BOTTOM_RIGHT = flashattn.CAUSAL_NONE, flashattn.CAUSAL_BOTTOM_RIGHT
I32 = torch.int32
# torch 2.13's varlen_attn refuses Hq != Hk unless enable_gqa=True; 2.11's has no such argument.
GQA_KWARGS = {"enable_gqa": True} if "enable_gqa" in inspect.signature(varlen_attn).parameters else {}


# ---- what reaches flashattn's varlen ops ---------------------------------------------------------------


@dataclass(frozen=True)
class VarlenCall:
    op: str  # "fwd_varlen" or "bwd_varlen"
    max_seqlen_q: int
    max_seqlen_k: int
    softmax_scale: float
    causal_mode: int
    window: tuple[int, int]
    backend: str
    deterministic: bool | None = None  # the backward's


@pytest.fixture
def varlen_ops(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[VarlenCall]]:
    """Our aten implementations as the CPU kernels over the stand-in kernels; yields the list of
    flashattn varlen op calls they make (recorded on their way to the stand-ins)."""
    allow_cpu_entry_points(monkeypatch)
    calls: list[VarlenCall] = []
    fwd = _ops.fwd_varlen
    bwd = _ops.bwd_varlen

    def recording_fwd(q, k, v, cu_q, cu_k, max_q, max_k, scale, causal_mode, backend, left=-1, right=-1, softcap=0.0):
        calls.append(VarlenCall("fwd_varlen", max_q, max_k, scale, causal_mode, (left, right), backend))
        return fwd(q, k, v, cu_q, cu_k, max_q, max_k, scale, causal_mode, backend, left, right, softcap)

    def recording_bwd(dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, causal_mode, deterministic, backend,
                      left=-1, right=-1, softcap=0.0):
        calls.append(VarlenCall("bwd_varlen", max_q, max_k, scale, causal_mode, (left, right), backend, deterministic))
        return bwd(dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, causal_mode, deterministic, backend,
                   left, right, softcap)

    monkeypatch.setattr(_ops, "fwd_varlen", recording_fwd)
    monkeypatch.setattr(_ops, "bwd_varlen", recording_bwd)
    with cpu_standin_kernels():
        handle = torch_impl.register_kernels("CPU")
        try:
            yield calls
        finally:
            handle.remove()


# ---- packed batches --------------------------------------------------------------------------------------


@dataclass
class Packed:
    q: torch.Tensor  # [total_q, Hq, D], float64, requires grad
    k: torch.Tensor  # [total_k, Hk, D]
    v: torch.Tensor
    cu_q: torch.Tensor  # int32 [B + 1]
    cu_k: torch.Tensor
    max_q: int
    max_k: int


def cumulative(lens: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=I32)


def packed(lens_q: list[int], lens_k: list[int], hq: int = 4, hk: int = 2, d: int = 16, seed: int = 0,
           dtype: torch.dtype = torch.float64) -> Packed:
    gen = torch.Generator().manual_seed(seed)

    def make(rows: int, heads: int) -> torch.Tensor:
        return torch.randn(rows, heads, d, generator=gen, dtype=torch.float64).to(dtype).requires_grad_(True)

    return Packed(make(sum(lens_q), hq), make(sum(lens_k), hk), make(sum(lens_k), hk), cumulative(lens_q),
                  cumulative(lens_k), max(lens_q), max(lens_k))


def reference(p: Packed, scale: float, mode: int, window: tuple[int, int] = (-1, -1)):
    """(out [total_q, Hq, D], lse [Hq, total_q]) in float64, differentiable."""
    return flashattn.attention_reference_varlen(p.q, p.k, p.v, p.cu_q, p.cu_k, scale, mode, window)


def assert_grads_match(out: torch.Tensor, ref: torch.Tensor, p: Packed, seed: int = 9) -> None:
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    got = torch.autograd.grad(out, (p.q, p.k, p.v), dout)
    want = torch.autograd.grad(ref, (p.q, p.k, p.v), dout)
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        torch.testing.assert_close(g, w, msg=lambda m, name=name: f"{name}: {m}")


# Sequence lengths (query, key): empty and one-row sequences, Sq > Sk (rows that see no key under
# causal), Sq < Sk.
LENGTHS = {
    "mixed": ([5, 0, 1, 7, 3], [6, 2, 4, 7, 9]),
    "sq-over-sk": ([6, 3], [2, 3]),
    "one-sequence": ([9], [9]),
}


@pytest.mark.parametrize("lengths", LENGTHS.values(), ids=LENGTHS.keys())
@pytest.mark.parametrize(("is_causal", "scale"), [(False, None), (True, None), (True, 0.3)], ids=["full", "causal", "causal-scale"])
def test_flash_attention_forward_packed_forward_and_backward(varlen_ops: list, lengths, is_causal: bool, scale) -> None:
    """aten::_flash_attention_forward with cum_seq_q / cum_seq_k: out and lse [Hq, total_q] as the
    float64 per-sequence reference (causal bottom-right per sequence), the zero rng state, and
    the gradients through torch's own autograd formula (aten::_flash_attention_backward)."""
    p = packed(*lengths)
    out, lse, rng_state, unused, debug = torch.ops.aten._flash_attention_forward(
        p.q, p.k, p.v, p.cu_q, p.cu_k, p.max_q, p.max_k, 0.0, is_causal, False, scale=scale
    )
    sc = 0.25 if scale is None else scale
    ref, ref_lse = reference(p, sc, BOTTOM_RIGHT if is_causal else NONE)
    torch.testing.assert_close(out, ref)
    assert lse.dtype == torch.float32 and lse.shape == (4, p.q.shape[0])
    torch.testing.assert_close(lse, ref_lse.float())
    assert (rng_state.shape, rng_state.dtype, unused.shape, unused.dtype, debug.numel()) == ((2,), torch.uint64, (), torch.uint64, 0)
    assert not rng_state.any() and not unused.any()
    assert_grads_match(out, ref, p)
    mode = BOTTOM_RIGHT if is_causal else NONE
    assert [(c.op, c.max_seqlen_q, c.max_seqlen_k, c.softmax_scale, c.causal_mode, c.window) for c in varlen_ops] == [
        ("fwd_varlen", p.max_q, p.max_k, sc, mode, (-1, -1)), ("bwd_varlen", p.max_q, p.max_k, sc, mode, (-1, -1))
    ]


def test_causal_is_bottom_right_per_sequence(varlen_ops: list) -> None:
    """torch's FlashAttention-2 varlen kernels align is_causal bottom-right in each sequence: query
    i of sequence b sees keys j <= i + Sk_b - Sq_b; a row that sees no key gives 0. Written out
    here key by key, independently of flashattn's reference."""
    p = packed([2, 3, 3], [4, 3, 1], hq=2, hk=2, d=8, seed=1)
    out = torch.ops.aten._flash_attention_forward(p.q, p.k, p.v, p.cu_q, p.cu_k, 3, 4, 0.0, True, False)[0]
    visible = {  # packed query row -> packed key rows it sees
        0: [0, 1, 2], 1: [0, 1, 2, 3],  # Sq 2, Sk 4: offset 2
        2: [4], 3: [4, 5], 4: [4, 5, 6],  # Sq = Sk = 3
        5: [], 6: [], 7: [7],  # Sq 3, Sk 1: offset -2, the first two rows see nothing
    }
    q, k, v = (t.detach() for t in (p.q, p.k, p.v))
    for row, keys in visible.items():
        if not keys:
            assert not out[row].any(), f"query row {row} sees no key: its output must be 0"
            continue
        s = torch.einsum("hd,jhd->hj", q[row], k[keys]) / math.sqrt(8)
        want = torch.einsum("hj,jhd->hd", torch.softmax(s, dim=-1), v[keys])
        torch.testing.assert_close(out[row], want, msg=lambda m, row=row: f"query row {row}: {m}")


# (window_size_left, window_size_right, is_causal) -> the window flashattn's kernels get, with max_k = 9
# and torch's FlashAttention-2 varlen normalization: >= max_k or negative is unbounded, is_causal sets
# the right edge to 0, and a left edge with an unbounded right one gets the right edge max_k.
WINDOWS = [
    ((2, 1, False), NONE, (2, 1)),
    ((3, None, False), NONE, (3, 9)),
    ((3, 40, False), NONE, (3, 9)),
    ((None, 2, False), NONE, (-1, 2)),
    ((9, 9, False), NONE, (-1, -1)),
    ((-1, 0, False), BOTTOM_RIGHT, (-1, -1)),  # varlen_attn's causal window
    ((4, 0, False), NONE, (4, 0)),  # varlen_attn's "causal with a window of 4"
    ((2, 5, True), BOTTOM_RIGHT, (2, -1)),
]


@pytest.mark.parametrize(("given", "mode", "window"), WINDOWS, ids=[str(w[0]) for w in WINDOWS])
def test_sliding_windows_forward_and_backward(varlen_ops: list, given, mode: int, window) -> None:
    p = packed([5, 0, 12, 3], [9, 2, 3, 3], seed=2)
    left, right, is_causal = given
    out, lse, rng_state, unused, _ = torch.ops.aten._flash_attention_forward(
        p.q, p.k, p.v, p.cu_q, p.cu_k, p.max_q, p.max_k, 0.0, is_causal, False,
        window_size_left=left, window_size_right=right,
    )
    assert (varlen_ops[0].causal_mode, varlen_ops[0].window) == (mode, window)
    ref_window = (window[0], 0) if mode == BOTTOM_RIGHT else window
    ref, ref_lse = reference(p, 0.25, mode, ref_window)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(lse, ref_lse.float())
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(3), dtype=out.dtype)
    grads = torch.ops.aten._flash_attention_backward(
        dout, p.q, p.k, p.v, out, lse, p.cu_q, p.cu_k, p.max_q, p.max_k, 0.0, is_causal, rng_state, unused,
        window_size_left=left, window_size_right=right,
    )
    for g, w in zip(grads, torch.autograd.grad(ref, (p.q, p.k, p.v), dout)):
        torch.testing.assert_close(g, w)
    assert (varlen_ops[1].causal_mode, varlen_ops[1].window) == (mode, window)


def test_the_right_edge_max_k_is_what_torch_computes(varlen_ops: list) -> None:
    """The 12-query sequence against 3 keys with a left window of 3 only: torch's kernels put the
    right edge at max_k (9), so its first rows do not see all keys, unlike an unbounded edge."""
    p = packed([12], [3], seed=4)
    out = torch.ops.aten._flash_attention_forward(p.q, p.k, p.v, p.cu_q, p.cu_k, 12, 9, 0.0, False, False,
                                                  window_size_left=3)[0]
    bounded = reference(p, 0.25, NONE, (3, 9))[0]
    unbounded = reference(p, 0.25, NONE, (3, -1))[0]
    torch.testing.assert_close(out, bounded)
    assert not torch.allclose(out, unbounded)


# ---- torch.nn.attention.varlen ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("window_size", "mode", "window"),
    [((-1, -1), NONE, (-1, -1)), ((-1, 0), BOTTOM_RIGHT, (-1, -1)), ((3, 0), NONE, (3, 0)), ((2, 2), NONE, (2, 2))],
    ids=["full", "causal", "causal-window-3", "window-2-2"],
)
@pytest.mark.parametrize("heads", [(4, 4), (4, 2)], ids=["mha", "gqa"])
def test_varlen_attn_forward_and_backward(varlen_ops: list, window_size, mode: int, window, heads) -> None:
    """torch.nn.attention.varlen.varlen_attn (window_size (-1, 0) is its causal) runs our
    implementations forward and backward: out, the lse it returns ([Hq, total_q]) and the
    gradients as the float64 per-sequence reference."""
    from torch.nn.attention.varlen import AuxRequest

    p = packed([7, 1, 0, 6], [5, 3, 2, 6], hq=heads[0], hk=heads[1], seed=5)
    kwargs = GQA_KWARGS if heads[0] != heads[1] else {}
    out, lse = varlen_attn(p.q, p.k, p.v, p.cu_q, p.cu_k, p.max_q, p.max_k, window_size=window_size,
                           return_aux=AuxRequest(lse=True), **kwargs)
    ref, ref_lse = reference(p, 0.25, mode, window)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(lse, ref_lse.float())
    assert_grads_match(out, ref, p)
    assert [(c.op, c.causal_mode, c.window) for c in varlen_ops] == [("fwd_varlen", mode, window), ("bwd_varlen", mode, window)]


def test_varlen_attn_scale_and_plain_output(varlen_ops: list) -> None:
    p = packed([4, 9], [8, 2], hq=2, hk=2, seed=6)
    out = varlen_attn(p.q, p.k, p.v, p.cu_q, p.cu_k, p.max_q, p.max_k, scale=0.7)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, reference(p, 0.7, NONE)[0])
    assert varlen_ops[0].softmax_scale == 0.7


@pytest.mark.skipif(not hasattr(varlen_module, "varlen_attn_out"), reason=f"torch {torch.__version__} has no varlen_attn_out")
def test_varlen_attn_out_writes_the_output(varlen_ops: list) -> None:
    """varlen_attn_out (torch >= 2.13) calls aten::_flash_attention_forward_no_dropout_inplace with
    the packed batch: the output lands in the given tensor."""
    p = packed([3, 6], [5, 6], seed=7)
    q, k, v = (t.detach() for t in (p.q, p.k, p.v))
    out = torch.full_like(q, float("nan"))
    result = varlen_module.varlen_attn_out(out, q, k, v, p.cu_q, p.cu_k, p.max_q, p.max_k, window_size=(-1, 0),
                                           **GQA_KWARGS)
    ref, _ = flashattn.attention_reference_varlen(q, k, v, p.cu_q, p.cu_k, 0.25, BOTTOM_RIGHT)
    assert result is out
    torch.testing.assert_close(out, ref)


@pytest.mark.parametrize("switch", ["flashattn", "torch"])
def test_backward_mode_is_read_when_the_backward_runs(varlen_ops: list, switch: str) -> None:
    p = packed([3, 4], [3, 4], seed=8)
    out = varlen_attn(p.q, p.k, p.v, p.cu_q, p.cu_k, p.max_q, p.max_k, **GQA_KWARGS)
    before = (flashattn.get_deterministic(), torch.are_deterministic_algorithms_enabled(),
              torch.is_deterministic_algorithms_warn_only_enabled())
    try:
        flashattn.set_deterministic(False)
        torch.use_deterministic_algorithms(False)
        out.sum().backward(retain_graph=True)
        if switch == "flashattn":
            flashattn.set_deterministic(True)
        else:
            torch.use_deterministic_algorithms(True, warn_only=True)
        out.sum().backward()
    finally:
        flashattn.set_deterministic(before[0])
        torch.use_deterministic_algorithms(before[1], warn_only=before[2])
    assert [c.deterministic for c in varlen_ops if c.op == "bwd_varlen"] == [False, True]


def test_torch_compile_of_a_module_calling_varlen_attn(varlen_ops: list) -> None:
    """torch.compile(fullgraph=True) traces varlen_attn (torch's custom ops and their fake kernels)
    and runs our implementations forward and backward."""
    from torch._dynamo.utils import counters

    class Block(torch.nn.Module):
        def __init__(self, dim: int = 32, heads: int = 2) -> None:
            super().__init__()
            self.heads = heads
            self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False, dtype=torch.float64)

        def forward(self, x: torch.Tensor, cu: torch.Tensor, max_len: int) -> torch.Tensor:
            q, k, v = self.qkv(x).view(x.shape[0], 3, self.heads, -1).unbind(1)  # slices of a packed QKV
            return varlen_attn(q, k, v, cu, cu, max_len, max_len, window_size=(-1, 0)).flatten(1)

    torch.manual_seed(0)
    block = Block()
    x = torch.randn(11, 32, dtype=torch.float64)
    cu = cumulative([4, 7])
    torch._dynamo.reset()
    counters.clear()
    got = torch.compile(block, backend="aot_eager", fullgraph=True)(x, cu, 7)
    got_grads = torch.autograd.grad(got.square().sum(), list(block.parameters()))
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    assert [c.op for c in varlen_ops] == ["fwd_varlen", "bwd_varlen"]
    q, k, v = block.qkv(x).view(11, 3, 2, -1).unbind(1)
    want = flashattn.attention_reference_varlen(q, k, v, cu, cu, 1 / math.sqrt(16), BOTTOM_RIGHT)[0].flatten(1)
    torch.testing.assert_close(got, want)
    for g, w in zip(got_grads, torch.autograd.grad(want.square().sum(), list(block.parameters()))):
        torch.testing.assert_close(g, w)


# ---- outputs laid out as torch's meta kernels say -----------------------------------------------------


def on_meta(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def metadata(results) -> list:
    return [(tuple(r.shape), r.dtype, r.stride()) for r in results]


@pytest.mark.parametrize("layout", ["contiguous", "packed-qkv", "head-major"])
def test_outputs_are_laid_out_as_torch_meta_kernels_say(varlen_ops: list, layout: str) -> None:
    lens = [3, 0, 6]
    cu = cumulative(lens)
    if layout == "contiguous":
        p = packed(lens, lens, hq=4, hk=4, dtype=torch.bfloat16)
        q, k, v = (t.detach() for t in (p.q, p.k, p.v))
    elif layout == "packed-qkv":  # slices of one [total, 3, H, D] projection: not dense
        qkv = torch.randn(9, 3, 4, 16, dtype=torch.bfloat16)
        q, k, v = qkv.unbind(1)
    else:  # dense [H, total, D] buffers seen as [total, H, D]: empty_like keeps their strides
        q, k, v = (torch.randn(4, 9, 16, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(s)).transpose(0, 1)
                   for s in range(3))
    fa, fa_bwd = torch.ops.aten._flash_attention_forward, torch.ops.aten._flash_attention_backward
    ours = fa(q, k, v, cu, cu, 6, 6, 0.0, True, False)
    theirs = fa(on_meta(q), on_meta(k), on_meta(v), on_meta(cu), on_meta(cu), 6, 6, 0.0, True, False)
    assert metadata(ours) == metadata(theirs)
    dout = torch.randn_like(ours[0])
    grads = fa_bwd(dout, q, k, v, ours[0], ours[1], cu, cu, 6, 6, 0.0, True, ours[2], ours[3])
    meta_grads = fa_bwd(on_meta(dout), on_meta(q), on_meta(k), on_meta(v), theirs[0], theirs[1], on_meta(cu),
                        on_meta(cu), 6, 6, 0.0, True, theirs[2], theirs[3])
    assert metadata(grads) == metadata(meta_grads)


# ---- refusals: before any kernel, naming the argument ------------------------------------------------


def fa_packed(p: Packed | None = None, **kwargs):
    """aten::_flash_attention_forward (through the dispatcher) on a small packed batch, with kwargs
    replacing its arguments."""
    p = p or packed([3, 5], [4, 5])
    args = dict(query=p.q.detach(), key=p.k.detach(), value=p.v.detach(), cum_seq_q=p.cu_q, cum_seq_k=p.cu_k,
                max_q=p.max_q, max_k=p.max_k, dropout_p=0.0, is_causal=False, return_debug_mask=False)
    positional = list(args)
    args.update(kwargs)
    keyword = {n: args.pop(n) for n in list(args) if n not in positional}
    return torch.ops.aten._flash_attention_forward(*args.values(), **keyword)


REFUSED = [
    ("dropout", {"dropout_p": 0.1}, NotImplementedError, r"dropout_p must be 0\.0"),
    ("debug-mask", {"return_debug_mask": True}, NotImplementedError, "return_debug_mask must be False"),
    ("seqused_k", {"seqused_k": torch.tensor([4, 5], dtype=I32)}, NotImplementedError, "seqused_k must be None"),
    ("alibi", {"alibi_slopes": torch.ones(4)}, NotImplementedError, "alibi_slopes must be None"),
    ("cum_seq_q-alone", {"cum_seq_k": None}, ValueError, "cum_seq_k must be given with cum_seq_q"),
    ("cum_seq_k-alone", {"cum_seq_q": None}, ValueError, "cum_seq_q must be given with cum_seq_k"),
    ("query-4d", {"query": torch.zeros(1, 8, 4, 16, dtype=torch.float64)}, ValueError,
     r"query must be 3-D \[total, H, D\] with cum_seq_q and cum_seq_k"),
    ("cum_seq_q-int64", {"cum_seq_q": torch.tensor([0, 3, 8])}, TypeError, "cum_seq_q.dtype must be torch.int32, got torch.int64"),
    ("cum_seq_k-2d", {"cum_seq_k": torch.tensor([[0, 4, 9]], dtype=I32)}, ValueError, r"cum_seq_k must be 1-D \[batch \+ 1\]"),
    ("cum_seq-lengths", {"cum_seq_k": torch.tensor([0, 9], dtype=I32)}, ValueError,
     r"cum_seq_q and cum_seq_k must have the same length \(batch \+ 1\), got 3 and 2"),
    ("max_q-negative", {"max_q": -1}, ValueError, "max_q must be >= 0, got -1"),
    ("heads", {"key": torch.zeros(9, 3, 16, dtype=torch.float64), "value": torch.zeros(9, 3, 16, dtype=torch.float64)},
     ValueError, r"query heads \(4\) must be a multiple of key/value heads \(3\)"),
    ("dtypes", {"key": torch.zeros(9, 2, 16, dtype=torch.float32), "value": torch.zeros(9, 2, 16, dtype=torch.float32)},
     TypeError, "query, key and value must share one dtype"),
]
if "block_table" in str(torch.ops.aten._flash_attention_forward.default._schema):  # torch >= 2.13
    REFUSED += [
        ("block_table", {"block_table": torch.zeros(2, 1, dtype=I32)}, NotImplementedError, "block_table must be None"),
        ("num_splits", {"num_splits": 2}, NotImplementedError, "num_splits must be None, 0 or 1"),
    ]


@pytest.mark.parametrize(("kwargs", "error", "match"), [pytest.param(k, e, m, id=i) for i, k, e, m in REFUSED])
def test_forward_refuses(varlen_ops: list, kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match) as info:
        fa_packed(**kwargs)
    assert "flashattn" in str(info.value) or error is not NotImplementedError
    assert varlen_ops == []


def test_the_hopper_backend_is_refused_by_name(varlen_ops: list) -> None:
    with flashattn.use_backend("hopper"), pytest.raises(ValueError, match="backend 'hopper' does not support packed"):
        fa_packed()
    assert varlen_ops == []


def test_backward_refuses(varlen_ops: list) -> None:
    p = packed([3, 5], [4, 5])
    q, k, v = (t.detach() for t in (p.q, p.k, p.v))
    out, lse, rng_state, unused, _ = fa_packed(p)
    bwd = torch.ops.aten._flash_attention_backward
    args = (q, k, v, out, lse, p.cu_q, p.cu_k, p.max_q, p.max_k)
    with pytest.raises(NotImplementedError, match=r"dropout_p must be 0\.0"):
        bwd(out, *args, 0.5, False, rng_state, unused)
    with pytest.raises(ValueError, match=r"logsumexp must be the forward's float32 \[Hq, total_q\] = \[4, 8\]"):
        bwd(out, q, k, v, out, lse[None], p.cu_q, p.cu_k, p.max_q, p.max_k, 0.0, False, rng_state, unused)
    with pytest.raises(ValueError, match=r"grad_out must have query's shape \(8, 4, 16\)"):
        bwd(out[:4], *args, 0.0, False, rng_state, unused)
    with pytest.raises(ValueError, match="cum_seq_q must be given with cum_seq_k"):
        bwd(out, q, k, v, out, lse, None, p.cu_k, p.max_q, p.max_k, 0.0, False, rng_state, unused)
    assert [c.op for c in varlen_ops] == ["fwd_varlen"]


def test_varlen_attn_refusals_name_the_argument(varlen_ops: list) -> None:
    p = packed([3, 5], [4, 5], hq=2, hk=2)
    if "seqused_k" in inspect.signature(varlen_attn).parameters:  # torch >= 2.13
        with pytest.raises(RuntimeError, match="seqused_k must be None"):
            varlen_attn(p.q.detach(), p.k.detach(), p.v.detach(), p.cu_q, p.cu_k, 5, 5, seqused_k=torch.tensor([4, 5], dtype=I32))
    with pytest.raises(TypeError, match="cum_seq_k.dtype must be torch.int32"):
        varlen_attn(p.q, p.k, p.v, p.cu_q, p.cu_k.long(), 5, 5)
    assert varlen_ops == []


def test_sdpa_backward_op_refuses_cumulative_lengths() -> None:
    """aten::_scaled_dot_product_flash_attention_backward takes dense [B, H, S, D] tensors only (its
    forward never returns cumulative lengths): packed batches are another op's."""
    q = torch.zeros(1, 2, 8, 16, dtype=torch.bfloat16)
    state = torch.zeros(2, dtype=torch.uint64)
    with pytest.raises(NotImplementedError, match="cum_seq_q and cum_seq_k must be None"):
        torch_impl.scaled_dot_product_flash_attention_backward(
            q, q, q, q, q, torch.zeros(1, 2, 8), cumulative([8]), cumulative([8]), 8, 8, 0.0, False, state, state
        )


def test_math_sdpa_agrees_on_a_sequence(varlen_ops: list) -> None:
    """One sequence of the packed batch against torch's own math SDPA (is_causal top-left equals
    bottom-right when Sq == Sk): the reference the other tests use is torch's attention."""
    p = packed([6, 6], [6, 6], hq=2, hk=2, seed=10)
    out = torch.ops.aten._flash_attention_forward(p.q, p.k, p.v, p.cu_q, p.cu_k, 6, 6, 0.0, True, False)[0]
    for b in range(2):
        rows = slice(6 * b, 6 * (b + 1))
        want = F.scaled_dot_product_attention(*(t[rows].transpose(0, 1) for t in (p.q, p.k, p.v)), is_causal=True)
        torch.testing.assert_close(out[rows], want.transpose(0, 1))
