"""No public function may return an output whose gradient is silently dropped.

Every name in flashattn.__all__ is classified: either a function that computes tensors from tensor
inputs (TENSOR_FUNCTIONS, each with its calls) or not (NOT_TENSOR_FUNCTIONS); a new public name
fails test_every_public_name_is_classified until it is. Each call runs with every tensor input
requiring grad and must either raise (inference-only functions) or give, for each output that
requires grad, a gradient to every input that requires grad: not None, finite, the input's shape.
An output that does not require grad is allowed only where the function documents it (the lse).

On CPU the entry points run with stand-in kernels on float64 CPU tensors (their device and dtype
checks relaxed: tests/standin_kernels.py); on a GPU, with the real kernels on bfloat16 tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

import flashattn
from standin_kernels import allow_cpu_entry_points, cpu_standin_kernels


@dataclass(frozen=True)
class Call:
    id: str
    shapes: dict[str, tuple[int, ...]]  # tensor inputs, all requiring grad
    run: Callable[..., object]  # run(**tensors) -> tensor or tuple
    raises: type[Exception] | None = None  # inference-only: must raise this
    non_differentiable: tuple[int, ...] = ()  # output positions documented as not differentiable
    independent: tuple[tuple[int, str], ...] = ()  # (output, input) pairs with no mathematical dependence


BSHD_Q, BSHD_KV = (2, 9, 4, 64), (2, 7, 2, 64)


def _cu(cu_q, cu_k, device):
    return (torch.tensor(cu_q, dtype=torch.int32, device=device), torch.tensor(cu_k, dtype=torch.int32, device=device))
BHSD_Q, BHSD_KV = (2, 4, 9, 64), (2, 2, 7, 64)

TENSOR_FUNCTIONS: dict[str, list[Call]] = {
    "scaled_dot_product_attention": [
        Call("rank4-gqa-causal", {"q": BHSD_Q, "k": BHSD_KV, "v": BHSD_KV},
             lambda q, k, v: flashattn.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)),
        Call("rank3", {"q": (4, 9, 64), "k": (4, 7, 64), "v": (4, 7, 64)},
             lambda q, k, v: flashattn.scaled_dot_product_attention(q, k, v)),
    ],
    "flash_attn_func": [
        Call("causal", {"q": BSHD_Q, "k": BSHD_KV, "v": BSHD_KV}, lambda q, k, v: flashattn.flash_attn_func(q, k, v, causal=True)),
        Call("return_lse", {"q": BSHD_Q, "k": BSHD_KV, "v": BSHD_KV},
             lambda q, k, v: flashattn.flash_attn_func(q, k, v, return_lse=True), non_differentiable=(1,)),
    ],
    "flash_attn_with_kvcache": [
        Call("no-append", {"q": (2, 1, 4, 64), "k_cache": (2, 16, 2, 64), "v_cache": (2, 16, 2, 64)},
             lambda q, k_cache, v_cache: flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=5),
             raises=RuntimeError),
        Call("append", {"q": (2, 1, 4, 64), "k_cache": (2, 16, 2, 64), "v_cache": (2, 16, 2, 64), "k": (2, 1, 2, 64), "v": (2, 1, 2, 64)},
             lambda q, k_cache, v_cache, k, v: flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=5),
             raises=RuntimeError),
    ],
    "flash_attn_varlen_func": [
        Call("causal", {"q": (9, 4, 64), "k": (7, 2, 64), "v": (7, 2, 64)},
             lambda q, k, v: flashattn.flash_attn_varlen_func(q, k, v, *_cu((0, 4, 9), (0, 3, 7), q.device), 5, 4,
                                                              causal=True, return_lse=True),
             non_differentiable=(1,)),
    ],
    "attention_reference": [
        Call("bottom-right", {"q": (1, 6, 2, 8), "k": (1, 4, 1, 8), "v": (1, 4, 1, 8)},
             lambda q, k, v: flashattn.attention_reference(q, k, v, 0.5, flashattn.CAUSAL_BOTTOM_RIGHT)[0]),
    ],
    "attention_reference_varlen": [
        Call("bottom-right", {"q": (9, 2, 8), "k": (7, 1, 8), "v": (7, 1, 8)},
             lambda q, k, v: flashattn.attention_reference_varlen(q, k, v, [0, 4, 4, 9], [0, 3, 5, 7], 0.5,
                                                                  flashattn.CAUSAL_BOTTOM_RIGHT)[0]),
    ],
    "attention_reference_varlen_grads": [
        Call("bottom-right", {"q": (9, 2, 8), "k": (7, 1, 8), "v": (7, 1, 8), "dout": (9, 2, 8)},
             lambda q, k, v, dout: flashattn.attention_reference_varlen_grads(
                 q, k, v, dout, [0, 4, 4, 9], [0, 3, 5, 7], 0.5, flashattn.CAUSAL_BOTTOM_RIGHT),
             independent=((2, "v"),)),  # dV = P^T dO does not involve V
    ],
    "attention_reference_grads": [
        Call("top-left", {"q": (1, 6, 2, 8), "k": (1, 4, 1, 8), "v": (1, 4, 1, 8), "dout": (1, 6, 2, 8)},
             lambda q, k, v, dout: flashattn.attention_reference_grads(q, k, v, dout, 0.5, flashattn.CAUSAL_TOP_LEFT),
             independent=((2, "v"),)),  # dV = P^T dO does not involve V
    ],
}
NOT_TENSOR_FUNCTIONS = {
    "set_backend", "get_backend", "use_backend", "set_deterministic", "get_deterministic",
    "set_check_indices", "get_check_indices", "check_indices", "extension_available", "extension_error", "build_info", "CAUSAL_NONE", "CAUSAL_TOP_LEFT", "CAUSAL_BOTTOM_RIGHT",
    "activate", "deactivate",
}
CALLS = [pytest.param(name, call, id=f"{name}-{call.id}") for name, calls in TENSOR_FUNCTIONS.items() for call in calls]


def test_every_public_name_is_classified() -> None:
    public = set(flashattn.__all__)
    classified = set(TENSOR_FUNCTIONS) | NOT_TENSOR_FUNCTIONS
    assert public == classified, f"unclassified: {sorted(public - classified)}; not public: {sorted(classified - public)}"


def check_gradients_flow(call: Call, dtype: torch.dtype, device: str | torch.device) -> None:
    gen = torch.Generator(device=device).manual_seed(0)
    inputs = {n: torch.randn(s, generator=gen, device=device).to(dtype).requires_grad_(True) for n, s in call.shapes.items()}
    if call.raises is not None:
        with pytest.raises(call.raises, match="requires grad"):
            call.run(**inputs)
        return
    result = call.run(**inputs)
    outputs = result if isinstance(result, tuple) else (result,)
    for i, out in enumerate(outputs):
        if i in call.non_differentiable:
            assert not out.requires_grad, f"output {i} is documented as not differentiable but requires grad"
            continue
        assert out.requires_grad, f"output {i} does not require grad although its inputs do: its gradient is lost"
        grads = torch.autograd.grad(out, list(inputs.values()), torch.randn_like(out), allow_unused=True, retain_graph=True)
        for (name, x), g in zip(inputs.items(), grads):
            if (i, name) in call.independent:
                continue
            assert g is not None, f"output {i}: no gradient reaches {name}"
            assert g.shape == x.shape, f"output {i}: gradient of {name} has shape {tuple(g.shape)}, expected {tuple(x.shape)}"
            assert torch.isfinite(g).all(), f"output {i}: gradient of {name} is not finite"


@pytest.mark.parametrize(("name", "call"), CALLS)
def test_gradients_flow_or_the_call_raises_cpu(monkeypatch: pytest.MonkeyPatch, name: str, call: Call) -> None:
    allow_cpu_entry_points(monkeypatch)
    with cpu_standin_kernels():
        check_gradients_flow(call, torch.float64, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "call"), CALLS)
def test_gradients_flow_or_the_call_raises_gpu(name: str, call: Call, device: torch.device) -> None:
    dtype = torch.float64 if name.startswith("attention_reference") else torch.bfloat16
    check_gradients_flow(call, dtype, device)
