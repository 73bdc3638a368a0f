"""The backward's Python layer, checked without a GPU:
  * flashattn::bwd: its schema (the contract with the CUDA binding), fake kernel and argument checks;
  * the autograd of the fwd / fwd_bhsd ops and of the entry points, run for real on CPU with stand-in
    kernels (tests/standin_kernels.py: the float64 references as CPU kernels): gradcheck,
    torch.library.opcheck, needs_input_grad, lse not differentiable, no double backward, the
    deterministic switch and the backend as the backward receives them, and torch.compile
    (fullgraph=True, aot_eager) of a forward + backward;
  * set_deterministic / get_deterministic, and flash_attn_with_kvcache refusing inputs that
    require grad.
The same layer on the GPU with the real kernels: tests/kernels/test_backward_gpu.py.
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import flashattn
from standin_kernels import allow_cpu_entry_points, cpu_standin_kernels
from tensor_makers import fake_maker

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
NONE, TOP_LEFT, BOTTOM_RIGHT = flashattn.CAUSAL_NONE, flashattn.CAUSAL_TOP_LEFT, flashattn.CAUSAL_BOTTOM_RIGHT
MODE_IDS = ["none", "top-left", "bottom-right"]

BWD_SCHEMA = (
    "flashattn::bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, float softmax_scale, "
    "int causal_mode, bool deterministic, str backend, int window_left=-1, int window_right=-1, float softcap=0.) "
    "-> (Tensor dq, Tensor dk, Tensor dv)"
)


@pytest.fixture
def standin():
    """The CPU stand-in kernels, registered for the test; yields the list of bwd calls."""
    with cpu_standin_kernels() as calls:
        yield calls


@pytest.fixture
def cpu_entry_points(monkeypatch: pytest.MonkeyPatch, standin):
    """Entry points that take CPU tensors, with the stand-in kernels; yields the bwd calls."""
    allow_cpu_entry_points(monkeypatch)
    return standin


@pytest.fixture(autouse=True)
def default_switches():
    """Every test starts and ends with the deterministic switches off."""
    torch_flag = torch.are_deterministic_algorithms_enabled()
    torch_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    flashattn.set_deterministic(False)
    torch.use_deterministic_algorithms(False)
    yield
    flashattn.set_deterministic(False)
    torch.use_deterministic_algorithms(torch_flag, warn_only=torch_warn_only)


def randn(*shape: int, dtype: torch.dtype = F64, grad: bool = True, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=F64).to(dtype).requires_grad_(grad)


def qkv(b=2, sq=7, sk=5, hq=4, hk=2, d=8, dtype=F64, bhsd=False, grad=True):
    """q [B, Sq, Hq, D], k/v [B, Sk, Hk, D] (or the [B, H, S, D] transposes, contiguous), leaves."""
    shapes = ((b, sq, hq, d), (b, sk, hk, d), (b, sk, hk, d))
    if bhsd:
        shapes = tuple((s[0], s[2], s[1], s[3]) for s in shapes)
    return tuple(randn(*s, dtype=dtype, grad=grad, seed=i) for i, s in enumerate(shapes))


# ---- flashattn::bwd: schema, fake kernel, argument checks -----------------------------------------


def test_bwd_schema_is_the_contract_with_the_binding() -> None:
    assert str(torch.ops.flashattn.bwd.default._schema) == BWD_SCHEMA


@pytest.mark.parametrize(
    ("b", "sq", "sk", "hq", "hk", "d"),
    [(2, 17, 33, 4, 2, 64), (1, 1, 1, 1, 1, 8), (0, 5, 7, 3, 3, 256), (3, 100, 1, 8, 1, 128)],
)
@pytest.mark.parametrize("dtype", [F16, BF16], ids=["fp16", "bf16"])
def test_bwd_fake_kernel(b: int, sq: int, sk: int, hq: int, hk: int, d: int, dtype: torch.dtype) -> None:
    """dq, dk, dv: new contiguous tensors in q's dtype shaped like q, k, v, whatever the input
    strides (a stride-0 dout from out.sum(), transposed k/v)."""
    with FakeTensorMode():
        q = fake_maker(b, sq, hq, d, dtype=dtype)
        k = fake_maker(b, hk, sk, d, dtype=dtype).transpose(1, 2)
        v = fake_maker(b, sk, hk, d, dtype=dtype)
        out = fake_maker(b, sq, hq, d, dtype=dtype)
        dout = fake_maker(b, sq, hq, d, dtype=dtype, strides=(0, 0, 0, 0))
        lse = fake_maker(b, hq, sq, dtype=F32)
        dq, dk, dv = torch.ops.flashattn.bwd(dout, q, k, v, out, lse, 0.125, BOTTOM_RIGHT, True, "auto")
    for g, x, name in ((dq, q, "dq"), (dk, k, "dk"), (dv, v, "dv")):
        assert (g.shape, g.dtype, g.device.type) == (x.shape, dtype, "cuda"), name
        assert g.is_contiguous(), f"{name} strides {g.stride()}"


B, SQ, SK, HQ, HK, D = 2, 9, 6, 4, 2, 64
BAD_BWD_ARGS = [
    # (id, {argument: (shape, dtype)} replacing the good one, exception, message)
    ("dout-shape", {"dout": ((B, SQ + 1, HQ, D), F16)}, ValueError, "dout must have out's shape"),
    ("dout-dtype", {"dout": ((B, SQ, HQ, D), BF16)}, TypeError, "dout.dtype must be q's dtype torch.float16"),
    ("dout-float32", {"dout": ((B, SQ, HQ, D), F32)}, TypeError, "dout.dtype must be q's dtype"),
    ("out-shape", {"out": ((B, SQ, HQ, D + 8), F16)}, ValueError, "out must have q's shape"),
    ("out-dtype", {"out": ((B, SQ, HQ, D), BF16)}, TypeError, "out.dtype must be q's dtype"),
    ("k-v-shapes", {"v": ((B, SK + 1, HK, D), F16)}, ValueError, "k and v must have the same shape"),
    ("k-dtype", {"k": ((B, SK, HK, D), BF16), "v": ((B, SK, HK, D), BF16)}, TypeError, "k.dtype must be q's dtype"),
    ("lse-shape-bshd", {"lse": ((B, SQ, HQ), F32)}, ValueError, "lse must be [B, Hq, Sq]"),
    ("lse-dtype", {"lse": ((B, HQ, SQ), F16)}, TypeError, "lse must be float32"),
    ("rank-3", {"q": ((SQ, HQ, D), F16), "out": ((SQ, HQ, D), F16), "dout": ((SQ, HQ, D), F16)}, ValueError, "must be 4-D"),
]


@pytest.mark.parametrize(("replace", "error", "match"), [pytest.param(*row[1:], id=row[0]) for row in BAD_BWD_ARGS])
def test_bwd_refuses_inconsistent_arguments(replace: dict, error: type[Exception], match: str) -> None:
    good = {
        "dout": ((B, SQ, HQ, D), F16), "q": ((B, SQ, HQ, D), F16), "k": ((B, SK, HK, D), F16),
        "v": ((B, SK, HK, D), F16), "out": ((B, SQ, HQ, D), F16), "lse": ((B, HQ, SQ), F32),
    }
    good.update(replace)
    with FakeTensorMode(), pytest.raises(error, match=match.replace("[", r"\[").replace("]", r"\]")):
        args = [fake_maker(*shape, dtype=dtype) for shape, dtype in good.values()]
        torch.ops.flashattn.bwd(*args, 0.125, NONE, False, "auto")


# ---- the ops' autograd, on CPU with the stand-in kernels ------------------------------------------


@pytest.mark.parametrize("mode", [NONE, TOP_LEFT, BOTTOM_RIGHT], ids=MODE_IDS)
@pytest.mark.parametrize(("sq", "sk", "hq", "hk"), [(7, 5, 4, 2), (3, 9, 2, 2), (1, 4, 3, 1)], ids=["Sq>Sk-gqa", "Sq<Sk", "Sq=1-mqa"])
def test_gradcheck_fwd_op(standin, mode: int, sq: int, sk: int, hq: int, hk: int) -> None:
    """Finite differences of the forward against the registered backward (float64 stand-ins):
    the op's autograd hands the right tensors and scalars to flashattn::bwd and its gradients to
    the right inputs. Bottom-right with Sq > Sk includes rows that see no key."""
    q, k, v = qkv(sq=sq, sk=sk, hq=hq, hk=hk)
    assert torch.autograd.gradcheck(lambda q, k, v: torch.ops.flashattn.fwd(q, k, v, 0.4, mode, "auto")[0], (q, k, v))
    assert standin and all(c.softmax_scale == 0.4 and c.causal_mode == mode for c in standin)


@pytest.mark.parametrize("mode", [NONE, TOP_LEFT, BOTTOM_RIGHT], ids=MODE_IDS)
def test_gradcheck_fwd_bhsd_op(standin, mode: int) -> None:
    """The torch-layout op: q/k/v [B, H, S, D] in, gradients back in that layout."""
    q, k, v = qkv(bhsd=True)
    assert torch.autograd.gradcheck(lambda q, k, v: torch.ops.flashattn.fwd_bhsd(q, k, v, 0.4, mode, "auto")[0], (q, k, v))
    # flashattn::bwd itself always sees [B, S, H, D]
    assert standin[-1].shapes[1] == (2, 7, 4, 8) and standin[-1].shapes[2] == (2, 5, 2, 8)


def test_gradcheck_with_scale_zero(standin) -> None:
    q, k, v = qkv()
    assert torch.autograd.gradcheck(lambda q, k, v: torch.ops.flashattn.fwd(q, k, v, 0.0, TOP_LEFT, "auto")[0], (q, k, v))


@pytest.mark.parametrize("op", ["fwd", "fwd_bhsd"])
@pytest.mark.parametrize("mode", [NONE, BOTTOM_RIGHT], ids=["none", "bottom-right"])
def test_opcheck(standin, op: str, mode: int) -> None:
    """torch.library.opcheck: schema, autograd registration, fake kernel against the (stand-in)
    real one, and AOT dispatch with dynamic shapes."""
    q, k, v = qkv(dtype=F32, bhsd=op == "fwd_bhsd")
    torch.library.opcheck(getattr(torch.ops.flashattn, op).default, (q, k, v, 0.3, mode, "auto"))


def test_opcheck_bwd(standin) -> None:
    q, k, v = qkv(dtype=F32, grad=False)
    out, lse = torch.ops.flashattn.fwd(q, k, v, 0.3, BOTTOM_RIGHT, "auto")
    dout = torch.randn_like(out)
    torch.library.opcheck(torch.ops.flashattn.bwd.default, (dout, q, k, v, out, lse, 0.3, BOTTOM_RIGHT, False, "auto"))
    torch.library.opcheck(torch.ops.flashattn.bwd.default, (dout.transpose(1, 2).contiguous().transpose(1, 2), q, k, v, out, lse, 0.3, NONE, True, "portable"))


@pytest.mark.parametrize("needs", ["q", "k", "v", "qv"])
def test_only_inputs_that_require_grad_get_one(standin, needs: str) -> None:
    q, k, v = (t.detach().requires_grad_(name in needs) for t, name in zip(qkv(), "qkv"))
    out, _ = torch.ops.flashattn.fwd(q, k, v, 0.4, NONE, "auto")
    out.sum().backward()
    for t, name in zip((q, k, v), "qkv"):
        assert (t.grad is not None) == (name in needs), name
    want = flashattn.attention_reference_grads(q, k, v, torch.ones_like(out), 0.4, NONE)
    for t, w, name in zip((q, k, v), want, "qkv"):
        if name in needs:
            torch.testing.assert_close(t.grad, w, rtol=1e-12, atol=1e-12)


def test_nothing_runs_when_no_input_requires_grad(standin) -> None:
    q, k, v = qkv(grad=False)
    out, lse = torch.ops.flashattn.fwd(q, k, v, 0.4, NONE, "auto")
    assert not out.requires_grad and not lse.requires_grad and not standin


def test_lse_is_not_differentiable(standin) -> None:
    q, k, v = qkv()
    out, lse = torch.ops.flashattn.fwd(q, k, v, 0.4, BOTTOM_RIGHT, "auto")
    assert out.requires_grad and not lse.requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        lse.sum().backward()
    # a loss through both out and lse: the lse part contributes nothing
    grads_both = torch.autograd.grad(out.sum() + lse.masked_fill(torch.isinf(lse), 0).sum(), (q, k, v))
    out, lse = torch.ops.flashattn.fwd(q, k, v, 0.4, BOTTOM_RIGHT, "auto")
    grads_out = torch.autograd.grad(out.sum(), (q, k, v))
    for a, b in zip(grads_both, grads_out):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_double_backward_raises(standin) -> None:
    q, k, v = qkv()
    out, _ = torch.ops.flashattn.fwd(q, k, v, 0.4, NONE, "auto")
    (dq,) = torch.autograd.grad(out.sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        dq.sum().backward()


def test_dout_of_a_sum_reaches_the_op_with_stride_0(standin) -> None:
    """What the binding must accept: `out.sum().backward()` hands bwd an expanded (stride-0) dout."""
    q, k, v = qkv()
    out, _ = torch.ops.flashattn.fwd(q, k, v, 0.4, NONE, "auto")
    out.sum().backward()
    assert standin[-1].dout_strides == (0, 0, 0, 0)


# ---- the deterministic switch and the backend, as the backward receives them ----------------------


def _backward_once(standin, **kw) -> bool:
    q, k, v = qkv()
    out, _ = torch.ops.flashattn.fwd(q, k, v, 0.4, NONE, kw.get("backend", "auto"))
    out.sum().backward()
    return standin[-1].deterministic


def test_deterministic_is_off_by_default(standin) -> None:
    assert flashattn.get_deterministic() is False
    assert _backward_once(standin) is False


def test_set_deterministic_turns_it_on(standin) -> None:
    flashattn.set_deterministic(True)
    assert flashattn.get_deterministic() is True
    assert _backward_once(standin) is True
    flashattn.set_deterministic(False)
    assert _backward_once(standin) is False


@pytest.mark.parametrize("warn_only", [False, True])
def test_torch_deterministic_algorithms_turn_it_on(standin, warn_only: bool) -> None:
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    assert flashattn.get_deterministic() is False  # flashattn's own switch is unchanged
    assert _backward_once(standin) is True


def test_deterministic_is_read_when_the_forward_runs(standin) -> None:
    q, k, v = qkv()
    out, _ = torch.ops.flashattn.fwd(q, k, v, 0.4, NONE, "auto")
    flashattn.set_deterministic(True)
    out.sum().backward()
    assert standin[-1].deterministic is False
    out, _ = torch.ops.flashattn.fwd(q, k, v, 0.4, NONE, "auto")
    flashattn.set_deterministic(False)
    out.sum().backward()
    assert standin[-1].deterministic is True


@pytest.mark.parametrize("flag", [1, 0, "yes", None])
def test_set_deterministic_takes_only_a_bool(flag) -> None:
    with pytest.raises(TypeError, match="set_deterministic takes a bool"):
        flashattn.set_deterministic(flag)
    assert flashattn.get_deterministic() is False


def test_deterministic_switch_is_public() -> None:
    assert {"set_deterministic", "get_deterministic"} <= set(flashattn.__all__)


@pytest.mark.parametrize("name", ["auto", "portable", "hopper"])
def test_backward_gets_the_forward_backend(cpu_entry_points, name: str) -> None:
    """The backend in effect at the forward is handed to bwd as-is; the binding differentiates
    every backend's forward with the portable backward (the one backward path today)."""
    q, k, v = qkv()
    with flashattn.use_backend(name):
        out = flashattn.flash_attn_func(q, k, v, causal=True)
    out.sum().backward()
    assert q.grad is not None and k.grad is not None and v.grad is not None
    assert cpu_entry_points[-1].backend == name


# ---- the entry points' autograd, on CPU ------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("sq", "sk", "hq", "hk"), [(7, 5, 4, 2), (3, 9, 2, 2)], ids=["Sq>Sk-gqa", "Sq<Sk"])
def test_gradcheck_flash_attn_func(cpu_entry_points, causal: bool, sq: int, sk: int, hq: int, hk: int) -> None:
    q, k, v = qkv(sq=sq, sk=sk, hq=hq, hk=hk)
    assert torch.autograd.gradcheck(lambda q, k, v: flashattn.flash_attn_func(q, k, v, 0.3, causal), (q, k, v))
    assert {c.causal_mode for c in cpu_entry_points} == {BOTTOM_RIGHT if causal else NONE}


SDPA_SHAPES = [
    ((6, 8), (5, 8), False),
    ((3, 6, 8), (3, 5, 8), False),
    ((2, 3, 6, 8), (2, 3, 5, 8), False),
    ((2, 4, 6, 8), (2, 2, 5, 8), True),
    ((2, 2, 3, 6, 8), (2, 2, 3, 5, 8), False),
    ((2, 2, 4, 6, 8), (2, 2, 2, 5, 8), True),
]


@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("q_shape", "kv_shape", "gqa"), SDPA_SHAPES, ids=["rank2", "rank3", "rank4", "rank4-gqa", "rank5", "rank5-gqa"])
def test_gradcheck_sdpa(cpu_entry_points, q_shape, kv_shape, gqa: bool, is_causal: bool) -> None:
    q = randn(*q_shape, seed=0)
    k, v = randn(*kv_shape, seed=1), randn(*kv_shape, seed=2)

    def fn(q, k, v):
        return flashattn.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=0.3, enable_gqa=gqa)

    assert torch.autograd.gradcheck(fn, (q, k, v))
    assert {c.causal_mode for c in cpu_entry_points} == {TOP_LEFT if is_causal else NONE}


def test_sdpa_rank4_gradients_are_views_of_bshd_buffers(cpu_entry_points) -> None:
    """Like its out, the torch-layout entry's gradients are [B, H, S, D] views of [B, S, H, D] buffers."""
    q, k, v = qkv(bhsd=True)
    out = flashattn.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    dq, dk, dv = torch.autograd.grad(out.sum(), (q, k, v))
    b, h, s, d = dq.shape
    assert dq.stride() == (s * h * d, d, h * d, 1)
    assert dk.shape == k.shape and dv.shape == v.shape


def _train_step(q, k, v, w):
    out = flashattn.flash_attn_func(q, k, v, causal=True)
    return (out * w).square().sum()


def test_torch_compile_fullgraph_forward_and_backward(cpu_entry_points) -> None:
    """A training step (forward + backward through flash_attn_func) compiles with fullgraph=True,
    no graph break, and gives eager's gradients; the backward graph calls flashattn::bwd."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    q, k, v = qkv(dtype=F32)
    w = torch.randn(q.shape)
    want = torch.autograd.grad(_train_step(q, k, v, w), (q, k, v))
    n_eager = len(cpu_entry_points)
    compiled = torch.compile(_train_step, fullgraph=True, backend="aot_eager")
    got = torch.autograd.grad(compiled(q, k, v, w), (q, k, v))
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    assert len(cpu_entry_points) == n_eager + 1, "the compiled backward called flashattn::bwd once"
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])


def test_torch_compile_retraces_when_the_deterministic_switches_change(cpu_entry_points) -> None:
    """The mode is fixed in a compiled graph at trace time; torch.compile guards on both switches."""
    torch._dynamo.reset()
    q, k, v = qkv(dtype=F32)
    w = torch.randn(q.shape)
    compiled = torch.compile(_train_step, fullgraph=True, backend="aot_eager")
    seen = []
    for flash_flag, torch_flag in ((False, False), (True, False), (False, False), (False, True), (False, False)):
        flashattn.set_deterministic(flash_flag)
        torch.use_deterministic_algorithms(torch_flag)
        torch.autograd.grad(compiled(q, k, v, w), (q, k, v))
        seen.append(cpu_entry_points[-1].deterministic)
    assert seen == [False, True, False, True, False]


def test_torch_compile_dynamic_shapes_forward_and_backward(cpu_entry_points) -> None:
    torch._dynamo.reset()
    compiled = torch.compile(_train_step, fullgraph=True, dynamic=True, backend="aot_eager")
    for sq, sk in ((7, 5), (4, 11), (1, 1)):
        q, k, v = qkv(sq=sq, sk=sk, dtype=F32)
        w = torch.randn(q.shape)
        got = torch.autograd.grad(compiled(q, k, v, w), (q, k, v))
        want = torch.autograd.grad(_train_step(q, k, v, w), (q, k, v))
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e, rtol=0, atol=0)


# ---- flash_attn_with_kvcache is inference-only ----------------------------------------------------


KVCACHE_ARGS = ("q", "k_cache", "v_cache", "k", "v")


def _kvcache_inputs(mk, requires: str | None):
    shapes = {"q": (2, 1, 4, 64), "k_cache": (2, 16, 2, 64), "v_cache": (2, 16, 2, 64), "k": (2, 1, 2, 64), "v": (2, 1, 2, 64)}
    return {name: mk(*shape).requires_grad_(name == requires) for name, shape in shapes.items()}


@pytest.mark.parametrize("requires", KVCACHE_ARGS)
def test_kvcache_refuses_inputs_that_require_grad(requires: str) -> None:
    # (Fake CUDA tensors only up to the refusal: on a CPU-only torch, recording an autograd node
    # for a CUDA tensor aborts the process, so nothing here may reach an op with grad enabled.)
    with FakeTensorMode(), pytest.raises(RuntimeError, match=f"inference-only.*{requires} requires grad.*flash_attn_func"):
        x = _kvcache_inputs(fake_maker, requires)
        flashattn.flash_attn_with_kvcache(**x, cache_seqlens=3)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_kvcache_with_grad_mode_off_reaches_the_op(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    monkeypatch.setattr(flashattn._ext, "require_extension", lambda: None)
    context = torch.no_grad if mode == "no_grad" else torch.inference_mode
    with FakeTensorMode():
        x = _kvcache_inputs(fake_maker, "q")
        with context():
            out = flashattn.flash_attn_with_kvcache(**x, cache_seqlens=3)
    assert out.shape == (2, 1, 4, 64) and not out.requires_grad


def test_standin_gradients_equal_autograd_of_the_reference() -> None:
    """The stand-in's float64 gradients equal autograd through the float64 forward reference
    (so the gradchecks above check the wiring, not the stand-in)."""
    q, k, v = qkv()
    dout = randn(*q.shape, grad=False, seed=9)
    out, _ = flashattn.attention_reference(q, k, v, 0.4, BOTTOM_RIGHT)
    want = torch.autograd.grad(out, (q, k, v), dout)
    got = flashattn.attention_reference_grads(q, k, v, dout, 0.4, BOTTOM_RIGHT)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
