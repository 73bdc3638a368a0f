"""The FP8 forward (issue 29) without a GPU: the register-fragment reasoning behind the P V key
permutation, the FP8 numerics criterion against an emulated kernel, argument validation, the op's
fake kernel and torch.compile tracing, the experimental switch and the device checks, the generated
instantiations and the resource check's parsing of the FP8 kernels.

CUDA tensors here are fake (FakeTensorMode): metadata only, available on a CPU-only torch.
"""

from __future__ import annotations

import math
import pathlib
import re
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from numerics import assert_fp8_attention_matches, dequantize_fp8
from repo_modules import load_repo_module
from torch._subclasses.fake_tensor import FakeTensorMode

import flashattn
from flashattn import _validate

ROOT = pathlib.Path(__file__).resolve().parents[2]
FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16


def fake(*shape: int, dtype: torch.dtype = FP8) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="cuda")


def descales(b: int, hk: int, **kw) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return tuple(torch.ones(b, hk, dtype=kw.get("dtype", torch.float32), device=kw.get("device", "cuda"))
                 for _ in range(3))


@pytest.fixture
def no_extension_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the entry points reach the op without the compiled extension (its fake kernel runs)."""
    monkeypatch.setattr(flashattn._ext, "require_extension", lambda: None)


# ---- the key permutation of P V (csrc/flash_fwd_sm90/traits.h, consumer.cuh convert_p) -------------


def key_of_position() -> Callable[[int], int]:
    """fp8_key_of_position as written in traits.h (C++ integer division on non-negative ints)."""
    text = (ROOT / "csrc/flash_fwd_sm90/traits.h").read_text()
    body = re.search(r"constexpr int fp8_key_of_position\(int k\) \{\s*return (.*?);\s*\}", text, re.S)
    assert body, "fp8_key_of_position not found in traits.h"
    expr = body.group(1).replace("/", "//")
    return lambda k: eval(expr, {}, {"k": k})  # noqa: S307 (the repository's own source)


def convert_p_indices() -> list[list[int]]:
    """consumer.cuh's FP8 convert_p: for k-step kk's register r, the 4 accumulator indices (offsets
    from 16 kk) packed lowest byte first."""
    text = (ROOT / "csrc/flash_fwd_sm90/consumer.cuh").read_text()
    rows = re.findall(r"p\[kk\]\[(\d)\] = pack4_e4m3\(([^;]*)\);", text)
    assert len(rows) == 4, rows
    out = [[0] * 4 for _ in range(4)]
    for r, args in rows:
        out[int(r)] = [int(x) for x in re.findall(r"s\[16 \* kk \+ (\d+)\]", args)]
    return out


def test_p_fragment_and_vt_permutation_give_the_exact_p_v() -> None:
    """Thread t of the warpgroup holds accumulator value v = 4 j + 2 h + e at row 16 (t / 32) +
    (t % 32) / 4 + 8 h, column 8 j + 2 (t % 4) + e (CuTe CLayout_64xN); the m64k32 8-bit A fragment
    has byte i of register r at row 16 (t / 32) + (t % 32) / 4 + 8 (r % 2), k position 4 (t % 4) + i
    + 16 (r / 2) (CuTe ALayout_64x32). With convert_p's choice of accumulator values and V^T's key
    positions from fp8_key_of_position, A[m, pos] must be P[m, key(pos)] for every m and pos."""
    key = key_of_position()
    idx = convert_p_indices()
    n_keys = 128
    for kk in range(n_keys // 32):
        for t in range(128):
            for r in range(4):
                for i in range(4):
                    v = 16 * kk + idx[r][i]
                    j, h, e = v // 4, (v // 2) % 2, v % 2
                    acc_row, acc_col = 16 * (t // 32) + (t % 32) // 4 + 8 * h, 8 * j + 2 * (t % 4) + e
                    a_row, a_pos = 16 * (t // 32) + (t % 32) // 4 + 8 * (r % 2), 4 * (t % 4) + i + 16 * (r // 2)
                    assert acc_row == a_row, (kk, t, r, i)
                    assert acc_col == 32 * kk + key(a_pos), (kk, t, r, i, acc_col, a_pos)
    # a permutation of each 32-key group
    assert sorted(key(p) for p in range(64)) == list(range(64))


def emulated_fp8_forward(q8, k8, v8, qd, kd, vd, scale, causal_mode, permute_keys=lambda k: k,
                         lse_offset_removed: bool = True):
    """What the FP8 path computes, in float64 on the CPU: exact scores of the e4m3 inputs times the
    descaled scale, the row max and float sums of p = 2^8 exp(s - max) (softmax.cuh's kMaxOffset),
    P rounded to e4m3, P V8, times v_descale / rowsum, rounded to bfloat16; LSE with the 2^8 taken
    out. permute_keys: a (wrong) mapping of the P V keys; lse_offset_removed=False: a (wrong) LSE
    that keeps the 2^8."""
    q = dequantize_fp8(q8, qd)
    k = dequantize_fp8(k8, kd)
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    kr = k.repeat_interleave(hq // hk, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kr) * (d**-0.5 if scale is None else scale)
    vis = flashattn.reference.visible_keys(sq, sk, causal_mode)
    if vis is not None:
        s = s.masked_fill(~vis, float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m) * 2.0**8
    l = p.sum(-1, keepdim=True)
    p8 = p.to(FP8).double()
    v = v8.double().repeat_interleave(hq // hk, dim=2).permute(0, 2, 1, 3)  # [B, Hq, Sk, D]
    v = v[:, :, [permute_keys(j) for j in range(sk)]]
    o = p8 @ v
    vfac = vd.double().repeat_interleave(hq // hk, dim=1)[:, :, None, None]
    o = torch.where(l > 0, o * vfac / torch.where(l > 0, l, torch.ones_like(l)), torch.zeros_like(o))
    offset = 8 * math.log(2.0) if lse_offset_removed else 0.0
    lse = torch.where(l[..., 0] > 0, (m[..., 0] + torch.log(l[..., 0]) - offset),
                      torch.full_like(l[..., 0], float("-inf")))
    return o.permute(0, 2, 1, 3).to(BF16), lse.float()


def fp8_inputs(seed: int, b: int, sq: int, sk: int, hq: int, hk: int, d: int, magnitude: float = 4.0):
    g = torch.Generator().manual_seed(seed)
    q8 = (torch.randn(b, sq, hq, d, generator=g) * magnitude).to(FP8)
    k8 = (torch.randn(b, sk, hk, d, generator=g) * magnitude).to(FP8)
    v8 = (torch.randn(b, sk, hk, d, generator=g) * magnitude).to(FP8)
    qd, kd, vd = (torch.rand(b, hk, generator=g) * 0.5 + 0.05 for _ in range(3))
    return q8, k8, v8, qd, kd, vd


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), b=st.integers(1, 2), sq=st.integers(1, 40), sk=st.integers(1, 70),
       group=st.sampled_from([(1, 1), (2, 1), (4, 2)]), d=st.sampled_from([16, 32, 64]),
       causal=st.sampled_from([flashattn.CAUSAL_NONE, flashattn.CAUSAL_BOTTOM_RIGHT]))
def test_fp8_criterion_accepts_the_emulated_kernel(seed, b, sq, sk, group, d, causal) -> None:
    hq, hk = group
    q8, k8, v8, qd, kd, vd = fp8_inputs(seed, b, sq, sk, hq, hk, d)
    out, lse = emulated_fp8_forward(q8, k8, v8, qd, kd, vd, None, causal)
    errs = assert_fp8_attention_matches(out, lse, q8, k8, v8, qd, kd, vd, None, causal)
    assert errs.worst_ratio <= 1.0


@pytest.mark.parametrize("bug", ["swapped keys", "v_descale dropped", "q_descale squared", "lse keeps the 2^8"])
def test_fp8_criterion_rejects_wrong_kernels(bug: str) -> None:
    q8, k8, v8, qd, kd, vd = fp8_inputs(7, 2, 33, 64, 4, 2, 64)
    if bug == "swapped keys":
        out, lse = emulated_fp8_forward(q8, k8, v8, qd, kd, vd, None, 0, permute_keys=lambda j: j ^ 1)
    elif bug == "lse keeps the 2^8":
        out, lse = emulated_fp8_forward(q8, k8, v8, qd, kd, vd, None, 0, lse_offset_removed=False)
    elif bug == "v_descale dropped":
        out, lse = emulated_fp8_forward(q8, k8, v8, qd, kd, torch.ones_like(vd), None, 0)
    else:
        out, lse = emulated_fp8_forward(q8, k8, v8, qd * qd, kd, vd, None, 0)
    with pytest.raises(AssertionError, match="exceeds"):
        assert_fp8_attention_matches(out, lse, q8, k8, v8, qd, kd, vd, None, 0)


# ---- validation ------------------------------------------------------------------------------------


def call(q, k, v, qd, kd, vd, **kw):
    return flashattn.flash_attn_func(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, **kw)


@pytest.mark.parametrize(
    ("case", "error", "match"),
    [
        ("mixed fp8 and bf16", TypeError, "must all be torch.float8_e4m3fn.*mixed"),
        ("e5m2", TypeError, "takes torch.float8_e4m3fn"),
        ("missing q_descale", ValueError, "q_descale is required"),
        ("missing v_descale", ValueError, "v_descale is required"),
        ("descale shape", ValueError, r"k_descale must have shape \[batch, k/v heads\] = \[2, 2\]"),
        ("descale dtype", TypeError, "q_descale must be float32"),
        ("descale on bf16 inputs", ValueError, "apply to float8_e4m3fn inputs only"),
        ("head dim 72", ValueError, "multiple of 16"),
        ("head dim 320", ValueError, "multiple of 16"),
        ("gqa mismatch", ValueError, "multiple of k/v heads"),
        ("window", ValueError, "window_size is not supported by the FP8 forward"),
        ("softcap", ValueError, "softcap is not supported by the FP8 forward"),
        ("q requires grad", RuntimeError, "no backward: q must not require grad"),
        ("descale requires grad", RuntimeError, "no backward: v_descale"),
        ("3-D", ValueError, "4-D"),
    ],
)
def test_fp8_bad_inputs_name_the_argument(no_extension_needed: None, case: str, error: type, match: str) -> None:
    with FakeTensorMode(), pytest.raises(error, match=match):
        b, sq, sk, hq, hk, d = 2, 17, 9, 4, 2, 64
        q, k, v = fake(b, sq, hq, d), fake(b, sk, hk, d), fake(b, sk, hk, d)
        qd, kd, vd = descales(b, hk)
        kw = {}
        if case == "mixed fp8 and bf16":
            v = fake(b, sk, hk, d, dtype=BF16)
        elif case == "e5m2":
            q, k, v = (fake(*t.shape, dtype=torch.float8_e5m2) for t in (q, k, v))
        elif case == "missing q_descale":
            qd = None
        elif case == "missing v_descale":
            vd = None
        elif case == "descale shape":
            kd = torch.ones(b, hq, device="cuda")
        elif case == "descale dtype":
            qd = torch.ones(b, hk, dtype=BF16, device="cuda")
        elif case == "descale on bf16 inputs":
            q, k, v = (fake(*t.shape, dtype=BF16) for t in (q, k, v))
        elif case == "head dim 72":
            q, k, v = fake(b, sq, hq, 72), fake(b, sk, hk, 72), fake(b, sk, hk, 72)
        elif case == "head dim 320":
            q, k, v = fake(b, sq, hq, 320), fake(b, sk, hk, 320), fake(b, sk, hk, 320)
        elif case == "gqa mismatch":
            k, v = fake(b, sk, 3, d), fake(b, sk, 3, d)
            qd, kd, vd = descales(b, 3)
        elif case == "window":
            kw["window_size"] = (8, 0)
        elif case == "softcap":
            kw["softcap"] = 30.0
        elif case == "q requires grad":
            q.requires_grad_(True)
        elif case == "descale requires grad":
            vd = torch.ones(b, hk, device="cuda", requires_grad=True)
        elif case == "3-D":
            q = fake(sq, hq, d)
        call(q, k, v, qd, kd, vd, **kw)


def test_fp8_without_descales_is_refused_not_run_as_16_bit(no_extension_needed: None) -> None:
    with FakeTensorMode(), pytest.raises(ValueError, match="q_descale is required"):
        q = fake(1, 8, 2, 64)
        flashattn.flash_attn_func(q, q, q)


# ---- the op: fake kernel, torch.compile ------------------------------------------------------------


@pytest.mark.parametrize(("b", "sq", "sk", "hq", "hk", "d"), [(2, 17, 33, 4, 2, 64), (1, 1, 5, 8, 1, 128), (1, 129, 7, 2, 2, 256)])
def test_fp8_fake_kernel_shapes(b, sq, sk, hq, hk, d) -> None:
    with FakeTensorMode():
        q, k = fake(b, sq, hq, d), fake(b, sk, hk, d)
        out, lse = torch.ops.flashattn.fwd_fp8(q, k, k, *descales(b, hk), None, flashattn.CAUSAL_BOTTOM_RIGHT)
    assert out.shape == (b, sq, hq, d) and out.dtype == BF16
    assert lse.shape == (b, hq, sq) and lse.dtype == torch.float32


def test_fp8_fake_kernel_validates(no_extension_needed: None) -> None:
    with FakeTensorMode(), pytest.raises(ValueError, match="k_descale must have shape"):
        q = fake(1, 8, 2, 64)
        torch.ops.flashattn.fwd_fp8(q, q, q, torch.ones(1, 2, device="cuda"), torch.ones(2, device="cuda"),
                                    torch.ones(1, 2, device="cuda"), None, 0)


@pytest.mark.parametrize("causal", [False, True])
def test_fp8_flash_attn_func_traces_into_one_fwd_fp8(no_extension_needed: None, causal: bool) -> None:
    graphs = []

    def capture(gm: torch.fx.GraphModule, example_inputs):
        graphs.append(gm)
        return gm.forward

    def fn(q, k, v, qd, kd, vd):
        return flashattn.flash_attn_func(q, k, v, causal=causal, q_descale=qd, k_descale=kd, v_descale=vd,
                                         return_lse=True)

    torch._dynamo.reset()
    with FakeTensorMode():
        compiled = torch.compile(fn, fullgraph=True, backend=capture)
        out, lse = compiled(fake(2, 17, 4, 64), fake(2, 9, 2, 64), fake(2, 9, 2, 64), *descales(2, 2))
    assert out.dtype == BF16 and out.shape == (2, 17, 4, 64) and lse.shape == (2, 4, 17)
    calls = [n for gm in graphs for n in gm.graph.nodes if n.op == "call_function" and "flashattn" in str(n.target)]
    assert len(calls) == 1 and "fwd_fp8" in str(calls[0].target)
    assert calls[0].args[6] == pytest.approx(64**-0.5)
    assert calls[0].args[7] == (flashattn.CAUSAL_BOTTOM_RIGHT if causal else flashattn.CAUSAL_NONE)


# ---- the device checks ----------------------------------------------------------------------------------


class _Q:
    device = torch.device("cuda", 0)


@pytest.mark.parametrize(("cap", "name"), [((8, 0), "NVIDIA A100"), ((8, 9), "NVIDIA L4"), ((10, 0), "NVIDIA B200")])
def test_fp8_needs_a_hopper_gpu(monkeypatch: pytest.MonkeyPatch, cap, name) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cap)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    with pytest.raises(RuntimeError, match=f"needs a Hopper GPU.*{name}.*{cap[0]}\\.{cap[1]}"):
        _validate.fp8_device(_Q())


def test_fp8_needs_a_9_0a_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(flashattn._ext, "build_info", lambda: {"cuda_archs": "8.0_8.9_9.0"})
    with pytest.raises(RuntimeError, match="built for 9.0a.*8.0_8.9_9.0"):
        _validate.fp8_device(_Q())


# ---- generated instantiations, resource check ----------------------------------------------------------


def test_fp8_instantiations_are_generated_and_current() -> None:
    gen = load_repo_module("tools/gen_instantiations.py")
    r = subprocess.run([sys.executable, str(ROOT / "tools/gen_instantiations.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    folder = ROOT / "csrc/flash_fwd_sm90/instantiations"
    rows = (folder / "registry_fp8.inc").read_text().splitlines()[2:]
    assert rows == [f"FLASHATTN_FWD_SM90_FP8_INSTANCE(Sm90Fp8Config, {d})" for d in gen.SM90_FP8_HEAD_DIMS]
    files = sorted(p.name for p in folder.glob("fwd_sm90_fp8_*.cu"))
    assert files == sorted(f"fwd_sm90_fp8_hdim{d}_{s}.cu" for d in gen.SM90_FP8_HEAD_DIMS for s in gen.SM90_SCHEDULES)
    assert "fp8" not in (folder / "registry.inc").read_text()


def test_resource_check_parses_the_fp8_kernels() -> None:
    checker = load_repo_module("tools/check_resources.py")
    sample = (
        "ptxas info    : Compiling entry function '_ZN9flashattn4sm9025flash_fwd_sm90_fp8_kernelINS0_16Sm90Fp8FwdTraits"
        "ILi256ELi128ELi2EEELb0EEEvNS0_13Sm90Fp8ParamsE' for 'sm_90a'\n"
        "ptxas info    : Function properties for _ZN9flashattn4sm9025flash_fwd_sm90_fp8_kernel\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 168 registers, used 16 barriers\n"
    )
    (k,) = checker.parse_ptxas(sample)
    assert (k["head_dim"], k["block_m"], k["block_n"], k["threads"], k["schedule"]) == (256, 128, 128, 384, "static")
    assert checker.check([k], {"selection": {}}, []) == []
