"""flash_attn_with_kvcache: split-KV decoding against a KV cache, with in-place append.

CPU (run everywhere, CI included):
  * the bad-inputs table, on fake CUDA tensors (FakeTensorMode), like tests/kernels/test_validation.py
    (on a GPU also with real tensors: the binding's refusal, explained by the checked path);
  * valid calls reach the op (its fake kernel) with the right output metadata, and without the
    extension they fail with the build message;
  * the op's schema marks exactly k_cache and v_cache as mutated, and torch.compile(fullgraph=True)
    traces through it with the mutation carried back to the caller's caches (aot_eager with a
    stand-in CPU kernel registered for the duration of the test);
  * the split heuristic and the tile configs (csrc/flash_decode/decode_traits.h, plain C++
    compiled with the host compiler);
  * paged caches and seqused_k: their rows of the bad-inputs table, the split kernel's row mapping
    through the table for every config and page size (host-compiled probe), the test helpers
    that build pools and gather pages back, a paged append traced by torch.compile.
GPU (`gpu` marker; they also skip themselves without CUDA or the built extension):
  * Hypothesis over batch, GQA heads, per-batch cache lengths, Sq 1..16 (and a few larger), head
    dims, dtypes, causal, scale, forced splits 1..128 and the heuristic, with and without
    appending: every batch against the float64 reference under the suite's criterion
    (tests/numerics.py: max err <= 2 x SDPA-math same-dtype err + 1e-5, LSE, empty rows), the
    append checked bitwise (new rows written, everything else untouched), cache rows past each
    sequence filled with NaN (they must never leak into the result), outputs poisoned;
  * long caches with many splits, causal rows that see no key, odd layouts of the caches;
  * torch.compile(fullgraph=True) and CUDA-graph capture/replay with new cache_seqlens values;
  * paged caches (block_table): Hypothesis over the same specs x page sizes 16..256 x pool layouts
    against the reference on the gathered pages and bitwise against the contiguous path (forced
    splits), appends across page boundaries checked bitwise on the whole pool, every config's
    rows per pass, splits 1..128 for pages 16/64/256, torch.compile, CUDA-graph replay with new
    cache_seqlens and block tables; one logical cache under several page orders gives the same
    bits (GQA 32:8 and 8:1);
  * seqused_k: against the reference on its first seqused_k[b] keys (contiguous and paged, with an
    append at cache_seqlens, clamped values), bitwise equal to cache_seqlens + Sq_new, graph replay.
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
from repo_modules import run_cpp_probe
from numerics import assert_attention_matches
from tensor_makers import Maker, fake_maker, real_maker

F16, BF16, F32, I32 = torch.float16, torch.bfloat16, torch.float32, torch.int32
NONE, BOTTOM_RIGHT = flashattn.CAUSAL_NONE, flashattn.CAUSAL_BOTTOM_RIGHT

HAVE_GPU = torch.cuda.is_available() and flashattn.extension_available()
needs_gpu = [
    pytest.mark.gpu,
    pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU and the built flashattn extension"),
]


def gpu_test(fn):
    for mark in needs_gpu:
        fn = mark(fn)
    return fn


kvcache = flashattn.flash_attn_with_kvcache

# ==== bad inputs (CPU, fake CUDA tensors) =========================================================

B, SQ, HQ, HK, SK, D = 2, 1, 8, 2, 64, 64
Q = (B, SQ, HQ, D)
CACHE = (B, SK, HK, D)
NEW = (B, 1, HK, D)


@dataclass(frozen=True)
class BadInput:
    id: str
    call: Callable[[Maker], object]
    error: type[Exception]
    match: str


def _caches(mk: Maker, shape=CACHE, **kw):
    return mk(*shape, **kw), mk(*shape, **kw)


def _seqlens(mk: Maker, n=B, dtype=I32, device="cuda"):
    return mk(n, dtype=dtype, device=device)


BAD_INPUTS = [
    BadInput("q-float32", lambda mk: kvcache(mk(*Q, dtype=F32), *_caches(mk, dtype=F32)), TypeError, "q.dtype must be torch.float16 or torch.bfloat16, got torch.float32"),
    BadInput("q-not-a-tensor", lambda mk: kvcache([[1.0]], *_caches(mk)), TypeError, "q must be a torch.Tensor, got list"),
    BadInput("cache-not-a-tensor", lambda mk: kvcache(mk(*Q), None, mk(*CACHE)), TypeError, "k_cache must be a torch.Tensor, got NoneType"),
    BadInput("q-rank-3", lambda mk: kvcache(mk(B, HQ, D), *_caches(mk)), ValueError, "q must have at least 4 dimensions"),
    BadInput("cache-rank-5", lambda mk: kvcache(mk(*Q), *_caches(mk, (1, *CACHE))), ValueError, "k_cache must be 4-D [batch, seqlen, heads, head_dim]"),
    BadInput("mixed-dtypes", lambda mk: kvcache(mk(*Q, dtype=BF16), *_caches(mk)), TypeError, "q, k_cache and v_cache must share one dtype"),
    BadInput("q-on-cpu", lambda mk: kvcache(mk(*Q, device="cpu"), *_caches(mk, device="cpu")), ValueError, "q must be on a CUDA device, got device cpu"),
    BadInput("cache-on-cpu", lambda mk: kvcache(mk(*Q), mk(*CACHE, device="cpu"), mk(*CACHE)), ValueError, "k_cache must be on a CUDA device"),
    BadInput("head-dim-12", lambda mk: kvcache(mk(B, SQ, HQ, 12), *_caches(mk, (B, SK, HK, 12))), ValueError, "head dim (q.shape[-1]) must be a multiple of 8 in [8, 256], got 12"),
    BadInput("head-dim-264", lambda mk: kvcache(mk(B, SQ, HQ, 264), *_caches(mk, (B, SK, HK, 264))), ValueError, "must be a multiple of 8 in [8, 256], got 264"),
    BadInput("cache-shapes-differ", lambda mk: kvcache(mk(*Q), mk(*CACHE), mk(B, SK + 1, HK, D)), ValueError, "k_cache and v_cache must have the same shape"),
    BadInput("cache-batch-differs", lambda mk: kvcache(mk(*Q), *_caches(mk, (B + 1, SK, HK, D))), ValueError, "k_cache batch size (3) must equal q's (2)"),
    BadInput("cache-head-dim-differs", lambda mk: kvcache(mk(*Q), *_caches(mk, (B, SK, HK, 32))), ValueError, "k_cache head dim (32) must equal q's (64)"),
    BadInput("heads-not-multiple", lambda mk: kvcache(mk(B, SQ, 6, D), *_caches(mk, (B, SK, 4, D))), ValueError, "q heads (6) must be a multiple of k_cache/v_cache heads (4)"),
    BadInput("cache-last-dim-strided", lambda mk: kvcache(mk(*Q), mk(*CACHE, strides=(SK * HK * 2 * D, HK * 2 * D, 2 * D, 2)), mk(*CACHE)), ValueError, "k_cache must have a contiguous last dimension"),
    BadInput("cache-row-stride-not-8", lambda mk: kvcache(mk(*Q), mk(*CACHE), mk(*CACHE, strides=(SK * HK * (D + 4), HK * (D + 4), D + 4, 1))), ValueError, "v_cache must have strides of dims 0-2 and a storage offset that are multiples of 8 elements"),
    BadInput("k-without-v", lambda mk: kvcache(mk(*Q), *_caches(mk), k=mk(*NEW), cache_seqlens=3), ValueError, "k and v must be given together (got k a tensor, v None)"),
    BadInput("v-without-k", lambda mk: kvcache(mk(*Q), *_caches(mk), v=mk(*NEW), cache_seqlens=3), ValueError, "k and v must be given together (got k None, v a tensor)"),
    BadInput("k-heads-differ", lambda mk: kvcache(mk(*Q), *_caches(mk), k=mk(B, 1, HK + 1, D), v=mk(B, 1, HK + 1, D), cache_seqlens=3), ValueError, "k must be [B=2, Sq_new, Hk=2, D=64] to match the cache, got shape (2, 1, 3, 64)"),
    BadInput("k-batch-differs", lambda mk: kvcache(mk(*Q), *_caches(mk), k=mk(1, 1, HK, D), v=mk(1, 1, HK, D), cache_seqlens=3), ValueError, "k must be [B=2, Sq_new, Hk=2, D=64]"),
    BadInput("v-shape-differs", lambda mk: kvcache(mk(*Q), *_caches(mk), k=mk(*NEW), v=mk(B, 2, HK, D), cache_seqlens=3), ValueError, "v must have k's shape (2, 1, 2, 64), got (2, 2, 2, 64)"),
    BadInput("k-dtype-differs", lambda mk: kvcache(mk(*Q), *_caches(mk), k=mk(*NEW, dtype=BF16), v=mk(*NEW, dtype=BF16), cache_seqlens=3), TypeError, "k and v must have q's dtype torch.float16"),
    BadInput("k-on-cpu", lambda mk: kvcache(mk(*Q), *_caches(mk), k=mk(*NEW, device="cpu"), v=mk(*NEW, device="cpu"), cache_seqlens=3), ValueError, "k must be on a CUDA device"),
    BadInput("k-rows-exceed-cache", lambda mk: kvcache(mk(*Q), *_caches(mk), k=mk(B, SK + 1, HK, D), v=mk(B, SK + 1, HK, D), cache_seqlens=_seqlens(mk)), ValueError, "k/v have 65 new rows but the cache holds only Sk_max = 64"),
    BadInput("append-without-seqlens", lambda mk: kvcache(mk(*Q), *_caches(mk), k=mk(*NEW), v=mk(*NEW)), ValueError, "cache_seqlens is required when appending k/v"),
    BadInput("seqlens-int64", lambda mk: kvcache(mk(*Q), *_caches(mk), cache_seqlens=_seqlens(mk, dtype=torch.int64)), TypeError, "cache_seqlens must be an int32 tensor, got dtype torch.int64"),
    BadInput("seqlens-float", lambda mk: kvcache(mk(*Q), *_caches(mk), cache_seqlens=_seqlens(mk, dtype=F32)), TypeError, "cache_seqlens must be an int32 tensor, got dtype torch.float32"),
    BadInput("seqlens-wrong-length", lambda mk: kvcache(mk(*Q), *_caches(mk), cache_seqlens=_seqlens(mk, n=B + 1)), ValueError, "cache_seqlens must have shape [B] = [2], got [3]"),
    BadInput("seqlens-2d", lambda mk: kvcache(mk(*Q), *_caches(mk), cache_seqlens=mk(B, 1, dtype=I32)), ValueError, "cache_seqlens must have shape [B] = [2], got [2, 1]"),
    BadInput("seqlens-on-cpu", lambda mk: kvcache(mk(*Q), *_caches(mk), cache_seqlens=_seqlens(mk, device="cpu")), ValueError, "cache_seqlens must be on q's device cuda:0, got cpu"),
    BadInput("seqlens-python-float", lambda mk: kvcache(mk(*Q), *_caches(mk), cache_seqlens=3.0), TypeError, "cache_seqlens must be an int32 tensor, an int or None, got float"),
    BadInput("seqlens-bool", lambda mk: kvcache(mk(*Q), *_caches(mk), cache_seqlens=True), TypeError, "cache_seqlens must be an int32 tensor, an int or None, got bool"),
    BadInput("seqlens-int-too-large", lambda mk: kvcache(mk(*Q), *_caches(mk), cache_seqlens=SK + 1), ValueError, "cache_seqlens must be in [0, Sk_max = 64], got 65"),
    BadInput("seqlens-int-negative", lambda mk: kvcache(mk(*Q), *_caches(mk), cache_seqlens=-1), ValueError, "cache_seqlens must be in [0, Sk_max = 64], got -1"),
    BadInput("append-overflows-cache", lambda mk: kvcache(mk(*Q), *_caches(mk), k=mk(B, 2, HK, D), v=mk(B, 2, HK, D), cache_seqlens=SK - 1), ValueError, "cache_seqlens must be in [0, Sk_max - Sq_new = 64 - 2], got 63"),
    BadInput("num-splits-negative", lambda mk: kvcache(mk(*Q), *_caches(mk), num_splits=-1), ValueError, "num_splits must be >= 0 (0: heuristic, 1: no split), got -1"),
    BadInput("num-splits-float", lambda mk: kvcache(mk(*Q), *_caches(mk), num_splits=2.0), TypeError, "num_splits must be an int, got float"),
    BadInput("num-splits-bool", lambda mk: kvcache(mk(*Q), *_caches(mk), num_splits=True), TypeError, "num_splits must be an int, got bool"),
    BadInput("scale-nan", lambda mk: kvcache(mk(*Q), *_caches(mk), softmax_scale=math.nan), ValueError, "scale must be finite, got nan"),
    BadInput("window-below-minus-one", lambda mk: kvcache(mk(*Q), *_caches(mk), window_size=(-3, -1)), ValueError, "window_size values must be >= -1 (-1: unbounded), got (-3, -1)"),
    BadInput("window-float", lambda mk: kvcache(mk(*Q), *_caches(mk), window_size=(8, 0.5)), TypeError, "window_size must be a pair of ints (left, right), got float 0.5 for right"),
    BadInput("window-none", lambda mk: kvcache(mk(*Q), *_caches(mk), window_size=None), TypeError, "window_size must be a pair of ints (left, right), -1 meaning unbounded, got None"),
    BadInput("softcap-negative", lambda mk: kvcache(mk(*Q), *_caches(mk), softcap=-0.5), ValueError, "softcap must be finite and >= 0 (0.0: off), got -0.5"),
    BadInput("softcap-nan", lambda mk: kvcache(mk(*Q), *_caches(mk), softcap=math.nan), ValueError, "softcap must be finite and >= 0 (0.0: off), got nan"),
    BadInput("softcap-none", lambda mk: kvcache(mk(*Q), *_caches(mk), softcap=None), TypeError, "softcap must be a float (0.0: off), got NoneType"),
]

# Paged caches: a pool of NUM_PAGES pages of PAGE rows, a [B, PAGES_PER_SEQ] table (Sk_max = 64).
PAGE, NUM_PAGES, PAGES_PER_SEQ = 16, 9, 4
POOL = (NUM_PAGES, PAGE, HK, D)


def _table(mk: Maker, shape=(B, PAGES_PER_SEQ), dtype=I32, device="cuda"):
    return mk(*shape, dtype=dtype, device=device)


BAD_INPUTS += [
    BadInput("block-table-list", lambda mk: kvcache(mk(*Q), *_caches(mk, POOL), block_table=[[0, 1]]), TypeError, "block_table must be an int32 tensor or None, got list"),
    BadInput("block-table-int64", lambda mk: kvcache(mk(*Q), *_caches(mk, POOL), block_table=_table(mk, dtype=torch.int64)), TypeError, "block_table must be an int32 tensor, got dtype torch.int64"),
    BadInput("block-table-1d", lambda mk: kvcache(mk(*Q), *_caches(mk, POOL), block_table=_table(mk, (B * PAGES_PER_SEQ,))), ValueError, "block_table must be 2-D [B, max_blocks_per_seq], got shape [8]"),
    BadInput("block-table-batch-differs", lambda mk: kvcache(mk(*Q), *_caches(mk, POOL), block_table=_table(mk, (B + 1, PAGES_PER_SEQ))), ValueError, "block_table batch size (3) must equal q's (2)"),
    BadInput("block-table-no-columns", lambda mk: kvcache(mk(*Q), *_caches(mk, POOL), block_table=_table(mk, (B, 0))), ValueError, "block_table must have at least one column (max_blocks_per_seq >= 1)"),
    BadInput("block-table-on-cpu", lambda mk: kvcache(mk(*Q), *_caches(mk, POOL), block_table=_table(mk, device="cpu")), ValueError, "block_table must be on q's device cuda:0, got cpu"),
    BadInput("page-size-8", lambda mk: kvcache(mk(*Q), *_caches(mk, (NUM_PAGES, 8, HK, D)), block_table=_table(mk)), ValueError, "page_size (k_cache.shape[1]) must be a positive multiple of 16, got 8"),
    BadInput("page-size-24", lambda mk: kvcache(mk(*Q), *_caches(mk, (NUM_PAGES, 24, HK, D)), block_table=_table(mk)), ValueError, "must be a positive multiple of 16, got 24"),
    BadInput("page-size-0", lambda mk: kvcache(mk(*Q), *_caches(mk, (NUM_PAGES, 0, HK, D)), block_table=_table(mk)), ValueError, "must be a positive multiple of 16, got 0"),
    BadInput("no-pages", lambda mk: kvcache(mk(*Q), *_caches(mk, (0, PAGE, HK, D)), block_table=_table(mk)), ValueError, "k_cache/v_cache must hold at least one page (k_cache.shape[0] >= 1), got 0"),
    BadInput("paged-heads-not-multiple", lambda mk: kvcache(mk(B, SQ, 6, D), *_caches(mk, (NUM_PAGES, PAGE, 4, D)), block_table=_table(mk)), ValueError, "q heads (6) must be a multiple of k_cache/v_cache heads (4)"),
    BadInput("paged-pool-shapes-differ", lambda mk: kvcache(mk(*Q), mk(*POOL), mk(NUM_PAGES + 1, PAGE, HK, D), block_table=_table(mk)), ValueError, "k_cache and v_cache must have the same shape"),
    BadInput("paged-k-batch-differs", lambda mk: kvcache(mk(*Q), *_caches(mk, POOL), k=mk(NUM_PAGES, 1, HK, D), v=mk(NUM_PAGES, 1, HK, D), cache_seqlens=3, block_table=_table(mk)), ValueError, "k must be [B=2, Sq_new, Hk=2, D=64]"),
    BadInput("paged-append-exceeds-table", lambda mk: kvcache(mk(*Q), *_caches(mk, POOL), k=mk(B, 65, HK, D), v=mk(B, 65, HK, D), cache_seqlens=_seqlens(mk), block_table=_table(mk)), ValueError, "k/v have 65 new rows but the cache holds only Sk_max = 64"),
    BadInput("paged-seqlens-int-too-large", lambda mk: kvcache(mk(*Q), *_caches(mk, POOL), cache_seqlens=PAGE * PAGES_PER_SEQ + 1, block_table=_table(mk)), ValueError, "cache_seqlens must be in [0, Sk_max = 64], got 65"),
    BadInput("paged-append-overflows", lambda mk: kvcache(mk(*Q), *_caches(mk, POOL), k=mk(B, 2, HK, D), v=mk(B, 2, HK, D), cache_seqlens=63, block_table=_table(mk)), ValueError, "cache_seqlens must be in [0, Sk_max - Sq_new = 64 - 2], got 63"),
    BadInput("paged-pool-row-stride-not-8", lambda mk: kvcache(mk(*Q), mk(*POOL), mk(*POOL, strides=(PAGE * HK * (D + 4), HK * (D + 4), D + 4, 1)), block_table=_table(mk)), ValueError, "v_cache must have strides of dims 0-2 and a storage offset that are multiples of 8 elements"),
]
BAD_INPUTS += [
    BadInput("seqused-k-list", lambda mk: kvcache(mk(*Q), *_caches(mk), seqused_k=[3, 4]), TypeError, "seqused_k must be an int32 tensor or None, got list"),
    BadInput("seqused-k-int", lambda mk: kvcache(mk(*Q), *_caches(mk), seqused_k=3), TypeError, "seqused_k must be an int32 tensor or None, got int"),
    BadInput("seqused-k-int64", lambda mk: kvcache(mk(*Q), *_caches(mk), seqused_k=_seqlens(mk, dtype=torch.int64)), TypeError, "seqused_k must be an int32 tensor, got dtype torch.int64"),
    BadInput("seqused-k-wrong-length", lambda mk: kvcache(mk(*Q), *_caches(mk), seqused_k=_seqlens(mk, n=B + 1)), ValueError, "seqused_k must have shape [B] = [2], got [3]"),
    BadInput("seqused-k-2d", lambda mk: kvcache(mk(*Q), *_caches(mk), seqused_k=mk(B, 1, dtype=I32)), ValueError, "seqused_k must have shape [B] = [2], got [2, 1]"),
    BadInput("seqused-k-on-cpu", lambda mk: kvcache(mk(*Q), *_caches(mk), seqused_k=_seqlens(mk, device="cpu")), ValueError, "seqused_k must be on q's device cuda:0, got cpu"),
    BadInput("paged-seqused-k-int64", lambda mk: kvcache(mk(*Q), *_caches(mk, POOL), block_table=_table(mk), seqused_k=_seqlens(mk, dtype=torch.int64)), TypeError, "seqused_k must be an int32 tensor, got dtype torch.int64"),
]
BAD_INPUT_PARAMS = [pytest.param(row, id=row.id) for row in BAD_INPUTS]


@pytest.mark.parametrize("row", BAD_INPUT_PARAMS)
def test_bad_input_is_refused(row: BadInput) -> None:
    with FakeTensorMode(), pytest.raises(row.error) as info:
        row.call(fake_maker)
    assert row.match in str(info.value)


@gpu_test
@pytest.mark.parametrize("row", BAD_INPUT_PARAMS)
def test_bad_input_on_real_tensors_is_refused_alike(row: BadInput) -> None:
    """The same rows with real tensors: the call takes the direct path, where the binding must
    refuse it (a bad input it let through would reach the kernels), and the checked path names the
    argument as on fake tensors."""
    with pytest.raises(row.error) as info:
        row.call(real_maker)
    assert row.match in str(info.value)


def test_bad_input_on_real_cpu_tensors_names_the_device() -> None:
    with pytest.raises(ValueError, match="q must be on a CUDA device, got device cpu"):
        kvcache(torch.zeros(Q, dtype=F16), torch.zeros(CACHE, dtype=F16), torch.zeros(CACHE, dtype=F16))


def _valid_calls(mk: Maker):
    """(description, call) pairs of valid calls covering every argument form."""
    seqlens = _seqlens(mk)
    return [
        ("full cache", lambda: kvcache(mk(*Q), *_caches(mk), return_lse=True)),
        ("int seqlens, causal", lambda: kvcache(mk(*Q), *_caches(mk), cache_seqlens=5, causal=True, return_lse=True)),
        ("tensor seqlens, append", lambda: kvcache(mk(*Q), *_caches(mk), k=mk(*NEW), v=mk(*NEW), cache_seqlens=seqlens, return_lse=True)),
        ("Sq=16, MQA, forced splits", lambda: kvcache(mk(B, 16, HQ, D), *_caches(mk, (B, SK, 1, D)), num_splits=7, return_lse=True)),
        ("bhsd cache view, D=256", lambda: kvcache(mk(B, SQ, HQ, 256), *_caches(mk, (B, SK, HK, 256), strides=(HK * SK * 256, 256, SK * 256, 1)), softmax_scale=0.0, return_lse=True)),
        ("append with int seqlens", lambda: kvcache(mk(*Q), *_caches(mk), k=mk(B, 3, HK, D), v=mk(B, 3, HK, D), cache_seqlens=SK - 3, return_lse=True)),
        ("window and softcap", lambda: kvcache(mk(*Q), *_caches(mk), cache_seqlens=seqlens, causal=True, window_size=(16, 0), softcap=30.0, return_lse=True)),
        ("paged, append", lambda: kvcache(mk(*Q), *_caches(mk, POOL), k=mk(*NEW), v=mk(*NEW), cache_seqlens=seqlens, block_table=_table(mk), return_lse=True)),
        ("paged, full table, pool batch != B", lambda: kvcache(mk(B, 16, HQ, D), *_caches(mk, (1, 256, HK, D)), block_table=_table(mk, (B, 1)), return_lse=True)),
        ("paged, window, bhsd pool", lambda: kvcache(mk(*Q), *_caches(mk, POOL, strides=(HK * PAGE * D, D, PAGE * D, 1)), cache_seqlens=5, window_size=(8, 0), block_table=_table(mk), return_lse=True)),
        ("seqused_k", lambda: kvcache(mk(*Q), *_caches(mk), seqused_k=seqlens, causal=True, return_lse=True)),
        ("seqused_k, append", lambda: kvcache(mk(*Q), *_caches(mk), k=mk(*NEW), v=mk(*NEW), cache_seqlens=seqlens, seqused_k=_seqlens(mk), return_lse=True)),
        ("paged, seqused_k", lambda: kvcache(mk(*Q), *_caches(mk, POOL), block_table=_table(mk), seqused_k=seqlens, return_lse=True)),
    ]


def test_valid_inputs_reach_the_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """Valid calls pass validation and the fake kernel gives out [B, Sq, Hq, D] in q's dtype and
    lse float32 [B, Hq, Sq]; so each bad-input row fails because of its one bad input."""
    monkeypatch.setattr(flashattn._ext, "require_extension", lambda: None)
    with FakeTensorMode():
        for what, call in _valid_calls(fake_maker):
            out, lse = call()
            b, hq = out.shape[0], out.shape[2]
            assert out.dim() == 4 and out.dtype == F16 and out.device.type == "cuda", what
            assert lse.shape == (b, hq, out.shape[1]) and lse.dtype == F32, what
        out = kvcache(fake_maker(*Q), *_caches(fake_maker))
        assert isinstance(out, torch.Tensor) and out.shape == Q


@pytest.mark.skipif(flashattn.extension_available(), reason="the extension is built here")
def test_without_the_extension_a_valid_call_says_how_to_build() -> None:
    with FakeTensorMode(), pytest.raises(RuntimeError, match="CUDA extension is not built"):
        kvcache(fake_maker(*Q), *_caches(fake_maker))


# ==== the op's schema and torch.compile (CPU) ======================================================


def test_schema_marks_exactly_the_caches_as_mutated() -> None:
    schema = torch.ops.flashattn.fwd_kvcache.default._schema
    written = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
    assert written == {"k_cache", "v_cache"}, str(schema)
    assert all(r.alias_info is None for r in schema.returns), "outputs are fresh tensors, never views of inputs"


def _cpu_standin(q, k_cache, v_cache, k, v, cache_seqlens, cache_seqlen, softmax_scale, causal, num_splits,
                 window_left=-1, window_right=-1, softcap=0.0, block_table=None, seqused_k=None):
    """A CPU kernel for the op, for tracing tests only: the append, and a cheap fake attention."""
    if k is not None:
        for b in range(q.shape[0]):
            base = int(cache_seqlens[b]) if cache_seqlens is not None else cache_seqlen
            for j in range(k.shape[1]):
                if block_table is None:
                    page, row = b, base + j
                else:
                    page, row = int(block_table[b, (base + j) // k_cache.shape[1]]), (base + j) % k_cache.shape[1]
                k_cache[page, row] = k[b, j]
                v_cache[page, row] = v[b, j]
    return q * softmax_scale, torch.zeros(q.shape[0], q.shape[2], q.shape[1], dtype=F32)


def test_torch_compile_fullgraph_carries_the_cache_mutation() -> None:
    """torch.compile(fullgraph=True) traces the op (its fake kernel) and, from the schema's
    mutation annotation, writes the appended rows back into the caller's caches."""
    lib = torch.library.Library("flashattn", "IMPL")
    try:
        lib.impl("fwd_kvcache", _cpu_standin, "CPU")

        def step(q, kc, vc, k, v, seqlens):
            out, lse = torch.ops.flashattn.fwd_kvcache(q, kc, vc, k, v, seqlens, 0, 0.5, True, 0)
            return out + 1, lse

        compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
        q = torch.randn(2, 1, 4, 8)
        kc, vc = torch.zeros(2, 10, 2, 8), torch.zeros(2, 10, 2, 8)
        k, v = torch.full((2, 1, 2, 8), 2.0), torch.full((2, 1, 2, 8), 3.0)
        seqlens = torch.tensor([2, 7], dtype=I32)
        out, lse = compiled(q, kc, vc, k, v, seqlens)
        torch.testing.assert_close(out, q * 0.5 + 1)
        assert lse.shape == (2, 4, 1)
        assert kc[0, 2].eq(2).all() and kc[1, 7].eq(2).all() and vc[1, 7].eq(3).all()
        assert kc.sum() == 2 * 2 * 2 * 8 and vc.sum() == 3 * 2 * 2 * 8, "only the appended rows change"
    finally:
        lib._destroy()


def test_torch_compile_fullgraph_carries_the_paged_append() -> None:
    """The same with a block table (the op called as the public function calls it): the optional trailing argument
    reaches the op, and the pages it names get the appended rows in the caller's pools."""
    lib = torch.library.Library("flashattn", "IMPL")
    try:
        lib.impl("fwd_kvcache", _cpu_standin, "CPU")
        real = torch.ops.flashattn.fwd_kvcache.default

        def step(q, kp, vp, k, v, seqlens, table):
            out, lse = real(q, kp, vp, k, v, seqlens, 0, 0.5, True, 0, -1, -1, 0.0, table)
            return out + 1, lse

        compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
        q = torch.randn(2, 1, 4, 8)
        kp, vp = torch.zeros(5, 16, 2, 8), torch.zeros(5, 16, 2, 8)
        k, v = torch.full((2, 2, 2, 8), 2.0), torch.full((2, 2, 2, 8), 3.0)
        seqlens = torch.tensor([15, 3], dtype=I32)
        table = torch.tensor([[4, 1], [2, -1]], dtype=I32)
        out, lse = compiled(q, kp, vp, k, v, seqlens, table)
        torch.testing.assert_close(out, q * 0.5 + 1)
        # batch 0 appends at 15 and 16: row 15 of page 4, row 0 of page 1; batch 1 rows 3, 4 of page 2
        for page, row in ((4, 15), (1, 0), (2, 3), (2, 4)):
            assert kp[page, row].eq(2).all() and vp[page, row].eq(3).all(), (page, row)
        assert kp.sum() == 4 * 2 * 2 * 8 and vp.sum() == 4 * 3 * 2 * 8, "only the appended rows change"
    finally:
        lib._destroy()


# ==== split heuristic and tile configs (plain C++, host compiler) =================================

VARIANTS = ("portable", "hopper", "hopper_split", "hopper_stream")  # DecodeVariant's values, in order

_HEURISTIC_PROBE = r"""
#include <cstdio>
#include <initializer_list>
#include <utility>
#include "flash_decode/decode_traits.h"
using namespace flashattn;
template <int D, DecodeVariant V> void config() {
  using T = typename DecodeTileConfig<D, V>::Traits;
  std::printf("config %d %d %d %d %d %d\n", D, int(V), T::kNWarps, T::kStages, T::kBlockN, T::kSmemBytes);
}
int main() {
  config<64, DecodeVariant::kPortable>(); config<128, DecodeVariant::kPortable>(); config<256, DecodeVariant::kPortable>();
  config<128, DecodeVariant::kHopper>(); config<128, DecodeVariant::kHopperSplit>();
  config<128, DecodeVariant::kHopperStream>();
  // pick kernel_head_dim cc_major max_smem_per_block -> variant
  for (int d : {64, 128, 256})
    for (auto cc : {std::pair{8, 101376}, std::pair{8, 166912}, std::pair{9, 232448}, std::pair{9, 101376}, std::pair{10, 232448}})
      std::printf("pick %d %d %d %d\n", d, cc.first, cc.second, int(decode_pick_variant(d, cc.first, cc.second)));
  for (int d = 0; d <= 264; d += 4) std::printf("round %d %d\n", d, decode_round_head_dim(d));
  // splits requested tiles n_blocks sm_count ctas_per_sm
  const long tiles[] = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 4096};
  const long blocks[] = {0, 1, 2, 3, 16, 64, 100, 256, 1024, 2048, 4096};
  const int sms[][2] = {{132, 3}, {132, 2}, {108, 2}, {58, 1}};
  for (long t : tiles) for (long n : blocks) for (auto& s : sms) for (int req : {0, 1, 2, 7, 100, 1000})
    std::printf("split %d %ld %ld %d %d %d\n", req, t, n, s[0], s[1], decode_num_splits(req, t, n, s[0], s[1]));
  // prefer kernel_head_dim max_smem_per_block splits -> kHopperSplit instead of kHopper
  for (int d : {64, 128, 256}) for (int smem : {101376, 232448}) for (int s : {1, 2, 8, 16, 128})
    std::printf("prefer %d %d %d %d\n", d, smem, s, int(decode_prefer_split_config(d, smem, s)));
  // stream kernel_head_dim max_smem_per_block splits -> kHopperStream instead of kHopper
  for (int d : {64, 128, 256}) for (int smem : {101376, 232448}) for (int s : {1, 2, 8, 16, 128})
    std::printf("stream %d %d %d %d\n", d, smem, s, int(decode_prefer_stream_config(d, smem, s)));
}
"""


@pytest.fixture(scope="module")
def heuristic_table(tmp_path_factory) -> dict:
    lines = run_cpp_probe(tmp_path_factory, "decode_heuristic", _HEURISTIC_PROBE)
    table: dict = {"config": {}, "round": {}, "split": {}, "pick": {}, "prefer": {}, "stream": {}}
    for line in lines:
        kind, *vals = line.split()
        vals = [int(x) for x in vals]
        if kind == "config":
            variant = VARIANTS[vals[1]]
            table["config"][(vals[0], variant)] = dict(warps=vals[2], stages=vals[3], block_n=vals[4], smem=vals[5])
        elif kind == "pick":
            table["pick"][tuple(vals[:3])] = VARIANTS[vals[3]]
        elif kind in ("prefer", "stream"):
            table[kind][tuple(vals[:3])] = bool(vals[3])
        elif kind == "round":
            table["round"][vals[0]] = vals[1]
        else:
            table["split"][tuple(vals[:5])] = vals[5]
    return table


def test_every_decode_config_fits_its_targets(heuristic_table: dict) -> None:
    """The portable configs (one per head dim) serve sm80, sm89 and sm90: each is under the L4's
    99 KB per block. The Hopper configs (D=128) are over it and must fit the H100's 227 KB."""
    configs = heuristic_table["config"]
    assert set(configs) == {(64, "portable"), (128, "portable"), (256, "portable"), (128, "hopper"),
                            (128, "hopper_split"), (128, "hopper_stream")}
    for (d, variant), c in configs.items():
        assert c["smem"] <= (99 if variant == "portable" else 227) * 1024, (d, variant, c)
        assert c["block_n"] == 16 * c["warps"] and c["stages"] >= 2, (d, variant, c)
    for variant in ("hopper", "hopper_split", "hopper_stream"):
        assert configs[(128, variant)]["smem"] > 99 * 1024, "else it would not need to be sm90-only"
    assert configs[(128, "hopper_split")]["stages"] > configs[(128, "hopper")]["stages"], "more blocks in flight"
    assert 2 * configs[(128, "hopper_stream")]["smem"] <= 227 * 1024, "two CTAs per SM on an H100"


def test_hopper_decode_config_only_where_measured_and_it_fits(heuristic_table: dict) -> None:
    """kHopper is picked for D=128 on sm90+ with the smem for it; sm80 (A100, 163 KB: it would fit)
    and sm89 (99 KB: it would not) keep the portable config, as does every other head dim."""
    pick = heuristic_table["pick"]
    hopper_smem = heuristic_table["config"][(128, "hopper")]["smem"]
    for (d, cc, smem), variant in pick.items():
        expected = "hopper" if d == 128 and cc >= 9 and smem >= hopper_smem else "portable"
        assert variant == expected, (d, cc, smem, variant)
    assert pick[(128, 9, 232448)] == "hopper" and pick[(128, 8, 166912)] == "portable"


def test_split_config_only_where_khopper_splits(heuristic_table: dict) -> None:
    """kHopperSplit replaces kHopper only for D=128 where its shared memory fits and kHopper's own
    plan splits the keys; no split, another head dim or a GPU without the shared memory keep the
    plan's config."""
    prefer = heuristic_table["prefer"]
    split_smem = heuristic_table["config"][(128, "hopper_split")]["smem"]
    assert prefer, "the probe printed no rows"
    for (d, smem, splits), chosen in prefer.items():
        assert chosen == (d == 128 and smem >= split_smem and splits > 1), (d, smem, splits)
    assert prefer[(128, 232448, 2)] and not prefer[(128, 232448, 1)] and not prefer[(128, 101376, 16)]


def test_stream_config_only_where_khopper_does_not_split(heuristic_table: dict) -> None:
    """kHopperStream replaces kHopper only for D=128 where its shared memory fits and kHopper's plan
    runs the keys unsplit; split plans (kHopperSplit's), other head dims and GPUs without the
    shared memory keep their config. The two rules never both apply."""
    stream, prefer = heuristic_table["stream"], heuristic_table["prefer"]
    stream_smem = heuristic_table["config"][(128, "hopper_stream")]["smem"]
    assert stream, "the probe printed no rows"
    for (d, smem, splits), chosen in stream.items():
        assert chosen == (d == 128 and smem >= stream_smem and splits == 1), (d, smem, splits)
        assert not (chosen and prefer[(d, smem, splits)]), (d, smem, splits)
    assert stream[(128, 232448, 1)] and not stream[(128, 232448, 2)] and not stream[(128, 101376, 1)]


def test_every_head_dim_maps_to_a_kernel(heuristic_table: dict) -> None:
    for d, k in heuristic_table["round"].items():
        if 8 <= d <= 256 and d % 8 == 0:
            assert k in (64, 128, 256) and k >= d and (k == 64 or k // 2 < d), (d, k)
        else:
            assert k == -1, (d, k)


def test_split_choice_is_bounded_and_honours_requests(heuristic_table: dict) -> None:
    for (req, tiles, n_blocks, sm, ctas), s in heuristic_table["split"].items():
        cap = max(1, min(128, n_blocks))
        assert 1 <= s <= cap, (req, tiles, n_blocks, sm, ctas, s)
        if req > 0:
            assert s == min(req, cap), "a forced split count is only clamped"
        else:
            bps = -(-n_blocks // s) if n_blocks else 0
            assert n_blocks == 0 or -(-n_blocks // bps) == s, "the heuristic never leaves a split empty"


def test_split_heuristic_fills_the_h100_on_the_decode_grid(heuristic_table: dict) -> None:
    """The benchmark's decode shapes (GQA 32:8, D=128: 64-key blocks, 3 CTAs per SM on 132 SMs):
    small batches split until >= 85% of the GPU's CTA slots are busy; large grids do not split."""
    split = heuristic_table["split"]
    slots = 132 * 3
    for tiles in (8, 64):  # B = 1, 8 with 8 KV heads
        for n_blocks in (1024, 2048):  # Sk = 64k, 128k
            s = split[(0, tiles, n_blocks, 132, 3)]
            assert tiles * s >= 0.85 * slots, (tiles, n_blocks, s)
    assert split[(0, 4096, 2048, 132, 3)] == 1
    assert split[(0, 8, 16, 132, 3)] == 16, "Sk=1k, B=1: one 64-key block per split"


# ==== paged caches: the split kernel's row mapping (plain C++, host compiler) =====================

_PAGE_PROBE = r"""
#include <cstdio>
#include "flash_decode/decode_traits.h"
using namespace flashattn;
// The split kernel's paged load loop (decode_kernel.cuh, load_block) with the cp.async replaced by a
// check: pass i of the thread whose first row is row0 must read key key0 + row0 + i * kRowsPerPass
// from row key % page_size of table entry key / page_size.
template <int D, DecodeVariant V> void check() {
  using T = typename DecodeTileConfig<D, V>::Traits;
  constexpr int kPassesPerGroup = kDecodeMinPageSize / T::kRowsPerPass;
  long checked = 0, wrong = 0;
  for (int page_size = 16; page_size <= 528; page_size += 16)
    for (int nb = 0; nb * T::kBlockN < 4 * 528 + 2 * T::kBlockN; ++nb) {
      const int key0 = nb * T::kBlockN;
      for (int row0 = 0; row0 < T::kRowsPerPass; ++row0) {
        DecodePageCursor cursor(key0, page_size);
        for (int g = 0; g < T::kBlockN / kDecodeMinPageSize; ++g) {
          const int row_base = cursor.row_base() + row0;
          for (int j = 0; j < kPassesPerGroup; ++j) {
            const int i = g * kPassesPerGroup + j;
            const int key = key0 + row0 + i * T::kRowsPerPass;
            const int row = row_base + j * T::kRowsPerPass;
            ++checked;
            if (cursor.page_idx != key / page_size || row != key % page_size) {
              if (wrong++ < 5) std::printf("bad D=%d page=%d key=%d -> entry %d row %d\n", D, page_size, key, cursor.page_idx, row);
            }
          }
          cursor.next();
        }
      }
    }
  std::printf("mapping %d %d %ld %ld %d %d\n", D, int(V), checked, wrong, T::kRowsPerPass, T::kBlockN);
}
int main() {
  check<64, DecodeVariant::kPortable>(); check<128, DecodeVariant::kPortable>(); check<256, DecodeVariant::kPortable>();
  check<128, DecodeVariant::kHopper>(); check<128, DecodeVariant::kHopperSplit>();
  check<128, DecodeVariant::kHopperStream>();
}
"""


def test_paged_row_mapping_of_every_decode_config(tmp_path_factory) -> None:
    """Every tile config, page sizes 16..528 (every multiple of 16, pages smaller and larger than
    the key tile), every thread's first row and pass: the block-table entry and row in the page
    that the split kernel's paged loads use are those of the key they stand for."""
    lines = run_cpp_probe(tmp_path_factory, "decode_pages", _PAGE_PROBE)
    assert not [line for line in lines if line.startswith("bad")], lines[:10]
    mapped = [line.split() for line in lines if line.startswith("mapping")]
    assert len(mapped) == 6, lines
    for _, d, variant, checked, wrong, rows_per_pass, block_n in mapped:
        assert int(checked) > 0 and int(wrong) == 0, (d, variant, checked, wrong)
        assert 16 % int(rows_per_pass) == 0 and int(block_n) % 16 == 0, (d, variant, rows_per_pass, block_n)


# ==== GPU: numerics, append, properties ============================================================


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({2: torch.int16, 4: torch.int32}[t.element_size()])


CACHE_LAYOUTS = ("contiguous", "bhsd", "slice_heads", "slice_seq", "pad_dim")


def make_cache(shape, layout: str, dtype, gen, device) -> torch.Tensor:
    """A [B, S, H, D] cache laid out as `layout` (strides multiples of 8, as the op requires)."""
    b, s, h, d = shape

    def randn(*size):
        return torch.randn(*size, generator=gen, device=device, dtype=F32).to(dtype)

    if layout == "contiguous":
        return randn(b, s, h, d)
    if layout == "bhsd":
        return randn(b, h, s, d).transpose(1, 2)
    if layout == "slice_heads":
        return randn(b, s, h + 1, d)[:, :, 1:]
    if layout == "slice_seq":
        return randn(b, s + 3, h, d)[:, 3:]
    if layout == "pad_dim":
        return randn(b, s, h, d + 8)[..., :d]
    raise ValueError(layout)


@dataclass(frozen=True)
class KVCacheSpec:
    batch: int
    seqlen_q: int
    heads_q: int
    heads_kv: int
    head_dim: int
    seqlen_k_max: int
    seqlen_new: int  # rows appended (0: no k/v)
    cache_lens: tuple[int, ...] | int | None  # per batch (tensor), one int, or None (= Sk_max)
    dtype: torch.dtype
    causal: bool
    scale: float | None
    num_splits: int
    layout: str
    q_transposed: bool  # q as a [B, H, S, D] buffer's transpose
    magnitude: float
    seed: int
    window: tuple[int, int] = (-1, -1)  # window_size (left, right)
    softcap: float = 0.0

    def __repr__(self) -> str:
        extra = (f" window={self.window}" if self.window != (-1, -1) else "") + (
            f" softcap={self.softcap:g}" if self.softcap else "")
        return (
            f"KVCacheSpec(B={self.batch} Sq={self.seqlen_q} Hq={self.heads_q} Hk={self.heads_kv} D={self.head_dim} "
            f"Sk_max={self.seqlen_k_max} Sq_new={self.seqlen_new} cache_seqlens={self.cache_lens} "
            f"{str(self.dtype).replace('torch.', '')} causal={self.causal} scale={self.scale} "
            f"num_splits={self.num_splits} cache={self.layout} q_bhsd={self.q_transposed} x{self.magnitude:g} "
            f"seed={self.seed}{extra})"
        )


@st.composite
def kvcache_specs(draw, max_batch: int = 4, max_seqlen_k: int = 300) -> KVCacheSpec:
    heads_kv = draw(st.integers(1, 4))
    heads_q = heads_kv * draw(st.sampled_from((1, 2, 3, 4, 8)))
    batch = draw(st.integers(1, max_batch))
    seqlen_q = draw(st.one_of(st.integers(1, 16), st.sampled_from((1, 1, 17, 40))))
    seqlen_k_max = draw(st.one_of(st.integers(1, 70), st.sampled_from((1, 31, 32, 33, 63, 64, 65, 128, 129, 257)), st.integers(1, max_seqlen_k)))
    seqlen_new = draw(st.one_of(st.just(0), st.integers(1, min(16, seqlen_k_max)), st.just(min(seqlen_q, seqlen_k_max))))
    room = seqlen_k_max - seqlen_new
    form = draw(st.sampled_from(("tensor", "tensor", "int", "none") if seqlen_new == 0 else ("tensor", "tensor", "int")))
    if form == "tensor":
        lens = tuple(draw(st.lists(st.one_of(st.integers(0, room), st.just(room), st.just(0)), min_size=batch, max_size=batch)))
    elif form == "int":
        lens = draw(st.integers(0, room))
    else:
        lens = None
    return KVCacheSpec(
        batch=batch,
        seqlen_q=seqlen_q,
        heads_q=heads_q,
        heads_kv=heads_kv,
        head_dim=draw(st.one_of(st.sampled_from((64, 128, 256)), st.integers(1, 32).map(lambda x: 8 * x))),
        seqlen_k_max=seqlen_k_max,
        seqlen_new=seqlen_new,
        cache_lens=lens,
        dtype=draw(st.sampled_from((F16, BF16))),
        causal=draw(st.booleans()),
        scale=draw(st.one_of(st.none(), st.just(0.0), st.floats(-1.0, 1.0, allow_nan=False, width=32))),
        num_splits=draw(st.sampled_from((0, 0, 1, 2, 3, 5, 16, 64, 128))),
        layout=draw(st.sampled_from(CACHE_LAYOUTS)),
        q_transposed=draw(st.booleans()),
        magnitude=draw(st.sampled_from((1.0, 30.0))),
        seed=draw(st.integers(0, 2**31 - 1)),
    )


@st.composite
def kvcache_window_specs(draw, max_batch: int = 4, max_seqlen_k: int = 300) -> KVCacheSpec:
    """kvcache_specs with a local window and/or a softcap (tests/strategies.py windows, softcaps)."""
    import dataclasses

    import strategies as fst

    spec = draw(kvcache_specs(max_batch, max_seqlen_k))
    window = draw(fst.windows(max_extent=max_seqlen_k))
    softcap = draw(fst.softcaps())
    return dataclasses.replace(spec, window=window, softcap=softcap)


def run_and_check(spec: KVCacheSpec, device: torch.device) -> None:
    """One call under `spec`, checked against the reference batch by batch, the append bitwise."""
    gen = torch.Generator(device=device).manual_seed(spec.seed)
    b, sq, hq, hk, d = spec.batch, spec.seqlen_q, spec.heads_q, spec.heads_kv, spec.head_dim
    dt = spec.dtype
    if spec.q_transposed:
        q = (torch.randn(b, hq, sq, d, generator=gen, device=device) * spec.magnitude).to(dt).transpose(1, 2)
    else:
        q = (torch.randn(b, sq, hq, d, generator=gen, device=device) * spec.magnitude).to(dt)
    k_cache = make_cache((b, spec.seqlen_k_max, hk, d), spec.layout, dt, gen, device)
    v_cache = make_cache((b, spec.seqlen_k_max, hk, d), spec.layout, dt, gen, device)
    k_new = v_new = None
    if spec.seqlen_new:
        k_new = torch.randn(b, spec.seqlen_new, hk, d, generator=gen, device=device).to(dt)
        v_new = torch.randn(b, spec.seqlen_new, hk, d, generator=gen, device=device).to(dt)
    if isinstance(spec.cache_lens, tuple):
        lens = list(spec.cache_lens)
        seqlens_arg = torch.tensor(lens, dtype=I32, device=device)
    elif isinstance(spec.cache_lens, int):
        lens = [spec.cache_lens] * b
        seqlens_arg = spec.cache_lens
    else:
        lens = [spec.seqlen_k_max] * b
        seqlens_arg = None
    # Rows past each sequence's end hold NaN: the kernels must never let them into the result.
    for i in range(b):
        k_cache[i, lens[i] + spec.seqlen_new :] = float("nan")
        v_cache[i, lens[i] + spec.seqlen_new :] = float("nan")
    expect_k, expect_v = k_cache.clone(), v_cache.clone()
    for i in range(b):
        if spec.seqlen_new:
            expect_k[i, lens[i] : lens[i] + spec.seqlen_new] = k_new[i]
            expect_v[i, lens[i] : lens[i] + spec.seqlen_new] = v_new[i]
    k_ptr = k_cache.data_ptr()

    from gpu_helpers import poison_cuda_allocator

    poison_cuda_allocator()
    out, lse = kvcache(
        q, k_cache, v_cache, k_new, v_new, cache_seqlens=seqlens_arg, softmax_scale=spec.scale,
        causal=spec.causal, num_splits=spec.num_splits, return_lse=True, window_size=spec.window, softcap=spec.softcap,
    )
    torch.cuda.synchronize(device)
    assert k_cache.data_ptr() == k_ptr
    for name, got, want in (("k_cache", k_cache, expect_k), ("v_cache", v_cache, expect_v)):
        differ = int((bits(got) != bits(want)).sum())
        assert differ == 0, f"{spec}: {name}: {differ} elements differ from the expected in-place append"
    mode = BOTTOM_RIGHT if spec.causal else NONE
    for i in range(b):
        n = lens[i] + spec.seqlen_new
        assert_attention_matches(
            out[i : i + 1], lse[i : i + 1], q[i : i + 1], expect_k[i : i + 1, :n], expect_v[i : i + 1, :n],
            spec.scale, mode, window=spec.window, softcap=spec.softcap, context=f"{spec} batch {i} (seqlen_k {n})",
        )


@gpu_test
@given(spec=kvcache_specs())
def test_kvcache_matches_reference(spec: KVCacheSpec, device: torch.device) -> None:
    run_and_check(spec, device)


@gpu_test
@given(spec=kvcache_window_specs())
def test_kvcache_with_window_and_softcap_matches_reference(spec: KVCacheSpec, device: torch.device) -> None:
    """Local window (aligned per batch at seqlen_k(b) - Sq) and softcap, under the suite's
    criterion with the softcap's tanh allowance (tests/numerics.py)."""
    run_and_check(spec, device)


def _spec(**kw) -> KVCacheSpec:
    base = dict(batch=2, seqlen_q=1, heads_q=32, heads_kv=8, head_dim=128, seqlen_k_max=4096, seqlen_new=0,
                cache_lens=None, dtype=BF16, causal=False, scale=None, num_splits=0, layout="contiguous",
                q_transposed=False, magnitude=1.0, seed=0)
    base.update(kw)
    return KVCacheSpec(**base)


LONG_CASES = [
    _spec(),
    _spec(cache_lens=(4000, 17), num_splits=128),
    _spec(seqlen_k_max=33000, cache_lens=(32999, 1025), num_splits=0, causal=True, seqlen_new=1),
    _spec(seqlen_k_max=20000, batch=1, cache_lens=19999, num_splits=1, dtype=F16, head_dim=64, heads_q=8, heads_kv=1),
    _spec(seqlen_k_max=9000, cache_lens=(8000, 8999), head_dim=256, heads_q=16, heads_kv=2, num_splits=7, seqlen_q=4, seqlen_new=1, causal=True),
    _spec(seqlen_k_max=5000, seqlen_q=16, heads_q=16, heads_kv=2, cache_lens=(4984, 3000), seqlen_new=16, causal=True, layout="bhsd"),
    _spec(seqlen_k_max=3000, heads_q=8, heads_kv=8, cache_lens=(0, 2999), seqlen_new=1, causal=True, num_splits=5),
    # sliding windows over long caches: only the window's key blocks are split and read
    _spec(seqlen_k_max=33000, cache_lens=(32999, 1025), seqlen_new=1, causal=True, window=(4096, 0)),
    _spec(seqlen_k_max=20000, cache_lens=(19990, 300), seqlen_q=4, seqlen_new=4, causal=True, window=(1000, 0), num_splits=16),
    _spec(seqlen_k_max=9000, cache_lens=(8000, 10), head_dim=256, heads_q=16, heads_kv=2, seqlen_q=8, window=(500, 3), softcap=30.0),
    _spec(seqlen_k_max=5000, cache_lens=(4999, 2000), magnitude=30.0, softcap=50.0, dtype=F16, causal=True),
    # D=128 small batches whose heuristic plan runs kHopperSplit on sm90 (decode_prefer_split_config):
    # full and ragged caches, an append, fp16, a window
    _spec(batch=1, seqlen_k_max=4096, cache_lens=4096),
    _spec(batch=3, seqlen_k_max=1100, cache_lens=(1099, 517, 1), seqlen_new=1, causal=True, dtype=F16),
    _spec(batch=1, seqlen_k_max=16400, cache_lens=16383, seqlen_q=3, seqlen_new=3, causal=True, window=(2000, 0)),
]


@gpu_test
@pytest.mark.parametrize("spec", LONG_CASES, ids=repr)
def test_long_caches_and_many_splits(spec: KVCacheSpec, device: torch.device) -> None:
    run_and_check(spec, device)


@gpu_test
def test_rows_that_see_no_key_are_zero_with_lse_minus_inf(device: torch.device) -> None:
    """Bottom-right causal with Sq > seqlen_k: the first Sq - seqlen_k rows see nothing; a batch
    with an empty cache and nothing appended sees nothing at all."""
    q = torch.randn(2, 12, 4, 64, device=device, dtype=F16)
    kc = torch.randn(2, 40, 2, 64, device=device, dtype=F16)
    vc = torch.randn(2, 40, 2, 64, device=device, dtype=F16)
    for splits in (1, 3):
        out, lse = kvcache(q, kc, vc, cache_seqlens=torch.tensor([5, 0], dtype=I32, device=device), causal=True,
                           num_splits=splits, return_lse=True)
        assert (out[0, :7] == 0).all() and torch.isneginf(lse[0, :, :7]).all()
        assert torch.isfinite(lse[0, :, 7:]).all()
        assert (out[1] == 0).all() and torch.isneginf(lse[1]).all()
        assert_attention_matches(out[:1], lse[:1], q[:1], kc[:1, :5], vc[:1, :5], None, BOTTOM_RIGHT)


@gpu_test
def test_inputs_at_unaligned_addresses_give_the_aligned_result(device: torch.device) -> None:
    """q and the appended k/v as contiguous views 3 elements into flat buffers (contiguous to torch,
    not 16-byte aligned: the binding copies them): output, lse and the appended caches bitwise equal
    to the same call on aligned tensors."""
    gen = torch.Generator(device=device).manual_seed(11)

    def randn(*shape: int, offset: int = 0) -> torch.Tensor:
        n = math.prod(shape)
        return torch.randn(offset + n, generator=gen, device=device).to(BF16)[offset:].view(shape)

    q, k_new, v_new = randn(2, 1, 4, 64, offset=3), randn(2, 1, 2, 64, offset=3), randn(2, 1, 2, 64, offset=5)
    assert q.is_contiguous() and q.data_ptr() % 16 != 0
    kc, vc = randn(2, 40, 2, 64), randn(2, 40, 2, 64)
    kc2, vc2 = kc.clone(), vc.clone()
    lens = torch.tensor([9, 30], dtype=I32, device=device)
    out, lse = kvcache(q, kc, vc, k_new, v_new, cache_seqlens=lens, causal=True, return_lse=True)
    ref, ref_lse = kvcache(q.clone(), kc2, vc2, k_new.clone(), v_new.clone(), cache_seqlens=lens, causal=True,
                           return_lse=True)
    assert torch.equal(out, ref) and torch.equal(lse, ref_lse)
    assert torch.equal(kc, kc2) and torch.equal(vc, vc2)


@gpu_test
def test_split_count_does_not_change_the_result_beyond_rounding(device: torch.device) -> None:
    gen = torch.Generator(device=device).manual_seed(3)
    q = torch.randn(1, 1, 32, 128, generator=gen, device=device).to(BF16)
    kc = torch.randn(1, 16384, 8, 128, generator=gen, device=device).to(BF16)
    vc = torch.randn(1, 16384, 8, 128, generator=gen, device=device).to(BF16)
    ref, ref_lse = kvcache(q, kc, vc, num_splits=1, return_lse=True)
    for splits in (0, 2, 17, 128):
        out, lse = kvcache(q, kc, vc, num_splits=splits, return_lse=True)
        torch.testing.assert_close(lse, ref_lse, atol=1e-4, rtol=1e-5)
        torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=0)


def _decode_step_inputs(device: torch.device):
    gen = torch.Generator(device=device).manual_seed(7)
    b, hq, hk, d, sk = 3, 16, 4, 128, 2048
    q = torch.randn(b, 1, hq, d, generator=gen, device=device).to(BF16)
    kc = torch.randn(b, sk, hk, d, generator=gen, device=device).to(BF16)
    vc = torch.randn(b, sk, hk, d, generator=gen, device=device).to(BF16)
    k = torch.randn(b, 1, hk, d, generator=gen, device=device).to(BF16)
    v = torch.randn(b, 1, hk, d, generator=gen, device=device).to(BF16)
    seqlens = torch.tensor([100, 2047, 1000], dtype=I32, device=device)
    return q, kc, vc, k, v, seqlens


@gpu_test
def test_torch_compile_fullgraph_on_gpu(device: torch.device) -> None:
    q, kc, vc, k, v, seqlens = _decode_step_inputs(device)
    kc2, vc2 = kc.clone(), vc.clone()

    def step(q, kc, vc, k, v, seqlens):
        return flashattn.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, causal=True, return_lse=True)

    want_out, want_lse = step(q, kc, vc, k, v, seqlens)
    got_out, got_lse = torch.compile(step, fullgraph=True)(q, kc2, vc2, k, v, seqlens)
    torch.testing.assert_close(got_out, want_out, atol=0, rtol=0)
    torch.testing.assert_close(got_lse, want_lse, atol=0, rtol=0)
    assert bool((bits(kc2) == bits(kc)).all()) and bool((bits(vc2) == bits(vc)).all()), "compiled append differs"


@gpu_test
def test_cuda_graph_replay_follows_new_cache_seqlens(device: torch.device) -> None:
    """No host sync in the op: it captures; replays read the current cache_seqlens values."""
    q, kc, vc, k, v, seqlens = _decode_step_inputs(device)
    kc_eager, vc_eager = kc.clone(), vc.clone()
    static = dict(q=q.clone(), k=k.clone(), v=v.clone(), seqlens=seqlens.clone())

    def step():
        return flashattn.flash_attn_with_kvcache(static["q"], kc, vc, static["k"], static["v"],
                                                 cache_seqlens=static["seqlens"], return_lse=True)

    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        step()  # warm-up (first-call attribute setup, allocator)
    torch.cuda.current_stream(device).wait_stream(side)
    kc.copy_(kc_eager), vc.copy_(vc_eager)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g_out, g_lse = step()
    for new_lens in ([5, 10, 15], [2047, 0, 1024], [100, 2047, 1000]):
        kc.copy_(kc_eager), vc.copy_(vc_eager)
        static["seqlens"].copy_(torch.tensor(new_lens, dtype=I32, device=device))
        graph.replay()
        ke, ve = kc_eager.clone(), vc_eager.clone()
        e_out, e_lse = flashattn.flash_attn_with_kvcache(q, ke, ve, k, v, cache_seqlens=static["seqlens"], return_lse=True)
        torch.cuda.synchronize(device)
        torch.testing.assert_close(g_out, e_out, atol=0, rtol=0)
        torch.testing.assert_close(g_lse, e_lse, atol=0, rtol=0)
        assert bool((bits(kc) == bits(ke)).all()), f"graph append differs for cache_seqlens {new_lens}"


# ==== paged caches (block_table) ==================================================================
# The pool holds every sequence's pages in a random permutation; pages 0 and num_pages - 1 are
# spares full of NaN that no table entry names, so a kernel reading a page it should not (a -1
# entry would be clamped to page 0) lets NaN into the result. Table entries of pages that hold no
# key even after the append are -1 on odd batches (the contract: never read). Reference: the pages
# gathered back into a contiguous cache, then the contiguous path's checks.


def random_block_table(batch: int, pages_per_seq: int, lens_after: list[int], page_size: int, seed: int) -> torch.Tensor:
    """int32 [batch, pages_per_seq] (CPU): distinct pages 1 .. batch * pages_per_seq in random order."""
    gen = torch.Generator().manual_seed(seed)
    table = (torch.randperm(batch * pages_per_seq, generator=gen) + 1).view(batch, pages_per_seq).to(I32)
    for i in range(1, batch, 2):
        table[i, -(-lens_after[i] // page_size):] = -1
    return table


def pages_from_contiguous(cache: torch.Tensor, table: torch.Tensor, page_size: int, layout: str = "contiguous") -> torch.Tensor:
    """The pool [batch * pages_per_seq + 2, page_size, H, D] holding cache [B, S, H, D] (S a multiple
    of page_size) through table (CPU int32); unnamed pages and rows of -1 entries are NaN."""
    b, s, h, d = cache.shape
    num_pages = b * (s // page_size) + 2
    if layout == "contiguous":
        pool = torch.full((num_pages, page_size, h, d), float("nan"), dtype=cache.dtype, device=cache.device)
    elif layout == "bhsd":  # heads before rows inside a page: strides (H*P*D, D, P*D, 1)
        pool = torch.full((num_pages, h, page_size, d), float("nan"), dtype=cache.dtype, device=cache.device).transpose(1, 2)
    else:
        raise ValueError(layout)
    for i in range(b):
        for j in range(s // page_size):
            page = int(table[i, j])
            if page >= 0:
                pool[page] = cache[i, j * page_size : (j + 1) * page_size]
    return pool


def gather_pages(pool: torch.Tensor, table: torch.Tensor, batch: int, n: int) -> torch.Tensor:
    """The first n keys of sequence `batch` as a contiguous [1, n, H, D] cache."""
    page_size = pool.shape[1]
    pages = [pool[int(table[batch, j])] for j in range(-(-n // page_size))]
    rows = torch.cat(pages, 0)[:n] if pages else pool.new_empty((0, *pool.shape[2:]))
    return rows.unsqueeze(0)


def test_paged_test_helpers_round_trip() -> None:
    """The GPU tests' reference rests on these: gathering the pages back gives the cache."""
    cache = torch.randn(3, 64, 2, 8)
    table = random_block_table(3, 4, [64, 17, 33], 16, seed=1)
    assert sorted(int(x) for x in table.flatten() if x >= 0) == sorted(set(int(x) for x in table.flatten() if x >= 0))
    assert int(table.min()) >= -1 and int(table.max()) <= 12 and (table[1, 2:] == -1).all() and (table[1, :2] >= 1).all()
    for layout in ("contiguous", "bhsd"):
        pool = pages_from_contiguous(cache, table, 16, layout)
        assert pool.shape == (14, 16, 2, 8) and torch.isnan(pool[0]).all() and torch.isnan(pool[13]).all()
        for i, n in ((0, 64), (1, 17), (1, 32), (2, 33), (2, 0)):
            torch.testing.assert_close(gather_pages(pool, table, i, n), cache[i : i + 1, :n], rtol=0, atol=0)


PAGE_SIZES = (16, 16, 32, 48, 64, 256)


def run_and_check_paged(spec: KVCacheSpec, page_size: int, pool_layout: str, device: torch.device) -> None:
    """One paged call under `spec` (its cache layout aside: the pool has its own): the append
    checked bitwise on the whole pool, every batch against the reference on the gathered pages,
    and, with forced splits, out and LSE bitwise equal to the contiguous path's on the same cache
    (the same key tiles and splits; the heuristic may plan differently if the two kernels' occupancy
    differ)."""
    gen = torch.Generator(device=device).manual_seed(spec.seed)
    b, sq, hq, hk, d = spec.batch, spec.seqlen_q, spec.heads_q, spec.heads_kv, spec.head_dim
    dt = spec.dtype
    pages_per_seq = max(1, -(-spec.seqlen_k_max // page_size))
    sk = pages_per_seq * page_size
    if spec.q_transposed:
        q = (torch.randn(b, hq, sq, d, generator=gen, device=device) * spec.magnitude).to(dt).transpose(1, 2)
    else:
        q = (torch.randn(b, sq, hq, d, generator=gen, device=device) * spec.magnitude).to(dt)
    k_c = torch.randn(b, sk, hk, d, generator=gen, device=device).to(dt)
    v_c = torch.randn(b, sk, hk, d, generator=gen, device=device).to(dt)
    k_new = v_new = None
    if spec.seqlen_new:
        k_new = torch.randn(b, spec.seqlen_new, hk, d, generator=gen, device=device).to(dt)
        v_new = torch.randn(b, spec.seqlen_new, hk, d, generator=gen, device=device).to(dt)
    if isinstance(spec.cache_lens, tuple):
        lens = list(spec.cache_lens)
        seqlens_arg = torch.tensor(lens, dtype=I32, device=device)
    elif isinstance(spec.cache_lens, int):
        lens = [spec.cache_lens] * b
        seqlens_arg = spec.cache_lens
    else:
        lens = [sk] * b
        seqlens_arg = None
    lens_after = [n + spec.seqlen_new for n in lens]
    for i in range(b):
        k_c[i, lens_after[i] :] = float("nan")
        v_c[i, lens_after[i] :] = float("nan")
    expect_k, expect_v = k_c.clone(), v_c.clone()
    if spec.seqlen_new:
        for i in range(b):
            expect_k[i, lens[i] : lens_after[i]] = k_new[i]
            expect_v[i, lens[i] : lens_after[i]] = v_new[i]
    table_cpu = random_block_table(b, pages_per_seq, lens_after, page_size, spec.seed)
    table = table_cpu.to(device)
    k_pool = pages_from_contiguous(k_c, table_cpu, page_size, pool_layout)
    v_pool = pages_from_contiguous(v_c, table_cpu, page_size, pool_layout)
    want_k_pool = pages_from_contiguous(expect_k, table_cpu, page_size, pool_layout)
    want_v_pool = pages_from_contiguous(expect_v, table_cpu, page_size, pool_layout)
    context = f"{spec} page_size={page_size} pool={pool_layout}"

    from gpu_helpers import poison_cuda_allocator

    poison_cuda_allocator()
    kw = dict(cache_seqlens=seqlens_arg, softmax_scale=spec.scale, causal=spec.causal, num_splits=spec.num_splits,
              return_lse=True, window_size=spec.window, softcap=spec.softcap)
    out, lse = kvcache(q, k_pool, v_pool, k_new, v_new, block_table=table, **kw)
    torch.cuda.synchronize(device)
    for name, got, want in (("k_cache", k_pool, want_k_pool), ("v_cache", v_pool, want_v_pool)):
        differ = int((bits(got) != bits(want)).sum())
        assert differ == 0, f"{context}: {name}: {differ} elements of the pool differ from the expected in-place append"
    mode = BOTTOM_RIGHT if spec.causal else NONE
    for i in range(b):
        n = lens_after[i]
        assert_attention_matches(
            out[i : i + 1], lse[i : i + 1], q[i : i + 1], gather_pages(k_pool, table_cpu, i, n),
            gather_pages(v_pool, table_cpu, i, n), spec.scale, mode, window=spec.window, softcap=spec.softcap,
            context=f"{context} batch {i} (seqlen_k {n})",
        )
    if spec.num_splits > 0:
        c_out, c_lse = kvcache(q, k_c, v_c, k_new, v_new, **kw)
        assert torch.equal(bits(out), bits(c_out)), f"{context}: out differs from the contiguous cache's"
        assert torch.equal(bits(lse), bits(c_lse)), f"{context}: lse differs from the contiguous cache's"


@gpu_test
@given(spec=st.one_of(kvcache_specs(), kvcache_window_specs()), page_size=st.sampled_from(PAGE_SIZES),
       pool_layout=st.sampled_from(("contiguous", "contiguous", "bhsd")))
def test_paged_kvcache_matches_reference_and_contiguous(spec: KVCacheSpec, page_size: int, pool_layout: str,
                                                        device: torch.device) -> None:
    run_and_check_paged(spec, page_size, pool_layout, device)


PAGED_CASES = [
    # partially filled last page, an empty sequence, a full one
    (_spec(batch=3, seqlen_k_max=256, cache_lens=(100, 0, 256), num_splits=1), 64),
    # the append crosses page boundaries (14 + 5 > 16, 30 + 5 > 32) and starts a page (0 + 5)
    (_spec(batch=3, seqlen_k_max=64, heads_q=8, heads_kv=2, cache_lens=(14, 30, 0), seqlen_q=5, seqlen_new=5,
           causal=True, num_splits=2), 16),
    # the append fills a page exactly and the next starts empty
    (_spec(batch=2, seqlen_k_max=96, cache_lens=(28, 44), seqlen_new=4, seqlen_q=4, causal=True, num_splits=3), 16),
    # head dims of every config: 2, 8, 16 rows per pass
    (_spec(seqlen_k_max=1000, head_dim=256, heads_q=16, heads_kv=2, cache_lens=(999, 333), seqlen_new=1, num_splits=5), 16),
    (_spec(seqlen_k_max=1000, head_dim=64, heads_q=8, heads_kv=1, cache_lens=(999, 333), seqlen_new=1, num_splits=5, dtype=F16), 16),
    (_spec(seqlen_k_max=1000, head_dim=96, heads_q=12, heads_kv=4, cache_lens=(640, 17), seqlen_new=1, num_splits=4), 48),
    # window and softcap through the table
    (_spec(seqlen_k_max=5000, cache_lens=(4990, 700), seqlen_q=4, seqlen_new=4, causal=True, window=(1000, 0),
           softcap=30.0, num_splits=16), 64),
    # GQA 8:1 (the decode benchmark grid's other head layout): one KV head, 8 packed query rows
    (_spec(batch=3, heads_q=8, heads_kv=1, seqlen_k_max=2048, cache_lens=(2047, 5, 1000), seqlen_new=1, causal=True,
           num_splits=9), 16),
    # pages larger than every key tile, page of one key tile, the heuristic
    (_spec(seqlen_k_max=33000, cache_lens=(32999, 1025), seqlen_new=1, causal=True, num_splits=0), 256),
    (_spec(seqlen_k_max=8192, cache_lens=(8000, 4096), seqlen_new=1, num_splits=0), 128),
    # the heuristic's kHopperSplit on sm90 (B=1, the keys split) through the table
    (_spec(batch=1, seqlen_k_max=4096, cache_lens=4095, seqlen_new=1, causal=True, num_splits=0), 16),
    (_spec(batch=1, seqlen_k_max=4096, cache_lens=4096, num_splits=0), 64),
] + [
    # splits 1..many over long caches, every benchmarked page size
    (_spec(batch=3, seqlen_k_max=4096, cache_lens=(4000, 17, 2049), seqlen_new=1, causal=True, num_splits=s), page)
    for page in (16, 64, 256) for s in (1, 2, 7, 33, 128)
]


@gpu_test
@pytest.mark.parametrize(("spec", "page_size"), PAGED_CASES, ids=lambda x: repr(x) if isinstance(x, KVCacheSpec) else f"page{x}")
def test_paged_cases(spec: KVCacheSpec, page_size: int, device: torch.device) -> None:
    run_and_check_paged(spec, page_size, "contiguous", device)


@gpu_test
@pytest.mark.parametrize("page_size", [16, 64, 256])
@pytest.mark.parametrize(("heads_q", "heads_kv"), [(32, 8), (8, 1)], ids=["gqa32:8", "gqa8:1"])
def test_paged_result_does_not_depend_on_the_page_order(page_size: int, heads_q: int, heads_kv: int,
                                                        device: torch.device) -> None:
    """One logical cache (partially filled last pages) under the identity table and several random
    page permutations of the pool: out and LSE equal bit for bit (the heuristic's plan, and forced
    splits, which also equal the contiguous cache's)."""
    gen = torch.Generator(device=device).manual_seed(page_size)
    b, sk, d = 2, 4096, 128
    q = torch.randn(b, 1, heads_q, d, generator=gen, device=device).to(BF16)
    kc = torch.randn(b, sk, heads_kv, d, generator=gen, device=device).to(BF16)
    vc = torch.randn(b, sk, heads_kv, d, generator=gen, device=device).to(BF16)
    seqlens = torch.tensor([4000, 1234], dtype=I32, device=device)
    n = sk // page_size
    tables = [torch.arange(1, b * n + 1, dtype=I32).view(b, n)]
    tables += [random_block_table(b, n, [sk] * b, page_size, seed) for seed in (1, 2, 3)]
    for splits in (0, 5):
        results = []
        for table in tables:
            kp, vp = pages_from_contiguous(kc, table, page_size), pages_from_contiguous(vc, table, page_size)
            results.append(kvcache(q, kp, vp, cache_seqlens=seqlens, num_splits=splits, return_lse=True,
                                   block_table=table.to(device)))
        if splits:
            results.append(kvcache(q, kc, vc, cache_seqlens=seqlens, num_splits=splits, return_lse=True))
        for i, (out, lse) in enumerate(results[1:], 1):
            assert torch.equal(bits(out), bits(results[0][0])), f"splits={splits}: result {i} out differs"
            assert torch.equal(bits(lse), bits(results[0][1])), f"splits={splits}: result {i} lse differs"
    out, lse = results[0]
    for i, n in enumerate(seqlens.tolist()):
        assert_attention_matches(out[i : i + 1], lse[i : i + 1], q[i : i + 1], kc[i : i + 1, :n], vc[i : i + 1, :n], None,
                                 NONE, context=f"page {page_size} GQA {heads_q}:{heads_kv} batch {i} ({n} keys)")


def _paged_step_inputs(device: torch.device, page_size: int = 64):
    q, kc, vc, k, v, seqlens = _decode_step_inputs(device)
    b, sk = kc.shape[0], kc.shape[1]
    table_cpu = random_block_table(b, sk // page_size, [sk] * b, page_size, seed=11)
    k_pool = pages_from_contiguous(kc, table_cpu, page_size)
    v_pool = pages_from_contiguous(vc, table_cpu, page_size)
    return q, k_pool, v_pool, k, v, seqlens, table_cpu.to(device)


@gpu_test
def test_paged_torch_compile_fullgraph_on_gpu(device: torch.device) -> None:
    q, kp, vp, k, v, seqlens, table = _paged_step_inputs(device)
    kp2, vp2 = kp.clone(), vp.clone()

    def step(q, kp, vp, k, v, seqlens, table):
        return flashattn.flash_attn_with_kvcache(q, kp, vp, k, v, cache_seqlens=seqlens, causal=True, return_lse=True,
                                                 block_table=table)

    want_out, want_lse = step(q, kp, vp, k, v, seqlens, table)
    got_out, got_lse = torch.compile(step, fullgraph=True)(q, kp2, vp2, k, v, seqlens, table)
    torch.testing.assert_close(got_out, want_out, atol=0, rtol=0)
    torch.testing.assert_close(got_lse, want_lse, atol=0, rtol=0)
    assert bool((bits(kp2) == bits(kp)).all()) and bool((bits(vp2) == bits(vp)).all()), "compiled paged append differs"


@gpu_test
def test_paged_cuda_graph_replay_follows_new_seqlens_and_tables(device: torch.device) -> None:
    """A captured paged decode step (append + attend): replays read the current cache_seqlens and
    block_table contents, and match eager calls on copies of the pools."""
    q, kp, vp, k, v, seqlens, table = _paged_step_inputs(device)
    kp_eager, vp_eager = kp.clone(), vp.clone()
    static = dict(q=q.clone(), k=k.clone(), v=v.clone(), seqlens=seqlens.clone(), table=table.clone())

    def step():
        return flashattn.flash_attn_with_kvcache(static["q"], kp, vp, static["k"], static["v"],
                                                 cache_seqlens=static["seqlens"], causal=True, return_lse=True,
                                                 block_table=static["table"])

    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        step()  # warm-up (first-call attribute setup, allocator)
    torch.cuda.current_stream(device).wait_stream(side)
    kp.copy_(kp_eager), vp.copy_(vp_eager)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g_out, g_lse = step()
    # The sequences' pages rotated between replays: the same pool, another table.
    rotated = torch.roll(table, shifts=1, dims=0)
    for new_lens, new_table in (([5, 10, 15], table), ([2047, 0, 1024], rotated), ([63, 64, 1000], table)):
        kp.copy_(kp_eager), vp.copy_(vp_eager)
        static["seqlens"].copy_(torch.tensor(new_lens, dtype=I32, device=device))
        static["table"].copy_(new_table)
        graph.replay()
        ke, ve = kp_eager.clone(), vp_eager.clone()
        e_out, e_lse = flashattn.flash_attn_with_kvcache(q, ke, ve, k, v, cache_seqlens=static["seqlens"], causal=True,
                                                         return_lse=True, block_table=static["table"])
        torch.cuda.synchronize(device)
        torch.testing.assert_close(g_out, e_out, atol=0, rtol=0)
        torch.testing.assert_close(g_lse, e_lse, atol=0, rtol=0)
        assert bool((bits(kp) == bits(ke)).all()), f"graph paged append differs for cache_seqlens {new_lens}"
        assert bool((bits(vp) == bits(ve)).all()), f"graph paged append differs for cache_seqlens {new_lens}"


# ==== seqused_k ====================================================================================
# The keys each batch's attention uses, in place of cache_seqlens + Sq_new; the append still writes
# at cache_seqlens. Reference: the first seqused_k[b] keys of the cache after the append (clamped to
# [0, Sk_max]).

SEQUSED_CASES = {
    "lens+new": [102, 2, 302, 512],  # what cache_seqlens + Sq_new gives: the call without seqused_k
    "shorter and longer": [50, 130, 512, 1],  # fewer keys than written, more than written, one key
    "clamped": [-3, 600, 0, 2**31 - 1],  # outside [0, Sk_max]: as 0 and Sk_max
}


def _seqused_inputs(device: torch.device, paged: bool, page_size: int = 64):
    gen = torch.Generator(device=device).manual_seed(5)
    b, sq, hq, hk, d, sk = 4, 2, 16, 4, 128, 512
    q = torch.randn(b, sq, hq, d, generator=gen, device=device).to(BF16)
    kc = torch.randn(b, sk, hk, d, generator=gen, device=device).to(BF16)
    vc = torch.randn(b, sk, hk, d, generator=gen, device=device).to(BF16)
    k = torch.randn(b, 2, hk, d, generator=gen, device=device).to(BF16)
    v = torch.randn(b, 2, hk, d, generator=gen, device=device).to(BF16)
    lens = [100, 0, 300, 510]
    expect_k, expect_v = kc.clone(), vc.clone()
    for i, n in enumerate(lens):
        expect_k[i, n : n + 2], expect_v[i, n : n + 2] = k[i], v[i]
    if not paged:
        return q, kc, vc, k, v, lens, expect_k, expect_v, {}
    table_cpu = random_block_table(b, sk // page_size, [sk] * b, page_size, seed=3)
    pools = [pages_from_contiguous(c, table_cpu, page_size) for c in (kc, vc, expect_k, expect_v)]
    return q, pools[0], pools[1], k, v, lens, pools[2], pools[3], {"block_table": table_cpu.to(device)}


@gpu_test
@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("case", list(SEQUSED_CASES))
@pytest.mark.parametrize("splits", [1, 3, 0])
def test_seqused_k_sets_the_keys_attended(case: str, paged: bool, splits: int, device: torch.device) -> None:
    q, kc, vc, k, v, lens, expect_k, expect_v, paging = _seqused_inputs(device, paged)
    used = SEQUSED_CASES[case]
    sk = 512
    kw = dict(cache_seqlens=torch.tensor(lens, dtype=I32, device=device), causal=True, num_splits=splits,
              return_lse=True, **paging)
    k1, v1 = kc.clone(), vc.clone()
    out, lse = kvcache(q, k1, v1, k, v, seqused_k=torch.tensor(used, dtype=I32, device=device), **kw)
    torch.cuda.synchronize(device)
    assert torch.equal(bits(k1), bits(expect_k)) and torch.equal(bits(v1), bits(expect_v)), \
        f"{case}: the append with seqused_k differs from the one at cache_seqlens"
    table_cpu = paging["block_table"].cpu() if paged else None
    for i, u in enumerate(used):
        n = min(max(u, 0), sk)
        if paged:
            kk, vv = gather_pages(k1, table_cpu, i, n), gather_pages(v1, table_cpu, i, n)
        else:
            kk, vv = k1[i : i + 1, :n], v1[i : i + 1, :n]
        assert_attention_matches(out[i : i + 1], lse[i : i + 1], q[i : i + 1], kk, vv, None, BOTTOM_RIGHT,
                                 context=f"seqused_k {case} {'paged' if paged else 'contiguous'} splits={splits} "
                                         f"batch {i} ({n} keys)")
    if case == "lens+new":  # the same seqlen_k(b) as without seqused_k: the same kernels' result, bit for bit
        k2, v2 = kc.clone(), vc.clone()
        want_out, want_lse = kvcache(q, k2, v2, k, v, **kw)
        assert torch.equal(bits(out), bits(want_out)) and torch.equal(bits(lse), bits(want_lse))


@gpu_test
@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_seqused_k_cuda_graph_replay_follows_new_values(paged: bool, device: torch.device) -> None:
    """A captured call with seqused_k: replays read its current contents and match eager calls."""
    q, kc, vc, _, _, _, _, _, paging = _seqused_inputs(device, paged)
    used = torch.tensor([1, 1, 1, 1], dtype=I32, device=device)

    def step():
        return kvcache(q, kc, vc, seqused_k=used, causal=True, return_lse=True, **paging)

    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g_out, g_lse = step()
    for new in ([5, 10, 15, 512], [512, 0, 100, 1], [64, 65, 128, 300]):
        used.copy_(torch.tensor(new, dtype=I32, device=device))
        graph.replay()
        e_out, e_lse = step()
        torch.cuda.synchronize(device)
        assert torch.equal(bits(g_out), bits(e_out)) and torch.equal(bits(g_lse), bits(e_lse)), new
        assert torch.isneginf(e_lse[1]).all() == (new[1] == 0), new
