"""Attention benchmarks, forward and backward: flashattn vs every SDPA backend on the same inputs.

Run on a GPU (see docs/benchmarks.md), e.g.
    python -m pytest benchmarks -m "bench and standard" --benchmark-json=bench.json
    python -m pytest benchmarks -m "bench and training" ...   (the backward, "bwd", and "fwd+bwd")
    python benchmarks/bench_report.py bench.json --png bench.png --markdown report.md

One test = one (shape, implementation). The first test of a shape times every implementation
collected for it together, in interleaved rounds (bench_common.measure_interleaved: round r runs
each implementation once, N back-to-back calls between two CUDA events, N so that a round lasts
>= round_ms, in an order that rotates and reverses from round to round), so clock drift hits
all of them alike; each test's pytest-benchmark stats are its rounds of (round time / N). extra_info
holds the shape, FLOPs, median ms, TFLOP/s, and for the latency-bound grids the single-call
latency (one call between two events, the GPU idle before it), which is what a caller who waits
for each result sees.
"""

from __future__ import annotations

import os
import sys
import warnings

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_common as bc

_CACHE: dict = {}


def _params(shapes, impls, grid_mark):
    for shape in shapes:
        for impl in impls:
            marks = [pytest.mark.bench, grid_mark]
            if shape.quick:
                marks.append(pytest.mark.quick)
            yield pytest.param(shape, impl, id=f"{shape.id}-{impl}", marks=marks)


def _inputs(shape):
    """Inputs (and SDPA default's output as a sanity reference) for the current shape, shared by
    all implementations; only the last shape is kept, so memory stays one shape's worth."""
    import torch

    if _CACHE.get("shape") != shape:
        _CACHE.clear()
        torch.cuda.empty_cache()
        total = torch.cuda.get_device_properties(0).total_memory
        need = shape.io_bytes + 2 * shape.b * shape.hq * shape.sq * shape.d  # Q, K, V, O + the reference O
        if need > 0.6 * total:
            raise bc.Unavailable(f"inputs need ~{need / 2**30:.0f} GiB, over 60% of this GPU's {total / 2**30:.0f} GiB")
        _CACHE["shape"] = shape
        q, k, v = bc.make_inputs(shape)
        if shape.pass_ != "fwd":  # leaves that require grad, and the upstream gradient
            import torch

            q, k, v = (t.requires_grad_(True) for t in (q, k, v))
            gen = torch.Generator(device=q.device).manual_seed(4321)
            _CACHE["dout"] = torch.randn(q.shape, generator=gen, device=q.device, dtype=q.dtype)
        _CACHE["qkv"] = (q, k, v)
    return _CACHE["qkv"]


def _reference(shape, q, k, v):
    if "ref" not in _CACHE:
        import torch.nn.functional as F

        kw = {"is_causal": shape.causal}
        if shape.hq != shape.hk:
            kw["enable_gqa"] = True
        try:
            if shape.pass_ == "fwd":
                _CACHE["ref"] = F.scaled_dot_product_attention(q, k, v, **kw)
            else:  # SDPA default's gradients
                import torch

                out = F.scaled_dot_product_attention(q, k, v, **kw)
                _CACHE["ref"] = torch.autograd.grad(out, (q, k, v), _CACHE["dout"])
                del out
        except (RuntimeError, TypeError) as exc:  # no reference: the sanity check is skipped
            _CACHE["ref"] = None
            _CACHE["ref_error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return _CACHE["ref"]


def _first_call(impl, fn):
    """Run once (also the first warm-up); a refusal becomes a skip with the library's reason."""
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = fn()
            torch.cuda.synchronize()
            return out
        except (RuntimeError, ValueError, TypeError, NotImplementedError) as exc:
            if isinstance(exc, torch.cuda.OutOfMemoryError):
                torch.cuda.empty_cache()
            raise bc.Unavailable(bc.refusal_reason(f"{impl} cannot run this shape", exc, caught)) from exc


_BENCH = bc.CaseBench()


def _prepare(shape: bc.Shape, impl: str):
    """impl ready to time on the shape's shared inputs: built, run once, checked against SDPA."""
    q, k, v = _inputs(shape)
    if shape.pass_ == "fwd":
        fn, ctx = bc.make_callable(impl, shape, q, k, v)
    else:
        fn, ctx = bc.make_training_callable(impl, shape, q, k, v, _CACHE["dout"])
    with ctx():
        out = _first_call(impl, fn)
    ref = _reference(shape, q, k, v)
    err = bc.rel_err(out, ref) if ref is not None else None
    del out
    if err is not None and not err <= bc.MAX_REL_ERR:
        raise bc.BenchFailure(f"{impl} on {shape.group}: relative L2 error {err:.3g} vs SDPA default exceeds {bc.MAX_REL_ERR}")
    if shape.grid == "latency-graph":  # kernel time: the call captured once, then replayed
        try:
            with ctx():
                fn = bc.graphed(fn)
        except RuntimeError as exc:
            raise bc.Unavailable(f"{impl} cannot be captured in a CUDA graph: {str(exc).splitlines()[0]}") from exc
    return bc.Runnable(fn, ctx), err


def run_case(benchmark, shape: bc.Shape, impl: str) -> None:
    outcome = _BENCH.outcome(shape, impl, lambda name: _prepare(shape, name), bc.settings_for(shape.grid))
    bc.record_outcome(benchmark, outcome, shape.group)

    info = benchmark.extra_info
    info.update(
        impl=impl,
        grid=shape.grid,
        dtype=shape.dtype,
        b=shape.b,
        hq=shape.hq,
        hk=shape.hk,
        sq=shape.sq,
        sk=shape.sk,
        d=shape.d,
        causal=shape.causal,
        causal_mode=shape.causal_mode,
        flops=shape.flops,
        **{"pass": shape.pass_},
        io_bytes=shape.io_bytes,
        timer="cuda_event",
        rel_err_vs_sdpa_default=outcome.rel_err,
    )
    if outcome.rel_err is None and "ref_error" in _CACHE:
        info["reference_error"] = _CACHE["ref_error"]
    bc.add_timing_info(benchmark, outcome.timing, shape.flops, shape.io_bytes)


@pytest.mark.parametrize(
    "shape,impl", list(_params(bc.latency_shapes(), bc.selected_impls(bc.DEFAULT_IMPLS), pytest.mark.latency))
)
def test_latency(benchmark, shape, impl):
    """The seed's shapes (fp16, D=64, B=1 H=1, S 32..2048): launch/latency-bound, host time included."""
    run_case(benchmark, shape, impl)


@pytest.mark.parametrize(
    "shape,impl", list(_params(bc.latency_graph_shapes(), bc.selected_impls(bc.DEFAULT_IMPLS), pytest.mark.latency))
)
def test_latency_graph(benchmark, shape, impl):
    """The same shapes, each implementation replayed from a CUDA graph: kernel time."""
    run_case(benchmark, shape, impl)


@pytest.mark.parametrize(
    "shape,impl", list(_params(bc.standard_shapes(), bc.selected_impls(bc.DEFAULT_IMPLS), pytest.mark.standard))
)
def test_standard(benchmark, shape, impl):
    """bf16/fp16, D in {64,128,256}, H=2048/D, B*S=16k, S 512..16k, causal on/off; GQA at D=128:
    Hq=16 with Hk=4 at S=4k and Hk=2 at S=16k."""
    run_case(benchmark, shape, impl)


@pytest.mark.parametrize(
    "shape,impl", list(_params(bc.training_shapes(), bc.selected_impls(bc.TRAINING_IMPLS), pytest.mark.training))
)
def test_training(benchmark, shape, impl):
    """The standard grid's shapes, backward alone ("bwd": forward once, then the timed
    torch.autograd.grad) and forward + backward ("fwd+bwd"); FLOPs 2.5x and 3.5x the forward's."""
    run_case(benchmark, shape, impl)


# DECODE GRID: runs once flashattn.flash_attn_with_kvcache exists (see bench_common.decode_shapes).
@pytest.mark.parametrize(
    "shape,impl", list(_params(bc.decode_shapes(), bc.selected_impls(bc.DECODE_IMPLS), pytest.mark.decode))
)
def test_decode(benchmark, shape, impl):
    """Decode: Sq=1 against a KV cache, GQA 32:8, D=128, B in {1,8,64}, Sk 1k..128k.
    Skipped (conftest) while flashattn has no flash_attn_with_kvcache."""
    run_case(benchmark, shape, impl)
