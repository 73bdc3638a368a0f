"""flashattn as PyTorch's flash-attention implementation (flashattn/torch_impl.py), checked without a GPU.

* registration: "flashattn" is listed by torch's registry after `import flashattn`, never active
  after it; activate/deactivate override and restore the aten CUDA kernels (seen in the
  dispatcher's record of where each op's CUDA kernel was registered, on CPU and CUDA builds of torch);
  activation without the extension or without the registry raises a clear RuntimeError.
* schemas: our implementations accept every argument of the installed torch's aten schemas, and of
  torch 2.11's (kept below), positional and keyword-only as the dispatcher passes them.
* the aten ops for real through the dispatcher: our implementations registered for the CPU key
  around flashattn's CPU stand-in kernels (tests/standin_kernels.py: the float64 reference), so
  the ops run with torch's own autograd formulas, on any layout: values against torch's SDPA,
  causal alignment, GQA, scale, the deterministic switch, output metadata against torch's meta
  kernels, errors that keep their type, torch.compile.
* every unsupported argument is refused before any kernel with an error naming it.
"""

from __future__ import annotations

import inspect
import math
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F

import flashattn
from flashattn import torch_impl
from standin_kernels import allow_cpu_entry_points, cpu_standin_kernels

attention = pytest.importorskip("torch.nn.attention")
needs_registry = pytest.mark.skipif(
    not torch_impl.registry_available(), reason=f"torch {torch.__version__} has no flash-attention implementation registry"
)
NONE, TOP_LEFT, BOTTOM_RIGHT = flashattn.CAUSAL_NONE, flashattn.CAUSAL_TOP_LEFT, flashattn.CAUSAL_BOTTOM_RIGHT

# torch 2.11's schemas of the overridden ops (from its libtorch), so that the 2.11 argument lists
# are checked whatever torch is installed. 2.13 adds block_table and num_splits to
# _flash_attention_forward, and _flash_attention_forward_no_dropout_inplace.
TORCH_2_11_SCHEMAS = {
    "_flash_attention_forward": (
        "aten::_flash_attention_forward(Tensor query, Tensor key, Tensor value, Tensor? cum_seq_q, Tensor? cum_seq_k, "
        "SymInt max_q, SymInt max_k, float dropout_p, bool is_causal, bool return_debug_mask, *, float? scale=None, "
        "SymInt? window_size_left=None, SymInt? window_size_right=None, Tensor? seqused_k=None, "
        "Tensor? alibi_slopes=None) -> (Tensor output, Tensor softmax_logsumexp, Tensor rng_state, Tensor unused, "
        "Tensor debug_attn_mask)"
    ),
    "_flash_attention_backward": (
        "aten::_flash_attention_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor out, "
        "Tensor logsumexp, Tensor cum_seq_q, Tensor cum_seq_k, SymInt max_q, SymInt max_k, float dropout_p, "
        "bool is_causal, Tensor rng_state, Tensor unused, *, float? scale=None, SymInt? window_size_left=None, "
        "SymInt? window_size_right=None) -> (Tensor, Tensor, Tensor)"
    ),
    "_scaled_dot_product_flash_attention": (
        "aten::_scaled_dot_product_flash_attention(Tensor query, Tensor key, Tensor value, float dropout_p=0.0, "
        "bool is_causal=False, bool return_debug_mask=False, *, float? scale=None) -> (Tensor output, "
        "Tensor logsumexp, Tensor cum_seq_q, Tensor cum_seq_k, SymInt max_q, SymInt max_k, Tensor rng_state, "
        "Tensor unused, Tensor debug_attn_mask)"
    ),
    "_scaled_dot_product_flash_attention_backward": (
        "aten::_scaled_dot_product_flash_attention_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, "
        "Tensor out, Tensor logsumexp, Tensor cum_seq_q, Tensor cum_seq_k, SymInt max_q, SymInt max_k, "
        "float dropout_p, bool is_causal, Tensor philox_seed, Tensor philox_offset, *, float? scale=None) -> "
        "(Tensor grad_query, Tensor grad_key, Tensor grad_value)"
    ),
}


# ---- registration -----------------------------------------------------------------------------------


@needs_registry
def test_import_registers_the_implementation_and_never_activates_it() -> None:
    code = (
        "import flashattn, torch.nn.attention as a; "
        "print('flashattn' in a.list_flash_attention_impls(), a.current_flash_attention_impl())"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert result.stdout.split() == ["True", "None"], result.stdout + result.stderr
    assert torch_impl.IMPL_NAME in attention.list_flash_attention_impls()


@pytest.fixture
def pretend_runnable(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Activation without the extension and a GPU (what it registers is then only looked at), and
    whatever the test does, torch's registry is left with nothing active."""
    monkeypatch.setattr(torch_impl, "_check_can_run", lambda: None)
    try:
        yield
    finally:
        flashattn.deactivate()
        assert not torch_impl.is_active()


def cuda_kernel_is_ours(op: str) -> bool:
    """Whether the op's CUDA kernel is ours. On a CUDA build of torch the op always has a CUDA
    kernel (torch's own, with or without a GPU), so the dispatcher's record of where the kernel
    was registered tells ours from torch's."""
    for line in torch._C._dispatch_dump(f"aten::{op}").splitlines():
        if line.startswith("CUDA:"):
            return "flashattn/torch_impl.py" in line
    return False


@needs_registry
@pytest.mark.parametrize("how", ["flashattn", "torch"])
def test_activate_overrides_the_cuda_kernels_and_deactivate_restores(pretend_runnable: None, how: str) -> None:
    ops = torch_impl.installed_ops()
    assert not any(cuda_kernel_is_ours(op) for op in ops)
    if how == "flashattn":
        flashattn.activate()
    else:
        attention.activate_flash_attention_impl("flashattn")
    assert attention.current_flash_attention_impl() == "flashattn" and torch_impl.is_active()
    assert all(cuda_kernel_is_ours(op) for op in ops)
    if how == "flashattn":
        flashattn.deactivate()
    else:
        attention.restore_flash_attention_impl()
    assert attention.current_flash_attention_impl() is None
    assert not any(cuda_kernel_is_ours(op) for op in ops)
    flashattn.activate()
    flashattn.activate()  # again: the registry restores the first activation before the second
    assert all(cuda_kernel_is_ours(op) for op in ops)
    flashattn.deactivate()
    assert not any(cuda_kernel_is_ours(op) for op in ops)


@needs_registry
def test_deactivate_leaves_another_implementation_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    removed: list[str] = []

    class Handle:
        def remove(self) -> None:
            removed.append("other")

    # a copy of the registry's table, so that the stand-in implementation never outlives the test
    monkeypatch.setattr(attention._registry, "_FLASH_ATTENTION_IMPLS", dict(attention._registry._FLASH_ATTENTION_IMPLS))
    attention.register_flash_attention_impl("flashattn-test-other", register_fn=Handle)
    try:
        attention.activate_flash_attention_impl("flashattn-test-other")
        flashattn.deactivate()
        assert attention.current_flash_attention_impl() == "flashattn-test-other" and removed == []
    finally:
        attention.restore_flash_attention_impl()
    assert removed == ["other"]


@needs_registry
@pytest.mark.skipif(flashattn.extension_available(), reason="the extension is built here")
def test_activate_without_the_extension_raises_its_error() -> None:
    message = flashattn.extension_error()
    assert message
    with pytest.raises(RuntimeError) as excinfo:
        flashattn.activate()
    assert str(excinfo.value) == message
    with pytest.raises(RuntimeError) as excinfo:
        attention.activate_flash_attention_impl("flashattn")
    assert str(excinfo.value) == message
    assert attention.current_flash_attention_impl() is None


def test_activate_without_the_registry_says_which_torch_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch_impl, "_registry", lambda: None)
    with pytest.raises(RuntimeError, match=r"torch .* has no torch\.nn\.attention\.register_flash_attention_impl.*2\.11"):
        flashattn.activate()
    flashattn.deactivate()  # nothing to do, no error
    assert not torch_impl.is_active()


def test_deactivate_when_not_active_does_nothing(caplog: pytest.LogCaptureFixture) -> None:
    flashattn.deactivate()
    assert not torch_impl.is_active()
    assert "restore" not in caplog.text


# ---- schemas ----------------------------------------------------------------------------------------


def assert_accepts(op: str, schema: torch._C.FunctionSchema) -> None:
    """Our implementation of `op` takes every argument of `schema`: positional ones at their
    position, keyword-only ones by name; the ones it has beyond the schema have defaults."""
    params = list(inspect.signature(torch_impl.IMPLEMENTATIONS[op]).parameters.values())
    positional = [p for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    keyword = {p.name: p for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert not any(p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) for p in params), f"{op}: takes *args/**kwargs"
    schema_positional = [a for a in schema.arguments if not a.kwarg_only]
    schema_keyword = [a for a in schema.arguments if a.kwarg_only]
    assert [p.name for p in positional[: len(schema_positional)]] == [a.name for a in schema_positional], op
    for extra in positional[len(schema_positional):]:
        assert extra.default is not inspect.Parameter.empty, f"{op}: positional {extra.name} not in the schema"
    for a in schema_keyword:
        assert a.name in keyword, f"{op}: keyword-only argument {a.name} of the schema not accepted"
    names = {a.name for a in schema_keyword}
    for name, p in keyword.items():
        assert name in names or p.default is not inspect.Parameter.empty, f"{op}: {name} is required but not in the schema"


@pytest.mark.parametrize("op", torch_impl.installed_ops())
def test_accepts_the_installed_torch_schema(op: str) -> None:
    assert_accepts(op, getattr(torch.ops.aten, op).default._schema)


@pytest.mark.parametrize("op", sorted(TORCH_2_11_SCHEMAS))
def test_accepts_the_torch_2_11_schema(op: str) -> None:
    assert_accepts(op, torch._C.parse_schema(TORCH_2_11_SCHEMAS[op]))


def test_overrides_every_op_this_torch_has() -> None:
    assert set(torch_impl.OPS) == set(TORCH_2_11_SCHEMAS)
    for op in torch_impl.OPS:
        assert hasattr(torch.ops.aten, op)
    for op in torch_impl.OPTIONAL_OPS:
        assert (op in torch_impl.installed_ops()) == hasattr(torch.ops.aten, op)


# ---- the ops through the dispatcher (CPU key, stand-in kernels) ---------------------------------------


@pytest.fixture
def cpu_ops(monkeypatch: pytest.MonkeyPatch) -> Iterator[list]:
    """Our implementations as the aten ops' CPU kernels over the stand-in kernels; yields the list
    of flashattn::bwd calls."""
    allow_cpu_entry_points(monkeypatch)
    with cpu_standin_kernels() as calls:
        handle = torch_impl.register_kernels("CPU")
        try:
            yield calls
        finally:
            handle.remove()
    assert handle.library is None


def randn(*shape: int, dtype: torch.dtype = torch.float64, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=gen, dtype=dtype).requires_grad_(True)


def reference_bhsd(q, k, v, scale: float, causal_mode: int) -> torch.Tensor:
    out, _ = flashattn.attention_reference(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale, causal_mode)
    return out.transpose(1, 2)


@pytest.mark.parametrize(
    ("hq", "hk", "sq", "sk", "is_causal", "scale"),
    [(4, 4, 9, 9, False, None), (4, 2, 9, 9, True, None), (4, 1, 6, 11, False, 0.3), (2, 2, 11, 6, True, 0.7), (2, 1, 5, 13, True, None)],
)
def test_sdpa_op_forward_and_backward(cpu_ops: list, hq: int, hk: int, sq: int, sk: int, is_causal: bool, scale) -> None:
    q, k, v = randn(2, hq, sq, 16), randn(2, hk, sk, 16, seed=1), randn(2, hk, sk, 16, seed=2)
    res = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, is_causal, scale=scale)
    out = res[0]
    sc = 1.0 / math.sqrt(16) if scale is None else scale
    mode = BOTTOM_RIGHT if is_causal else NONE  # torch's flash ops: is_causal is bottom-right
    ref = reference_bhsd(q, k, v, sc, mode)
    torch.testing.assert_close(out, ref)
    if not is_causal or sq == sk:  # SDPA's own semantics where it routes to flash
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale, enable_gqa=True)
        torch.testing.assert_close(out, expected)
    assert (res[4], res[5]) == (sq, sk) and res[2] is None and res[3] is None
    dout = randn(*out.shape, seed=3)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    ref_grads = torch.autograd.grad(ref, (q, k, v), dout)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r)
    assert [(c.causal_mode, c.softmax_scale) for c in cpu_ops] == [(mode, sc)]


def test_flash_attention_op_forward_and_backward(cpu_ops: list) -> None:
    q, k, v = randn(2, 7, 4, 16), randn(2, 10, 2, 16, seed=1), randn(2, 10, 2, 16, seed=2)
    out, lse, rng_state, unused, debug = torch.ops.aten._flash_attention_forward(q, k, v, None, None, 7, 10, 0.0, True, False)
    ref, ref_lse = flashattn.attention_reference(q, k, v, 0.25, BOTTOM_RIGHT)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(lse, ref_lse.float())
    assert (rng_state.shape, rng_state.dtype, unused.shape, unused.dtype, debug.numel()) == ((2,), torch.uint64, (), torch.uint64, 0)
    dout = randn(*out.shape, seed=3)
    for g, r in zip(torch.autograd.grad(out, (q, k, v), dout), torch.autograd.grad(ref, (q, k, v), dout)):
        torch.testing.assert_close(g, r)


@pytest.mark.parametrize(("left", "right", "is_causal", "mode"), [
    (None, None, False, NONE), (-1, -1, False, NONE), (8, 100, False, NONE),  # >= Sk: unbounded, as in torch's kernels
    (-1, 0, False, BOTTOM_RIGHT), (-1, 0, True, BOTTOM_RIGHT), (None, -1, True, BOTTOM_RIGHT),
    (None, 3, True, BOTTOM_RIGHT),  # is_causal sets the right window to 0 (torch's kernels ignore window_size_right)
])
def test_unbounded_windows_and_the_causal_window(cpu_ops: list, left, right, is_causal: bool, mode: int) -> None:
    q, k, v = randn(1, 5, 2, 8), randn(1, 8, 2, 8, seed=1), randn(1, 8, 2, 8, seed=2)
    out = torch.ops.aten._flash_attention_forward(
        q, k, v, None, None, 5, 8, 0.0, is_causal, False, window_size_left=left, window_size_right=right
    )[0]
    torch.testing.assert_close(out, flashattn.attention_reference(q, k, v, 1 / math.sqrt(8), mode)[0])


@pytest.mark.parametrize(("left", "right", "is_causal", "window"), [
    (3, None, False, (3, -1)), (2, 1, False, (2, 1)), (None, 2, False, (-1, 2)), (-7, 0, False, (-1, 0)),
    (2, 5, True, (2, 0)),  # is_causal: the right edge on the diagonal, window_size_right ignored
    (0, 0, False, (0, 0)),  # each query sees one key (rows before the diagonal none)
])
def test_sliding_windows_forward_and_backward(cpu_ops: list, left, right, is_causal: bool, window) -> None:
    """Sliding windows reach the kernels with torch's FlashAttention-2 semantics (bottom-right,
    negative = unbounded), forward and backward, against the float64 reference."""
    q, k, v = randn(2, 5, 2, 8), randn(2, 9, 1, 8, seed=1), randn(2, 9, 1, 8, seed=2)
    check_window(q, k, v, left, right, is_causal, window)


@pytest.mark.parametrize(("left", "right", "window"), [(1, None, (1, 4)), (2, 7, (2, 4)), (0, -1, (0, 4))])
def test_a_left_window_gets_the_right_edge_sk_when_sq_exceeds_sk(cpu_ops: list, left, right, window) -> None:
    """torch's FlashAttention-2 kernels give a left edge with an unbounded right one the right edge
    Sk (not unbounded): with Sq > Sk + 1 the first rows then miss the last keys, and flashattn does
    the same."""
    q, k, v = randn(1, 12, 2, 8), randn(1, 4, 2, 8, seed=1), randn(1, 4, 2, 8, seed=2)
    unbounded = flashattn.attention_reference(q, k, v, 1 / math.sqrt(8), NONE, (window[0], -1))[0]
    assert not torch.allclose(unbounded, flashattn.attention_reference(q, k, v, 1 / math.sqrt(8), NONE, window)[0])
    check_window(q, k, v, left, right, False, window)


def check_window(q, k, v, left, right, is_causal: bool, window) -> None:
    """The aten forward and backward with (left, right) against the float64 reference with window."""
    sq, sk = q.shape[1], k.shape[1]
    out, lse, rng_state, unused, _ = torch.ops.aten._flash_attention_forward(
        q, k, v, None, None, sq, sk, 0.0, is_causal, False, window_size_left=left, window_size_right=right
    )
    mode = BOTTOM_RIGHT if is_causal else NONE
    ref, ref_lse = flashattn.attention_reference(q, k, v, 1 / math.sqrt(8), mode, window)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(lse, ref_lse.float())
    dout = randn(*out.shape, seed=3)
    grads = torch.ops.aten._flash_attention_backward(
        dout, q, k, v, out, lse, None, None, sq, sk, 0.0, is_causal, rng_state, unused,
        window_size_left=left, window_size_right=right,
    )
    for g, r in zip(grads, torch.autograd.grad(ref, (q, k, v), dout)):
        torch.testing.assert_close(g, r)


@pytest.mark.skipif(not hasattr(torch.ops.aten, "_flash_attention_forward_no_dropout_inplace"), reason="torch < 2.13")
def test_inplace_forward_writes_out(cpu_ops: list) -> None:
    q, k, v = (randn(1, 6, 2, 8, seed=s).detach() for s in range(3))
    out = torch.full_like(q, float("nan"))
    lse = torch.ops.aten._flash_attention_forward_no_dropout_inplace(out, q, k, v, None, None, 6, 6, 0.0, True, False)
    ref, ref_lse = flashattn.attention_reference(q, k, v, 1 / math.sqrt(8), BOTTOM_RIGHT)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(lse, ref_lse.float())


@pytest.mark.parametrize("switch", ["flashattn", "torch"])
def test_backward_mode_is_read_when_the_backward_runs(cpu_ops: list, switch: str) -> None:
    q, k, v = randn(1, 2, 6, 8), randn(1, 2, 6, 8, seed=1), randn(1, 2, 6, 8, seed=2)
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v)[0]
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
    assert [c.deterministic for c in cpu_ops] == [False, True]


def strided_inputs(layout: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q [2, 4, 9, 16], k/v [2, 2, 7, 16] (torch layout) in a given memory order."""
    if layout == "bhsd":
        return randn(2, 4, 9, 16, dtype=dtype), randn(2, 2, 7, 16, dtype=dtype, seed=1), randn(2, 2, 7, 16, dtype=dtype, seed=2)
    if layout == "bshd":
        q, k, v = randn(2, 9, 4, 16, dtype=dtype), randn(2, 7, 2, 16, dtype=dtype, seed=1), randn(2, 7, 2, 16, dtype=dtype, seed=2)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    qkv = randn(2, 9, 3, 4, 16, dtype=dtype)  # packed QKV, Sq == Sk, slices that are not dense
    return tuple(qkv[:, :, i].transpose(1, 2) for i in range(3))  # type: ignore[return-value]


def on_meta(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def metadata(results) -> list:
    return [(tuple(r.shape), r.dtype, r.stride()) if isinstance(r, torch.Tensor) else r for r in results]


@pytest.mark.parametrize("layout", ["bhsd", "bshd", "packed"])
def test_outputs_are_laid_out_as_torch_meta_kernels_say(cpu_ops: list, layout: str) -> None:
    """Shapes, dtypes and strides of every output as torch's meta functions (what a compiled graph
    expects and asserts) give them, for the torch-layout and the FlashAttention-layout ops."""
    q, k, v = (t.detach() for t in strided_inputs(layout, torch.bfloat16))
    sdpa, sdpa_bwd = torch.ops.aten._scaled_dot_product_flash_attention, torch.ops.aten._scaled_dot_product_flash_attention_backward
    ours = sdpa(q, k, v, 0.0, True)
    theirs = sdpa(on_meta(q), on_meta(k), on_meta(v), 0.0, True)
    assert metadata(ours) == metadata(theirs)
    dout = torch.randn_like(ours[0])
    grads = sdpa_bwd(dout, q, k, v, ours[0], ours[1], None, None, ours[4], ours[5], 0.0, True, ours[6], ours[7])
    meta_grads = sdpa_bwd(on_meta(dout), on_meta(q), on_meta(k), on_meta(v), theirs[0], theirs[1], None, None,
                          theirs[4], theirs[5], 0.0, True, theirs[6], theirs[7])
    assert metadata(grads) == metadata(meta_grads)

    fa, fa_bwd = torch.ops.aten._flash_attention_forward, torch.ops.aten._flash_attention_backward
    qb, kb, vb = (t.transpose(1, 2) for t in (q, k, v))
    ours = fa(qb, kb, vb, None, None, 9, 7, 0.0, False, False)
    theirs = fa(on_meta(qb), on_meta(kb), on_meta(vb), None, None, 9, 7, 0.0, False, False)
    assert metadata(ours) == metadata(theirs)
    doutb = dout.transpose(1, 2)
    grads = fa_bwd(doutb, qb, kb, vb, ours[0], ours[1], None, None, 9, 7, 0.0, False, ours[2], ours[3])
    meta_grads = fa_bwd(on_meta(doutb), on_meta(qb), on_meta(kb), on_meta(vb), theirs[0], theirs[1], None, None, 9, 7,
                        0.0, False, theirs[2], theirs[3])
    assert metadata(grads) == metadata(meta_grads)


def test_torch_compile_traces_the_ops_with_torch_meta_kernels(cpu_ops: list) -> None:
    def loss(q, k, v):
        return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)[0].square().sum()

    q, k, v = strided_inputs("bshd", torch.float64)
    compiled = torch.compile(loss, backend="aot_eager", fullgraph=True)
    grads = torch.autograd.grad(compiled(q, k, v), (q, k, v))
    expected = torch.autograd.grad(reference_bhsd(q, k, v, 0.25, BOTTOM_RIGHT).square().sum(), (q, k, v))
    for g, r in zip(grads, expected):
        torch.testing.assert_close(g, r)
    assert len(cpu_ops) == 1


def test_errors_keep_their_type_through_the_dispatcher(cpu_ops: list) -> None:
    q = randn(1, 2, 4, 8)
    with pytest.raises(NotImplementedError, match="dropout_p must be 0.0"):
        torch.ops.aten._scaled_dot_product_flash_attention(q, q, q, 0.1)
    with pytest.raises(TypeError, match="share one dtype"):
        torch.ops.aten._scaled_dot_product_flash_attention(q, q.float(), q)


def test_removing_the_registration_takes_the_kernels_away(monkeypatch: pytest.MonkeyPatch) -> None:
    allow_cpu_entry_points(monkeypatch)
    q = randn(1, 2, 4, 8).detach()
    with cpu_standin_kernels():
        handle = torch_impl.register_kernels("CPU")
        torch.ops.aten._scaled_dot_product_flash_attention(q, q, q)
        handle.remove()
        handle.remove()  # idempotent
        with pytest.raises(NotImplementedError, match="CPU"):
            torch.ops.aten._scaled_dot_product_flash_attention(q, q, q)


# ---- unsupported arguments: refused before any kernel, naming the argument ---------------------------


def cuda_like(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """A CPU tensor: the argument checks below come before the device check."""
    return torch.zeros(shape, dtype=dtype)


Q, KV = (1, 8, 2, 64), (1, 8, 2, 64)


def fa_forward(**kwargs):
    args = dict(cum_seq_q=None, cum_seq_k=None, max_q=8, max_k=8, dropout_p=0.0, is_causal=False, return_debug_mask=False)
    keyword = {n: kwargs.pop(n) for n in list(kwargs) if n not in args}
    args.update(kwargs)
    return torch_impl.flash_attention_forward(cuda_like(*Q), cuda_like(*KV), cuda_like(*KV), *args.values(), **keyword)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dropout_p": 0.1}, r"dropout_p must be 0\.0"),
        ({"return_debug_mask": True}, "return_debug_mask must be False"),
        ({"alibi_slopes": torch.zeros(2)}, "alibi_slopes must be None"),
        ({"seqused_k": torch.zeros(1, dtype=torch.int32)}, "seqused_k must be None"),
        ({"block_table": torch.zeros(1, 1, dtype=torch.int32)}, "block_table must be None"),
        ({"num_splits": 4}, "num_splits must be None, 0 or 1"),
    ],
)
def test_flash_attention_forward_refuses(monkeypatch: pytest.MonkeyPatch, kwargs: dict, match: str) -> None:
    allow_cpu_entry_points(monkeypatch)  # the window checks come after the tensor checks; all before a kernel
    with pytest.raises(NotImplementedError, match=match) as excinfo:
        fa_forward(**kwargs)
    assert "aten::_flash_attention_forward" in str(excinfo.value)


def test_refusals_are_runtime_errors_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """NotImplementedError subclasses RuntimeError, what torch's FA3/FA4 raise for the same cases."""
    allow_cpu_entry_points(monkeypatch)
    with pytest.raises(RuntimeError, match="seqused_k"):
        fa_forward(seqused_k=torch.zeros(1, dtype=torch.int32))


@pytest.mark.parametrize(
    ("dtype", "error", "match"),
    [(torch.float32, TypeError, r"query\.dtype must be torch\.float16 or torch\.bfloat16, got torch\.float32"),
     (torch.bfloat16, ValueError, "query must be on a CUDA device")],
)
def test_dtype_and_device_are_checked(dtype: torch.dtype, error: type, match: str) -> None:
    q = cuda_like(1, 2, 8, 64, dtype=dtype)
    with pytest.raises(error, match=match):
        torch_impl.scaled_dot_product_flash_attention(q, q, q)
    with pytest.raises(error, match=match):
        torch_impl.flash_attention_forward(q, q, q, None, None, 2, 2, 0.0, False, False)


def test_head_dim_not_a_multiple_of_8_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    allow_cpu_entry_points(monkeypatch)
    q = cuda_like(1, 2, 8, 60)
    with pytest.raises(ValueError, match=r"head dim \(query.shape\[-1\]\) must be a multiple of 8"):
        torch_impl.scaled_dot_product_flash_attention(q, q, q)


def test_sdpa_ops_refuse() -> None:
    q = cuda_like(1, 2, 8, 64)
    with pytest.raises(NotImplementedError, match=r"aten::_scaled_dot_product_flash_attention\): dropout_p"):
        torch_impl.scaled_dot_product_flash_attention(q, q, q, 0.5)
    with pytest.raises(NotImplementedError, match="return_debug_mask"):
        torch_impl.scaled_dot_product_flash_attention(q, q, q, 0.0, False, True)
    lse = torch.zeros(1, 2, 8)
    state = torch.zeros(2, dtype=torch.uint64)
    with pytest.raises(NotImplementedError, match=r"_backward\): dropout_p"):
        torch_impl.scaled_dot_product_flash_attention_backward(q, q, q, q, q, lse, None, None, 8, 8, 0.3, False, state, state)
    with pytest.raises(NotImplementedError, match="cum_seq_q and cum_seq_k must be None: this op takes dense"):
        torch_impl.scaled_dot_product_flash_attention_backward(
            q, q, q, q, q, lse, torch.zeros(2, dtype=torch.int32), None, 8, 8, 0.0, False, state, state
        )
    with pytest.raises(ValueError, match=r"query must be 4-D \[B, H, S, D\]"):
        torch_impl.scaled_dot_product_flash_attention(q[0], q, q)


def test_flash_attention_backward_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    allow_cpu_entry_points(monkeypatch)
    q = cuda_like(*Q)
    lse, state = torch.zeros(1, 2, 8), torch.zeros(2, dtype=torch.uint64)
    with pytest.raises(NotImplementedError, match="dropout_p"):
        torch_impl.flash_attention_backward(q, q, q, q, q, lse, None, None, 8, 8, 0.1, False, state, state)
    with pytest.raises(ValueError, match="cum_seq_k must be given with cum_seq_q"):
        torch_impl.flash_attention_backward(q, q, q, q, q, lse, torch.zeros(2, dtype=torch.int32), None, 8, 8, 0.0, False, state, state)


def test_backward_checks_logsumexp(monkeypatch: pytest.MonkeyPatch) -> None:
    allow_cpu_entry_points(monkeypatch)
    q = cuda_like(*Q)
    state = torch.zeros(2, dtype=torch.uint64)
    with pytest.raises(ValueError, match=r"logsumexp must be the forward's float32 \[B, Hq, Sq\] = \[1, 2, 8\]"):
        torch_impl.flash_attention_backward(q, q, q, q, q, torch.zeros(1, 8, 2), None, None, 8, 8, 0.0, False, state, state)
