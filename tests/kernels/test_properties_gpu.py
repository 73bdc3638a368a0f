"""Properties beyond numerics, on the GPU: bitwise determinism, O(S) memory, torch.compile,
CUDA graphs, streams, and the NaN poisoning the numerics tests rely on."""

from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn
from gpu_helpers import peak_extra_bytes, poison_cuda_allocator
from numerics import assert_attention_matches
from strategies import AttentionSpec, Layout

pytestmark = pytest.mark.gpu

NONE, TOP_LEFT, BOTTOM_RIGHT = flashattn.CAUSAL_NONE, flashattn.CAUSAL_TOP_LEFT, flashattn.CAUSAL_BOTTOM_RIGHT


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of t, so that comparisons are bitwise (-0.0 != 0.0, NaN payloads count)."""
    return t.contiguous().view({2: torch.int16, 4: torch.int32}[t.element_size()])


def assert_bitwise_equal(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, f"{what}: {got.shape}/{got.dtype} vs {want.shape}/{want.dtype}"
    differ = int((bits(got) != bits(want)).sum())
    assert differ == 0, f"{what}: {differ} of {got.numel()} elements differ bitwise"


def spec(b=2, sq=300, sk=333, hq=8, hk=2, d=128, dtype=torch.bfloat16, mode=BOTTOM_RIGHT, layout_kv=Layout("contiguous"), seed=0):
    return AttentionSpec(b, sq, sk, hq, hk, d, dtype, mode, None, Layout("contiguous"), layout_kv, 1.0, seed)


def fa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return flashattn.flash_attn_func(q, k, v, causal=True, return_lse=True)


# ---- the poisoning itself -------------------------------------------------------------------------


@pytest.mark.parametrize("numel", [1, 1000, 3 << 20], ids=["1", "1000", "3M"])
def test_poisoning_fills_fresh_allocations_with_nan(numel: int, device: torch.device) -> None:
    poison_cuda_allocator()
    fresh = [torch.empty(numel, dtype=dtype, device=device) for dtype in (torch.float16, torch.bfloat16, torch.float32)]
    for t in fresh:
        assert torch.isnan(t).all(), f"{t.dtype} x {numel}: fresh memory is not NaN"


# ---- determinism --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "problem",
    [
        spec(),
        spec(sq=1, sk=4099, d=64, dtype=torch.float16, mode=NONE),
        spec(sq=517, sk=129, d=256, mode=BOTTOM_RIGHT, layout_kv=Layout("pad_dim", 5)),
        spec(b=1, sq=1000, sk=1000, hq=4, hk=4, d=96, mode=TOP_LEFT),
    ],
    ids=["gqa-causal", "decode", "d256-unaligned-kv", "d96-top-left"],
)
def test_bitwise_deterministic_run_to_run(problem: AttentionSpec, backend: str, device: torch.device) -> None:
    x = problem.make(device)
    scale = problem.resolved_scale
    runs = []
    for _ in range(3):
        poison_cuda_allocator()
        runs.append(torch.ops.flashattn.fwd(x.q, x.k, x.v, scale, x.causal_mode, backend))
    for i, (out, lse) in enumerate(runs[1:], start=2):
        assert_bitwise_equal(out, runs[0][0], f"out, run {i} vs run 1")
        assert_bitwise_equal(lse, runs[0][1], f"lse, run {i} vs run 1")


def test_outputs_are_fresh_contiguous_tensors(backend: str, device: torch.device) -> None:
    x = spec(layout_kv=Layout("bhsd")).make(device)
    out, lse = torch.ops.flashattn.fwd(x.q, x.k, x.v, 0.1, NONE, backend)
    assert out.is_contiguous() and lse.is_contiguous()
    assert out.data_ptr() not in {t.data_ptr() for t in (x.q, x.k, x.v)}


# ---- memory -------------------------------------------------------------------------------------


@pytest.mark.parametrize("seqlen", [4096, 16384])
def test_peak_memory_is_linear_in_sequence_length(seqlen: int, backend: str, device: torch.device, measure) -> None:
    b, h, d = 1, 4, 64
    q, k, v = (torch.randn(b, seqlen, h, d, device=device, dtype=torch.float16) for _ in range(3))
    with flashattn.use_backend(backend):
        ours = peak_extra_bytes(lambda: fa(q, k, v), device)
    outputs = q.numel() * q.element_size() + b * h * seqlen * 4  # out + lse
    assert ours <= 2 * outputs + (1 << 20), f"peak extra {ours} B for {outputs} B of outputs at S={seqlen}"

    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        math_peak = peak_extra_bytes(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True), device)
    measure(f"peak extra memory S={seqlen}, ours", ours / 2**20, "MiB")
    measure(f"peak extra memory S={seqlen}, SDPA math", math_peak / 2**20, "MiB")
    measure(f"SDPA math / ours peak memory S={seqlen}", math_peak / ours, "x")
    assert math_peak > 10 * ours  # the measurement sees the S^2 score matrix of the math backend


# ---- torch.compile --------------------------------------------------------------------------------


def _sdpa_causal_gqa(q, k, v):
    return flashattn.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def _flash_causal_lse(q, k, v):
    return flashattn.flash_attn_func(q, k, v, causal=True, return_lse=True)


ENTRY_POINTS = {
    # name: (function, q shape, k/v shape)
    "sdpa": (_sdpa_causal_gqa, (2, 8, 100, 64), (2, 2, 150, 64)),
    "flash_attn_func": (_flash_causal_lse, (2, 100, 8, 64), (2, 150, 2, 64)),
}


def _outputs(result) -> tuple[torch.Tensor, ...]:
    return result if isinstance(result, tuple) else (result,)


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_torch_compile_fullgraph_matches_eager(entry: str, backend: str, device: torch.device) -> None:
    fn, q_shape, kv_shape = ENTRY_POINTS[entry]
    q = torch.randn(q_shape, device=device, dtype=torch.bfloat16)
    k, v = (torch.randn(kv_shape, device=device, dtype=torch.bfloat16) for _ in range(2))
    torch._dynamo.reset()
    with flashattn.use_backend(backend):
        compiled = torch.compile(fn, fullgraph=True)
        got, want = compiled(q, k, v), fn(q, k, v)
    for i, (g, w) in enumerate(zip(_outputs(got), _outputs(want), strict=True)):
        assert_bitwise_equal(g, w, f"{entry} output {i}: compiled vs eager")


def test_torch_compile_dynamic_shapes(backend: str, device: torch.device) -> None:
    torch._dynamo.reset()
    with flashattn.use_backend(backend):
        compiled = torch.compile(_flash_causal_lse, fullgraph=True, dynamic=True)
        for sq, sk in ((100, 150), (37, 300), (1, 1)):
            q = torch.randn(2, sq, 8, 64, device=device, dtype=torch.float16)
            k, v = (torch.randn(2, sk, 2, 64, device=device, dtype=torch.float16) for _ in range(2))
            got, want = compiled(q, k, v), _flash_causal_lse(q, k, v)
            for g, w, name in zip(got, want, ("out", "lse"), strict=True):
                assert_bitwise_equal(g, w, f"{name} Sq={sq} Sk={sk}: compiled vs eager")


# ---- CUDA graphs ----------------------------------------------------------------------------------


def test_cuda_graph_capture_and_replay_match_eager(backend: str, device: torch.device) -> None:
    problem = spec(sq=257, sk=300)
    static = problem.make(device)
    q, k, v = static.q, static.k, static.v
    with flashattn.use_backend(backend):
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # warm up outside the capture, as torch.cuda.graph requires
            for _ in range(2):
                fa(q, k, v)
        torch.cuda.current_stream(device).wait_stream(side)

        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out, lse = fa(q, k, v)

        for seed in (1, 2):
            fresh = spec(sq=257, sk=300, seed=seed).make(device)
            q.copy_(fresh.q)
            k.copy_(fresh.k)
            v.copy_(fresh.v)
            graph.replay()
            want_out, want_lse = fa(fresh.q, fresh.k, fresh.v)
            torch.cuda.synchronize(device)
            assert_bitwise_equal(out, want_out, f"out, replay with seed {seed} vs eager")
            assert_bitwise_equal(lse, want_lse, f"lse, replay with seed {seed} vs eager")
        assert_attention_matches(out, lse, q, k, v, None, BOTTOM_RIGHT, context="replayed graph")


# ---- streams --------------------------------------------------------------------------------------


def test_two_streams_at_once(backend: str, device: torch.device) -> None:
    a = spec(sq=1000, sk=1000, mode=TOP_LEFT).make(device)
    b = spec(b=3, sq=333, sk=777, hq=4, hk=1, d=64, dtype=torch.float16, seed=1).make(device)
    with flashattn.use_backend(backend):
        want_a, want_b = fa(a.q, a.k, a.v), fa(b.q, b.k, b.v)
        torch.cuda.synchronize(device)
        current = torch.cuda.current_stream(device)
        s1, s2 = torch.cuda.Stream(device), torch.cuda.Stream(device)
        s1.wait_stream(current)
        s2.wait_stream(current)
        got_a, got_b = [], []
        for _ in range(4):
            with torch.cuda.stream(s1):
                got_a.append(fa(a.q, a.k, a.v))
            with torch.cuda.stream(s2):
                got_b.append(fa(b.q, b.k, b.v))
        current.wait_stream(s1)
        current.wait_stream(s2)
        torch.cuda.synchronize(device)
    for i, ((oa, la), (ob, lb)) in enumerate(zip(got_a, got_b)):
        assert_bitwise_equal(oa, want_a[0], f"stream 1 out, round {i}")
        assert_bitwise_equal(la, want_a[1], f"stream 1 lse, round {i}")
        assert_bitwise_equal(ob, want_b[0], f"stream 2 out, round {i}")
        assert_bitwise_equal(lb, want_b[1], f"stream 2 lse, round {i}")


def test_kernel_runs_on_the_current_stream(backend: str, device: torch.device) -> None:
    """The input is written late on a side stream (behind a GPU-side spin); a kernel launched on
    any other stream than the current one would read the NaN it held before."""
    x = spec().make(device)
    with flashattn.use_backend(backend):
        want = fa(x.q, x.k, x.v)
        late_q = torch.full_like(x.q, float("nan"))
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            torch.cuda._sleep(50_000_000)  # ~30 ms of GPU time on `side` only
            late_q.copy_(x.q)
            got = fa(late_q, x.k, x.v)
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)
    assert_bitwise_equal(got[0], want[0], "out computed on a side stream")
    assert_bitwise_equal(got[1], want[1], "lse computed on a side stream")
