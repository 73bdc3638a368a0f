"""The checked indices mode (issue 25), CPU side.

Device-side index tensors (cu_seqlens of packed batches; cache_seqlens, seqused_k and block_table
of decoding) are never read on the host by default. flashattn.set_check_indices(True) (or
FLASHATTN_CHECK_INDICES=1) validates them with torch ops before a launch and raises a ValueError
naming the argument. The validation functions are plain torch code, so they run here on CPU
tensors: every bad index gives its message, every good one passes. The wiring (which entry point
calls which check, and only when the mode is on) is checked with the op replaced by a stub.
The GPU side (the message from a real call; without the mode, no write outside the tensors) is in
tests/kernels/test_check_indices_gpu.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import flashattn
from flashattn import _ops
from tensor_makers import fake_maker

I32 = torch.int32


def cu(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=I32)


def check_varlen(cu_q, cu_k, total_q=10, total_k=12, max_q=6, max_k=8):
    _ops.check_varlen_indices("fwd_varlen", cu_q, cu_k, total_q, total_k, max_q, max_k)


# ==== the switch ====================================================================================

def test_switch_is_off_by_default_and_the_context_manager_restores_it() -> None:
    assert flashattn.get_check_indices() is False
    with flashattn.check_indices():
        assert flashattn.get_check_indices() is True
        with flashattn.check_indices(False):
            assert flashattn.get_check_indices() is False
        assert flashattn.get_check_indices() is True
    assert flashattn.get_check_indices() is False
    with pytest.raises(RuntimeError, match="boom"), flashattn.check_indices():
        raise RuntimeError("boom")
    assert flashattn.get_check_indices() is False


def test_switch_takes_a_bool() -> None:
    with pytest.raises(TypeError, match="set_check_indices takes a bool, got int"):
        flashattn.set_check_indices(1)


@pytest.mark.parametrize(("value", "expected"), [("1", True), ("0", False), ("", False)])
def test_environment_variable_turns_it_on_at_import(value: str, expected: bool) -> None:
    env = dict(os.environ, FLASHATTN_CHECK_INDICES=value)
    code = "import flashattn; print(flashattn.get_check_indices())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(expected)


# ==== packed batches: cu_seqlens ===================================================================

def test_valid_cu_seqlens_pass() -> None:
    check_varlen(cu(0, 4, 4, 10), cu(0, 8, 9, 12))
    check_varlen(cu(0, 3, 7), cu(0, 5, 11), total_q=10, total_k=12)  # rows past cu[B] are allowed
    check_varlen(cu(0), cu(0))  # no sequence


@pytest.mark.parametrize(("cu_q", "cu_k", "match"), [
    (cu(1, 4, 10), cu(0, 6, 12), r"fwd_varlen: cu_seqlens_q\[0\] must be 0 \(cumulative sequence lengths\), got 1"),
    (cu(0, 6, 4), cu(0, 6, 12), r"cu_seqlens_q must be nondecreasing, got cu_seqlens_q\[1\] = 6 > cu_seqlens_q\[2\] = 4"),
    (cu(0, 4, 11), cu(0, 6, 12), r"cu_seqlens_q\[-1\] must be <= the packed rows of q \(10\), got cu_seqlens_q\[-1\] = 11"),
    (cu(0, 2, 9), cu(0, 6, 12), r"sequence 1 is longer than max_seqlen_q = 6: cu_seqlens_q\[2\] - cu_seqlens_q\[1\] = 7"),
    (cu(0, 4, 10), cu(-2, 6, 12), r"cu_seqlens_k\[0\] must be 0 \(cumulative sequence lengths\), got -2"),
    (cu(0, 4, 10), cu(0, 7, 5), r"cu_seqlens_k must be nondecreasing, got cu_seqlens_k\[1\] = 7 > cu_seqlens_k\[2\] = 5"),
    (cu(0, 4, 10), cu(0, 6, 13), r"cu_seqlens_k\[-1\] must be <= the packed rows of k/v \(12\), got cu_seqlens_k\[-1\] = 13"),
    (cu(0, 4, 10), cu(0, 9, 12), r"sequence 0 is longer than max_seqlen_k = 8: cu_seqlens_k\[1\] - cu_seqlens_k\[0\] = 9"),
])
def test_bad_cu_seqlens_are_named(cu_q, cu_k, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        check_varlen(cu_q, cu_k)


def test_varlen_forward_and_backward_wrappers_check_only_when_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """_ops.fwd_varlen and _ops.bwd_varlen are the one place every packed call passes (the public
    function, torch's varlen ops, the autograd backward): they check when the mode is on."""
    calls = []
    monkeypatch.setattr(_ops, "_fwd_varlen", lambda *a: calls.append("fwd"))
    monkeypatch.setattr(_ops, "_bwd_varlen", lambda *a: calls.append("bwd"))
    q = torch.zeros(10, 2, 8, dtype=torch.float16)
    k = torch.zeros(12, 2, 8, dtype=torch.float16)
    lse = torch.zeros(2, 10)
    bad_q, good_k = cu(0, 6, 4), cu(0, 6, 12)
    fwd_args = (q, k, k, bad_q, good_k, 6, 8, 1.0, 0, "auto")
    bwd_args = (q, q, k, k, q, lse, bad_q, good_k, 6, 8, 1.0, 0, False, "auto")
    _ops.fwd_varlen(*fwd_args)
    _ops.bwd_varlen(*bwd_args)
    assert calls == ["fwd", "bwd"]
    with flashattn.check_indices():
        with pytest.raises(ValueError, match=r"fwd_varlen: cu_seqlens_q must be nondecreasing"):
            _ops.fwd_varlen(*fwd_args)
        with pytest.raises(ValueError, match=r"bwd_varlen: cu_seqlens_q must be nondecreasing"):
            _ops.bwd_varlen(*bwd_args)
    assert calls == ["fwd", "bwd"]


def test_checks_are_skipped_while_torch_compile_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    check_varlen(cu(0, 6, 4), cu(0, 6, 12))  # values unknown while tracing: no check, no error


# ==== decoding: cache_seqlens, seqused_k, block_table ==============================================

SK_MAX, PAGE, NUM_PAGES = 64, 16, 9  # a table of 4 pages per sequence


def check_kv(cache_seqlens=None, cache_seqlen=SK_MAX, sq_new=0, block_table=None, seqused_k=None):
    _ops.check_kvcache_indices(cache_seqlens, cache_seqlen, sq_new, SK_MAX, block_table, PAGE, NUM_PAGES, seqused_k)


def table(*rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=I32)


def test_valid_decode_indices_pass() -> None:
    check_kv(cache_seqlens=cu(0, 64))
    check_kv(cache_seqlens=cu(3, 62), sq_new=2)
    check_kv(seqused_k=cu(0, 64))
    # Entries past the pages a sequence uses may be anything (-1 here): they are never read.
    check_kv(cache_seqlens=cu(16, 33), block_table=table([0, -1, -1, -1], [1, 2, 8, -1]), cache_seqlen=0)
    check_kv(cache_seqlens=cu(15, 31), sq_new=1, block_table=table([3, -1, -1, -1], [4, 5, -1, -1]))
    check_kv(seqused_k=cu(1, 17), block_table=table([0, 99, 99, 99], [0, 1, -5, 7]))
    check_kv(block_table=table([0, 1, 2, 3], [4, 5, 6, 7]))  # cache_seqlens None: the whole table is read


@pytest.mark.parametrize(("kw", "match"), [
    (dict(cache_seqlens=cu(3, -1)), r"cache_seqlens\[b\] must be in \[0, Sk_max = 64\], got cache_seqlens\[1\] = -1"),
    (dict(cache_seqlens=cu(65, 3)), r"cache_seqlens\[b\] must be in \[0, Sk_max = 64\], got cache_seqlens\[0\] = 65"),
    (dict(cache_seqlens=cu(3, 63), sq_new=2),
     r"cache_seqlens\[b\] must be in \[0, Sk_max - Sq_new = 64 - 2\], got cache_seqlens\[1\] = 63"),
    (dict(seqused_k=cu(3, 65)), r"seqused_k\[b\] must be in \[0, Sk_max = 64\], got seqused_k\[1\] = 65"),
    (dict(seqused_k=cu(-4, 3)), r"seqused_k\[b\] must be in \[0, Sk_max = 64\], got seqused_k\[0\] = -4"),
    (dict(cache_seqlens=cu(16, 17), block_table=table([0, -1, -1, -1], [1, 9, -1, -1])),
     r"block_table\[1, 1\] = 9 is outside the page pool \[0, num_pages = 9\) and is read: sequence 1 uses 17 keys "
     r"\(cache_seqlens \+ Sq_new = 17; and its appended rows\), pages 0 \.\. 1"),
    (dict(cache_seqlens=cu(15, 0), sq_new=2, block_table=table([0, -1, -1, -1], [1, -1, -1, -1])),
     r"block_table\[0, 1\] = -1 is outside the page pool"),
    (dict(seqused_k=cu(40, 3), block_table=table([0, 1, -1, -1], [2, -1, -1, -1])),
     r"block_table\[0, 2\] = -1 is outside the page pool \[0, num_pages = 9\) and is read: sequence 0 uses 40 keys "
     r"\(seqused_k\[0\] = 40"),
    (dict(block_table=table([0, 1, 2, 3], [4, 5, 6, -7])), r"block_table\[1, 3\] = -7 is outside the page pool"),
])
def test_bad_decode_indices_are_named(kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match="flash_attn_with_kvcache: " + match):
        check_kv(**kw)


def test_an_append_reads_the_table_where_seqused_k_does_not() -> None:
    """seqused_k shorter than the append: the append's page is still read (and written) through
    the table, so it must be valid."""
    with pytest.raises(ValueError, match=r"block_table\[0, 2\] = -1"):
        check_kv(cache_seqlens=cu(32, 0), sq_new=1, seqused_k=cu(4, 4),
                 block_table=table([0, 1, -1, -1], [2, -1, -1, -1]))


def test_kvcache_calls_the_check_only_when_on(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setattr(flashattn._ext, "require_extension", lambda: None)
    monkeypatch.setattr(_ops, "check_kvcache_indices", lambda *a: seen.append(a))
    with FakeTensorMode():
        q = fake_maker(2, 1, 8, 64)
        pool = fake_maker(9, 16, 2, 64), fake_maker(9, 16, 2, 64)
        new = fake_maker(2, 1, 2, 64)
        lens, bt = fake_maker(2, dtype=I32), fake_maker(2, 4, dtype=I32)
        flashattn.flash_attn_with_kvcache(q, *pool, k=new, v=new, cache_seqlens=lens, block_table=bt)
        assert seen == []
        with flashattn.check_indices():
            flashattn.flash_attn_with_kvcache(q, *pool, k=new, v=new, cache_seqlens=lens, block_table=bt,
                                              seqused_k=lens)
    ((cache_seqlens, cache_seqlen, sq_new, sk_max, block_table, page_size, num_pages, seqused_k),) = seen
    assert cache_seqlens is lens and block_table is bt and seqused_k is lens
    assert (cache_seqlen, sq_new, sk_max, page_size, num_pages) == (0, 1, 64, 16, 9)
