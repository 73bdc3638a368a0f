"""The one place where flashattn's operators are registered with torch.library.

The schemas and the fake (meta) kernels live here, so that `torch.compile(fullgraph=True)` traces
through the ops on any machine, the extension built or not. The compiled extension registers the
CUDA kernels (csrc/binding*.cpp) and the ops' autograd (csrc/autograd.cpp) against these schemas;
without it (a CPU machine) flashattn/_autograd.py registers the same autograd in Python, which the
CPU suite runs with stand-in kernels. Defining a schema here or in C++ costs a call the same
(docs/perf-notes.md, "Host cost per call"): the dispatcher holds one schema either way.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from . import _ext, _validate

# causal_mode values shared with csrc/common/params.h
CAUSAL_NONE = 0
CAUSAL_TOP_LEFT = 1  # query i sees keys j <= i                (SDPA's is_causal)
CAUSAL_BOTTOM_RIGHT = 2  # query i sees keys j <= i + Sk - Sq  (FlashAttention, KV cache)

_lib = torch.library.Library("flashattn", "DEF")
# softmax_scale: None means 1/sqrt(head dim), else any finite value. window_left / window_right:
# local (sliding-window) attention, -1 unbounded on that side; key j is visible to query i iff
# i + offset - window_left <= j <= i + offset + window_right, offset the causal alignment's (0 for
# causal_mode 1, Sk - Sq for 0 and 2); causal masking is window_right = 0 on top of the window.
# softcap c > 0: each scaled score x becomes c * tanh(x / c); 0 off.
_FWD_SIGNATURE = (
    "(Tensor q, Tensor k, Tensor v, float? softmax_scale, int causal_mode, str backend, int window_left=-1, "
    "int window_right=-1, float softcap=0.) -> (Tensor out, Tensor lse)"
)
_lib.define("fwd" + _FWD_SIGNATURE)


@torch.library.register_fake("flashattn::fwd")
def _fwd_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float | None, causal_mode: int,
              backend: str, window_left: int = -1, window_right: int = -1,
              softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    b, sq, hq, d = q.shape
    out = q.new_empty((b, sq, hq, d))
    lse = q.new_empty((b, hq, sq), dtype=torch.float32)
    return out, lse


# The same op on the torch layout (SDPA's [B, H, S, D]); out comes back in that layout, as the
# transposed view of a [B, S, H, D] buffer that the fake kernel reproduces stride for stride.
_lib.define("fwd_bhsd" + _FWD_SIGNATURE)


@torch.library.register_fake("flashattn::fwd_bhsd")
def _fwd_bhsd_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float | None, causal_mode: int,
                   backend: str, window_left: int = -1, window_right: int = -1,
                   softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    out, lse = _fwd_fake(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), softmax_scale, causal_mode, backend)
    return out.transpose(1, 2), lse


# ==== FP8 forward (issue 29): flashattn::fwd_fp8 ===================================================
# q, k, v float8_e4m3fn [B, S, H, D] (unit last stride; other strides multiples of 16 elements or the
# binding copies), q_descale / k_descale / v_descale float32 [B, Hk] (FlashAttention-3's form: the
# real inputs are q.float() * q_descale[b, h // (Hq / Hk)] and so on), softmax_scale as fwd's,
# causal_mode as fwd's. Returns out bfloat16 [B, Sq, Hq, D] and lse float32 [B, Hq, Sq] (natural log
# of the descaled, scaled scores). The Hopper path only (sm_90a build), no backward.
_lib.define(
    "fwd_fp8(Tensor q, Tensor k, Tensor v, Tensor q_descale, Tensor k_descale, Tensor v_descale, "
    "float? softmax_scale, int causal_mode) -> (Tensor out, Tensor lse)"
)


@torch.library.register_fake("flashattn::fwd_fp8")
def _fwd_fp8_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_descale: torch.Tensor, k_descale: torch.Tensor,
                  v_descale: torch.Tensor, softmax_scale: float | None,
                  causal_mode: int) -> tuple[torch.Tensor, torch.Tensor]:
    _validate.fp8(q, k, v, q_descale, k_descale, v_descale, softmax_scale)
    b, sq, hq, d = q.shape
    out = q.new_empty((b, sq, hq, d), dtype=torch.bfloat16)
    lse = q.new_empty((b, hq, sq), dtype=torch.float32)
    return out, lse


# ==== backward (issue 14): flashattn::bwd =========================================================
# dout/q/out [B, Sq, Hq, D], k/v [B, Sk, Hk, D] (any strides with a unit last stride: the binding
# copies what it cannot load 16 bytes at a time, e.g. a stride-0 dout from `out.sum()`), lse
# float32 [B, Hq, Sq] exactly as fwd returned it (natural log, -inf on rows that see no key),
# softmax_scale (the value, not None) and causal_mode those of the forward. Returns dq, dk, dv: new
# contiguous tensors in q's dtype shaped like q, k, v (dk/dv summed over each query-head group in
# the kernel). deterministic=True: bitwise reproducible run to run (a fixed order of the dQ
# accumulation); False may accumulate dQ with atomics. backend: the forward's; "auto" and "hopper"
# run the Hopper (wgmma) backward on an H100 where it exists (head dim <= 256, windows and the
# softcap included), the portable (mma.sync) backward on any sm80+ GPU otherwise, "portable" always the
# portable one (the gradients do not depend on the forward path). window_left, window_right and
# softcap: those of the forward (the backward recomputes the forward's masked, capped scores).
_lib.define(
    "bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, float softmax_scale, "
    "int causal_mode, bool deterministic, str backend, int window_left=-1, int window_right=-1, "
    "float softcap=0.) -> (Tensor dq, Tensor dk, Tensor dv)"
)


@torch.library.register_fake("flashattn::bwd")
def _bwd_fake(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
              lse: torch.Tensor, softmax_scale: float, causal_mode: int, deterministic: bool, backend: str,
              window_left: int = -1, window_right: int = -1,
              softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _validate.bwd(dout, q, k, v, out, lse)
    return (
        q.new_empty(q.shape, dtype=q.dtype),
        k.new_empty(k.shape, dtype=q.dtype),
        v.new_empty(v.shape, dtype=q.dtype),
    )


# ==== packed variable-length batches (issue 16): flashattn::fwd_varlen ==========================
# q [total_q, Hq, D], k/v [total_k, Hk, D] (any row/head strides, unit last stride); cu_seqlens_q /
# cu_seqlens_k int32 [B + 1] on q's device: sequence b is rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]
# of q and cu_seqlens_k[b] .. cu_seqlens_k[b+1] of k/v (zero-length sequences allowed; never read on
# the host). max_seqlen_q / max_seqlen_k bound every sequence's lengths (grid sizing only: rows of
# a longer sequence are not computed). softmax_scale, causal_mode, window, softcap as fwd's, aligned
# per sequence (offset Sk_b - Sq_b, or 0 for causal_mode 1). Returns out [total_q, Hq, D] and lse
# float32 [Hq, total_q] (FlashAttention's varlen layout). 'auto' runs the Hopper forward's packed
# flavour on an H100, the portable kernel elsewhere; 'portable' the portable kernel everywhere;
# 'hopper' is refused. Differentiable with respect to q, k, v (bwd_varlen).
_lib.define(
    "fwd_varlen(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, int max_seqlen_q, "
    "int max_seqlen_k, float? softmax_scale, int causal_mode, str backend, int window_left=-1, "
    "int window_right=-1, float softcap=0.) -> (Tensor out, Tensor lse)"
)


@torch.library.register_fake("flashattn::fwd_varlen")
def _fwd_varlen_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float | None,
                     causal_mode: int, backend: str, window_left: int = -1, window_right: int = -1,
                     softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    total_q, hq, d = q.shape
    return q.new_empty((total_q, hq, d)), q.new_empty((hq, total_q), dtype=torch.float32)


# ==== the backward of packed batches: flashattn::bwd_varlen ======================================
# dout/q/out [total_q, Hq, D], k/v [total_k, Hk, D] (any row/head strides, unit last stride), lse
# float32 [Hq, total_q] exactly as fwd_varlen returned it; cu_seqlens, max_seqlen, softmax_scale,
# causal_mode, window and softcap those of the forward. Returns dq, dk, dv: new contiguous tensors
# in q's dtype shaped like q, k, v (dk/dv summed over each query-head group in the kernel); rows no
# sequence owns (past cu_seqlens[B]) get 0. deterministic as bwd's. 'auto' runs the Hopper
# backward's packed kernels on an H100, the portable backward elsewhere; 'portable' the portable
# one everywhere; 'hopper' is refused, as by the forward.
_lib.define(
    "bwd_varlen(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor cu_seqlens_q, "
    "Tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, float softmax_scale, int causal_mode, "
    "bool deterministic, str backend, int window_left=-1, int window_right=-1, float softcap=0.) "
    "-> (Tensor dq, Tensor dk, Tensor dv)"
)


@torch.library.register_fake("flashattn::bwd_varlen")
def _bwd_varlen_fake(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                     lse: torch.Tensor, cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, max_seqlen_q: int,
                     max_seqlen_k: int, softmax_scale: float, causal_mode: int, deterministic: bool, backend: str,
                     window_left: int = -1, window_right: int = -1,
                     softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _validate.bwd_varlen(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, backend)
    return (
        q.new_empty(q.shape, dtype=q.dtype),
        k.new_empty(k.shape, dtype=q.dtype),
        v.new_empty(v.shape, dtype=q.dtype),
    )


# ==== KV-cache decoding (issue 7): flashattn::fwd_kvcache =======================================
# Owned by the decode path (flashattn/kvcache.py, csrc/binding_decode.cpp, csrc/flash_decode/).
# k_cache and v_cache are annotated as mutated (Tensor(a!), Tensor(b!)): with k/v given, the op
# writes them into the caches in place (rows cache_seqlens[b] .. + Sq_new - 1) before attending.
# cache_seqlens (Tensor?, int32 [B]) wins over cache_seqlen (the same count for every batch).
# softmax_scale as fwd's. block_table (Tensor?, int32 [B, max_blocks_per_seq]): a paged cache,
# k_cache/v_cache then being [num_blocks, page_size, Hk, D]; seqused_k (Tensor?, int32 [B]): the
# keys each batch's attention uses, in place of cache_seqlens + Sq_new. Both last in the schema so
# that positional callers keep working. No backward: an input that requires grad is refused.
_lib.define(
    "fwd_kvcache(Tensor q, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor? k, Tensor? v, "
    "Tensor? cache_seqlens, int cache_seqlen, float? softmax_scale, bool causal, int num_splits, "
    "int window_left=-1, int window_right=-1, float softcap=0., Tensor? block_table=None, "
    "Tensor? seqused_k=None) -> (Tensor out, Tensor lse)"
)


@torch.library.register_fake("flashattn::fwd_kvcache")
def _fwd_kvcache_fake(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor | None,
                      v: torch.Tensor | None, cache_seqlens: torch.Tensor | None, cache_seqlen: int,
                      softmax_scale: float | None, causal: bool, num_splits: int, window_left: int = -1,
                      window_right: int = -1, softcap: float = 0.0, block_table: torch.Tensor | None = None,
                      seqused_k: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    b, sq, hq, d = q.shape
    out = q.new_empty((b, sq, hq, d))
    lse = q.new_empty((b, hq, sq), dtype=torch.float32)
    return out, lse


# ==== the deterministic switch ======================================================================
# flashattn.set_deterministic(); the backward is deterministic when this or torch's
# use_deterministic_algorithms(True) is on, read when the forward runs (the autograd's forward). The
# compiled extension's autograd reads its own copy, set here with this one, so no call pays a
# Python read of it.
_deterministic = False


def set_deterministic(flag: bool) -> None:
    global _deterministic
    _deterministic = flag
    if _ext._EXT is not None:
        _ext._EXT.set_deterministic(flag)


def get_deterministic() -> bool:
    return _deterministic


def deterministic_backward() -> bool:
    """Whether a backward recorded now runs the deterministic kernel: flashattn's own switch or
    torch.use_deterministic_algorithms(True) (warn_only included, as torch's own ops do)."""
    return _deterministic or torch.are_deterministic_algorithms_enabled()


def guard_switches_when_traced() -> None:
    """Called by the public entry points in the code torch.compile traces, never eagerly. A compiled
    graph bakes the backward's deterministic mode in when it is traced; branching on the switch here
    makes torch.compile guard on it, so the graph is traced again when set_deterministic changes it
    (torch.use_deterministic_algorithms is guarded by torch.compile itself)."""
    if _deterministic:
        return


# ==== checked indices (issue 25): validate device-side index tensors before a launch ============
# cu_seqlens (packed batches), cache_seqlens, seqused_k and block_table (decoding) live on the
# device and are never read on the host: that would synchronize and break CUDA-graph capture. The
# kernels clamp whatever they read into the tensors they were given (docs/varlen.md and
# docs/decode.md, "Bad device-side indices"), so a bad value cannot corrupt memory, but the result
# is then meaningless. The checked mode, for users debugging a serving engine, validates them with
# torch ops on the device before the launch and raises a ValueError naming the argument. It
# synchronizes once per call (a debug mode, off by default): FLASHATTN_CHECK_INDICES=1 turns it on
# at import, flashattn.set_check_indices() / flashattn.check_indices() at run time. Skipped while
# torch.compile traces (the values are not known then) and refused under CUDA-graph capture.
_check_indices = os.environ.get("FLASHATTN_CHECK_INDICES", "0").strip() not in ("", "0")


def set_check_indices(flag: bool) -> None:
    global _check_indices
    _check_indices = flag


def get_check_indices() -> bool:
    return _check_indices


def _checks_apply(*tensors: torch.Tensor | None) -> bool:
    """Whether the checked mode validates this call now: off while torch.compile traces; an error
    under CUDA-graph capture, where the one synchronization it needs is illegal."""
    if torch.compiler.is_compiling():
        return False
    if any(t is not None and t.is_cuda for t in tensors) and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            "flashattn's checked indices mode (FLASHATTN_CHECK_INDICES / set_check_indices) synchronizes with the "
            "GPU and cannot run under CUDA-graph capture: turn it off for the capture"
        )
    return True


def _first_true(mask: torch.Tensor) -> tuple[int, ...]:
    """Index of the first True of a mask known to hold one (error path only)."""
    return tuple(int(i) for i in mask.nonzero()[0].tolist())


def check_varlen_indices(op: str, cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, total_q: int, total_k: int,
                         max_seqlen_q: int, max_seqlen_k: int) -> None:
    """The packed batch's contract, checked on the device (one synchronization): for each of
    cu_seqlens_q (rows of q) and cu_seqlens_k (rows of k/v), cu[0] == 0, nondecreasing, cu[B] <= the
    packed rows, and every sequence's length <= its max_seqlen bound. Raises ValueError naming the
    argument, the first offending entry and what was expected."""
    if not _checks_apply(cu_seqlens_q, cu_seqlens_k):
        return
    pairs = (("cu_seqlens_q", cu_seqlens_q, total_q, "q", "max_seqlen_q", max_seqlen_q),
             ("cu_seqlens_k", cu_seqlens_k, total_k, "k/v", "max_seqlen_k", max_seqlen_k))
    flags = []
    for _, cu, total, _, _, bound in pairs:
        c = cu.to(torch.int64)
        lens = c[1:] - c[:-1]
        flags += [c[0] != 0, (lens < 0).any(), c[-1] > total, (lens > bound).any()]
    bad = torch.stack(flags).tolist()  # the one synchronization
    if not any(bad):
        return
    for i, (name, cu, total, rows_of, bound_name, bound) in enumerate(pairs):
        first, decreasing, past_end, too_long = bad[4 * i: 4 * i + 4]
        c = cu.to(torch.int64)
        lens = c[1:] - c[:-1]
        if first:
            raise ValueError(f"{op}: {name}[0] must be 0 (cumulative sequence lengths), got {int(c[0])}")
        if decreasing:
            (b,) = _first_true(lens < 0)
            raise ValueError(
                f"{op}: {name} must be nondecreasing, got {name}[{b}] = {int(c[b])} > {name}[{b + 1}] = {int(c[b + 1])}"
            )
        if past_end:
            raise ValueError(
                f"{op}: {name}[-1] must be <= the packed rows of {rows_of} ({total}), got {name}[-1] = {int(c[-1])}"
            )
        if too_long:
            (b,) = _first_true(lens > bound)
            raise ValueError(
                f"{op}: sequence {b} is longer than {bound_name} = {bound}: {name}[{b + 1}] - {name}[{b}] = "
                f"{int(lens[b])}"
            )


def check_kvcache_indices(cache_seqlens: torch.Tensor | None, cache_seqlen: int, sq_new: int, sk_max: int,
                          block_table: torch.Tensor | None, page_size: int, num_pages: int,
                          seqused_k: torch.Tensor | None) -> None:
    """flash_attn_with_kvcache's device-side indices, checked on the device (one synchronization):
    cache_seqlens[b] in [0, Sk_max - Sq_new]; seqused_k[b] in [0, Sk_max]; with a paged cache,
    every block_table entry the call reads (pages of keys 0 .. seqlen_k(b) - 1 and of the appended
    rows) in [0, num_pages). cache_seqlens None stands for cache_seqlen on every batch."""
    if not _checks_apply(cache_seqlens, seqused_k, block_table):
        return
    op = "flash_attn_with_kvcache"
    flags = []
    if cache_seqlens is not None:
        flags += [((cache_seqlens < 0) | (cache_seqlens > sk_max - sq_new)).any()]
    if seqused_k is not None:
        flags += [((seqused_k < 0) | (seqused_k > sk_max)).any()]
    read = None
    if block_table is not None:
        b = block_table.shape[0]
        device = block_table.device
        cache_len = (cache_seqlens.to(torch.int64).clamp(0, sk_max) if cache_seqlens is not None
                     else torch.full((b,), cache_seqlen, dtype=torch.int64, device=device))
        # Keys the attention reads, and rows the append writes: both go through the table.
        keys = (seqused_k.to(torch.int64) if seqused_k is not None else cache_len + sq_new).clamp(0, sk_max)
        if sq_new > 0:
            keys = torch.maximum(keys, (cache_len + sq_new).clamp(max=sk_max))
        pages = (keys + page_size - 1) // page_size
        cols = torch.arange(block_table.shape[1], device=device)
        read = cols[None, :] < pages[:, None]
        flags += [(read & ((block_table < 0) | (block_table >= num_pages))).any()]
    if not flags:
        return
    if not any(torch.stack(flags).tolist()):  # the one synchronization
        return
    if cache_seqlens is not None:
        bad = (cache_seqlens < 0) | (cache_seqlens > sk_max - sq_new)
        if bool(bad.any()):
            (i,) = _first_true(bad)
            what = f"Sk_max - Sq_new = {sk_max} - {sq_new}" if sq_new else f"Sk_max = {sk_max}"
            raise ValueError(f"{op}: cache_seqlens[b] must be in [0, {what}], got cache_seqlens[{i}] = "
                             f"{int(cache_seqlens[i])}")
    if seqused_k is not None:
        bad = (seqused_k < 0) | (seqused_k > sk_max)
        if bool(bad.any()):
            (i,) = _first_true(bad)
            raise ValueError(f"{op}: seqused_k[b] must be in [0, Sk_max = {sk_max}], got seqused_k[{i}] = "
                             f"{int(seqused_k[i])}")
    if TYPE_CHECKING:  # only the block table's flag is left: the table and its read mask were built above
        assert block_table is not None and read is not None
    bad = read & ((block_table < 0) | (block_table >= num_pages))
    i, j = _first_true(bad)
    used = (f"seqused_k[{i}] = {int(seqused_k[i])}" if seqused_k is not None
            else f"cache_seqlens + Sq_new = {int(keys[i])}")
    raise ValueError(
        f"{op}: block_table[{i}, {j}] = {int(block_table[i, j])} is outside the page pool [0, num_pages = "
        f"{num_pages}) and is read: sequence {i} uses {int(keys[i])} keys ({used}; and its appended rows), "
        f"pages 0 .. {int(pages[i]) - 1} of its table row at page_size {page_size}"
    )



# Registers the CUDA kernels and the C++ autograd when the extension is built; the Python autograd
# otherwise.
_ext._load()
if _ext._EXT is None:
    from . import _autograd

    _autograd.register()

# The overloads themselves: calling them skips the packet's overload resolution on every call.
_fwd = torch.ops.flashattn.fwd.default
_fwd_bhsd = torch.ops.flashattn.fwd_bhsd.default
_bwd = torch.ops.flashattn.bwd.default
_fwd_varlen = torch.ops.flashattn.fwd_varlen.default
_bwd_varlen = torch.ops.flashattn.bwd_varlen.default
_fwd_kvcache = torch.ops.flashattn.fwd_kvcache.default
_fwd_fp8 = torch.ops.flashattn.fwd_fp8.default


# The direct call path of the public entry points: the op first, the C++ binding's checks refusing
# bad input, the Python validation only to name what was refused. FLASHATTN_DIRECT_PATH=0 turns it
# off (every call validated in Python first, ~6 us, then the op). The binding's messages are built
# without a C++ stream (csrc/check.h): on a build whose libstdc++ disagreed with its compiler, a
# TORCH_CHECK message with a number in it crashed the process (the H200 build of 2026-11-26).
DIRECT_PATH = os.environ.get("FLASHATTN_DIRECT_PATH", "1").strip() not in ("", "0")


def eager_callable(overload: torch._ops.OpOverload[..., Any]) -> Callable[..., Any]:
    """What OpOverload.__call__ forwards to (its underlying builtin): the public entry points' direct
    path calls it, a Python frame less per call (~0.6 us on a slow CPU). Eager only: torch.compile
    traces the checked path, which calls the overloads."""
    return getattr(overload, "_op", overload)


def fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float | None, causal_mode: int, backend: str,
        window_left: int = -1, window_right: int = -1, softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B, Sq, Hq, D], k/v [B, Sk, Hk, D] (any strides, unit last stride) -> (out [B, Sq, Hq, D], lse [B, Hq, Sq]).
    The window and softcap go to the op only when set (fewer arguments on the common path)."""
    if window_left == -1 and window_right == -1 and softcap == 0.0:
        return _fwd(q, k, v, softmax_scale, causal_mode, backend)
    return _fwd(q, k, v, softmax_scale, causal_mode, backend, window_left, window_right, softcap)


def fwd_bhsd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float | None, causal_mode: int,
             backend: str, window_left: int = -1, window_right: int = -1,
             softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B, Hq, Sq, D], k/v [B, Hk, Sk, D] (any strides, unit last stride) -> (out [B, Hq, Sq, D] (a view
    of a [B, Sq, Hq, D] buffer), lse [B, Hq, Sq])."""
    if window_left == -1 and window_right == -1 and softcap == 0.0:
        return _fwd_bhsd(q, k, v, softmax_scale, causal_mode, backend)
    return _fwd_bhsd(q, k, v, softmax_scale, causal_mode, backend, window_left, window_right, softcap)


def fwd_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
               cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float | None,
               causal_mode: int, backend: str, window_left: int = -1, window_right: int = -1,
               softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """q [total_q, Hq, D], k/v [total_k, Hk, D], cu_seqlens int32 [B + 1] -> (out [total_q, Hq, D],
    lse float32 [Hq, total_q]). No validation of the metadata here (see
    flashattn.interface.flash_attn_varlen_func); the checked indices mode validates cu_seqlens
    here, the one place every checked packed forward passes (the public function and torch's
    varlen ops)."""
    if _check_indices:
        check_varlen_indices("fwd_varlen", cu_seqlens_q, cu_seqlens_k, q.shape[0], k.shape[0], max_seqlen_q,
                             max_seqlen_k)
    return _fwd_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal_mode,
                       backend, window_left, window_right, softcap)


def bwd_varlen(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
               lse: torch.Tensor, cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, max_seqlen_q: int,
               max_seqlen_k: int, softmax_scale: float, causal_mode: int, deterministic: bool, backend: str,
               window_left: int = -1, window_right: int = -1,
               softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dout/q/out [total_q, Hq, D], k/v [total_k, Hk, D] (any row/head strides, unit last stride), lse
    float32 [Hq, total_q] from fwd_varlen, cu_seqlens int32 [B + 1] and the forward's max_seqlen,
    scalars, window and softcap -> (dq [total_q, Hq, D], dk, dv [total_k, Hk, D]): contiguous, q's
    dtype; rows no sequence owns are 0. For callers outside the ops' autograd (torch's varlen
    backward): the arguments are checked first, with errors naming the argument, and so are the
    cu_seqlens values in the checked indices mode."""
    _validate.bwd_varlen(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, backend)
    if _check_indices:
        check_varlen_indices("bwd_varlen", cu_seqlens_q, cu_seqlens_k, q.shape[0], k.shape[0], max_seqlen_q,
                             max_seqlen_k)
    return _bwd_varlen(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                       causal_mode, deterministic, backend, window_left, window_right, softcap)


def fwd_fp8(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_descale: torch.Tensor, k_descale: torch.Tensor,
            v_descale: torch.Tensor, softmax_scale: float | None,
            causal_mode: int) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k, v float8_e4m3fn [B, S, H, D], descales float32 [B, Hk] -> (out bfloat16 [B, Sq, Hq, D],
    lse float32 [B, Hq, Sq])."""
    return _fwd_fp8(q, k, v, q_descale, k_descale, v_descale, softmax_scale, causal_mode)


def bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
        softmax_scale: float, causal_mode: int, deterministic: bool, backend: str, window_left: int = -1,
        window_right: int = -1, softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dout/q/out [B, Sq, Hq, D], k/v [B, Sk, Hk, D], lse float32 [B, Hq, Sq] from fwd (any strides,
    unit last stride) -> (dq, dk, dv): contiguous, q's dtype, shaped like q, k, v; window_left,
    window_right and softcap those the forward ran with."""
    return _bwd(dout, q, k, v, out, lse, softmax_scale, causal_mode, deterministic, backend, window_left, window_right,
                softcap)
