"""Packed variable-length batches on the GPU (flash_attn_varlen_func / flashattn::fwd_varlen,
issue 16): the forward and the backward on the Hopper kernels' packed flavours where they run (an
H100 under "auto"), the portable ones elsewhere and under "portable" (the forced Hopper backend is
refused).

  * numerics against the float64 reference by the suite's one criterion, applied to each sequence
    (tests/numerics.py `assert_varlen_attention_matches`), out and LSE ([Hq, total_q]), over
    Hypothesis-drawn packed batches (lengths 0 and 1 included, GQA, causal, windows, softcap,
    every head dim, strided layouts) and explicit edge cases; outputs from NaN-poisoned memory;
  * the padded-equivalence property: every sequence's rows are bitwise those of a dense
    flash_attn_func call on that sequence alone (same portable kernel, same tiles); on an H100 the
    Hopper packed forward's too (a packed call of the sequence alone; the dense Hopper call where
    both take one tile config); which forward kernels run under each backend;
  * max_seqlen larger than the sequences changes nothing; rows of a sequence never leak into
    another's (a poisoned neighbour);
  * CUDA-graph capture, replayed with new cu_seqlens values (no host synchronization), and
    torch.compile(fullgraph=True);
  * the forced Hopper backend is refused by name;
  * the backward: dq, dk, dv against the float64 reference by the suite's gradient criterion per
    sequence (`assert_varlen_gradients_match`), Hypothesis-drawn and explicit edge cases, both
    backward modes (deterministic: from NaN-poisoned memory), every causal mode through the op;
    the padded-equivalence property (bitwise the dense backward of each sequence alone on the same
    path: portable, and on an H100 the Hopper kernels); zero gradients for rows no sequence owns
    and no leak between sequences (NaN/inf neighbours); larger max_seqlen changes nothing;
    deterministic mode bitwise repeatable (no hang); which kernels run under each backend;
    CUDA-graph capture of forward + backward replayed with new cu_seqlens; torch.compile of a
    training step; the Hopper backend refused by the backward op.
Validation and the autograd glue are also checked on CPU: tests/kernels/test_varlen_cpu.py.
"""

from __future__ import annotations

import contextlib
import math
import os

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import flashattn
from gpu_helpers import (assert_bitwise_equal, backward_mode, dense_calls_per_sequence, finished_within,
                         poison_cuda_allocator)
from numerics import assert_varlen_attention_matches, assert_varlen_gradients_match
from strategies import Layout, VarlenSpec, cumulative, varlen_specs

pytestmark = pytest.mark.gpu

NONE, TOP_LEFT, BOTTOM_RIGHT = flashattn.CAUSAL_NONE, flashattn.CAUSAL_TOP_LEFT, flashattn.CAUSAL_BOTTOM_RIGHT
I32 = torch.int32


def run_varlen(spec: VarlenSpec, device: torch.device, *, max_extra: int = 0, op: bool = False, backend: str = "auto"):
    x = spec.make(device)
    poison_cuda_allocator()
    max_q, max_k = spec.max_seqlen_q + max_extra, spec.max_seqlen_k + max_extra
    if op:  # the op itself: all three causal modes (top-left included)
        scale = 1 / math.sqrt(spec.head_dim) if spec.scale is None else spec.scale
        out, lse = torch.ops.flashattn.fwd_varlen(x.q, x.k, x.v, x.cu_seqlens_q, x.cu_seqlens_k, max_q, max_k, scale,
                                                  spec.causal_mode, backend, spec.window[0], spec.window[1], spec.softcap)
    else:
        assert spec.causal_mode in (NONE, BOTTOM_RIGHT)
        with flashattn.use_backend(backend):
            out, lse = flashattn.flash_attn_varlen_func(
                x.q, x.k, x.v, x.cu_seqlens_q, x.cu_seqlens_k, max_q, max_k, softmax_scale=spec.scale,
                causal=spec.causal_mode == BOTTOM_RIGHT, window_size=spec.window, softcap=spec.softcap, return_lse=True)
    return x, out, lse


# The forward's two packed flavours: "auto" runs the Hopper one on an H100.
PATHS = pytest.mark.parametrize("path", ["portable", pytest.param("auto", marks=pytest.mark.sm90, id="hopper")])


def check(spec: VarlenSpec, x, out, lse, context: str = ""):
    return assert_varlen_attention_matches(out, lse, x.q, x.k, x.v, x.cu_q, x.cu_k, spec.scale, spec.causal_mode,
                                           window=spec.window, softcap=spec.softcap, context=f"{context} {spec!r}")


# ---- Hypothesis -----------------------------------------------------------------------------------


@PATHS
@given(spec=varlen_specs())
def test_varlen_matches_reference(path: str, spec: VarlenSpec, device: torch.device) -> None:
    x, out, lse = run_varlen(spec, device, backend=path)
    check(spec, x, out, lse, path)


@PATHS
@given(spec=varlen_specs(causal_choices=(NONE, TOP_LEFT, BOTTOM_RIGHT)))
def test_op_matches_reference_in_every_causal_mode(path: str, spec: VarlenSpec, device: torch.device) -> None:
    x, out, lse = run_varlen(spec, device, op=True, backend=path)
    check(spec, x, out, lse, f"op {path}")


@given(spec=varlen_specs(max_seqlen=300))
def test_varlen_equals_per_sequence_dense_calls(spec: VarlenSpec, device: torch.device) -> None:
    """Padded equivalence: sequence b's rows of out and lse are bitwise those of flash_attn_func on
    q[cu_q[b]:cu_q[b+1]], k/v[cu_k[b]:cu_k[b+1]] alone (the portable path: same kernel, same tiles)."""
    x, out, lse = run_varlen(spec, device, backend="portable")
    for b, q0, q1, o_b, lse_b in dense_calls_per_sequence(x, spec):
        assert torch.equal(out[q0:q1], o_b), f"sequence {b}: out differs from the dense call, {spec!r}"
        assert torch.equal(lse[:, q0:q1], lse_b), f"sequence {b}: lse differs from the dense call, {spec!r}"


@pytest.mark.sm90
@given(spec=varlen_specs(max_seqlen=300))
def test_hopper_varlen_equals_per_sequence_calls(spec: VarlenSpec, device: torch.device) -> None:
    """The Hopper packed forward ("auto" on an H100): sequence b's rows of out and lse are bitwise
    those of a packed call holding sequence b alone with the same bounds (the same kernel: nothing of
    a neighbour reaches a sequence), and, where the head dim runs on one tile config (D > 64), those
    of the dense Hopper call on the sequence (no split over the keys: the packed flavour has none)."""
    x, out, lse = run_varlen(spec, device)
    causal = spec.causal_mode == BOTTOM_RIGHT
    with forced_splits(1):
        _check_each_sequence_alone(spec, x, out, lse, causal, device)


@contextlib.contextmanager
def forced_splits(n: int):
    """FLASHATTN_FWD_SPLITS=n for the dense Hopper calls inside (read at every call)."""
    old = os.environ.get("FLASHATTN_FWD_SPLITS")
    os.environ["FLASHATTN_FWD_SPLITS"] = str(n)
    try:
        yield
    finally:
        if old is None:
            del os.environ["FLASHATTN_FWD_SPLITS"]
        else:
            os.environ["FLASHATTN_FWD_SPLITS"] = old


def _check_each_sequence_alone(spec: VarlenSpec, x, out, lse, causal: bool, device: torch.device) -> None:
    for b in range(len(x.cu_q) - 1):
        q0, q1, k0, k1 = x.cu_q[b], x.cu_q[b + 1], x.cu_k[b], x.cu_k[b + 1]
        if q1 == q0:
            continue
        cq, ck = (torch.tensor([0, n], dtype=I32, device=device) for n in (q1 - q0, k1 - k0))
        o_b, lse_b = flashattn.flash_attn_varlen_func(
            x.q[q0:q1], x.k[k0:k1], x.v[k0:k1], cq, ck, spec.max_seqlen_q, spec.max_seqlen_k, softmax_scale=spec.scale,
            causal=causal, window_size=spec.window, softcap=spec.softcap, return_lse=True)
        assert torch.equal(out[q0:q1], o_b), f"sequence {b}: out differs from the call on it alone, {spec!r}"
        assert torch.equal(lse[:, q0:q1], lse_b), f"sequence {b}: lse differs from the call on it alone, {spec!r}"
        if spec.head_dim > 64 and k1 > k0:
            o_d, lse_d = flashattn.flash_attn_func(
                x.q[None, q0:q1], x.k[None, k0:k1], x.v[None, k0:k1], softmax_scale=spec.scale, causal=causal,
                window_size=spec.window, softcap=spec.softcap, return_lse=True)
            assert torch.equal(out[q0:q1], o_d[0]), f"sequence {b}: out differs from the dense call, {spec!r}"
            assert torch.equal(lse[:, q0:q1], lse_d[0]), f"sequence {b}: lse differs from the dense call, {spec!r}"


@PATHS
@given(spec=varlen_specs(max_seqlen=200), extra=st.sampled_from((1, 64, 1000)))
def test_larger_max_seqlen_changes_nothing(path: str, spec: VarlenSpec, extra: int, device: torch.device) -> None:
    """max_seqlen only sizes the grid: blocks past a sequence's end exit without writing. (On the
    Hopper path a bound from 1536 keys can pick another D=64 config, dispatch.cu packed_config_kind: the
    extras stay below it.)"""
    _, out, lse = run_varlen(spec, device, backend=path)
    _, out2, lse2 = run_varlen(spec, device, max_extra=extra, backend=path)
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
    ("unaligned-address", _spec([100, 1, 33], [7, 1, 40], layout_q=Layout("offset", 5), layout_kv=Layout("offset", 3), d=96,
                                hq=1, hk=1)),
    ("many-heads", _spec([1100, 1300, 50], hq=48, hk=8, d=128)),
    # A 4096-key bound: D=64 causal runs the three-consumer long-keys config on the Hopper path.
    ("long-keys-config,D=64", _spec([4500, 130, 4097], mode=BOTTOM_RIGHT, d=64, hq=2, hk=1)),
]


@PATHS
@pytest.mark.parametrize("dtype", [pytest.param(torch.float16, id="fp16"), pytest.param(torch.bfloat16, id="bf16")])
@pytest.mark.parametrize("spec", [pytest.param(s, id=i) for i, s in EDGES])
def test_edge_case(path: str, spec: VarlenSpec, dtype, device: torch.device) -> None:
    spec = VarlenSpec(**{**spec.__dict__, "dtype": dtype})
    x, out, lse = run_varlen(spec, device, backend=path)
    check(spec, x, out, lse, path)


@PATHS
@pytest.mark.parametrize("d", [64, 96, 128, 192, 256])
def test_rows_of_one_sequence_never_reach_another(path: str, d: int, device: torch.device) -> None:
    """A neighbour full of NaN (or huge values) changes nothing in its neighbours: tiles and K/V
    loads stop at each sequence's end (the Hopper path reads on into the neighbour's rows, masks its
    keys and zeroes its V rows)."""
    spec = _spec([100, 70, 129], [130, 70, 64], mode=NONE, d=d)
    x = spec.make(device)
    with flashattn.use_backend(path):
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


@pytest.mark.sm90
@pytest.mark.parametrize("spec", [
    # A 4096-key bound picks D=64's long-keys config for the batch; the 130-row sequence packed alone
    # has 130 rows, below that bound.
    pytest.param(_spec([4500, 130, 4097], [4500, 130, 4097], mode=BOTTOM_RIGHT, d=64, hq=2, hk=1), id="key-bound"),
    # The window's edges reach into the 600-row sequence, never into the 100-row one: packed alone,
    # the 100-row sequence's rows are fewer than the edges.
    pytest.param(_spec([600, 100], mode=NONE, window=(300, 300), d=64, hq=2, hk=1), id="window-past-a-sequence"),
])
def test_a_sequence_packed_alone_takes_its_batch_config(spec: VarlenSpec, device: torch.device) -> None:
    """The Hopper packed forward picks its config from the caller's bounds and window, never from the
    packed rows (which depend on the neighbours): each sequence's rows are bitwise those of a packed
    call holding it alone under the same bounds and window, where the alone call's rows are fewer
    than the bound or the window's edges (the clamped bound, a dropped edge picked another D=64
    config for the sequence alone, other bits, before 2026-12-05)."""
    x, out, lse = run_varlen(spec, device)
    check(spec, x, out, lse, "auto")
    with forced_splits(1):
        _check_each_sequence_alone(spec, x, out, lse, spec.causal_mode == BOTTOM_RIGHT, device)


# D=64's long-keys config (traits.h Sm90LongKeysConfig<64>: 192-row tiles, three consumer warpgroups,
# the partial tile first), as the profiler names its packed kernel demangled or not.
LONG_KEYS_TRAITS = ("Sm90FwdTraits<64, 128, 2, true, 1, false, 4, 3, true>",
                    "Sm90FwdTraitsILi64ELi128ELi2ELb1ELi1ELb0ELi4ELi3ELb1EE")


@pytest.mark.sm90
@pytest.mark.parametrize("dtype", [pytest.param(torch.float16, id="fp16"), pytest.param(torch.bfloat16, id="bf16")])
def test_long_bounds_take_the_long_keys_config_each_partial_tile_first(dtype, device: torch.device) -> None:
    """A causal D=64 packed batch whose key bound reaches 1536, with heads enough that one sequence of
    the bounds in 192-row tiles fills 1.5 waves, runs the long-keys config (dispatch.cu
    packed_config_kind), each sequence's partial query tile first (packed.cuh packed_row_shift: the
    lengths leave every remainder kind, a whole last tile included); one head fewer, the default
    config. Either way the numerics hold per sequence, and each sequence's rows are bitwise those of
    a packed call of it alone under the same bounds (the choice reads the bounds and heads only)."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    lens = [1700, 1537, 250, 1, 0, 900, 192, 191]
    heads = -(-3 * sms // (2 * -(-max(lens) // 192)))  # kSm90LongKeysGridHalfWaves = 3
    for hq, expect in ((heads, True), (heads - 1, False)):
        spec = VarlenSpec(**{**_spec(lens, hq=hq, hk=1, d=64, mode=BOTTOM_RIGHT).__dict__, "dtype": dtype})
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            run_varlen(spec, device)
            torch.cuda.synchronize(device)
        names = {e.name for e in prof.events() if "flash_fwd" in e.name}
        took = any(t in n for n in names for t in LONG_KEYS_TRAITS)
        assert names and took == expect, (hq, names)
        x, out, lse = run_varlen(spec, device)
        check(spec, x, out, lse, f"{hq} heads")
        with forced_splits(1):
            _check_each_sequence_alone(spec, x, out, lse, True, device)


def _forward_kernels(backend: str, device: torch.device) -> set[str]:
    x = _spec([300, 200], d=128, mode=BOTTOM_RIGHT).make(device)
    with flashattn.use_backend(backend), torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        flashattn.flash_attn_varlen_func(x.q, x.k, x.v, x.cu_seqlens_q, x.cu_seqlens_k, 300, 300, causal=True)
        torch.cuda.synchronize(device)
    return {e.name for e in prof.events() if "flash_fwd" in e.name}


def test_forward_kernels_by_backend(device: torch.device) -> None:
    """Under "auto" the Hopper forward's packed flavour on an H100 (flash_fwd_sm90_varlen_supported),
    the portable packed kernel on every other GPU and under "portable"."""
    portable = _forward_kernels("portable", device)
    assert portable and not any("sm90" in n for n in portable), portable
    names = _forward_kernels("auto", device)
    if torch.cuda.get_device_capability(device) == (9, 0):
        assert names and all("flash_fwd_sm90_packed_kernel" in n for n in names), names
    else:
        assert names == portable, names


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


def test_forward_rows_no_sequence_owns_are_zero(device: torch.device) -> None:
    """cu_seqlens covering only part of the packed tensors (padding rows at the end of a packed
    buffer, or no sequence at all): those rows of out are 0 and of lse -inf, as for a row that sees
    no key, from NaN-poisoned memory; the owned rows are those of a call on the owned rows alone."""
    poison_cuda_allocator()
    torch.manual_seed(3)
    q = torch.randn(50, 4, 64, device=device, dtype=torch.bfloat16)
    k, v = (torch.randn(40, 2, 64, device=device, dtype=torch.bfloat16) for _ in range(2))
    for cu_q, cu_k in (([0, 20, 41], [0, 15, 33]), ([0], [0])):
        cq, ck = (torch.tensor(c, dtype=I32, device=device) for c in (cu_q, cu_k))
        out, lse = flashattn.flash_attn_varlen_func(q, k, v, cq, ck, 21, 18, causal=True, return_lse=True)
        torch.cuda.synchronize()
        r, rk = cu_q[-1], cu_k[-1]
        assert bool((out[r:] == 0).all()), f"out rows {r}.. of no sequence are not 0 (cu_seqlens_q {cu_q})"
        assert bool((lse[:, r:] == float("-inf")).all()), f"lse of rows {r}.. of no sequence is not -inf"
        if r:
            alone, lse_alone = flashattn.flash_attn_varlen_func(q[:r], k[:rk], v[:rk], cq, ck, 21, 18, causal=True,
                                                                return_lse=True)
            assert_bitwise_equal(out[:r], alone, "owned rows of out")
            assert_bitwise_equal(lse[:, :r].contiguous(), lse_alone, "owned rows of lse")


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


# ==== the backward (flashattn::bwd_varlen through the autograd of flash_attn_varlen_func) ============

DOUT_KINDS = ("contiguous", "pad_dim", "broadcast", "scalar", "offset")


def make_varlen_dout(x, kind: str, seed: int) -> torch.Tensor:
    """An upstream gradient shaped like out [total_q, Hq, D]: contiguous, rows padded by 5 elements
    (strides the kernels cannot load 16 bytes at a time: the binding copies), one row broadcast
    with stride 0 (what a sum-like loss hands the backward), one value with every stride 0
    (out.sum()'s own gradient: the last stride is 0 too), or a contiguous view 3 elements into a flat
    buffer (contiguous to torch, not 16-byte aligned: the binding copies)."""
    t, h, d = x.q.shape
    gen = torch.Generator(device=x.q.device).manual_seed(seed)

    def randn(*size: int) -> torch.Tensor:
        return torch.randn(*size, generator=gen, device=x.q.device).to(x.q.dtype)

    if kind == "contiguous":
        return randn(t, h, d)
    if kind == "pad_dim":
        return randn(t, h, d + 5)[..., :d]
    if kind == "broadcast":
        return randn(1, 1, d).expand(t, h, d)
    if kind == "scalar":
        return randn(1, 1, 1).expand(t, h, d)
    if kind == "offset":
        return randn(3 + t * h * d)[3:].view(t, h, d)
    raise ValueError(kind)


def varlen_grads(spec: VarlenSpec, x, dout: torch.Tensor, *, op: bool = False, max_extra: int = 0,
                 cu=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of flash_attn_varlen_func (or of the op itself: every causal mode) on fresh
    leaves with the spec's memory layout; cu: (cu_seqlens_q, cu_seqlens_k, max_q, max_k) to use
    instead of the spec's."""
    q, k, v = (t.detach().requires_grad_(True) for t in (x.q, x.k, x.v))
    cu_q, cu_k, max_q, max_k = cu or (x.cu_seqlens_q, x.cu_seqlens_k, spec.max_seqlen_q, spec.max_seqlen_k)
    max_q, max_k = max_q + max_extra, max_k + max_extra
    if op:
        scale = 1 / math.sqrt(spec.head_dim) if spec.scale is None else spec.scale
        out, _ = torch.ops.flashattn.fwd_varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale, spec.causal_mode, "auto",
                                                spec.window[0], spec.window[1], spec.softcap)
    else:
        assert spec.causal_mode in (NONE, BOTTOM_RIGHT)
        out = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale=spec.scale,
                                               causal=spec.causal_mode == BOTTOM_RIGHT, window_size=spec.window,
                                               softcap=spec.softcap)
    return torch.autograd.grad(out, (q, k, v), dout)


def check_grads(spec: VarlenSpec, x, dout: torch.Tensor, grads, context: str = ""):
    return assert_varlen_gradients_match(*grads, x.q, x.k, x.v, dout, x.cu_q, x.cu_k, spec.scale, spec.causal_mode,
                                         window=spec.window, softcap=spec.softcap, context=f"{context} {spec!r}")


@given(spec=varlen_specs(), deterministic=st.booleans(), dout_kind=st.sampled_from(DOUT_KINDS))
def test_varlen_gradients_match_reference(spec: VarlenSpec, deterministic: bool, dout_kind: str,
                                          device: torch.device) -> None:
    """dq, dk, dv of every sequence by the suite's gradient criterion (tests/numerics.py), in both
    backward modes (deterministic: from NaN-poisoned memory); zero-length sequences, GQA, causal,
    windows, softcaps, every head dim, strided layouts and upstream gradients."""
    x = spec.make(device)
    dout = make_varlen_dout(x, dout_kind, spec.seed + 1)
    with backward_mode(deterministic):
        grads = varlen_grads(spec, x, dout)
    check_grads(spec, x, dout, grads, f"deterministic={deterministic} dout={dout_kind}")


@given(spec=varlen_specs(causal_choices=(NONE, TOP_LEFT, BOTTOM_RIGHT)), deterministic=st.booleans())
def test_op_gradients_match_reference_in_every_causal_mode(spec: VarlenSpec, deterministic: bool,
                                                           device: torch.device) -> None:
    x = spec.make(device)
    dout = make_varlen_dout(x, "contiguous", spec.seed + 1)
    with backward_mode(deterministic):
        grads = varlen_grads(spec, x, dout, op=True)
    check_grads(spec, x, dout, grads, f"op, deterministic={deterministic}")


@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "default"])
@pytest.mark.parametrize("spec", [pytest.param(s, id=i) for i, s in EDGES])
def test_edge_case_gradients(spec: VarlenSpec, deterministic: bool, device: torch.device) -> None:
    x = spec.make(device)
    dout = make_varlen_dout(x, "contiguous", 5)
    with backward_mode(deterministic):
        grads = varlen_grads(spec, x, dout)
    check_grads(spec, x, dout, grads, f"deterministic={deterministic}")


# The dense Hopper backward's dense-only configs, turned off for the comparison with the packed
# kernels (csrc/flash_bwd_sm90/dispatch.cu): the wide 80-query config at D=128, the GQA group
# split over CTAs and the split last wave (both: float32 dK/dV sums in another order), and in
# deterministic mode the rotated walks without a mask (launch.cuh bwd_rotate_m: the steps, hence
# the dK/dV and dQ sums, in another order). The packed kernels run none of them.
DENSE_AS_PACKED = {"FLASHATTN_BWD_WIDE": "0", "FLASHATTN_BWD_GROUP_SPLIT": "1", "FLASHATTN_BWD_TAIL": "0",
                   "FLASHATTN_BWD_ROTATE": "0"}


def _dense_grads(spec: VarlenSpec, x, dout: torch.Tensor, b: int, backend: str, out: torch.Tensor, lse: torch.Tensor,
                 deterministic: bool):
    """Sequence b alone through the dense backward op (flashattn::bwd) under `backend`, on the packed
    forward's rows of out and lse: the two calls then differ only in their backward (a dense forward
    under "auto" on an H100 runs the Hopper forward, whose bits differ from the portable one's), and
    the dense one in the tile config the packed one runs (DENSE_AS_PACKED)."""
    q0, q1, k0, k1 = x.cu_q[b], x.cu_q[b + 1], x.cu_k[b], x.cu_k[b + 1]
    scale = 1 / math.sqrt(spec.head_dim) if spec.scale is None else spec.scale
    saved = {name: os.environ.get(name) for name in DENSE_AS_PACKED}
    os.environ.update(DENSE_AS_PACKED)
    try:
        return torch.ops.flashattn.bwd(dout[None, q0:q1], x.q[None, q0:q1], x.k[None, k0:k1], x.v[None, k0:k1],
                                       out[None, q0:q1], lse[None, :, q0:q1], scale, spec.causal_mode, deterministic,
                                       backend, spec.window[0], spec.window[1], spec.softcap)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def assert_equals_per_sequence_dense_backward(spec: VarlenSpec, x, dout: torch.Tensor, grads, deterministic: bool,
                                              backend: str):
    dq, dk, dv = grads
    with flashattn.use_backend(backend):
        out, lse = flashattn.flash_attn_varlen_func(
            x.q, x.k, x.v, x.cu_seqlens_q, x.cu_seqlens_k, spec.max_seqlen_q, spec.max_seqlen_k, softmax_scale=spec.scale,
            causal=spec.causal_mode == BOTTOM_RIGHT, window_size=spec.window, softcap=spec.softcap, return_lse=True)
    for b in range(len(x.cu_q) - 1):
        q0, q1, k0, k1 = x.cu_q[b], x.cu_q[b + 1], x.cu_k[b], x.cu_k[b + 1]
        if q1 == q0 or k1 == k0:
            continue
        want = _dense_grads(spec, x, dout, b, backend, out, lse, deterministic)
        # dK/dV are summed in registers in a fixed order in both modes; dQ's atomics only in
        # deterministic mode.
        pairs = [("dk", dk[k0:k1], want[1][0]), ("dv", dv[k0:k1], want[2][0])]
        if deterministic:
            pairs.append(("dq", dq[q0:q1], want[0][0]))
        for name, got, w in pairs:
            assert_bitwise_equal(got, w, f"sequence {b} {name} vs the dense backward, {spec!r}")


def runs_the_dense_tiles(spec: VarlenSpec) -> bool:
    """Whether a dense call on one sequence of the spec (no window) runs the backward tile config
    the packed call runs: packed batches take the compact route (csrc/flash_bwd/registry.h), which
    a dense call takes with a softcap, and which is the only config of head dims 32 and 96."""
    return spec.softcap > 0 or spec.head_dim <= 32 or 64 < spec.head_dim <= 96


@given(spec=varlen_specs(max_seqlen=300, with_window=False).filter(runs_the_dense_tiles), deterministic=st.booleans())
def test_varlen_gradients_equal_per_sequence_dense_backward(spec: VarlenSpec, deterministic: bool,
                                                            device: torch.device) -> None:
    """Padded equivalence, portable backward: sequence b's rows of dq, dk, dv are bitwise those of
    the dense portable backward of flash_attn_func on that sequence alone (the same tile config,
    the same arithmetic; dq in deterministic mode, whose accumulation order is fixed). Where both
    calls run one config: packed batches take the compact route, as dense calls with a softcap or
    a window do, while a dense call without them takes the large tiles where they fit
    (runs_the_dense_tiles); and without windows here, whose edges the dense call normalizes per
    sequence and the packed call for the packed totals (test_windowed_... below has a window every
    sequence reaches). The other calls meet the gradient criterion per sequence
    (test_varlen_gradients_match_reference)."""
    x = spec.make(device)
    dout = make_varlen_dout(x, "contiguous", spec.seed + 1)
    with backward_mode(deterministic), flashattn.use_backend("portable"):
        grads = varlen_grads(spec, x, dout)
    assert_equals_per_sequence_dense_backward(spec, x, dout, grads, deterministic, "portable")


@pytest.mark.sm90
@given(spec=varlen_specs(max_seqlen=300, with_window=False), deterministic=st.booleans())
def test_hopper_gradients_equal_per_sequence_dense_backward(spec: VarlenSpec, deterministic: bool,
                                                            device: torch.device) -> None:
    """Padded equivalence on the Hopper backward: its packed kernels read each sequence from its
    first row and zero the rows of the next sequence inside a partial tile, so every sequence's
    dK/dV (and dQ in deterministic mode) are bitwise the dense Hopper backward's on that sequence
    alone, every head dim and the softcap included (one tile config per head dim and softcap; the
    dense call without its dense-only configs, DENSE_AS_PACKED)."""
    x = spec.make(device)
    dout = make_varlen_dout(x, "contiguous", spec.seed + 1)
    with backward_mode(deterministic):
        grads = varlen_grads(spec, x, dout)
    assert_equals_per_sequence_dense_backward(spec, x, dout, grads, deterministic, "auto")


@pytest.mark.parametrize("path", ["portable", pytest.param("auto", marks=pytest.mark.sm90, id="hopper")])
@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "default"])
@pytest.mark.parametrize(("spec", "why"), [
    pytest.param(_spec([700, 300, 999], [800, 300, 1000], window=(64, 0), d=64), "left edge and causal", id="window+causal"),
    pytest.param(_spec([400, 513], [300, 700], mode=NONE, window=(100, 50), d=128, hq=4, hk=1), "two edges", id="two-sided"),
    pytest.param(_spec([257, 64, 300], softcap=15.0, mode=NONE, d=256, hq=2, hk=1, magnitude=30.0), "softcap", id="softcap"),
    pytest.param(_spec([190, 64, 333], [300, 90, 333], window=(100, 0), d=192), "D=192, window and causal", id="d192"),
    pytest.param(_spec([129, 257], mode=NONE, softcap=10.0, d=168, hq=3, hk=1), "D=168 softcap", id="d168-softcap"),
])
def test_windowed_gradients_equal_per_sequence_dense_backward(spec: VarlenSpec, why: str, deterministic: bool,
                                                              path: str, device: torch.device) -> None:
    """The same with a window every sequence's rows reach (so on the portable path the dense and the
    packed call both take the compact route and run the window kernels), and with a softcap
    (always that route); on an H100 also both on the Hopper kernels ("auto")."""
    x = spec.make(device)
    dout = make_varlen_dout(x, "contiguous", 3)
    with backward_mode(deterministic), flashattn.use_backend(path):
        grads = varlen_grads(spec, x, dout)
    assert_equals_per_sequence_dense_backward(spec, x, dout, grads, deterministic, path)
    check_grads(spec, x, dout, grads, why)


@given(spec=varlen_specs(max_seqlen=200), extra=st.sampled_from((1, 64, 1000)))
def test_larger_max_seqlen_changes_no_gradient(spec: VarlenSpec, extra: int, device: torch.device) -> None:
    """max_seqlen sizes the grid only: key blocks past a sequence's end exit without writing, and
    the deterministic tickets (sized by max_seqlen_q) count the same."""
    x = spec.make(device)
    dout = make_varlen_dout(x, "contiguous", 2)
    with backward_mode(True):
        want = varlen_grads(spec, x, dout)
        got = varlen_grads(spec, x, dout, max_extra=extra)
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert_bitwise_equal(g, w, f"{name} with max_seqlen + {extra}, {spec!r}")


def test_rows_no_sequence_owns_get_zero_and_nothing_leaks(device: torch.device) -> None:
    """cu_seqlens ending before the packed totals: the rows past them get gradient 0 (from
    NaN-poisoned memory), and NaN/inf in them or in a neighbouring sequence's q, k, v, dout changes
    no other sequence's gradients."""
    spec = _spec([100, 70, 129, 40], [130, 70, 64, 50], mode=NONE, d=64)
    x = spec.make(device)
    cu = (torch.tensor(x.cu_q[:4], dtype=I32, device=device), torch.tensor(x.cu_k[:4], dtype=I32, device=device),
          129, 130)  # three sequences: rows x.cu_q[3].. and x.cu_k[3].. belong to none
    dout = make_varlen_dout(x, "contiguous", 4)
    with backward_mode(True):
        dq, dk, dv = varlen_grads(spec, x, dout, cu=cu)
        assert bool((dq[x.cu_q[3]:] == 0).all()) and bool((dk[x.cu_k[3]:] == 0).all()) and bool((dv[x.cu_k[3]:] == 0).all())
        three = VarlenSpec(**{**spec.__dict__, "q_lens": spec.q_lens[:3], "k_lens": spec.k_lens[:3]})
        sub = x.__class__(x.q[:x.cu_q[3]], x.k[:x.cu_k[3]], x.v[:x.cu_k[3]], cu[0], cu[1], x.cu_q[:4], x.cu_k[:4], None)
        check_grads(three, sub, dout[:x.cu_q[3]], (dq[:x.cu_q[3]], dk[:x.cu_k[3]], dv[:x.cu_k[3]]), "three of four")

        q, k, v, d2 = x.q.clone(), x.k.clone(), x.v.clone(), dout.clone()
        for t, r0, r1 in ((q, 100, 170), (k, 130, 200), (v, 130, 200), (d2, 100, 170)):  # sequence 1
            t[r0:r1] = float("nan")
        for t, r0 in ((q, x.cu_q[3]), (k, x.cu_k[3]), (v, x.cu_k[3]), (d2, x.cu_q[3])):  # nobody's rows
            t[r0:] = float("inf")
        poisoned = x.__class__(q, k, v, x.cu_seqlens_q, x.cu_seqlens_k, x.cu_q, x.cu_k, None)
        dq2, dk2, dv2 = varlen_grads(spec, poisoned, d2, cu=cu)
    keep_q = torch.ones(x.q.shape[0], dtype=torch.bool, device=device)
    keep_q[100:170] = False
    keep_k = torch.ones(x.k.shape[0], dtype=torch.bool, device=device)
    keep_k[130:200] = False
    assert_bitwise_equal(dq2[keep_q], dq[keep_q], "dq of the other sequences with a NaN neighbour")
    assert_bitwise_equal(dk2[keep_k], dk[keep_k], "dk of the other sequences with a NaN neighbour")
    assert_bitwise_equal(dv2[keep_k], dv[keep_k], "dv of the other sequences with a NaN neighbour")


DETERMINISM = [
    # many key blocks per query block, GQA, sequences of different lengths in one grid
    pytest.param(_spec([2048, 1500, 3000, 1], [2048, 3000, 1700, 1], mode=NONE, d=64), id="full-d64"),
    pytest.param(_spec([2048, 1500, 3000, 0], [2048, 3000, 1700, 9], mode=BOTTOM_RIGHT, d=128), id="causal-d128"),
    pytest.param(_spec([3000, 2000], [4000, 2100], mode=BOTTOM_RIGHT, window=(500, -1), d=128), id="causal+left-500"),
    pytest.param(_spec([2048, 999], [2048, 2500], mode=NONE, window=(256, 256), softcap=20.0, d=64), id="window+softcap"),
]


@pytest.mark.parametrize("spec", DETERMINISM)
def test_deterministic_backward_is_bitwise_reproducible(spec: VarlenSpec, device: torch.device) -> None:
    """Three runs with flashattn.set_deterministic(True) are bitwise equal, none hangs (each
    sequence's dQ tickets count its own key blocks; blocks past a sequence's keys hold none), and
    the gradients are right; torch's switch alone gives the same bits."""
    x = spec.make(device)
    dout = make_varlen_dout(x, "contiguous", 8)
    runs = []
    for _ in range(3):
        with backward_mode(True):
            flashattn.set_deterministic(True)
            runs.append(varlen_grads(spec, x, dout))
            finished_within(60, f"deterministic varlen backward {spec!r}")
    for i, grads in enumerate(runs[1:], start=2):
        for name, got, want in zip(("dq", "dk", "dv"), grads, runs[0]):
            assert_bitwise_equal(got, want, f"{name}, run {i} vs run 1")
    check_grads(spec, x, dout, runs[0], "deterministic")
    with backward_mode(False):
        torch.use_deterministic_algorithms(True)
        by_torch = varlen_grads(spec, x, dout)
    for name, got, want in zip(("dq", "dk", "dv"), by_torch, runs[0]):
        assert_bitwise_equal(got, want, f"{name}, torch's switch vs flashattn's")


def _backward_kernels(backend: str, device: torch.device) -> set[str]:
    spec = _spec([300, 200], d=64, mode=NONE)
    x = spec.make(device)
    q = x.q.detach().requires_grad_(True)
    with flashattn.use_backend(backend):
        out = flashattn.flash_attn_varlen_func(q, x.k, x.v, x.cu_seqlens_q, x.cu_seqlens_k, 300, 300)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        out.backward(torch.randn_like(out))
        torch.cuda.synchronize(device)
    return {e.name for e in prof.events() if "flash_bwd" in e.name}


def test_backward_runs_the_portable_kernels_under_portable(device: torch.device) -> None:
    """Under "portable", on every GPU (an H100 included), a packed batch's backward runs the
    portable kernels, their packed flavour, on the compact tiles (D=64: 128 keys x 64 queries)."""
    names = _backward_kernels("portable", device)
    main = {n for n in names if "flash_bwd_kernel" in n}
    assert main and not any("sm90" in n for n in names), names
    assert all(", true, false, false>" in n for n in main), main  # <Traits, Element, kVarlen, kWindow, kSoftcap>
    assert all("BwdKernelTraits<64, 128, 64," in n for n in main), main  # <D, block N, block M, ...>


def test_backward_under_auto_runs_the_hopper_kernels_on_an_h100(device: torch.device) -> None:
    """Under "auto" the packed flavour of the Hopper backward's main kernel and dQ conversion on an
    H100 (flash_bwd_sm90_supported), the portable packed kernels on every other GPU."""
    names = _backward_kernels("auto", device)
    if torch.cuda.get_device_capability(device) == (9, 0):
        main = {n for n in names if "flash_bwd_sm90_kernel" in n}
        convert = {n for n in names if "flash_bwd_sm90_convert_dq_kernel" in n}
        assert main and convert and not any("flash_bwd_kernel<" in n for n in names), names
        assert all(", false, true>(" in n for n in main), main  # <Traits, Element, kSoftcap, kPacked>(params)
        assert all(", true>(" in n for n in convert), convert  # <Traits, Element, kPacked>(...)
    else:
        assert {n for n in names if "flash_bwd_kernel" in n} and not any("sm90" in n for n in names), names


def test_cuda_graph_of_a_training_step_follows_new_cu_seqlens(device: torch.device) -> None:
    """Forward + backward captured in one CUDA graph (the bindings never read cu_seqlens on the
    host), replayed with new lengths written into the same cu_seqlens tensors: the gradients meet
    the criterion for the new packing, and equal eager's bitwise (deterministic mode)."""
    spec = _spec([100, 50, 106], [64, 128, 64], mode=BOTTOM_RIGHT, d=64)
    x = spec.make(device)
    cu_q, cu_k = x.cu_seqlens_q.clone(), x.cu_seqlens_k.clone()
    q, k, v = (t.detach().requires_grad_(True) for t in (x.q, x.k, x.v))
    w = make_varlen_dout(x, "contiguous", 1)

    def step():
        out = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 256, 256, causal=True)
        (out * w).sum().backward()

    with backward_mode(True):
        flashattn.set_deterministic(True)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(2):
                step()
        torch.cuda.current_stream(device).wait_stream(side)
        for t in (q, k, v):
            t.grad = None
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        for q_lens, k_lens in (([100, 50, 106], [64, 128, 64]), ([0, 256, 0], [1, 200, 55]), ([1, 1, 254], [128, 0, 128])):
            cu_q.copy_(torch.tensor(cumulative(q_lens), dtype=I32, device=device))
            cu_k.copy_(torch.tensor(cumulative(k_lens), dtype=I32, device=device))
            graph.replay()
            torch.cuda.synchronize(device)
            new = VarlenSpec(**{**spec.__dict__, "q_lens": tuple(q_lens), "k_lens": tuple(k_lens)})
            nx = x.__class__(x.q, x.k, x.v, cu_q, cu_k, cumulative(q_lens), cumulative(k_lens), None)
            want = varlen_grads(new, nx, w, cu=(cu_q, cu_k, 256, 256))
            for name, g, e in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), want):
                assert_bitwise_equal(g, e, f"{name}, replay with lengths {q_lens}/{k_lens} vs eager")
            check_grads(new, nx, w, (q.grad, k.grad, v.grad), "graph replay")


def test_torch_compile_training_step(device: torch.device) -> None:
    """Forward + backward compiled with fullgraph=True (inductor): no graph break, eager's bits
    (deterministic mode)."""
    from torch._dynamo.utils import counters

    spec = _spec([100, 0, 37], [80, 5, 37], d=64, window=(16, 0), softcap=10.0)
    x = spec.make(device)
    q, k, v = (t.detach().requires_grad_(True) for t in (x.q, x.k, x.v))
    w = make_varlen_dout(x, "contiguous", 1)

    def loss(q, k, v, cu_q, cu_k):
        out = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 100, 80, causal=True, window_size=(16, 0),
                                               softcap=10.0)
        return (out * w).sum()

    torch._dynamo.reset()
    counters.clear()
    with backward_mode(True):
        got = torch.autograd.grad(torch.compile(loss, fullgraph=True)(q, k, v, x.cu_seqlens_q, x.cu_seqlens_k), (q, k, v))
        want = torch.autograd.grad(loss(q, k, v, x.cu_seqlens_q, x.cu_seqlens_k), (q, k, v))
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    for name, g, e in zip(("dq", "dk", "dv"), got, want):
        assert_bitwise_equal(g, e, f"{name}: compiled vs eager")
    check_grads(spec, x, w, got, "compiled")


def test_backward_op_refuses_the_hopper_backend(device: torch.device) -> None:
    """The binding itself (a RuntimeError naming the backend) and the Python wrapper the autograd
    calls (a ValueError, before the op)."""
    x = _spec([10, 20], d=64).make(device)
    out, lse = torch.ops.flashattn.fwd_varlen(x.q, x.k, x.v, x.cu_seqlens_q, x.cu_seqlens_k, 20, 20, 0.125, NONE, "auto")
    args = (out, x.q, x.k, x.v, out, lse, x.cu_seqlens_q, x.cu_seqlens_k, 20, 20, 0.125, NONE, False, "hopper")
    with pytest.raises(RuntimeError, match="backend 'hopper' does not support packed"):
        torch.ops.flashattn.bwd_varlen(*args)
    with pytest.raises(ValueError, match="backend 'hopper' does not support packed"):
        flashattn._ops.bwd_varlen(*args)
