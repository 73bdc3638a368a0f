"""Packed variable-length batches on the GPU (flash_attn_varlen_func / flashattn::fwd_varlen,
issue 16): the portable kernel on every GPU (the Hopper path needs dense tensors and is refused).

  * numerics against the float64 reference by the suite's one criterion, applied to each sequence
    (tests/numerics.py `assert_varlen_attention_matches`), out and LSE ([Hq, total_q]), over
    Hypothesis-drawn packed batches (lengths 0 and 1 included, GQA, causal, windows, softcap,
    every head dim, strided layouts) and explicit edge cases; outputs from NaN-poisoned memory;
  * the padded-equivalence property: every sequence's rows are bitwise those of a dense
    flash_attn_func call on that sequence alone (same portable kernel, same tiles);
  * max_seqlen larger than the sequences changes nothing; rows of a sequence never leak into
    another's (a poisoned neighbour);
  * CUDA-graph capture, replayed with new cu_seqlens values (no host synchronization), and
    torch.compile(fullgraph=True);
  * the forced Hopper backend is refused by name.
Validation and the autograd glue are also checked on CPU: tests/test_varlen_cpu.py.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import flashattn
from gpu_helpers import poison_cuda_allocator
from numerics import assert_varlen_attention_matches
from strategies import Layout, VarlenSpec, cumulative, varlen_specs

pytestmark = pytest.mark.gpu

NONE, TOP_LEFT, BOTTOM_RIGHT = flashattn.CAUSAL_NONE, flashattn.CAUSAL_TOP_LEFT, flashattn.CAUSAL_BOTTOM_RIGHT
I32 = torch.int32


def run_varlen(spec: VarlenSpec, device: torch.device, *, max_extra: int = 0, op: bool = False):
    x = spec.make(device)
    poison_cuda_allocator()
    max_q, max_k = spec.max_seqlen_q + max_extra, spec.max_seqlen_k + max_extra
    if op:  # the op itself: all three causal modes (top-left included)
        scale = 1 / math.sqrt(spec.head_dim) if spec.scale is None else spec.scale
        out, lse = torch.ops.flashattn.fwd_varlen(x.q, x.k, x.v, x.cu_seqlens_q, x.cu_seqlens_k, max_q, max_k, scale,
                                                  spec.causal_mode, "auto", spec.window[0], spec.window[1], spec.softcap)
    else:
        assert spec.causal_mode in (NONE, BOTTOM_RIGHT)
        out, lse = flashattn.flash_attn_varlen_func(
            x.q, x.k, x.v, x.cu_seqlens_q, x.cu_seqlens_k, max_q, max_k, softmax_scale=spec.scale,
            causal=spec.causal_mode == BOTTOM_RIGHT, window_size=spec.window, softcap=spec.softcap, return_lse=True)
    return x, out, lse


def check(spec: VarlenSpec, x, out, lse, context: str = ""):
    return assert_varlen_attention_matches(out, lse, x.q, x.k, x.v, x.cu_q, x.cu_k, spec.scale, spec.causal_mode,
                                           window=spec.window, softcap=spec.softcap, context=f"{context} {spec!r}")


# ---- Hypothesis -----------------------------------------------------------------------------------


@given(spec=varlen_specs())
def test_varlen_matches_reference(spec: VarlenSpec, device: torch.device) -> None:
    x, out, lse = run_varlen(spec, device)
    check(spec, x, out, lse)


@given(spec=varlen_specs(causal_choices=(NONE, TOP_LEFT, BOTTOM_RIGHT)))
def test_op_matches_reference_in_every_causal_mode(spec: VarlenSpec, device: torch.device) -> None:
    x, out, lse = run_varlen(spec, device, op=True)
    check(spec, x, out, lse, "op")


@given(spec=varlen_specs(max_seqlen=300))
def test_varlen_equals_per_sequence_dense_calls(spec: VarlenSpec, device: torch.device) -> None:
    """Padded equivalence: sequence b's rows of out and lse are bitwise those of flash_attn_func on
    q[cu_q[b]:cu_q[b+1]], k/v[cu_k[b]:cu_k[b+1]] alone (the portable path, as varlen takes)."""
    x, out, lse = run_varlen(spec, device)
    with flashattn.use_backend("portable"):
        for b in range(len(x.cu_q) - 1):
            q0, q1, k0, k1 = x.cu_q[b], x.cu_q[b + 1], x.cu_k[b], x.cu_k[b + 1]
            if q1 == q0 or k1 == k0:
                continue
            o_b, lse_b = flashattn.flash_attn_func(
                x.q[None, q0:q1], x.k[None, k0:k1], x.v[None, k0:k1], softmax_scale=spec.scale,
                causal=spec.causal_mode == BOTTOM_RIGHT, window_size=spec.window, softcap=spec.softcap, return_lse=True)
            assert torch.equal(out[q0:q1], o_b[0]), f"sequence {b}: out differs from the dense call, {spec!r}"
            assert torch.equal(lse[:, q0:q1], lse_b[0]), f"sequence {b}: lse differs from the dense call, {spec!r}"


@given(spec=varlen_specs(max_seqlen=200), extra=st.sampled_from((1, 64, 1000)))
def test_larger_max_seqlen_changes_nothing(spec: VarlenSpec, extra: int, device: torch.device) -> None:
    """max_seqlen only sizes the grid: blocks past a sequence's end exit without writing."""
    _, out, lse = run_varlen(spec, device)
    _, out2, lse2 = run_varlen(spec, device, max_extra=extra)
    assert torch.equal(out, out2) and torch.equal(lse, lse2)


# ---- explicit edge cases --------------------------------------------------------------------------


def _spec(q_lens, k_lens=None, hq=4, hk=2, d=128, mode=BOTTOM_RIGHT, window=(-1, -1), softcap=0.0, dtype=torch.bfloat16,
          layout_q=Layout("contiguous"), layout_kv=Layout("contiguous"), magnitude=1.0) -> VarlenSpec:
    return VarlenSpec(tuple(q_lens), tuple(k_lens if k_lens is not None else q_lens), hq, hk, d, dtype, mode, window,
                      softcap, None, layout_q, layout_kv, magnitude, seed=0)


EDGES = [
    ("one-sequence", _spec([777])),
    ("tile-edges", _spec([127, 128, 129, 1, 64, 65, 255, 256, 257])),
    ("zero-and-one", _spec([0, 1, 0, 0, 1, 5, 0], [3, 1, 0, 7, 0, 5, 1])),
    ("leading-and-trailing-empty", _spec([0, 0, 300, 0], [0, 5, 300, 0], mode=NONE)),
    ("q-longer-than-k-causal", _spec([300, 50, 130], [17, 50, 1])),  # bottom-right: early rows see no key
    ("k-longer-than-q", _spec([1, 16, 100], [2000, 1500, 130], hq=8, hk=1, d=64)),
    ("many-short", _spec([(7 * i) % 50 for i in range(64)], hq=8, hk=8, d=64)),
    ("long-and-short", _spec([3000, 1, 40, 1024], mode=NONE, d=64)),
    ("window-4k-of-5k", _spec([5000, 300], mode=BOTTOM_RIGHT, window=(1024, 0), d=128)),
    ("window-two-sided", _spec([600, 200, 999], [700, 200, 10], mode=NONE, window=(63, 64), d=96)),
    ("window-wider-than-sequences", _spec([100, 90], [80, 120], window=(1000, 1000), d=64)),
    ("softcap", _spec([129, 257, 3], softcap=30.0, mode=NONE, magnitude=30.0)),
    ("softcap+window,D=256", _spec([200, 300], [400, 100], softcap=20.0, window=(64, -1), d=256, hq=2, hk=1)),
    ("D=8", _spec([77, 99, 0], d=8, hq=3, hk=1, mode=NONE)),
    ("D=32", _spec([130, 65], d=32)),
    ("D=160", _spec([130, 65], d=160, hq=2, hk=2)),
    ("D=192", _spec([130, 65], d=192, hq=2, hk=1)),
    ("strided", _spec([100, 200, 33], layout_q=Layout("pad_dim", 8), layout_kv=Layout("bhsd"), d=64)),
    ("unaligned-strides", _spec([100, 33], layout_q=Layout("pad_dim", 5), layout_kv=Layout("slice_seq", 3), d=64)),
    ("many-heads", _spec([1100, 1300, 50], hq=48, hk=8, d=128)),
]


@pytest.mark.parametrize("dtype", [pytest.param(torch.float16, id="fp16"), pytest.param(torch.bfloat16, id="bf16")])
@pytest.mark.parametrize("spec", [pytest.param(s, id=i) for i, s in EDGES])
def test_edge_case(spec: VarlenSpec, dtype, device: torch.device) -> None:
    spec = VarlenSpec(**{**spec.__dict__, "dtype": dtype})
    x, out, lse = run_varlen(spec, device)
    check(spec, x, out, lse)


def test_rows_of_one_sequence_never_reach_another(device: torch.device) -> None:
    """A neighbour full of NaN (or huge values) changes nothing in its neighbours: tiles and K/V
    loads stop at each sequence's end."""
    spec = _spec([100, 70, 129], [130, 70, 64], mode=NONE, d=64)
    x = spec.make(device)
    ref, ref_lse = flashattn.flash_attn_varlen_func(x.q, x.k, x.v, x.cu_seqlens_q, x.cu_seqlens_k, 129, 130,
                                                    return_lse=True)
    q, k, v = x.q.clone(), x.k.clone(), x.v.clone()
    q[100:170] = float("nan")
    k[130:200] = float("nan")
    v[130:200] = float("inf")
    out, lse = flashattn.flash_attn_varlen_func(q, k, v, x.cu_seqlens_q, x.cu_seqlens_k, 129, 130, return_lse=True)
    keep = torch.ones(q.shape[0], dtype=torch.bool, device=device)
    keep[100:170] = False
    assert torch.equal(out[keep], ref[keep]) and torch.equal(lse[:, keep], ref_lse[:, keep])


def test_lse_layout_is_heads_by_packed_rows(device: torch.device) -> None:
    """lse is [Hq, total_q]: column r is packed query row r, for every head."""
    spec = _spec([5, 0, 9], [4, 3, 9], hq=3, hk=1, d=64, mode=NONE)
    x, out, lse = run_varlen(spec, device)
    assert lse.shape == (3, 14) and lse.is_contiguous()
    for b, (q0, q1, k0, k1) in enumerate([(0, 5, 0, 4), (5, 5, 4, 7), (5, 14, 7, 16)]):
        if q1 == q0:
            continue
        qd = x.q[q0:q1].double().transpose(0, 1)  # [H, S, D]
        kd = x.k[k0:k1].double().transpose(0, 1).expand(3, -1, -1)
        want = torch.logsumexp(torch.matmul(qd, kd.transpose(-1, -2)) / 8.0, dim=-1)
        torch.testing.assert_close(lse[:, q0:q1].double(), want, atol=1e-4, rtol=1e-5)


# ---- no host synchronization: CUDA graphs, torch.compile -----------------------------------------


def test_cuda_graph_replay_follows_new_cu_seqlens(device: torch.device) -> None:
    """The binding never reads cu_seqlens on the host: the call captures, and replays with new
    lengths (same batch size, same bounds) compute the new packing."""
    spec = _spec([100, 50, 106], [64, 128, 64], mode=BOTTOM_RIGHT, d=64)
    x = spec.make(device)
    cu_q, cu_k = x.cu_seqlens_q.clone(), x.cu_seqlens_k.clone()

    def step():
        return flashattn.flash_attn_varlen_func(x.q, x.k, x.v, cu_q, cu_k, 256, 256, causal=True, return_lse=True)

    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g_out, g_lse = step()
    for q_lens, k_lens in (([100, 50, 106], [64, 128, 64]), ([0, 256, 0], [1, 200, 55]), ([1, 1, 254], [128, 0, 128])):
        cu_q.copy_(torch.tensor(cumulative(q_lens), dtype=I32, device=device))
        cu_k.copy_(torch.tensor(cumulative(k_lens), dtype=I32, device=device))
        graph.replay()
        torch.cuda.synchronize(device)
        new = VarlenSpec(**{**spec.__dict__, "q_lens": tuple(q_lens), "k_lens": tuple(k_lens)})
        check(new, x.__class__(x.q, x.k, x.v, cu_q, cu_k, cumulative(q_lens), cumulative(k_lens), None), g_out, g_lse,
              "graph replay")


def test_torch_compile_fullgraph(device: torch.device) -> None:
    spec = _spec([100, 0, 37], [80, 5, 37], d=64, window=(16, 0), softcap=10.0)
    x = spec.make(device)

    def f(q, k, v, cu_q, cu_k):
        return flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 100, 80, causal=True, window_size=(16, 0),
                                                softcap=10.0, return_lse=True)

    want = f(x.q, x.k, x.v, x.cu_seqlens_q, x.cu_seqlens_k)
    torch._dynamo.reset()
    got = torch.compile(f, fullgraph=True)(x.q, x.k, x.v, x.cu_seqlens_q, x.cu_seqlens_k)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


# ---- refusals -------------------------------------------------------------------------------------------


def test_forced_hopper_backend_is_refused(device: torch.device) -> None:
    x = _spec([10, 20], d=64).make(device)
    with flashattn.use_backend("hopper"), pytest.raises(ValueError, match="backend 'hopper' does not support packed"):
        flashattn.flash_attn_varlen_func(x.q, x.k, x.v, x.cu_seqlens_q, x.cu_seqlens_k, 20, 20)
    with pytest.raises(RuntimeError, match="backend 'hopper' does not support packed"):
        torch.ops.flashattn.fwd_varlen(x.q, x.k, x.v, x.cu_seqlens_q, x.cu_seqlens_k, 20, 20, 0.125, NONE, "hopper")
