"""The Python API around the kernels, checked without a GPU: backend selection, extension status,
the fake (meta) kernel, the layouts the entry points hand to the op, and torch.compile tracing.

CUDA tensors here are fake (FakeTensorMode): metadata only, available on a CPU-only torch.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import flashattn

F16, BF16 = torch.float16, torch.bfloat16


def fake(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="cuda")


@pytest.fixture
def no_extension_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the entry points reach the op without the compiled extension (its fake kernel runs)."""
    monkeypatch.setattr(flashattn._ext, "require_extension", lambda: None)


# ---- backend selection --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["auto", "portable", "hopper"])
def test_set_backend_round_trips(name: str) -> None:
    with flashattn.use_backend(name):
        assert flashattn.get_backend() == name


def test_use_backend_restores_the_previous_one_after_an_error() -> None:
    before = flashattn.get_backend()
    other = "portable" if before != "portable" else "hopper"
    with pytest.raises(RuntimeError, match="inside"), flashattn.use_backend(other):
        assert flashattn.get_backend() == other
        raise RuntimeError("inside")
    assert flashattn.get_backend() == before


def test_set_backend_refuses_unknown_names() -> None:
    before = flashattn.get_backend()
    with pytest.raises(ValueError, match="backend must be one of"):
        flashattn.set_backend("cudnn")
    assert flashattn.get_backend() == before


def test_backend_env_var_is_read_at_import() -> None:
    env = {**os.environ, "FLASHATTN_BACKEND": "portable"}
    code = "import flashattn; print(flashattn.get_backend())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "portable"


# ---- extension status ---------------------------------------------------------------------------


def test_extension_status_is_consistent() -> None:
    available = flashattn.extension_available()
    assert (flashattn.extension_error() is None) == available
    if available:
        assert set(flashattn.build_info()) == {"cuda_archs", "nvcc", "torch", "cuda_runtime"}
    else:
        assert flashattn.build_info() == {}
        assert "not built" in flashattn.extension_error()


@pytest.mark.skipif(flashattn.extension_available(), reason="the extension is built here")
def test_calls_without_extension_say_how_to_build_it() -> None:
    with FakeTensorMode(), pytest.raises(RuntimeError, match="extension is not built.*pip install"):
        flashattn.flash_attn_func(fake(1, 4, 2, 64), fake(1, 4, 2, 64), fake(1, 4, 2, 64))


@pytest.mark.skipif(flashattn.extension_available(), reason="the extension is built here")
@pytest.mark.parametrize("call", ["sdpa", "kvcache"])
def test_cpu_tensors_without_extension_say_the_extension_first(call: str) -> None:
    """A first call with CPU tensors on a machine without kernels: the message leads with the
    missing extension (what the user must fix first) and still names the argument's device."""
    q = torch.zeros(1, 4, 2, 64, dtype=F16)
    fn = {"sdpa": lambda: flashattn.scaled_dot_product_attention(q, q, q),
          "kvcache": lambda: flashattn.flash_attn_with_kvcache(q, q, q)}[call]
    with pytest.raises(ValueError) as info:
        fn()
    msg = str(info.value)
    assert msg.startswith("the flashattn CUDA extension is not built (") and "pip install" in msg, msg
    assert msg.endswith(("query must be on a CUDA device, got device cpu", "q must be on a CUDA device, got device cpu"))


# ---- fake kernel and the layouts handed to the op -----------------------------------------------


@pytest.mark.parametrize(
    ("b", "sq", "sk", "hq", "hk", "d"),
    [(2, 17, 33, 4, 2, 64), (1, 1, 1, 1, 1, 8), (0, 5, 7, 3, 3, 256), (3, 100, 1, 8, 1, 128)],
)
def test_fake_kernel_shapes(b: int, sq: int, sk: int, hq: int, hk: int, d: int) -> None:
    with FakeTensorMode():
        q, k = fake(b, sq, hq, d), fake(b, sk, hk, d)
        out, lse = torch.ops.flashattn.fwd(q, k, k, 0.1, flashattn.CAUSAL_BOTTOM_RIGHT, "auto")
    assert (out.shape, out.dtype, out.device.type) == ((b, sq, hq, d), BF16, "cuda")
    assert (lse.shape, lse.dtype, lse.device.type) == ((b, hq, sq), torch.float32, "cuda")


@pytest.mark.parametrize(
    ("b", "sq", "sk", "hq", "hk", "d"),
    [(2, 17, 33, 4, 2, 64), (1, 1, 1, 1, 1, 8), (0, 5, 7, 3, 3, 256)],
)
def test_fake_kernel_shapes_bhsd(b: int, sq: int, sk: int, hq: int, hk: int, d: int) -> None:
    """The torch-layout op: out [B, Hq, Sq, D] as the transposed view of a [B, Sq, Hq, D] buffer,
    stride for stride what the CUDA kernel returns (a compiled graph relies on the fake's strides)."""
    with FakeTensorMode():
        q, k = fake(b, hq, sq, d), fake(b, hk, sk, d)
        out, lse = torch.ops.flashattn.fwd_bhsd(q, k, k, 0.1, flashattn.CAUSAL_TOP_LEFT, "auto")
    assert (out.shape, out.dtype, out.device.type) == ((b, hq, sq, d), BF16, "cuda")
    assert out.stride() == (sq * hq * d, d, hq * d, 1)
    assert (lse.shape, lse.dtype) == ((b, hq, sq), torch.float32)


@pytest.mark.parametrize(
    ("q_shape", "kv_shape", "gqa"),
    [((4, 17, 64), (4, 33, 64), False), ((2, 8, 17, 32), (2, 2, 9, 32), True), ((2, 3, 4, 17, 64), (2, 3, 4, 5, 64), False)],
    ids=["rank3", "rank4-gqa", "rank5"],
)
def test_sdpa_returns_query_shape(no_extension_needed: None, q_shape, kv_shape, gqa: bool) -> None:
    with FakeTensorMode():
        out = flashattn.scaled_dot_product_attention(fake(*q_shape), fake(*kv_shape), fake(*kv_shape), enable_gqa=gqa)
    assert out.shape == q_shape and out.dtype == BF16


def test_flash_attn_func_returns_lse_only_when_asked(no_extension_needed: None) -> None:
    with FakeTensorMode():
        q, k = fake(2, 17, 4, 64), fake(2, 9, 1, 64)
        out = flashattn.flash_attn_func(q, k, k)
        out2, lse = flashattn.flash_attn_func(q, k, k, return_lse=True)
    assert isinstance(out, torch.Tensor) and out.shape == (2, 17, 4, 64)
    assert out2.shape == (2, 17, 4, 64) and lse.shape == (2, 4, 17)


# ---- torch.compile(fullgraph=True) traces each entry point into one op call ----------------------


def traced_op_calls(fn: Callable, *inputs_shapes: tuple[int, ...]) -> list[tuple]:
    """Compile `fn` with fullgraph=True on fake CUDA inputs; the (scale, causal_mode, backend)
    arguments of every flashattn.fwd call in the captured graph."""
    graphs = []

    def capture(gm: torch.fx.GraphModule, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    with FakeTensorMode():
        compiled = torch.compile(fn, fullgraph=True, backend=capture)
        compiled(*(fake(*s) for s in inputs_shapes))
    return [
        tuple(node.args[3:])
        for gm in graphs
        for node in gm.graph.nodes
        if node.op == "call_function" and "flashattn" in str(node.target)
    ]


def test_compile_sdpa_is_top_left_causal_with_default_scale() -> None:
    def fn(q, k, v):
        return flashattn.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    calls = traced_op_calls(fn, (2, 4, 17, 64), (2, 2, 33, 64), (2, 2, 33, 64))
    assert calls == [(pytest.approx(1 / math.sqrt(64)), flashattn.CAUSAL_TOP_LEFT, flashattn.get_backend())]


def test_compile_flash_attn_func_is_bottom_right_causal_with_given_scale() -> None:
    def fn(q, k, v):
        return flashattn.flash_attn_func(q, k, v, softmax_scale=0.3, causal=True, return_lse=True)

    calls = traced_op_calls(fn, (2, 17, 4, 64), (2, 33, 2, 64), (2, 33, 2, 64))
    assert calls == [(pytest.approx(0.3), flashattn.CAUSAL_BOTTOM_RIGHT, flashattn.get_backend())]


def test_compile_retraces_when_the_backend_changes() -> None:
    def fn(q, k, v):
        return flashattn.flash_attn_func(q, k, v)

    graphs = []

    def capture(gm: torch.fx.GraphModule, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend=capture)
    with FakeTensorMode():
        q = fake(1, 8, 2, 64)
        with flashattn.use_backend("auto"):
            compiled(q, q, q)
        with flashattn.use_backend("portable"):
            compiled(q, q, q)
    backends = [n.args[5] for gm in graphs for n in gm.graph.nodes if n.op == "call_function" and "flashattn" in str(n.target)]
    assert backends == ["auto", "portable"]


def test_compile_with_dynamic_shapes_traces_one_graph() -> None:
    graphs = []

    def capture(gm: torch.fx.GraphModule, example_inputs):
        graphs.append(gm)
        return gm.forward

    def fn(q, k, v):
        return flashattn.flash_attn_func(q, k, v, causal=True, return_lse=True)

    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, dynamic=True, backend=capture)
    with FakeTensorMode():
        for sq, sk in ((100, 150), (37, 300)):
            out, lse = compiled(fake(2, sq, 8, 64), fake(2, sk, 2, 64), fake(2, sk, 2, 64))
            assert out.shape == (2, sq, 8, 64) and lse.shape == (2, 8, sq)
    assert len(graphs) == 1
