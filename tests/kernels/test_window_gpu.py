"""Local (sliding-window) attention and the logit softcap on the GPU (issue 16), on every forward
path the `backend` fixture names (portable, and the Hopper path on an H100): against the float64
reference by the suite's one criterion (tests/numerics.py, with its documented softcap baseline
and tanh allowance), over Hypothesis-drawn problems and explicit edge cases; outputs allocated
from NaN-poisoned memory. Also: windows that reach no row change nothing (bitwise), and the
backward through a window or softcap, after a forward on either path, meets the gradient
criterion (the backward's own coverage is in tests/kernels/test_backward_gpu.py).

The decode path's window/softcap tests are in tests/kernels/test_kvcache.py."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import flashattn
import strategies as fst
from gpu_helpers import poison_cuda_allocator
from numerics import assert_attention_matches, assert_gradients_match
from strategies import AttentionSpec, Layout, attention_specs

pytestmark = pytest.mark.gpu

NONE, TOP_LEFT, BOTTOM_RIGHT = flashattn.CAUSAL_NONE, flashattn.CAUSAL_TOP_LEFT, flashattn.CAUSAL_BOTTOM_RIGHT
MODE_IDS = {NONE: "none", TOP_LEFT: "top-left", BOTTOM_RIGHT: "bottom-right"}


def run_op(spec: AttentionSpec, window: tuple[int, int], softcap: float, backend: str, device: torch.device):
    x = spec.make(device)
    poison_cuda_allocator()
    out, lse = torch.ops.flashattn.fwd(x.q, x.k, x.v, spec.resolved_scale, spec.causal_mode, backend, window[0],
                                       window[1], softcap)
    return x, out, lse


def check(x, out, lse, window, softcap, context: str):
    return assert_attention_matches(out, lse, x.q, x.k, x.v, x.scale, x.causal_mode, window=window, softcap=softcap,
                                    context=context)


# ---- Hypothesis -----------------------------------------------------------------------------------


@given(spec=attention_specs(), window=fst.windows(), softcap=fst.softcaps())
def test_op_with_window_and_softcap_matches_reference(spec: AttentionSpec, window, softcap, backend: str,
                                                      device: torch.device) -> None:
    """torch.ops.flashattn.fwd, all three causal modes (the window takes the mode's alignment)."""
    x, out, lse = run_op(spec, window, softcap, backend, device)
    check(x, out, lse, window, softcap, f"backend {backend}")


@given(spec=attention_specs(causal_choices=(NONE, BOTTOM_RIGHT)), window=fst.windows(), softcap=fst.softcaps())
def test_flash_attn_func_with_window_and_softcap_matches_reference(spec: AttentionSpec, window, softcap, backend: str,
                                                                  device: torch.device) -> None:
    x = spec.make(device)
    poison_cuda_allocator()
    with flashattn.use_backend(backend):
        out, lse = flashattn.flash_attn_func(x.q, x.k, x.v, softmax_scale=x.scale, causal=spec.causal_mode == BOTTOM_RIGHT,
                                             window_size=window, softcap=softcap, return_lse=True)
    check(x, out, lse, window, softcap, f"backend {backend}")


@given(spec=attention_specs(max_seqlen=300), window=fst.windows(), softcap=st.sampled_from((0.0, 20.0)))
def test_wide_windows_change_nothing(spec: AttentionSpec, window, softcap, backend: str, device: torch.device) -> None:
    """A window edge no query row reaches is no edge: the result is bitwise that of the call
    without it (the host turns such edges into -1, so the same kernel path runs)."""
    sq, sk = spec.seqlen_q, spec.seqlen_k
    off = 0 if spec.causal_mode == TOP_LEFT else sk - sq
    # left >= Sq - 1 + offset and right >= Sk - 1 - offset reach no row (both bounds are >= 0)
    wide = (sq - 1 + off + window[0] if window[0] >= 0 else -1, sk - 1 - off + window[1] if window[1] >= 0 else -1)
    x, out, lse = run_op(spec, wide, softcap, backend, device)
    _, out0, lse0 = run_op(spec, (-1, -1), softcap, backend, device)
    assert torch.equal(out, out0) and torch.equal(lse, lse0), f"window {wide} vs none"


# ---- explicit edge cases --------------------------------------------------------------------------


def _spec(b, sq, sk, hq, hk, d, mode, dtype=torch.bfloat16, magnitude=1.0, scale=None) -> AttentionSpec:
    return AttentionSpec(b, sq, sk, hq, hk, d, dtype, mode, scale, Layout("contiguous"), Layout("contiguous"), magnitude, 0)


EDGES = [
    # id, spec args, window, softcap
    ("(0,0)", (2, 130, 130, 4, 2, 64, NONE), (0, 0), 0.0),
    ("(0,0),Sq>Sk", (1, 300, 17, 2, 1, 64, NONE), (0, 0), 0.0),  # bottom-right: rows 0..282 see no key
    ("(0,0),top-left,Sq>Sk", (1, 200, 50, 2, 2, 128, TOP_LEFT), (0, 0), 0.0),  # rows >= 50 see no key
    ("left-only", (2, 257, 700, 4, 4, 128, NONE), (100, -1), 0.0),
    ("right-only", (2, 257, 700, 4, 1, 64, NONE), (-1, 37), 0.0),
    ("left+right", (1, 500, 500, 2, 2, 96, NONE), (63, 64), 0.0),
    ("causal-bottom-right+left", (1, 1000, 1500, 4, 2, 128, BOTTOM_RIGHT), (256, -1), 0.0),
    ("causal-top-left+left", (1, 1500, 1000, 4, 2, 64, TOP_LEFT), (100, -1), 0.0),
    ("window>S", (2, 100, 90, 2, 2, 64, BOTTOM_RIGHT), (1000, 1000), 0.0),
    ("D=256,window", (1, 333, 333, 2, 1, 256, BOTTOM_RIGHT), (50, -1), 0.0),
    ("D=8,window", (2, 77, 99, 3, 1, 8, NONE), (5, 5), 0.0),
    ("long-keys,D=64,window", (1, 600, 4500, 4, 2, 64, BOTTOM_RIGHT), (1000, -1), 0.0),
    ("sliding-4k-of-8k", (1, 8192, 8192, 2, 1, 128, BOTTOM_RIGHT), (4096, -1), 0.0),
    ("many-tiles,window", (3, 1100, 1300, 48, 8, 128, BOTTOM_RIGHT), (300, 0), 0.0),
    ("softcap", (2, 129, 129, 2, 2, 64, NONE), (-1, -1), 30.0),
    ("softcap,logits-x30", (2, 129, 257, 4, 2, 128, BOTTOM_RIGHT), (-1, -1), 50.0),
    ("softcap-saturated", (1, 65, 300, 2, 2, 64, NONE), (-1, -1), 1.0),
    ("softcap+window,D=256", (1, 200, 400, 2, 2, 256, BOTTOM_RIGHT), (64, -1), 20.0),
    ("softcap,scale<0", (1, 70, 90, 2, 2, 64, NONE), (-1, -1), 10.0),
]


@pytest.mark.parametrize("dtype", [pytest.param(torch.float16, id="fp16"), pytest.param(torch.bfloat16, id="bf16")])
@pytest.mark.parametrize(("args", "window", "softcap"), [pytest.param(a, w, c, id=i) for i, a, w, c in EDGES])
def test_edge_case(args, window, softcap, dtype, backend: str, device: torch.device) -> None:
    magnitude = 30.0 if "x30" in str(args) or softcap == 50.0 else 1.0
    scale = -0.7 if softcap == 10.0 else None
    spec = _spec(*args, dtype=dtype, magnitude=magnitude, scale=scale)
    x, out, lse = run_op(spec, window, softcap, backend, device)
    errors = check(x, out, lse, window, softcap, f"backend {backend} {spec!r} window {window} softcap {softcap}")
    if args == (1, 300, 17, 2, 1, 64, NONE):
        assert errors.empty_rows == 2 * (300 - 17)


def test_softcap_bounds_the_lse(backend: str, device: torch.device) -> None:
    """With huge logits, every capped score is within +-c: lse <= c + log(Sk)."""
    spec = _spec(1, 64, 200, 2, 2, 64, NONE, magnitude=30.0)
    x, out, lse = run_op(spec, (-1, -1), 5.0, backend, device)
    assert bool((lse <= 5.0 + torch.log(torch.tensor(200.0)) + 1e-3).all())
    check(x, out, lse, (-1, -1), 5.0, f"backend {backend}")


# ---- gradients --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("window", "softcap"), [((64, 0), 0.0), ((-1, -1), 30.0), ((16, 16), 5.0)],
                         ids=["window", "softcap", "both"])
def test_backward_with_window_or_softcap_matches_reference(window, softcap, backend: str, device: torch.device) -> None:
    """The forward on the path under test, the portable backward on its out and lse: the backward
    recomputes the forward's masked, capped probabilities from the saved lse."""
    gen = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(1, 200, 2, 64, generator=gen, device=device).to(torch.bfloat16).requires_grad_(True)
               for _ in range(3))
    dout = torch.randn(1, 200, 2, 64, generator=gen, device=device).to(torch.bfloat16)
    mode = BOTTOM_RIGHT if window[1] == 0 else NONE
    with flashattn.use_backend(backend):
        out = flashattn.flash_attn_func(q, k, v, causal=window[1] == 0, window_size=window, softcap=softcap)
    out.backward(dout)
    assert_attention_matches(out.detach(), None, q.detach(), k.detach(), v.detach(), None, mode, window=window,
                             softcap=softcap)
    assert_gradients_match(q.grad, k.grad, v.grad, q.detach(), k.detach(), v.detach(), dout, None, mode, window=window,
                           softcap=softcap, context=f"backend {backend}")


def test_backward_through_a_window_no_row_reaches_runs(device: torch.device) -> None:
    """window (-1, 0) under causal masking, or wider than the sequences, is no window: its
    gradients are those of the call without it."""
    gen = torch.Generator(device=device).manual_seed(0)
    base = [torch.randn(2, 100, 2, 64, generator=gen, device=device).to(torch.float16) for _ in range(3)]
    grads = []
    previous = flashattn.get_deterministic()
    flashattn.set_deterministic(True)  # bitwise reproducible dQ accumulation
    try:
        for window in ((-1, -1), (-1, 0), (500, 500)):
            leaves = [t.clone().requires_grad_(True) for t in base]
            flashattn.flash_attn_func(*leaves, causal=True, window_size=window).float().square().sum().backward()
            grads.append([t.grad for t in leaves])
    finally:
        flashattn.set_deterministic(previous)
    for g in grads[1:]:
        assert all(torch.equal(a, b) for a, b in zip(g, grads[0]))
