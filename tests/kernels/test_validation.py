"""Bad inputs are refused with the documented exception and a message naming the problem.

Every row of the table runs on CPU in CI: the inputs are fake CUDA tensors (torch's
FakeTensorMode carries device, dtype, shape and strides without memory or a GPU), which take the
entry points' checked path, flashattn/_validate.py, before any kernel. On a GPU the same rows run
with real tensors, each followed by a valid call that must still be right: there a call takes the
direct path, the C++ binding refuses it, and the checked path names the argument, so the table
also proves the binding refuses every row. A property closes the file: inputs drawn at random,
valid by construction or with anything wrong, get a result or a clear refusal, never another
exception.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
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


# ==== any input: a result or a clear refusal ===========================================================
# Beyond the table: shapes, dtypes, devices, strides and scalars drawn at random, the metadata only
# (FakeTensorMode). Half the calls are valid by construction and must reach the op (its fake
# kernel: the output has q's shape and dtype); the other half have anything wrong, and every call
# either returns such an output or raises TypeError / ValueError / NotImplementedError with a
# message: never another exception (an IndexError from a short shape, an AttributeError from a
# list, a RuntimeError from the op's own checks) and never a result of another shape.

REFUSALS = (TypeError, ValueError, NotImplementedError)
_DIMS = st.sampled_from([0, 1, 2, 3, 7, 8, 16, 33, 64, 65, 128, 256, 264])
_DTYPES = st.sampled_from([F16, BF16, F32, torch.float64, torch.int32, torch.bool, torch.float8_e4m3fn])
_SCALARS = st.sampled_from([None, 0, 1, -1, 0.5, -0.5, math.nan, math.inf, True, "x", (1,), (1, 2), (-2, 3),
                            [0, 0], 1e40, 2**40])
_VALID = {  # values each keyword takes in a valid call
    "softmax_scale": [None, 0.125, 1.0], "scale": [None, 0.125], "causal": [False, True],
    "is_causal": [False, True], "window_size": [(-1, -1), (3, 0), (0, 0), (-1, 2)], "softcap": [0.0, 30.0],
    "dropout_p": [0.0], "attn_mask": [None], "num_splits": [0, 1, 3],
}


@st.composite
def _tensor(draw: st.DrawFn, shape: tuple[int, ...] | None = None, dtype: torch.dtype = F16,
            bad: bool = True) -> torch.Tensor:
    """A fake CUDA tensor of the given shape and dtype, contiguous; when `bad`, sometimes any shape,
    any dtype, on the CPU, or with a non-unit last stride."""
    device, strides = "cuda", None
    if bad:
        if shape is None or draw(st.integers(0, 9)) == 0:
            shape = tuple(draw(st.lists(_DIMS, min_size=0, max_size=6)))
        if draw(st.integers(0, 9)) == 0:
            dtype = draw(_DTYPES)
        if draw(st.integers(0, 19)) == 0:
            device = "cpu"
        if shape and draw(st.integers(0, 9)) == 0:
            strides = tuple(torch.empty(shape, device="meta").stride()[:-1]) + (draw(st.sampled_from([0, 2, 3])),)
    assert shape is not None
    return fake_maker(*shape, dtype=dtype, device=device, strides=strides)


@st.composite
def _qkv_bshd(draw: st.DrawFn, bad: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    b, s, h = draw(st.sampled_from([1, 2])), draw(st.sampled_from([0, 1, 16, 33])), draw(st.sampled_from([1, 2, 4]))
    d = draw(st.sampled_from([8, 16, 64, 72, 128, 256]))
    sk, hk, dv = draw(st.sampled_from([1, 5, 40])), draw(st.sampled_from([h, 1])), d
    if bad:
        d = draw(st.one_of(st.just(d), _DIMS))
        sk, hk, dv = draw(st.sampled_from([s, 5, 0])), draw(st.sampled_from([h, 1, 3])), draw(st.sampled_from([d, d, 16]))
    dtype = draw(st.sampled_from([F16, BF16]))
    return (draw(_tensor((b, s, h, d), dtype, bad)), draw(_tensor((b, sk, hk, d), dtype, bad)),
            draw(_tensor((b, sk, hk, dv), dtype, bad)))


def _kwargs(draw: st.DrawFn, names: tuple[str, ...], bad: bool) -> dict[str, object]:
    return {name: draw(_SCALARS if bad else st.sampled_from(_VALID[name]))
            for name in names if draw(st.integers(0, 3)) == 0}


@st.composite
def _any_call(draw: st.DrawFn) -> tuple[str, bool, Callable[[], object], torch.Tensor]:
    """(entry point, whether anything may be wrong, the call, q as the entry point takes it)."""
    bad = draw(st.booleans())
    q, k, v = draw(_qkv_bshd(bad))
    entry = draw(st.sampled_from(["sdpa", "flash_attn_func", "varlen", "kvcache"]))
    if entry == "sdpa":
        q, k, v = (t.transpose(1, 2) if t.dim() == 4 else t for t in (q, k, v))
        kw = _kwargs(draw, ("dropout_p", "is_causal", "scale", "attn_mask"), bad)
        kw["enable_gqa"] = True if not bad else draw(st.sampled_from([True, False, None]))
        return entry, bad, lambda: sdpa(q, k, v, **kw), q
    if entry == "flash_attn_func":
        kw = _kwargs(draw, ("softmax_scale", "causal", "window_size", "softcap"), bad)
        return entry, bad, lambda: fa(q, k, v, **kw), q
    if entry == "varlen":
        batch = q.shape[0] if q.dim() else 1
        q, k, v = (t.flatten(0, 1) if t.dim() == 4 else t for t in (q, k, v))
        cu = draw(_tensor((batch + 1,), torch.int32, bad))
        max_q, max_k = (draw(st.sampled_from([0, 1, 16, -1, 2**31, None, 1.5] if bad else [1, 16, 64])) for _ in "qk")
        kw = _kwargs(draw, ("softmax_scale", "causal", "window_size", "softcap"), bad)
        return entry, bad, lambda: flashattn.flash_attn_varlen_func(q, k, v, cu, cu, max_q, max_k, **kw), q
    kw = _kwargs(draw, ("softmax_scale", "causal", "window_size", "softcap", "num_splits"), bad)
    batch = q.shape[0] if q.dim() else 1
    if draw(st.booleans()):
        kw["cache_seqlens"] = draw(_tensor((batch,), torch.int32, bad))
    elif bad and draw(st.booleans()):
        kw["cache_seqlens"] = draw(_SCALARS)
    if bad and draw(st.integers(0, 3)) == 0:
        kw["block_table"] = draw(_tensor((batch, 2), torch.int32, bad))
    if bad and draw(st.integers(0, 4)) == 0:
        kw["k"], kw["v"] = draw(_tensor()), draw(_tensor())
    return entry, bad, lambda: flashattn.flash_attn_with_kvcache(q, k, v, **kw), q


@given(data=st.data())
def test_any_input_gets_a_result_or_a_clear_refusal(data: st.DataObject) -> None:
    with pytest.MonkeyPatch.context() as mp, FakeTensorMode():
        mp.setattr(flashattn._ext, "require_extension", lambda: None)  # valid calls reach the fake kernels
        entry, bad, call, q = data.draw(_any_call())
        try:
            out = call()
        except REFUSALS as e:
            assert bad, f"{entry}: a valid call refused: {type(e).__name__}: {e}"
            assert str(e), f"{entry}: {type(e).__name__} without a message"
            return
    assert isinstance(out, torch.Tensor), f"{entry} returned {type(out).__name__}"
    assert out.shape == q.shape and out.dtype == q.dtype, f"{entry}: out {tuple(out.shape)} {out.dtype}, q {tuple(q.shape)} {q.dtype}"
