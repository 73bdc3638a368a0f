"""The backward pass on the GPU: dQ, dK, dV of every differentiable entry point against the float64
gradient reference, by the gradient criterion of tests/numerics.py, over Hypothesis-drawn problems
and explicit edge cases; determinism; torch.compile and CUDA-graph capture of a training step;
memory; a short training run against SDPA. The forward runs on each tested backend (the
`backend` fixture); the backward is the portable kernel on every path."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings

import flashattn
from gpu_helpers import poison_cuda_allocator
from numerics import assert_gradients_match
from strategies import AttentionInputs, AttentionSpec, Layout, attention_specs

pytestmark = pytest.mark.gpu

NONE, TOP_LEFT, BOTTOM_RIGHT = flashattn.CAUSAL_NONE, flashattn.CAUSAL_TOP_LEFT, flashattn.CAUSAL_BOTTOM_RIGHT


def grads_of_op(x: AttentionInputs, dout: torch.Tensor, backend: str, deterministic: bool = False):
    """dq, dk, dv of torch.ops.flashattn.fwd through autograd; the gradients land in NaN-poisoned
    fresh memory. The backward's mode is fixed when the forward runs (flashattn's switch or torch's
    deterministic algorithms, which the poisoning turns on), so the forward runs with torch's
    switch off and flashattn's set to `deterministic`."""
    q, k, v = (t.detach().requires_grad_() for t in (x.q, x.k, x.v))
    scale = 1.0 / x.q.shape[-1] ** 0.5 if x.scale is None else x.scale
    poison_cuda_allocator()
    torch.use_deterministic_algorithms(False)
    flashattn.set_deterministic(deterministic)
    try:
        out, _ = torch.ops.flashattn.fwd(q, k, v, scale, x.causal_mode, backend)
    finally:
        flashattn.set_deterministic(False)
        torch.use_deterministic_algorithms(True, warn_only=True)
    return torch.autograd.grad(out, (q, k, v), dout)


def upstream(x: AttentionInputs, seed: int = 0) -> torch.Tensor:
    g = torch.Generator(device=x.q.device).manual_seed(seed)
    return torch.randn(x.q.shape, device=x.q.device, dtype=x.q.dtype, generator=g)


# ---- Hypothesis property: the op's gradients over the forward's input families ---------------------


@given(spec=attention_specs())
@settings(max_examples=40)
def test_op_gradients_match_reference(spec: AttentionSpec, backend: str, device: torch.device) -> None:
    x = spec.make(device)
    dout = upstream(x)
    dq, dk, dv = grads_of_op(x, dout, backend)
    assert_gradients_match(dq, dk, dv, x.q, x.k, x.v, dout, x.scale, x.causal_mode, context=f"backend {backend}")


# ---- Edge cases ------------------------------------------------------------------------------------

EDGE_CASES = [
    # B, Sq, Sk, Hq, Hk, D, dtype, causal, scale
    pytest.param(1, 1, 1, 1, 1, 64, torch.float16, NONE, None, id="S=1"),
    pytest.param(2, 1, 1000, 8, 1, 128, torch.bfloat16, BOTTOM_RIGHT, None, id="Sq=1-long-Sk-mqa"),
    pytest.param(1, 300, 40, 2, 2, 64, torch.float16, BOTTOM_RIGHT, None, id="Sq>>Sk-empty-rows"),
    pytest.param(2, 40, 300, 2, 2, 64, torch.bfloat16, TOP_LEFT, None, id="Sq<<Sk-top-left"),
    pytest.param(2, 129, 77, 4, 4, 8, torch.float16, NONE, None, id="D=8"),
    pytest.param(1, 200, 190, 2, 1, 256, torch.bfloat16, BOTTOM_RIGHT, None, id="D=256"),
    pytest.param(1, 257, 257, 16, 2, 128, torch.float16, TOP_LEFT, None, id="gqa-8:1"),
    pytest.param(2, 65, 65, 3, 3, 64, torch.bfloat16, NONE, 0.0, id="scale-0"),
    pytest.param(2, 65, 65, 3, 3, 64, torch.float16, TOP_LEFT, -0.7, id="scale-negative"),
]


@pytest.mark.parametrize("b,sq,sk,hq,hk,d,dtype,causal,scale", EDGE_CASES)
def test_edge_case_gradients(b, sq, sk, hq, hk, d, dtype, causal, scale, backend: str, device: torch.device) -> None:
    spec = AttentionSpec(b, sq, sk, hq, hk, d, dtype, causal, scale, Layout("contiguous"), Layout("bhsd"), 1.0, 7)
    x = spec.make(device)
    dout = upstream(x, seed=3)
    dq, dk, dv = grads_of_op(x, dout, backend)
    assert_gradients_match(dq, dk, dv, x.q, x.k, x.v, dout, x.scale, x.causal_mode, context=str(spec))
    if causal == BOTTOM_RIGHT and sq > sk:
        assert torch.equal(dq[:, : sq - sk], torch.zeros_like(dq[:, : sq - sk])), "rows that see no key need dq = 0"


def test_many_batch_heads(device: torch.device) -> None:
    """B * H beyond 65535 (a grid dimension's limit) with small S."""
    spec = AttentionSpec(2, 17, 9, 33000, 33000, 32, torch.bfloat16, BOTTOM_RIGHT, None, Layout("contiguous"),
                         Layout("contiguous"), 1.0, 11)
    x = spec.make(device)
    dout = upstream(x)
    dq, dk, dv = grads_of_op(x, dout, "portable")
    # The full reference would materialize 66000 heads' scores: check a head at each end exactly.
    for h in (0, 32999):
        sub = AttentionInputs(x.q[:, :, h : h + 1], x.k[:, :, h : h + 1], x.v[:, :, h : h + 1], x.scale, x.causal_mode)
        assert_gradients_match(dq[:, :, h : h + 1], dk[:, :, h : h + 1], dv[:, :, h : h + 1], sub.q, sub.k, sub.v,
                               dout[:, :, h : h + 1], sub.scale, sub.causal_mode, context=f"head {h}")
    assert torch.isfinite(dq).all() and torch.isfinite(dk).all() and torch.isfinite(dv).all()


@pytest.mark.parametrize("loss", ["sum", "transposed"])
def test_noncontiguous_upstream_gradient(loss: str, device: torch.device) -> None:
    """dO with stride 0 (out.sum()) or a transposed layout reaches the kernel correctly."""
    spec = AttentionSpec(2, 130, 97, 4, 2, 64, torch.float16, BOTTOM_RIGHT, None, Layout("contiguous"),
                         Layout("contiguous"), 1.0, 5)
    x = spec.make(device)
    q, k, v = (t.detach().requires_grad_() for t in (x.q, x.k, x.v))
    out = flashattn.flash_attn_func(q, k, v, causal=True)
    if loss == "sum":
        out.float().sum().backward()
        dout = torch.ones_like(out)
    else:
        w = torch.randn(out.shape[1], out.shape[0], out.shape[2], out.shape[3], device=device, dtype=out.dtype)
        (out.transpose(0, 1) * w).float().sum().backward()
        dout = w.transpose(0, 1)
    assert_gradients_match(q.grad, k.grad, v.grad, x.q, x.k, x.v, dout, None, BOTTOM_RIGHT)


# ---- Entry points: every differentiable public function trains ----------------------------------


@pytest.mark.parametrize("rank", [2, 3, 4, 5])
def test_sdpa_entry_gradients(rank: int, device: torch.device) -> None:
    g = torch.Generator(device=device).manual_seed(rank)
    lead = {2: (), 3: (4,), 4: (2, 4), 5: (2, 2, 2)}[rank]
    shape = (*lead, 77, 64) if rank > 2 else (77, 64)
    q, k, v = (torch.randn(shape, device=device, dtype=torch.bfloat16, generator=g).requires_grad_() for _ in range(3))
    out = flashattn.scaled_dot_product_attention(q, k, v, is_causal=True)
    dout = torch.randn_like(out)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)

    def to_bshd(t: torch.Tensor) -> torch.Tensor:
        t = t.detach().reshape(-1, *t.shape[-3:]) if t.dim() >= 3 else t.detach()[None, None]
        return t.transpose(1, 2)

    assert_gradients_match(to_bshd(dq), to_bshd(dk), to_bshd(dv), to_bshd(q), to_bshd(k), to_bshd(v), to_bshd(dout),
                           None, TOP_LEFT, context=f"rank {rank}")


def test_sdpa_entry_gqa_gradients(device: torch.device) -> None:
    g = torch.Generator(device=device).manual_seed(1)
    q = torch.randn(2, 8, 100, 128, device=device, dtype=torch.float16, generator=g).requires_grad_()
    k = torch.randn(2, 2, 120, 128, device=device, dtype=torch.float16, generator=g).requires_grad_()
    v = torch.randn(2, 2, 120, 128, device=device, dtype=torch.float16, generator=g).requires_grad_()
    out = flashattn.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    dout = torch.randn_like(out)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    t = lambda x: x.detach().transpose(1, 2)  # noqa: E731
    assert_gradients_match(t(dq), t(dk), t(dv), t(q), t(k), t(v), t(dout), None, NONE)


def test_no_public_function_drops_a_gradient(device: torch.device) -> None:
    """Every public function that returns a tensor computed from its inputs either gives every
    input that requires grad a gradient or refuses with an error: never a silent None."""
    g = torch.Generator(device=device).manual_seed(0)

    def make(*shape):
        return torch.randn(*shape, device=device, dtype=torch.bfloat16, generator=g).requires_grad_()

    q4, k4, v4 = make(1, 2, 33, 64), make(1, 2, 33, 64), make(1, 2, 33, 64)
    checked = set()
    for name in flashattn.__all__:
        fn = getattr(flashattn, name)
        if name == "scaled_dot_product_attention":
            outs = [fn(q4, k4, v4)]
        elif name == "flash_attn_func":
            outs = [fn(q4, k4, v4), fn(q4, k4, v4, return_lse=True)[0]]
        elif name == "flash_attn_with_kvcache":
            with pytest.raises((RuntimeError, ValueError), match="grad"):
                fn(q4, k4.detach().clone(), v4.detach().clone())
            checked.add(name)
            continue
        else:
            continue
        for out in outs:
            for t in (q4, k4, v4):
                t.grad = None
            out.float().sum().backward()
            for t in (q4, k4, v4):
                assert t.grad is not None and torch.isfinite(t.grad).all(), f"{name}: a gradient is missing"
        checked.add(name)
    assert checked == {"scaled_dot_product_attention", "flash_attn_func", "flash_attn_with_kvcache"}


def test_lse_is_not_differentiable(device: torch.device) -> None:
    q, k, v = (torch.randn(1, 40, 2, 64, device=device, dtype=torch.float16).requires_grad_() for _ in range(3))
    out, lse = flashattn.flash_attn_func(q, k, v, return_lse=True)
    assert out.requires_grad and not lse.requires_grad


# ---- Determinism -------------------------------------------------------------------------------------


@pytest.mark.parametrize("d,causal", [(64, TOP_LEFT), (128, NONE), (128, BOTTOM_RIGHT)])
def test_deterministic_mode_is_bitwise_reproducible(d: int, causal: int, device: torch.device) -> None:
    spec = AttentionSpec(1, 2048, 2048, 4, 2, d, torch.bfloat16, causal, None, Layout("contiguous"),
                         Layout("contiguous"), 1.0, 9)
    x = spec.make(device)
    dout = upstream(x)
    runs = [grads_of_op(x, dout, "auto", deterministic=True) for _ in range(3)]
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert torch.equal(a, b), "deterministic backward differs between runs"
    small = AttentionSpec(1, 300, 300, 4, 2, d, torch.bfloat16, causal, None, Layout("contiguous"),
                          Layout("contiguous"), 1.0, 9).make(device)
    sd = upstream(small)
    assert_gradients_match(*grads_of_op(small, sd, "auto", deterministic=True), small.q, small.k, small.v, sd,
                           None, causal, context="deterministic")


def test_torch_deterministic_algorithms_switch(device: torch.device) -> None:
    x = AttentionSpec(1, 1024, 1024, 2, 2, 64, torch.float16, NONE, None, Layout("contiguous"),
                      Layout("contiguous"), 1.0, 2).make(device)
    dout = upstream(x)
    def grads() -> tuple[torch.Tensor, ...]:
        q, k, v = (t.detach().requires_grad_() for t in (x.q, x.k, x.v))
        out = flashattn.flash_attn_func(q, k, v)
        return torch.autograd.grad(out, (q, k, v), dout)

    previous = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        a, b = grads(), grads()
    finally:
        torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])
    assert all(torch.equal(s, t) for s, t in zip(a, b))


# ---- Training: compile, CUDA graphs, memory, a short run ----------------------------------------------


class Block(torch.nn.Module):
    """A pre-norm transformer block whose attention is `attn(q, k, v)` on [B, H, S, D]."""

    def __init__(self, attn, d_model: int = 256, heads: int = 4) -> None:
        super().__init__()
        self.attn, self.heads = attn, heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(d_model), torch.nn.LayerNorm(d_model)
        self.qkv = torch.nn.Linear(d_model, 3 * d_model)
        self.proj = torch.nn.Linear(d_model, d_model)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d_model, 4 * d_model), torch.nn.GELU(), torch.nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        a = self.attn(q, k, v).transpose(1, 2).reshape(b, s, c)
        x = x + self.proj(a)
        return x + self.mlp(self.norm2(x))


def flash_attn(q, k, v):
    return flashattn.scaled_dot_product_attention(q, k, v, is_causal=True)


def sdpa_attn(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def train(attn, device, steps: int = 50, seed: int = 0) -> list[float]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(Block(attn), Block(attn)).to(device=device, dtype=torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator(device=device).manual_seed(seed)
    data = torch.randn(8, 256, 256, device=device, dtype=torch.bfloat16, generator=g)
    target = data.roll(1, dims=1)
    losses = []
    for _ in range(steps):
        loss = F.mse_loss(model(data).float(), target.float())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_training_matches_sdpa(device: torch.device) -> None:
    """Two blocks trained 50 steps from one seed with flashattn and with torch's SDPA. bf16
    rounding differs between the two attentions from the first step, and training amplifies it,
    so the curves are compared loosely: both must learn (loss falls by over 30%), and the final
    losses agree within 5% (unrelated seeds differ by far more at this point)."""
    ours = train(flash_attn, device)
    ref = train(sdpa_attn, device)
    assert all(math.isfinite(v) for v in ours)
    assert ours[-1] < 0.7 * ours[0] and ref[-1] < 0.7 * ref[0]
    assert abs(ours[-1] - ref[-1]) <= 0.05 * ref[-1], (ours[-1], ref[-1])


def test_compiled_training_step_has_no_graph_breaks(device: torch.device) -> None:
    """torch.compile(fullgraph=True) of the forward and loss; AOTAutograd compiles the backward
    (through flashattn::bwd's fake kernel) that loss.backward() then runs. Equal to eager."""
    torch._dynamo.reset()
    model = Block(flash_attn).to(device=device, dtype=torch.bfloat16)
    x = torch.randn(2, 128, 256, device=device, dtype=torch.bfloat16)

    def loss_fn(inp):
        return model(inp).float().square().mean()

    explanation = torch._dynamo.explain(loss_fn)(x)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    torch._dynamo.reset()
    compiled = torch.compile(loss_fn, fullgraph=True)
    loss_c = compiled(x)
    loss_c.backward()
    grads_c = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    loss_e = loss_fn(x)
    loss_e.backward()
    grads_e = [p.grad.clone() for p in model.parameters()]
    torch.testing.assert_close(loss_c, loss_e, rtol=2e-2, atol=2e-2)
    for a, b in zip(grads_c, grads_e):
        torch.testing.assert_close(a, b, rtol=5e-2, atol=5e-2)


def test_cuda_graph_training_step(device: torch.device) -> None:
    """Forward + backward captured in a CUDA graph and replayed equal a fresh eager step."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 256, 64, device=device, dtype=torch.float16).requires_grad_() for _ in range(3))
    dout = torch.randn(2, 4, 256, 64, device=device, dtype=torch.float16)

    def step():
        out = flashattn.scaled_dot_product_attention(q, k, v, is_causal=True)
        return torch.autograd.grad(out, (q, k, v), dout)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_grads = step()
    with torch.no_grad():
        for t in (q, k, v):
            t.copy_(torch.randn_like(t))
    graph.replay()
    eager = step()
    for a, b in zip(static_grads, eager):  # equal up to the order of dQ's float atomics
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)


def test_backward_memory_is_linear_in_sequence_length(device: torch.device) -> None:
    """fwd+bwd at S=16k needs O(S) extra memory: far below the S x S matrix a materializing
    attention (SDPA's math backend) holds."""
    s, d = 16384, 64
    q, k, v = (torch.randn(1, 1, s, d, device=device, dtype=torch.bfloat16).requires_grad_() for _ in range(3))
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = flashattn.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.float().sum().backward()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    score_matrix = s * s * 4  # one float32 S x S matrix: 1 GiB here
    assert extra < score_matrix / 50, f"fwd+bwd used {extra} extra bytes"
