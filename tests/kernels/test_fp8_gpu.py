"""The FP8 forward (issue 29, csrc/flash_fwd_sm90 with Sm90Fp8FwdTraits, csrc/binding_fp8.cpp) on an
H100: float8_e4m3fn q/k/v with float32 [B, Hk] descales through flash_attn_func and the registered
op, against the float64 reference on the dequantized inputs (tests/numerics.py, the FP8 criterion):
causal and not (both alignments), GQA/MQA, head dims 64/128/256 and the rounded ones (16, 80, 144),
odd lengths around the 128-row/128-key tiles, Sq > Sk (rows that see no key), strided inputs,
outputs from NaN-poisoned memory; bad inputs on the GPU."""

from __future__ import annotations

import pytest
import torch

import flashattn
from gpu_helpers import backend_unavailable_reason, poison_cuda_allocator
from numerics import assert_fp8_attention_matches

pytestmark = pytest.mark.sm90

NONE, TOP_LEFT, BOTTOM_RIGHT = flashattn.CAUSAL_NONE, flashattn.CAUSAL_TOP_LEFT, flashattn.CAUSAL_BOTTOM_RIGHT
FP8 = torch.float8_e4m3fn

# batch, Sq, Sk, Hq, Hk, D, causal mode
CASES = [
    (1, 128, 128, 1, 1, 128, NONE),
    (2, 257, 383, 4, 2, 128, NONE),
    (2, 257, 383, 4, 2, 128, BOTTOM_RIGHT),
    (1, 1000, 1537, 2, 1, 128, TOP_LEFT),
    (1, 777, 3001, 4, 2, 256, BOTTOM_RIGHT),
    (2, 300, 129, 2, 2, 256, NONE),
    (1, 1500, 700, 2, 1, 64, BOTTOM_RIGHT),
    (3, 65, 33, 8, 1, 64, NONE),
    (1, 1, 1, 1, 1, 16, NONE),
    (2, 129, 4099, 3, 3, 80, BOTTOM_RIGHT),
    (1, 200, 200, 2, 2, 144, TOP_LEFT),
    (4, 2048, 2048, 8, 2, 128, BOTTOM_RIGHT),  # more tiles than SMs: the dynamic schedule
    (2, 2048, 2100, 8, 4, 256, TOP_LEFT),  # the same at D=256
    (1, 192, 193, 2, 1, 128, BOTTOM_RIGHT),  # one key past a 192-key block (D=128's block)
    (2, 70, 400, 2, 2, 112, NONE),  # the third block's last 64-key V^T plane lies past V^T's 512 keys
]
CASE_IDS = [f"b{b}-sq{sq}-sk{sk}-h{hq}:{hk}-d{d}-c{c}" for b, sq, sk, hq, hk, d, c in CASES]


@pytest.fixture(autouse=True)
def _hopper_fp8(device: torch.device) -> None:
    reason = backend_unavailable_reason("hopper")
    if reason:
        pytest.skip(reason)


def make(case, device: torch.device, magnitude: float = 3.0, seed: int = 0, strided: bool = False):
    b, sq, sk, hq, hk, d, _ = case
    g = torch.Generator(device=device).manual_seed(seed + sq * 7 + sk)

    def fp8(*shape):
        if strided:  # [B, H, S, D] memory seen as [B, S, H, D]
            x = torch.randn(shape[0], shape[2], shape[1], shape[3], device=device, generator=g).transpose(1, 2)
        else:
            x = torch.randn(*shape, device=device, generator=g)
        return (x * magnitude).to(FP8)

    q8, k8, v8 = fp8(b, sq, hq, d), fp8(b, sk, hk, d), fp8(b, sk, hk, d)
    qd, kd, vd = (torch.rand(b, hk, device=device, generator=g) * 0.5 + 0.05 for _ in range(3))
    return q8, k8, v8, qd, kd, vd


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_fp8_forward_matches_the_reference(case, device: torch.device) -> None:
    causal = case[6]
    q8, k8, v8, qd, kd, vd = make(case, device)
    poison_cuda_allocator()
    out, lse = torch.ops.flashattn.fwd_fp8(q8, k8, v8, qd, kd, vd, None, causal)
    torch.cuda.synchronize()
    assert_fp8_attention_matches(out, lse, q8, k8, v8, qd, kd, vd, None, causal, context="fwd_fp8")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_fp8_flash_attn_func(causal: bool, d: int, device: torch.device) -> None:
    case = (2, 333, 517, 4, 1, d, BOTTOM_RIGHT if causal else NONE)
    q8, k8, v8, qd, kd, vd = make(case, device, strided=True)
    out, lse = flashattn.flash_attn_func(q8, k8, v8, causal=causal, q_descale=qd, k_descale=kd, v_descale=vd,
                                         return_lse=True, softmax_scale=0.1)
    assert_fp8_attention_matches(out, lse, q8, k8, v8, qd, kd, vd, 0.1, case[6], context="flash_attn_func")


def test_fp8_inputs_at_unaligned_addresses(device: torch.device) -> None:
    """Contiguous q/k/v views 3 and 5 bytes into flat buffers (torch calls them contiguous; TMA cannot
    read them): the op copies them, never a misaligned access."""
    case = (2, 129, 200, 2, 1, 128, BOTTOM_RIGHT)
    q8, k8, v8, qd, kd, vd = make(case, device)

    def at_offset(t: torch.Tensor, offset: int) -> torch.Tensor:
        flat = torch.empty(offset + t.numel(), device=device, dtype=t.dtype)
        view = flat[offset:].view(t.shape)
        view.copy_(t)
        assert view.is_contiguous() and view.data_ptr() % 16 != 0
        return view

    qo, ko, vo = at_offset(q8, 3), at_offset(k8, 5), at_offset(v8, 5)
    out, lse = torch.ops.flashattn.fwd_fp8(qo, ko, vo, qd, kd, vd, None, BOTTOM_RIGHT)
    torch.cuda.synchronize()
    assert_fp8_attention_matches(out, lse, q8, k8, v8, qd, kd, vd, None, BOTTOM_RIGHT, context="unaligned addresses")


def test_fp8_under_torch_compile(device: torch.device) -> None:
    case = (1, 200, 300, 2, 2, 128, BOTTOM_RIGHT)
    q8, k8, v8, qd, kd, vd = make(case, device)
    fn = torch.compile(lambda *a: flashattn.flash_attn_func(*a[:3], causal=True, q_descale=a[3], k_descale=a[4],
                                                            v_descale=a[5]), fullgraph=True)
    out = fn(q8, k8, v8, qd, kd, vd)
    assert_fp8_attention_matches(out, None, q8, k8, v8, qd, kd, vd, None, BOTTOM_RIGHT, context="compiled")


@pytest.mark.parametrize(
    ("case", "error", "match"),
    [
        ("mixed", TypeError, "mixed"),
        ("missing descale", ValueError, "k_descale is required"),
        ("descale shape", ValueError, "v_descale must have shape"),
        ("descale on cpu", ValueError, "q_descale must be on q's device"),
        ("requires grad", RuntimeError, "no backward"),
    ],
)
def test_fp8_bad_inputs_on_the_gpu(case: str, error: type, match: str, device: torch.device) -> None:
    q8, k8, v8, qd, kd, vd = make((2, 16, 16, 2, 1, 64, NONE), device)
    if case == "mixed":
        v8 = v8.to(torch.bfloat16)
    elif case == "missing descale":
        kd = None
    elif case == "descale shape":
        vd = vd.flatten()
    elif case == "descale on cpu":
        qd = qd.cpu()
    elif case == "requires grad":
        q8 = q8.float().to(FP8).requires_grad_(True)
    with pytest.raises(error, match=match):
        flashattn.flash_attn_func(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd)
