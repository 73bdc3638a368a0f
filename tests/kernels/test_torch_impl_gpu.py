"""flashattn as PyTorch's flash-attention implementation (flashattn/torch_impl.py) on the GPU.

With flashattn activated, `F.scaled_dot_product_attention` under the flash backend runs flashattn's
kernels (counted through flashattn._ops): the same bits as `flashattn.scaled_dot_product_attention`
forward, and backward in deterministic mode; the suite's criteria against the float64 reference
(tests/numerics.py), head dims SDPA pads included; torch's `causal_lower_right` bias (bottom-right
through the flash op); the FlashAttention-layout aten op against `flash_attn_func`; unsupported
arguments raising; deactivation giving torch's own kernels back; torch.compile(fullgraph=True) of a
training step. Packed batches: torch.nn.attention.varlen.varlen_attn runs flashattn's varlen kernels,
the bits of flash_attn_varlen_func forward and (deterministic) backward, the suite's criteria per
sequence, compiled in a module; SDPA on nested jagged tensors likewise. Every test leaves flashattn deactivated, also when it fails (`activated` and the
autouse `nothing_left_active` fixtures).
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn
from flashattn import _ops, torch_impl
from numerics import assert_attention_matches, assert_gradients_match, assert_varlen_attention_matches

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch_impl.registry_available(),
        reason=f"torch {torch.__version__} has no torch.nn.attention flash-attention implementation registry",
    ),
]

NONE, TOP_LEFT, BOTTOM_RIGHT = flashattn.CAUSAL_NONE, flashattn.CAUSAL_TOP_LEFT, flashattn.CAUSAL_BOTTOM_RIGHT


@pytest.fixture(autouse=True)
def nothing_left_active() -> Iterator[None]:
    """No test starts or ends with flashattn active (a failing test included)."""
    flashattn.deactivate()
    try:
        yield
    finally:
        flashattn.deactivate()
    assert not torch_impl.is_active()


@pytest.fixture
def activated(device: torch.device) -> Iterator[None]:
    """flashattn activated for the test body, deactivated afterwards whatever happens."""
    flashattn.activate()
    try:
        assert torch.nn.attention.current_flash_attention_impl() == "flashattn"
        yield
    finally:
        flashattn.deactivate()


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts the calls the aten implementations make to flashattn's fwd and bwd ops (the direct
    entry points' rank-4 path, fwd_bhsd, is not counted)."""
    calls = {"fwd": 0, "bwd": 0}
    fwd, bwd = _ops.fwd, _ops.bwd

    def counting_fwd(*args):
        calls["fwd"] += 1
        return fwd(*args)

    def counting_bwd(*args):
        calls["bwd"] += 1
        return bwd(*args)

    monkeypatch.setattr(_ops, "fwd", counting_fwd)
    monkeypatch.setattr(_ops, "bwd", counting_bwd)
    return calls


@pytest.fixture
def deterministic() -> Iterator[None]:
    before = flashattn.get_deterministic()
    flashattn.set_deterministic(True)
    try:
        yield
    finally:
        flashattn.set_deterministic(before)


def make_qkv(b: int, hq: int, hk: int, sq: int, sk: int, d: int, dtype: torch.dtype, layout: str, device, seed: int = 0):
    """q [B, Hq, Sq, D], k/v [B, Hk, Sk, D] (torch layout) requiring grad; layout "bhsd" (contiguous)
    or "bshd" (transposed views of [B, S, H, D] buffers, what a model's projections give)."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def one(h: int, s: int) -> torch.Tensor:
        if layout == "bhsd":
            t = torch.randn(b, h, s, d, generator=gen, device=device)
        else:
            t = torch.randn(b, s, h, d, generator=gen, device=device).transpose(1, 2)
        return t.to(dtype).requires_grad_(True)

    return one(hq, sq), one(hk, sk), one(hk, sk)


def sdpa_flash(q, k, v, **kwargs) -> torch.Tensor:
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)


def assert_same_bits(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, f"{what}: {got.shape}/{got.dtype} vs {want.shape}/{want.dtype}"
    assert torch.equal(got, want), f"{what}: {int((got != want).sum())} of {got.numel()} elements differ"


# (B, Hq, Hk, Sq, Sk, D, is_causal, scale): causal only with Sq == Sk, where SDPA picks the flash backend
PROBLEMS = [
    (2, 8, 8, 128, 128, 64, False, None),
    (2, 8, 8, 257, 257, 128, True, None),
    (1, 8, 2, 100, 300, 128, False, 0.3),  # GQA, Sq != Sk
    (2, 4, 1, 77, 77, 256, True, None),  # MQA
    (3, 2, 2, 1, 129, 32, False, None),
]
PROBLEM_IDS = [f"b{p[0]}-h{p[1]}:{p[2]}-s{p[3]}:{p[4]}-d{p[5]}{'-causal' if p[6] else ''}{'-scale' if p[7] else ''}" for p in PROBLEMS]


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("problem", PROBLEMS, ids=PROBLEM_IDS)
def test_sdpa_forward_is_flashattn_bitwise(
    activated: None, kernel_calls: dict, problem, dtype: torch.dtype, layout: str, backend: str, device: torch.device
) -> None:
    b, hq, hk, sq, sk, d, is_causal, scale = problem
    q, k, v = make_qkv(b, hq, hk, sq, sk, d, dtype, layout, device)
    kwargs = dict(is_causal=is_causal, scale=scale, enable_gqa=hq != hk)
    with torch.no_grad(), flashattn.use_backend(backend):
        got = sdpa_flash(q, k, v, **kwargs)
        assert kernel_calls["fwd"] == 1, "SDPA's flash backend did not run flashattn's kernel"
        want = flashattn.scaled_dot_product_attention(q, k, v, **kwargs)
    assert_same_bits(got, want, "SDPA (flashattn activated) vs flashattn.scaled_dot_product_attention")
    assert got.stride() == torch.empty_like(q).stride(), "out not laid out like query (torch's kernels and meta functions)"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("problem", PROBLEMS, ids=PROBLEM_IDS)
def test_sdpa_gradients_are_flashattn_bitwise_in_deterministic_mode(
    activated: None, deterministic: None, kernel_calls: dict, problem, dtype: torch.dtype, backend: str, device: torch.device
) -> None:
    b, hq, hk, sq, sk, d, is_causal, scale = problem
    q, k, v = make_qkv(b, hq, hk, sq, sk, d, dtype, "bshd", device, seed=1)
    kwargs = dict(is_causal=is_causal, scale=scale, enable_gqa=hq != hk)
    gen = torch.Generator(device=device).manual_seed(2)
    dout = torch.randn(b, hq, sq, d, generator=gen, device=device).to(dtype)
    with flashattn.use_backend(backend):
        got = torch.autograd.grad(sdpa_flash(q, k, v, **kwargs), (q, k, v), dout)
        assert kernel_calls == {"fwd": 1, "bwd": 1}, kernel_calls
        want = torch.autograd.grad(flashattn.scaled_dot_product_attention(q, k, v, **kwargs), (q, k, v), dout)
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert_same_bits(g, w, f"{name}: SDPA (flashattn activated) vs flashattn.scaled_dot_product_attention")


@pytest.mark.parametrize(
    ("b", "hq", "hk", "sq", "sk", "d", "is_causal"),
    [
        (2, 4, 4, 200, 200, 64, True),
        (1, 6, 2, 33, 190, 128, False),
        (2, 4, 4, 150, 150, 60, True),  # SDPA pads D to 64 and passes 1/sqrt(60)
        (1, 2, 1, 70, 90, 100, False),  # pads to 104
        (1, 2, 2, 64, 64, 4, True),  # pads to 8
    ],
)
def test_sdpa_matches_the_reference(
    activated: None, kernel_calls: dict, b: int, hq: int, hk: int, sq: int, sk: int, d: int, is_causal: bool, device: torch.device
) -> None:
    """The suite's output and gradient criteria (tests/numerics.py), on the [B, S, H, D] views."""
    q, k, v = make_qkv(b, hq, hk, sq, sk, d, torch.bfloat16, "bshd", device, seed=3)
    out = sdpa_flash(q, k, v, is_causal=is_causal, enable_gqa=hq != hk)
    gen = torch.Generator(device=device).manual_seed(4)
    dout = torch.randn(out.shape, generator=gen, device=device).to(out.dtype)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    assert kernel_calls == {"fwd": 1, "bwd": 1}, kernel_calls
    mode = TOP_LEFT if is_causal else NONE
    bshd = [t.detach().transpose(1, 2) for t in (q, k, v)]
    assert_attention_matches(out.detach().transpose(1, 2), None, *bshd, None, mode, context="SDPA, flashattn activated")
    assert_gradients_match(dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2), *bshd, dout.transpose(1, 2), None, mode,
                           context="SDPA, flashattn activated")


def test_causal_lower_right_bias_is_bottom_right(activated: None, kernel_calls: dict, device: torch.device) -> None:
    """torch's causal_lower_right bias calls the flash op with is_causal=True for Sq != Sk, relying
    on torch's flash kernels being bottom-right aligned: flashattn's are there too."""
    from torch.nn.attention.bias import causal_lower_right

    q, k, v = make_qkv(2, 4, 4, 50, 170, 64, torch.bfloat16, "bshd", device, seed=5)
    with torch.no_grad():
        got = sdpa_flash(q, k, v, attn_mask=causal_lower_right(50, 170))
        assert kernel_calls["fwd"] == 1
        want = flashattn.flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
    assert_same_bits(got.transpose(1, 2), want, "causal_lower_right via SDPA vs flash_attn_func(causal=True)")


@pytest.mark.parametrize("window", [(None, None), (16, 8), (-1, 0), (20, None)], ids=["unbounded", "16-8", "causal-window", "left-20"])
@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_flash_attention_forward_op_is_flash_attn_func(
    activated: None, deterministic: None, is_causal: bool, window: tuple, device: torch.device
) -> None:
    """aten::_flash_attention_forward ([B, S, H, D], is_causal bottom-right, sliding windows as
    torch's FlashAttention-2 reads them) and its backward: the bits of flash_attn_func with the
    same window_size (deterministic mode for the gradients), and the gradient criterion."""
    q, k, v = (t.transpose(1, 2) for t in make_qkv(2, 8, 2, 90, 61, 128, torch.bfloat16, "bshd", device, seed=6))
    left, right = window
    causal = is_causal or (left in (None, -1) and right == 0)  # (-1, 0) is torch's causal window
    if causal:
        right_edge = 0
    elif right is None:
        # torch's kernels give a left edge with an unbounded right one the right edge Sk (61): with
        # Sq = 90 > Sk + 1 the first 28 rows do not see the last keys
        right_edge = -1 if left is None else 61
    else:
        right_edge = right
    ours = (-1 if left is None else left, right_edge)
    out, lse, rng_state, unused, debug = torch.ops.aten._flash_attention_forward(
        q, k, v, None, None, 90, 61, 0.0, is_causal, False, window_size_left=left, window_size_right=right
    )
    want, want_lse = flashattn.flash_attn_func(q, k, v, causal=causal, window_size=ours, return_lse=True)
    assert_same_bits(out, want, "out")
    assert_same_bits(lse, want_lse, "lse")
    assert (rng_state.shape, rng_state.dtype, unused.shape, unused.dtype, debug.numel()) == ((2,), torch.uint64, (), torch.uint64, 0)
    assert rng_state.device == q.device
    dout = torch.randn_like(out)
    grads = torch.ops.aten._flash_attention_backward(
        dout, q, k, v, out, lse, None, None, 90, 61, 0.0, is_causal, rng_state, unused,
        window_size_left=left, window_size_right=right,
    )
    ref = torch.autograd.grad(want, (q, k, v), dout)
    mode = BOTTOM_RIGHT if causal else NONE
    assert_gradients_match(*grads, q.detach(), k.detach(), v.detach(), dout, None, mode, window=ours,
                           context="aten::_flash_attention_backward")
    for name, g, r in zip(("dq", "dk", "dv"), grads, ref):
        assert_same_bits(g, r, f"{name}: aten::_flash_attention_backward vs flash_attn_func's backward")


def test_deactivate_restores_torchs_kernels(kernel_calls: dict, device: torch.device) -> None:
    q, k, v = make_qkv(2, 4, 4, 256, 256, 64, torch.bfloat16, "bhsd", device, seed=7)
    with torch.no_grad():
        torch_before = sdpa_flash(q, k, v, is_causal=True)
        assert kernel_calls["fwd"] == 0
        flashattn.activate()
        try:
            ours = sdpa_flash(q, k, v, is_causal=True)
            assert kernel_calls["fwd"] == 1
        finally:
            flashattn.deactivate()
        assert torch.nn.attention.current_flash_attention_impl() is None
        torch_after = sdpa_flash(q, k, v, is_causal=True)
    assert kernel_calls["fwd"] == 1, "flashattn's kernel ran after deactivate()"
    assert_same_bits(torch_after, torch_before, "torch's flash kernel before activation and after deactivation")
    assert_same_bits(ours, flashattn.scaled_dot_product_attention(q, k, v, is_causal=True), "ours")


def test_activation_through_torchs_registry(kernel_calls: dict, device: torch.device) -> None:
    q, k, v = make_qkv(1, 2, 2, 64, 64, 64, torch.float16, "bhsd", device, seed=8)
    torch.nn.attention.activate_flash_attention_impl("flashattn")
    try:
        assert torch_impl.is_active()
        with torch.no_grad():
            sdpa_flash(q, k, v)
        assert kernel_calls["fwd"] == 1
    finally:
        torch.nn.attention.restore_flash_attention_impl()
    assert not torch_impl.is_active()


def test_unsupported_arguments_raise(activated: None, device: torch.device) -> None:
    q, k, v = make_qkv(1, 2, 2, 64, 64, 64, torch.bfloat16, "bhsd", device, seed=9)
    with pytest.raises(RuntimeError, match=r"dropout_p must be 0\.0"):  # NotImplementedError is a RuntimeError
        sdpa_flash(q, k, v, dropout_p=0.1)
    with pytest.raises(RuntimeError, match="return_debug_mask must be False"):
        torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, True)
    qb, kb, vb = (t.detach().transpose(1, 2) for t in (q, k, v))
    cu = torch.tensor([0, 64], dtype=torch.int32, device=device)
    with pytest.raises(RuntimeError, match="seqused_k must be None"):
        torch.ops.aten._flash_attention_forward(qb[0], kb[0], vb[0], cu, cu, 64, 64, 0.0, False, False,
                                                seqused_k=torch.tensor([64], dtype=torch.int32, device=device))
    with pytest.raises(ValueError, match="cum_seq_k must be given with cum_seq_q"):
        torch.ops.aten._flash_attention_forward(qb[0], kb[0], vb[0], cu, None, 64, 64, 0.0, False, False)
    with pytest.raises((TypeError, RuntimeError), match=r"float16 or torch\.bfloat16, got torch\.float32"):
        torch.ops.aten._scaled_dot_product_flash_attention(q.float(), k.float(), v.float())


def test_torch_compile_training_step(activated: None, kernel_calls: dict, device: torch.device) -> None:
    """A small attention block compiled with fullgraph=True (inductor) runs forward and backward on
    flashattn's kernels (the aten ops are fallbacks there: outputs laid out as torch's meta
    functions say, which the compiled code asserts), close to eager."""
    from torch._dynamo.utils import counters

    class Block(torch.nn.Module):
        def __init__(self, dim: int = 256, heads: int = 4) -> None:
            super().__init__()
            self.heads = heads
            self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False)
            self.proj = torch.nn.Linear(dim, dim, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, dim = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, self.heads, dim // self.heads).unbind(2)  # packed QKV slices
            out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
            return self.proj(out.transpose(1, 2).reshape(b, s, dim))

    torch.manual_seed(0)
    block = Block().to(device=device, dtype=torch.bfloat16)
    x = torch.randn(2, 128, 256, device=device, dtype=torch.bfloat16)
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(block, fullgraph=True)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        got = compiled(x)
        got_grads = torch.autograd.grad(got.float().square().mean(), list(block.parameters()))
        assert kernel_calls["fwd"] >= 1 and kernel_calls["bwd"] >= 1, kernel_calls
        want = block(x)
        want_grads = torch.autograd.grad(want.float().square().mean(), list(block.parameters()))
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    for g, w in zip(got_grads, want_grads):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, w, atol=2e-2 * float(w.abs().max()), rtol=5e-2)


# ---- packed variable-length batches (torch.nn.attention.varlen, nested jagged tensors) ---------------


@pytest.fixture
def varlen_kernel_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts the calls the aten implementations make to flashattn's varlen ops."""
    calls = {"fwd_varlen": 0, "bwd_varlen": 0}
    fwd, bwd = _ops.fwd_varlen, _ops.bwd_varlen

    def counting_fwd(*args):
        calls["fwd_varlen"] += 1
        return fwd(*args)

    def counting_bwd(*args):
        calls["bwd_varlen"] += 1
        return bwd(*args)

    monkeypatch.setattr(_ops, "fwd_varlen", counting_fwd)
    monkeypatch.setattr(_ops, "bwd_varlen", counting_bwd)
    return calls


def varlen_gqa_kwargs(hq: int, hk: int) -> dict:
    """torch 2.13's varlen_attn takes GQA only with enable_gqa=True; 2.11's has no such argument."""
    from torch.nn.attention.varlen import varlen_attn

    return {"enable_gqa": True} if hq != hk and "enable_gqa" in inspect.signature(varlen_attn).parameters else {}


def make_packed(lens_q: list[int], lens_k: list[int], hq: int, hk: int, d: int, dtype: torch.dtype, device, seed: int = 0):
    """q [total_q, Hq, D], k/v [total_k, Hk, D] requiring grad, cu_seqlens int32 [B + 1], max lengths."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def one(rows: int, heads: int) -> torch.Tensor:
        return torch.randn(rows, heads, d, generator=gen, device=device).to(dtype).requires_grad_(True)

    def cu(lens: list[int]) -> torch.Tensor:
        return torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32, device=device)

    return one(sum(lens_q), hq), one(sum(lens_k), hk), one(sum(lens_k), hk), cu(lens_q), cu(lens_k), max(lens_q), max(lens_k)


# (lens_q, lens_k, Hq, Hk, D): zero- and one-row sequences, Sq > Sk (rows that see no key under
# causal), tile edges, GQA
VARLEN_PROBLEMS = [
    ([300, 1, 0, 77, 128], [300, 5, 64, 77, 129], 8, 2, 128),
    ([64, 200, 3], [17, 200, 90], 4, 4, 64),
]


@pytest.mark.parametrize("window_size", [(-1, -1), (-1, 0), (32, 0), (16, 16)], ids=["full", "causal", "causal-32", "16-16"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("problem", VARLEN_PROBLEMS, ids=["gqa-mixed", "mha"])
def test_varlen_attn_is_flash_attn_varlen_func_bitwise(
    activated: None, varlen_kernel_calls: dict, poisoned: None, problem, dtype: torch.dtype, window_size, device: torch.device
) -> None:
    """torch.nn.attention.varlen.varlen_attn (window_size (-1, 0) is its causal, bottom-right per
    sequence) runs flashattn's varlen kernel: out and lse [Hq, total_q] are the bits of
    flash_attn_varlen_func with the same mask."""
    from torch.nn.attention.varlen import AuxRequest, varlen_attn

    lens_q, lens_k, hq, hk, d = problem
    q, k, v, cu_q, cu_k, max_q, max_k = make_packed(lens_q, lens_k, hq, hk, d, dtype, device, seed=10)
    causal = window_size == (-1, 0)
    with torch.no_grad():
        out, lse = varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, window_size=window_size,
                               return_aux=AuxRequest(lse=True), **varlen_gqa_kwargs(hq, hk))
        assert varlen_kernel_calls["fwd_varlen"] == 1, "varlen_attn did not run flashattn's kernel"
        want, want_lse = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, causal=causal,
                                                          window_size=(-1, -1) if causal else window_size,
                                                          return_lse=True)
    assert_same_bits(out, want, "varlen_attn (flashattn activated) vs flash_attn_varlen_func")
    assert_same_bits(lse, want_lse, "varlen_attn's lse vs flash_attn_varlen_func's")


@pytest.mark.parametrize("window_size", [(-1, -1), (-1, 0), (32, 0)], ids=["full", "causal", "causal-32"])
@pytest.mark.parametrize("problem", VARLEN_PROBLEMS, ids=["gqa-mixed", "mha"])
def test_varlen_attn_gradients_are_flash_attn_varlen_func_bitwise_in_deterministic_mode(
    activated: None, deterministic: None, varlen_kernel_calls: dict, problem, window_size, device: torch.device
) -> None:
    from torch.nn.attention.varlen import varlen_attn

    lens_q, lens_k, hq, hk, d = problem
    q, k, v, cu_q, cu_k, max_q, max_k = make_packed(lens_q, lens_k, hq, hk, d, torch.bfloat16, device, seed=14)
    causal = window_size == (-1, 0)
    gen = torch.Generator(device=device).manual_seed(15)
    dout = torch.randn(q.shape, generator=gen, device=device).to(q.dtype)
    out = varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, window_size=window_size, **varlen_gqa_kwargs(hq, hk))
    got = torch.autograd.grad(out, (q, k, v), dout)
    assert varlen_kernel_calls == {"fwd_varlen": 1, "bwd_varlen": 1}, varlen_kernel_calls
    want_out = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, causal=causal,
                                                window_size=(-1, -1) if causal else window_size)
    want = torch.autograd.grad(want_out, (q, k, v), dout)
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert_same_bits(g, w, f"{name}: varlen_attn (flashattn activated) vs flash_attn_varlen_func's backward")


@pytest.mark.parametrize("window_size", [(-1, -1), (-1, 0), (24, 0)], ids=["full", "causal", "causal-24"])
def test_varlen_attn_matches_the_reference(
    activated: None, varlen_kernel_calls: dict, window_size, device: torch.device
) -> None:
    """varlen_attn forward and backward through flashattn's varlen kernels, by the suite's output
    and gradient criteria (tests/numerics.py) applied to each sequence; a sequence without
    queries gets zero key/value gradients."""
    lens_q, lens_k, hq, hk, d = [130, 1, 0, 77, 40], [130, 9, 33, 60, 70], 8, 2, 128
    q, k, v, cu_q, cu_k, max_q, max_k = make_packed(lens_q, lens_k, hq, hk, d, torch.bfloat16, device, seed=11)
    from torch.nn.attention.varlen import varlen_attn

    out = varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, window_size=window_size, **varlen_gqa_kwargs(hq, hk))
    gen = torch.Generator(device=device).manual_seed(12)
    dout = torch.randn(out.shape, generator=gen, device=device).to(out.dtype)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    assert varlen_kernel_calls == {"fwd_varlen": 1, "bwd_varlen": 1}, varlen_kernel_calls
    mode = BOTTOM_RIGHT if window_size == (-1, 0) else NONE
    window = (-1, -1) if mode == BOTTOM_RIGHT else window_size
    cq, ck = cu_q.tolist(), cu_k.tolist()
    qd, kd, vd = (t.detach() for t in (q, k, v))
    assert_varlen_attention_matches(out.detach(), None, qd, kd, vd, cq, ck, None, mode, window=window,
                                    context="varlen_attn, flashattn activated")
    for b in range(len(lens_q)):
        q0, q1, k0, k1 = cq[b], cq[b + 1], ck[b], ck[b + 1]
        if q1 == q0:
            assert not dk[k0:k1].any() and not dv[k0:k1].any(), f"sequence {b} has no queries: dk, dv must be 0"
            continue
        assert_gradients_match(dq[None, q0:q1], dk[None, k0:k1], dv[None, k0:k1], qd[None, q0:q1], kd[None, k0:k1],
                               vd[None, k0:k1], dout[None, q0:q1], None, mode, window=window,
                               context=f"varlen_attn, flashattn activated, sequence {b}")


def test_torch_compile_of_a_module_calling_varlen_attn(activated: None, varlen_kernel_calls: dict, device: torch.device) -> None:
    """A small attention block over a packed batch, compiled with fullgraph=True (inductor): forward
    and backward run flashattn's varlen kernels, close to eager."""
    from torch._dynamo.utils import counters
    from torch.nn.attention.varlen import varlen_attn

    class Block(torch.nn.Module):
        def __init__(self, dim: int = 256, heads: int = 4) -> None:
            super().__init__()
            self.heads = heads
            self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False)
            self.proj = torch.nn.Linear(dim, dim, bias=False)

        def forward(self, x: torch.Tensor, cu: torch.Tensor, max_len: int) -> torch.Tensor:
            q, k, v = self.qkv(x).view(x.shape[0], 3, self.heads, -1).unbind(1)  # packed QKV slices
            out = varlen_attn(q, k, v, cu, cu, max_len, max_len, window_size=(-1, 0))
            return self.proj(out.flatten(1))

    torch.manual_seed(0)
    block = Block().to(device=device, dtype=torch.bfloat16)
    lens = [100, 1, 155]
    x = torch.randn(sum(lens), 256, device=device, dtype=torch.bfloat16)
    cu = torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32, device=device)
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(block, fullgraph=True)
    got = compiled(x, cu, max(lens))
    got_grads = torch.autograd.grad(got.float().square().mean(), list(block.parameters()))
    assert varlen_kernel_calls["fwd_varlen"] >= 1 and varlen_kernel_calls["bwd_varlen"] >= 1, varlen_kernel_calls
    want = block(x, cu, max(lens))
    want_grads = torch.autograd.grad(want.float().square().mean(), list(block.parameters()))
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    for g, w in zip(got_grads, want_grads):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, w, atol=2e-2 * float(w.abs().max()), rtol=5e-2)


def test_nested_jagged_sdpa_runs_the_varlen_kernel(activated: None, varlen_kernel_calls: dict, device: torch.device) -> None:
    """SDPA on nested jagged tensors under the flash backend calls aten::_flash_attention_forward
    with the packed values and their offsets: flashattn's varlen kernel, the bits of
    flash_attn_varlen_func."""
    lens = [37, 2, 128]
    gen = torch.Generator(device=device).manual_seed(13)
    seqs = [[torch.randn(n, 4, 64, generator=gen, device=device, dtype=torch.bfloat16) for n in lens] for _ in range(3)]
    q, k, v = (torch.nested.nested_tensor(s, layout=torch.jagged).transpose(1, 2) for s in seqs)  # [B, H, j, D]
    with torch.no_grad():
        got = sdpa_flash(q, k, v, is_causal=True)
        assert varlen_kernel_calls["fwd_varlen"] == 1, "SDPA on nested tensors did not run flashattn's varlen kernel"
        cu = torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32, device=device)
        packed = [torch.cat(s) for s in seqs]
        want = flashattn.flash_attn_varlen_func(*packed, cu, cu, max(lens), max(lens), causal=True)
    assert_same_bits(got.transpose(1, 2).values(), want, "SDPA on nested jagged tensors vs flash_attn_varlen_func")
