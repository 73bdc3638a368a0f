"""Bad inputs are refused with the documented exception and a message naming the problem.

Every row of the table runs on CPU in CI: the inputs are fake CUDA tensors (torch's
FakeTensorMode carries device, dtype, shape and strides without memory or a GPU), which take the
entry points' checked path, flashattn/_validate.py, before any kernel. On a GPU the same rows run
with real tensors, each followed by a valid call that must still be right: there a call takes the
direct path, the C++ binding refuses it, and the checked path names the argument, so the table
also proves the binding refuses every row.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import flashattn
from numerics import assert_attention_matches
from tensor_makers import Maker, fake_maker, real_maker

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32


@dataclass(frozen=True)
class BadInput:
    """`call(mk)` makes one call with a bad input; mk(*shape, dtype=F16, device="cuda", strides=None)
    makes its tensors (fake ones on CPU, where views of fake CUDA tensors other than transposes
    are not available, hence `strides` rather than slicing)."""

    id: str
    entry: str  # "sdpa" (torch layout [B, H, S, D]) or "flash_attn_func" ([B, S, H, D])
    call: Callable[[Maker], object]
    error: type[Exception]
    match: str


def sdpa(*args, **kwargs):
    return flashattn.scaled_dot_product_attention(*args, **kwargs)


def fa(*args, **kwargs):
    return flashattn.flash_attn_func(*args, **kwargs)


def _qkv(mk: Maker, q_shape, kv_shape=None, **kw):
    kv_shape = kv_shape or q_shape
    return mk(*q_shape, **kw), mk(*kv_shape, **kw), mk(*kv_shape, **kw)


B, H, S, D = 2, 4, 16, 64
BHSD = (B, H, S, D)  # sdpa layout
BSHD = (B, S, H, D)  # flash_attn_func layout
DTYPE_MSG = "must be torch.float16 or torch.bfloat16"
HEAD_DIM_MSG = "must be a multiple of 8 in [8, 256], got"

BAD_INPUTS = [
    # ---- scaled_dot_product_attention ----
    BadInput("float32", "sdpa", lambda mk: sdpa(*_qkv(mk, BHSD, dtype=F32)), TypeError, f"query.dtype {DTYPE_MSG}, got torch.float32"),
    BadInput("float64-key", "sdpa", lambda mk: sdpa(mk(*BHSD), mk(*BHSD, dtype=torch.float64), mk(*BHSD)), TypeError, f"key.dtype {DTYPE_MSG}"),
    BadInput("mixed-fp16-bf16", "sdpa", lambda mk: sdpa(mk(*BHSD), mk(*BHSD, dtype=BF16), mk(*BHSD, dtype=BF16)), TypeError, "query, key and value must share one dtype"),
    BadInput("cpu-tensors", "sdpa", lambda mk: sdpa(*_qkv(mk, BHSD, device="cpu")), ValueError, "query must be on a CUDA device, got device cpu"),
    BadInput("mixed-devices", "sdpa", lambda mk: sdpa(mk(*BHSD), mk(*BHSD, device="cpu"), mk(*BHSD, device="cpu")), ValueError, "key must be on a CUDA device"),
    BadInput("head-dim-7", "sdpa", lambda mk: sdpa(*_qkv(mk, (B, H, S, 7))), ValueError, f"{HEAD_DIM_MSG} 7"),
    BadInput("head-dim-12", "sdpa", lambda mk: sdpa(*_qkv(mk, (B, H, S, 12))), ValueError, f"{HEAD_DIM_MSG} 12"),
    BadInput("head-dim-264", "sdpa", lambda mk: sdpa(*_qkv(mk, (B, H, S, 264))), ValueError, f"{HEAD_DIM_MSG} 264"),
    BadInput("kv-shape-mismatch", "sdpa", lambda mk: sdpa(mk(*BHSD), mk(*BHSD), mk(B, H, S + 1, D)), ValueError, "key and value must have the same shape"),
    BadInput("key-head-dim-differs", "sdpa", lambda mk: sdpa(mk(*BHSD), mk(B, H, S, 32), mk(B, H, S, 32)), ValueError, "key head dim must equal query head dim 64"),
    BadInput("gqa-heads-not-multiple", "sdpa", lambda mk: sdpa(*_qkv(mk, (B, 6, S, D), (B, 4, S, D)), enable_gqa=True), ValueError, "query heads (6) must be a multiple of key/value heads (4)"),
    BadInput("heads-differ-without-gqa", "sdpa", lambda mk: sdpa(*_qkv(mk, (B, 8, S, D), (B, 2, S, D))), ValueError, "pass enable_gqa=True"),
    BadInput("noncontiguous-last-dim", "sdpa", lambda mk: sdpa(mk(*BHSD, strides=(H * S * 2 * D, S * 2 * D, 2 * D, 2)), mk(*BHSD), mk(*BHSD)), ValueError, "query must have a contiguous last dimension"),
    BadInput("rank-1", "sdpa", lambda mk: sdpa(*_qkv(mk, (D,))), ValueError, "query must have at least 2 dimensions"),
    BadInput("rank-2-with-gqa", "sdpa", lambda mk: sdpa(*_qkv(mk, (S, D)), enable_gqa=True), ValueError, "query must have at least 3 dimensions"),
    BadInput("rank-mismatch", "sdpa", lambda mk: sdpa(mk(*BHSD), mk(H, S, D), mk(H, S, D)), ValueError, "query, key and value must have the same rank"),
    BadInput("batch-dims-mismatch", "sdpa", lambda mk: sdpa(*_qkv(mk, BHSD, (B + 1, H, S, D))), ValueError, "query and key batch dims must match"),
    BadInput("attn-mask", "sdpa", lambda mk: sdpa(*_qkv(mk, BHSD), attn_mask=mk(S, S, dtype=torch.bool)), ValueError, "attn_mask is not supported"),
    BadInput("dropout", "sdpa", lambda mk: sdpa(*_qkv(mk, BHSD), dropout_p=0.1), ValueError, "dropout_p must be 0.0"),
    BadInput("scale-nan", "sdpa", lambda mk: sdpa(*_qkv(mk, BHSD), scale=math.nan), ValueError, "scale must be finite, got nan"),
    BadInput("scale-inf", "sdpa", lambda mk: sdpa(*_qkv(mk, BHSD), scale=math.inf), ValueError, "scale must be finite, got inf"),
    BadInput("empty-keys", "sdpa", lambda mk: sdpa(*_qkv(mk, BHSD, (B, H, 0, D))), ValueError, "key/value sequence length must be >= 1"),
    BadInput("zero-kv-heads", "sdpa", lambda mk: sdpa(*_qkv(mk, BHSD, (B, 0, S, D)), enable_gqa=True), ValueError, "key/value must have at least one head"),
    BadInput("query-not-a-tensor", "sdpa", lambda mk: sdpa([[1.0] * D] * S, mk(S, D), mk(S, D)), TypeError, "query must be a torch.Tensor, got list"),
    # ---- flash_attn_func ----
    BadInput("float32", "flash_attn_func", lambda mk: fa(*_qkv(mk, BSHD, dtype=F32)), TypeError, f"q.dtype {DTYPE_MSG}, got torch.float32"),
    BadInput("mixed-fp16-bf16", "flash_attn_func", lambda mk: fa(mk(*BSHD, dtype=BF16), mk(*BSHD), mk(*BSHD)), TypeError, "query, key and value must share one dtype"),
    BadInput("cpu-tensors", "flash_attn_func", lambda mk: fa(*_qkv(mk, BSHD, device="cpu")), ValueError, "q must be on a CUDA device, got device cpu"),
    BadInput("mixed-devices", "flash_attn_func", lambda mk: fa(mk(*BSHD), mk(*BSHD), mk(*BSHD, device="cpu")), ValueError, "v must be on a CUDA device"),
    BadInput("rank-3", "flash_attn_func", lambda mk: fa(*_qkv(mk, (S, H, D))), ValueError, "q must have at least 4 dimensions"),
    BadInput("rank-5", "flash_attn_func", lambda mk: fa(*_qkv(mk, (1, B, S, H, D))), ValueError, "q must be 4-D [batch, seqlen, heads, head_dim]"),
    BadInput("head-dim-7", "flash_attn_func", lambda mk: fa(*_qkv(mk, (B, S, H, 7))), ValueError, f"{HEAD_DIM_MSG} 7"),
    BadInput("head-dim-264", "flash_attn_func", lambda mk: fa(*_qkv(mk, (B, S, H, 264))), ValueError, f"{HEAD_DIM_MSG} 264"),
    BadInput("batch-mismatch", "flash_attn_func", lambda mk: fa(*_qkv(mk, BSHD, (B + 1, S, H, D))), ValueError, "q and k batch sizes differ: 2 vs 3"),
    BadInput("heads-not-multiple", "flash_attn_func", lambda mk: fa(*_qkv(mk, (B, S, 6, D), (B, S, 4, D))), ValueError, "q heads (6) must be a multiple of k/v heads (4)"),
    BadInput("kv-shape-mismatch", "flash_attn_func", lambda mk: fa(mk(*BSHD), mk(*BSHD), mk(B, S, H // 2, D)), ValueError, "key and value must have the same shape"),
    BadInput("noncontiguous-last-dim", "flash_attn_func", lambda mk: fa(mk(*BSHD), mk(*BSHD, strides=(S * H * 2 * D, H * 2 * D, 2 * D, 2)), mk(*BSHD)), ValueError, "k must have a contiguous last dimension"),
    BadInput("softmax-scale-inf", "flash_attn_func", lambda mk: fa(*_qkv(mk, BSHD), softmax_scale=-math.inf), ValueError, "scale must be finite, got -inf"),
    BadInput("empty-keys", "flash_attn_func", lambda mk: fa(*_qkv(mk, BSHD, (B, 0, H, D))), ValueError, "key/value sequence length must be >= 1"),
    BadInput("zero-kv-heads", "flash_attn_func", lambda mk: fa(*_qkv(mk, BSHD, (B, S, 0, D))), ValueError, "k/v must have at least one head"),
    BadInput("v-not-a-tensor", "flash_attn_func", lambda mk: fa(mk(*BSHD), mk(*BSHD), None), TypeError, "v must be a torch.Tensor, got NoneType"),
    BadInput("window-below-minus-one", "flash_attn_func", lambda mk: fa(*_qkv(mk, BSHD), window_size=(-2, 0)), ValueError, "window_size values must be >= -1 (-1: unbounded), got (-2, 0)"),
    BadInput("window-right-below-minus-one", "flash_attn_func", lambda mk: fa(*_qkv(mk, BSHD), window_size=(4, -5)), ValueError, "window_size values must be >= -1 (-1: unbounded), got (4, -5)"),
    BadInput("window-float", "flash_attn_func", lambda mk: fa(*_qkv(mk, BSHD), window_size=(4.0, 0)), TypeError, "window_size must be a pair of ints (left, right), got float 4.0 for left"),
    BadInput("window-bool", "flash_attn_func", lambda mk: fa(*_qkv(mk, BSHD), window_size=(4, True)), TypeError, "got bool True for right"),
    BadInput("window-int", "flash_attn_func", lambda mk: fa(*_qkv(mk, BSHD), window_size=128), TypeError, "window_size must be a pair of ints (left, right), -1 meaning unbounded, got 128"),
    BadInput("window-three", "flash_attn_func", lambda mk: fa(*_qkv(mk, BSHD), window_size=(1, 2, 3)), TypeError, "window_size must be a pair of ints"),
    BadInput("softcap-negative", "flash_attn_func", lambda mk: fa(*_qkv(mk, BSHD), softcap=-1.0), ValueError, "softcap must be finite and >= 0 (0.0: off), got -1.0"),
    BadInput("softcap-inf", "flash_attn_func", lambda mk: fa(*_qkv(mk, BSHD), softcap=math.inf), ValueError, "softcap must be finite and >= 0 (0.0: off), got inf"),
    BadInput("softcap-nan", "flash_attn_func", lambda mk: fa(*_qkv(mk, BSHD), softcap=math.nan), ValueError, "softcap must be finite and >= 0 (0.0: off), got nan"),
    BadInput("softcap-str", "flash_attn_func", lambda mk: fa(*_qkv(mk, BSHD), softcap="30"), TypeError, "softcap must be a float (0.0: off), got str"),
    BadInput("softcap-bool", "flash_attn_func", lambda mk: fa(*_qkv(mk, BSHD), softcap=True), TypeError, "softcap must be a float (0.0: off), got bool"),
    BadInput("softcap-subnormal", "flash_attn_func", lambda mk: fa(*_qkv(mk, BSHD), softcap=1e-40), ValueError, "within float32's normal range"),
]
BAD_INPUT_PARAMS = [pytest.param(row, id=f"{row.entry}-{row.id}") for row in BAD_INPUTS]


@pytest.mark.parametrize("row", BAD_INPUT_PARAMS)
def test_bad_input_is_refused(row: BadInput) -> None:
    with FakeTensorMode(), pytest.raises(row.error) as info:
        row.call(fake_maker)
    assert row.match in str(info.value)


def test_bad_input_table_covers_both_entry_points() -> None:
    assert {row.entry for row in BAD_INPUTS} == {"sdpa", "flash_attn_func"}
    assert len({(row.entry, row.id) for row in BAD_INPUTS}) == len(BAD_INPUTS)


def test_valid_inputs_pass_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table's shapes are otherwise valid: the same calls with good inputs reach the op (its
    fake kernel here), so each row's failure is due to its one bad input."""
    monkeypatch.setattr(flashattn._ext, "require_extension", lambda: None)
    with FakeTensorMode():
        out = sdpa(*_qkv(fake_maker, BHSD), is_causal=True, scale=0.5)
        assert out.shape == BHSD and out.dtype == F16
        out, lse = fa(*_qkv(fake_maker, BSHD, dtype=BF16), causal=True, return_lse=True)
        assert out.shape == BSHD and out.dtype == BF16
        assert lse.shape == (B, H, S) and lse.dtype == F32
        out, lse = fa(*_qkv(fake_maker, BSHD), window_size=(3, 0), softcap=30.0, return_lse=True)
        assert out.shape == BSHD and lse.shape == (B, H, S)
        out = fa(*_qkv(fake_maker, BSHD), window_size=[0, 0], softcap=5)  # a list and an int are fine
        assert out.shape == BSHD


@pytest.mark.gpu
@pytest.mark.parametrize("row", BAD_INPUT_PARAMS)
def test_valid_call_after_bad_input_is_right(row: BadInput, device: torch.device) -> None:
    with pytest.raises(row.error) as info:
        row.call(real_maker)
    assert row.match in str(info.value)

    gen = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(BSHD, generator=gen, device=device, dtype=torch.float32).to(F16) for _ in range(3))
    if row.entry == "sdpa":
        out = sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)
        assert_attention_matches(out, None, q, k, v, None, flashattn.CAUSAL_TOP_LEFT, context=f"after {row.id}")
    else:
        out, lse = fa(q, k, v, causal=True, return_lse=True)
        assert_attention_matches(out, lse, q, k, v, None, flashattn.CAUSAL_BOTTOM_RIGHT, context=f"after {row.id}")
