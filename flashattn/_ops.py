"""The one place where flashattn's operators are registered with torch.library.

The schema and the fake (meta) kernel live here so that `torch.compile(fullgraph=True)`
traces through the op on any machine; the CUDA kernel is registered by the compiled
extension (`csrc/binding.cpp`) against this schema.
"""

from __future__ import annotations

import torch

from . import _ext

# causal_mode values shared with csrc/flash_fwd/params.h
CAUSAL_NONE = 0
CAUSAL_TOP_LEFT = 1  # query i sees keys j <= i                (SDPA's is_causal)
CAUSAL_BOTTOM_RIGHT = 2  # query i sees keys j <= i + Sk - Sq  (FlashAttention, KV cache)

BACKENDS = ("auto", "portable", "hopper")

_lib = torch.library.Library("flashattn", "DEF")
# window_left / window_right: local (sliding-window) attention, -1 unbounded on that side; key j is
# visible to query i iff i + offset - window_left <= j <= i + offset + window_right, offset the
# causal alignment's (0 for causal_mode 1, Sk - Sq for 0 and 2); causal masking is window_right = 0
# on top of the window. softcap c > 0: each scaled score x becomes c * tanh(x / c); 0 off.
_FWD_SIGNATURE = (
    "(Tensor q, Tensor k, Tensor v, float softmax_scale, int causal_mode, str backend, int window_left=-1, "
    "int window_right=-1, float softcap=0.) -> (Tensor out, Tensor lse)"
)
_lib.define("fwd" + _FWD_SIGNATURE)


@torch.library.register_fake("flashattn::fwd")
def _fwd_fake(q, k, v, softmax_scale, causal_mode, backend, window_left=-1, window_right=-1, softcap=0.0):
    b, sq, hq, d = q.shape
    out = q.new_empty((b, sq, hq, d))
    lse = q.new_empty((b, hq, sq), dtype=torch.float32)
    return out, lse


# The same op on the torch layout (SDPA's [B, H, S, D]); out comes back in that layout, as the
# transposed view of a [B, S, H, D] buffer that the fake kernel reproduces stride for stride.
_lib.define("fwd_bhsd" + _FWD_SIGNATURE)


@torch.library.register_fake("flashattn::fwd_bhsd")
def _fwd_bhsd_fake(q, k, v, softmax_scale, causal_mode, backend, window_left=-1, window_right=-1, softcap=0.0):
    out, lse = _fwd_fake(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), softmax_scale, causal_mode, backend)
    return out.transpose(1, 2), lse


# ==== backward (issue 14): flashattn::bwd and the autograd of fwd / fwd_bhsd ===================
# dout/q/out [B, Sq, Hq, D], k/v [B, Sk, Hk, D] (any strides with a unit last stride: the binding
# copies what it cannot load 16 bytes at a time, e.g. a stride-0 dout from `out.sum()`), lse
# float32 [B, Hq, Sq] exactly as fwd returned it (natural log, -inf on rows that see no key),
# softmax_scale and causal_mode those of the forward. Returns dq, dk, dv: new contiguous tensors in
# q's dtype shaped like q, k, v (dk/dv summed over each query-head group in the kernel).
# deterministic=True: bitwise reproducible run to run (a fixed order of the dQ accumulation);
# False may accumulate dQ with atomics. backend: the forward's; "auto" and "hopper" run the Hopper
# (wgmma) backward on an H100 where it exists (head dim <= 128, no window / softcap), the portable
# (mma.sync) backward on any sm80+ GPU otherwise, "portable" always the portable one (the
# gradients do not depend on the forward path). window_left, window_right and softcap: those of
# the forward (the backward recomputes the forward's masked, capped scores).
_lib.define(
    "bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, float softmax_scale, "
    "int causal_mode, bool deterministic, str backend, int window_left=-1, int window_right=-1, "
    "float softcap=0.) -> (Tensor dq, Tensor dk, Tensor dv)"
)


def check_bwd_args(dout, q, k, v, out, lse) -> None:
    """Metadata checks of flashattn::bwd's tensors, with errors that name the argument (the fake
    kernel runs them, so a compiled graph fails at trace time; the binding checks the same)."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            f"flashattn::bwd: q, k and v must be 4-D [B, S, H, D], got shapes {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)}"
        )
    if out.shape != q.shape:
        raise ValueError(f"flashattn::bwd: out must have q's shape {tuple(q.shape)}, got {tuple(out.shape)}")
    if dout.shape != q.shape:
        raise ValueError(f"flashattn::bwd: dout must have out's shape {tuple(q.shape)}, got {tuple(dout.shape)}")
    if k.shape != v.shape:
        raise ValueError(f"flashattn::bwd: k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    b, sq, hq, _ = q.shape
    if lse.shape != (b, hq, sq):
        raise ValueError(f"flashattn::bwd: lse must be [B, Hq, Sq] = {[b, hq, sq]}, got {list(lse.shape)}")
    if lse.dtype != torch.float32:
        raise TypeError(f"flashattn::bwd: lse must be float32, got {lse.dtype}")
    for name, t in (("dout", dout), ("k", k), ("v", v), ("out", out)):
        if t.dtype != q.dtype:
            raise TypeError(f"flashattn::bwd: {name}.dtype must be q's dtype {q.dtype}, got {t.dtype}")


@torch.library.register_fake("flashattn::bwd")
def _bwd_fake(dout, q, k, v, out, lse, softmax_scale, causal_mode, deterministic, backend, window_left=-1,
              window_right=-1, softcap=0.0):
    check_bwd_args(dout, q, k, v, out, lse)
    return (
        q.new_empty(q.shape, dtype=q.dtype),
        k.new_empty(k.shape, dtype=q.dtype),
        v.new_empty(v.shape, dtype=q.dtype),
    )


# flashattn.set_deterministic(); the backward is deterministic when this or torch's
# use_deterministic_algorithms(True) is on, read when the forward runs (see _setup_context).
_deterministic = False


def set_deterministic(flag: bool) -> None:
    global _deterministic
    _deterministic = flag


def get_deterministic() -> bool:
    return _deterministic


def deterministic_backward() -> bool:
    """Whether a backward recorded now runs the deterministic kernel: flashattn's own switch or
    torch.use_deterministic_algorithms(True) (warn_only included, as torch's own ops do)."""
    return _deterministic or torch.are_deterministic_algorithms_enabled()


def _setup_context(ctx, inputs, output) -> None:
    """Saves what the backward needs: q, k, v, out and lse (O(S) memory, never an S x S matrix),
    the scalars, the backend and the deterministic switch as they were at forward time. lse is
    not differentiable (its gradient is never computed: a loss through lse gets no gradient from
    it, and torch says so when it is the only path)."""
    q, k, v, softmax_scale, causal_mode, backend, *mask = inputs
    out, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.softmax_scale = softmax_scale
    ctx.causal_mode = causal_mode
    ctx.backend = backend
    # window_left, window_right, softcap (the schema's defaults when the caller left them out).
    ctx.mask = tuple(mask) + (-1, -1, 0.0)[len(mask):]
    ctx.num_inputs = len(inputs)
    ctx.deterministic = deterministic_backward()


def _grads_for(ctx, dq, dk, dv):
    need = ctx.needs_input_grad
    return (dq if need[0] else None, dk if need[1] else None, dv if need[2] else None) + (None,) * (ctx.num_inputs - 3)


def _bwd_for(ctx, dout, q, k, v, out, lse):
    """The backward op with the forward's scalars; window/softcap only when set (fewer arguments
    on the common path)."""
    args = (dout, q, k, v, out, lse, ctx.softmax_scale, ctx.causal_mode, ctx.deterministic, ctx.backend)
    if ctx.mask == (-1, -1, 0.0):
        return _bwd(*args)
    return _bwd(*args, *ctx.mask)


def _fwd_backward(ctx, dout, dlse):
    if dout is None:
        return (None,) * ctx.num_inputs
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = _bwd_for(ctx, dout, q, k, v, out, lse)
    return _grads_for(ctx, dq, dk, dv)


def _fwd_bhsd_backward(ctx, dout, dlse):
    """The same kernel on [B, S, H, D] views of the torch-layout tensors; the gradients come back
    as [B, H, S, D] views of contiguous [B, S, H, D] buffers (like the forward's out)."""
    if dout is None:
        return (None,) * ctx.num_inputs
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = _bwd_for(
        ctx, dout.transpose(1, 2), q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), out.transpose(1, 2), lse
    )
    return _grads_for(ctx, dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2))


torch.library.register_autograd("flashattn::fwd", _fwd_backward, setup_context=_setup_context)
torch.library.register_autograd("flashattn::fwd_bhsd", _fwd_bhsd_backward, setup_context=_setup_context)


def _bwd_setup_context(ctx, inputs, output) -> None:
    pass


def _bwd_backward(ctx, ddq, ddk, ddv):
    # Without an autograd kernel, torch would let a double backward through bwd run and silently
    # leave gradients out; say so instead.
    raise RuntimeError(
        "flashattn's backward is not differentiable: double backward (a gradient of a gradient, e.g. "
        "torch.autograd.grad(..., create_graph=True) followed by another backward) is not supported"
    )


torch.library.register_autograd("flashattn::bwd", _bwd_backward, setup_context=_bwd_setup_context)


# ==== packed variable-length batches (issue 16): flashattn::fwd_varlen ==========================
# q [total_q, Hq, D], k/v [total_k, Hk, D] (any row/head strides, unit last stride); cu_seqlens_q /
# cu_seqlens_k int32 [B + 1] on q's device: sequence b is rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]
# of q and cu_seqlens_k[b] .. cu_seqlens_k[b+1] of k/v (zero-length sequences allowed; never read on
# the host). max_seqlen_q / max_seqlen_k bound every sequence's lengths (grid sizing only: rows of
# a longer sequence are not computed). causal_mode, window, softcap as fwd's, aligned per sequence
# (offset Sk_b - Sq_b, or 0 for causal_mode 1). Returns out [total_q, Hq, D] and lse float32
# [Hq, total_q] (FlashAttention's varlen layout). The portable kernel runs on every GPU ('auto' and
# 'portable'); 'hopper' is refused. Differentiable with respect to q, k, v (bwd_varlen below).
_lib.define(
    "fwd_varlen(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, int max_seqlen_q, "
    "int max_seqlen_k, float softmax_scale, int causal_mode, str backend, int window_left=-1, "
    "int window_right=-1, float softcap=0.) -> (Tensor out, Tensor lse)"
)


@torch.library.register_fake("flashattn::fwd_varlen")
def _fwd_varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal_mode,
                     backend, window_left=-1, window_right=-1, softcap=0.0):
    total_q, hq, d = q.shape
    return q.new_empty((total_q, hq, d)), q.new_empty((hq, total_q), dtype=torch.float32)


# ==== the backward of packed batches: flashattn::bwd_varlen ======================================
# dout/q/out [total_q, Hq, D], k/v [total_k, Hk, D] (any row/head strides, unit last stride), lse
# float32 [Hq, total_q] exactly as fwd_varlen returned it; cu_seqlens, max_seqlen, softmax_scale,
# causal_mode, window and softcap those of the forward. Returns dq, dk, dv: new contiguous tensors
# in q's dtype shaped like q, k, v (dk/dv summed over each query-head group in the kernel); rows no
# sequence owns (past cu_seqlens[B]) get 0. deterministic as bwd's. The portable backward runs on
# every GPU ('auto' and 'portable'); 'hopper' is refused, as by the forward.
_lib.define(
    "bwd_varlen(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor cu_seqlens_q, "
    "Tensor cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, float softmax_scale, int causal_mode, "
    "bool deterministic, str backend, int window_left=-1, int window_right=-1, float softcap=0.) "
    "-> (Tensor dq, Tensor dk, Tensor dv)"
)

VARLEN_HOPPER_MESSAGE = (
    "backend 'hopper' does not support packed variable-length batches (its TMA path needs dense [B, S, H, D] "
    "tensors); use set_backend('auto') or 'portable', which run the portable kernels for them on every GPU"
)


def check_bwd_varlen_args(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                          backend) -> None:
    """Metadata checks of flashattn::bwd_varlen's arguments, with errors that name the argument (the
    fake kernel and the Python wrapper run them, so neither a compiled graph nor an autograd
    backward reaches the binding's checks; the binding checks the same)."""
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        raise ValueError(
            f"flashattn::bwd_varlen: q, k and v must be 3-D [total, H, D], got shapes {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)}"
        )
    if out.shape != q.shape:
        raise ValueError(f"flashattn::bwd_varlen: out must have q's shape {tuple(q.shape)}, got {tuple(out.shape)}")
    if dout.shape != q.shape:
        raise ValueError(f"flashattn::bwd_varlen: dout must have out's shape {tuple(q.shape)}, got {tuple(dout.shape)}")
    if k.shape != v.shape:
        raise ValueError(
            f"flashattn::bwd_varlen: k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}"
        )
    total_q, hq, d = q.shape
    if k.shape[2] != d:
        raise ValueError(f"flashattn::bwd_varlen: k's head dim must be q's {d}, got k shape {tuple(k.shape)}")
    if k.shape[1] == 0 or hq % k.shape[1] != 0:
        raise ValueError(f"flashattn::bwd_varlen: q heads ({hq}) must be a multiple of k/v heads ({k.shape[1]})")
    if lse.shape != (hq, total_q):
        raise ValueError(
            f"flashattn::bwd_varlen: lse must be [Hq, total_q] = {[hq, total_q]} (fwd_varlen's layout), got "
            f"{list(lse.shape)}"
        )
    if lse.dtype != torch.float32:
        raise TypeError(f"flashattn::bwd_varlen: lse must be float32, got {lse.dtype}")
    for name, t in (("dout", dout), ("k", k), ("v", v), ("out", out)):
        if t.dtype != q.dtype:
            raise TypeError(f"flashattn::bwd_varlen: {name}.dtype must be q's dtype {q.dtype}, got {t.dtype}")
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if cu.dtype != torch.int32:
            raise TypeError(f"flashattn::bwd_varlen: {name}.dtype must be torch.int32, got {cu.dtype}")
        if cu.dim() != 1 or cu.shape[0] < 1:
            raise ValueError(f"flashattn::bwd_varlen: {name} must be 1-D [batch + 1], got shape {tuple(cu.shape)}")
        if cu.device != q.device:
            raise ValueError(f"flashattn::bwd_varlen: {name} must be on q's device {q.device}, got {cu.device}")
    if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0]:
        raise ValueError(
            f"flashattn::bwd_varlen: cu_seqlens_q and cu_seqlens_k must have the same length (batch + 1), got "
            f"{cu_seqlens_q.shape[0]} and {cu_seqlens_k.shape[0]}"
        )
    for name, m in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if m < 0:
            raise ValueError(f"flashattn::bwd_varlen: {name} must be >= 0, got {m}")
    if backend == "hopper":
        raise ValueError(f"flashattn::bwd_varlen: {VARLEN_HOPPER_MESSAGE}")


@torch.library.register_fake("flashattn::bwd_varlen")
def _bwd_varlen_fake(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                     causal_mode, deterministic, backend, window_left=-1, window_right=-1, softcap=0.0):
    check_bwd_varlen_args(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, backend)
    return (
        q.new_empty(q.shape, dtype=q.dtype),
        k.new_empty(k.shape, dtype=q.dtype),
        v.new_empty(v.shape, dtype=q.dtype),
    )


def _fwd_varlen_setup_context(ctx, inputs, output) -> None:
    """As _setup_context, plus the packing (cu_seqlens, the max_seqlen bounds) the backward walks
    exactly as the forward did."""
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal_mode, backend, *mask = inputs
    out, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k)
    ctx.max_seqlen = (max_seqlen_q, max_seqlen_k)
    ctx.softmax_scale = softmax_scale
    ctx.causal_mode = causal_mode
    ctx.backend = backend
    ctx.mask = tuple(mask) + (-1, -1, 0.0)[len(mask):]
    ctx.num_inputs = len(inputs)
    ctx.deterministic = deterministic_backward()


def _fwd_varlen_backward(ctx, dout, dlse):
    if dout is None:
        return (None,) * ctx.num_inputs
    q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
    dq, dk, dv = bwd_varlen(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, *ctx.max_seqlen, ctx.softmax_scale,
                            ctx.causal_mode, ctx.deterministic, ctx.backend, *ctx.mask)
    return _grads_for(ctx, dq, dk, dv)


torch.library.register_autograd("flashattn::fwd_varlen", _fwd_varlen_backward, setup_context=_fwd_varlen_setup_context)
torch.library.register_autograd("flashattn::bwd_varlen", _bwd_backward, setup_context=_bwd_setup_context)


# Registers the CUDA implementations when the extension is built.
_ext._load()

# The overloads themselves: calling them skips the packet's overload resolution on every call.
_fwd = torch.ops.flashattn.fwd.default
_fwd_bhsd = torch.ops.flashattn.fwd_bhsd.default
_bwd = torch.ops.flashattn.bwd.default


def fwd(q, k, v, softmax_scale: float, causal_mode: int, backend: str, window_left: int = -1, window_right: int = -1,
        softcap: float = 0.0):
    """q [B, Sq, Hq, D], k/v [B, Sk, Hk, D] (any strides, unit last stride) -> (out [B, Sq, Hq, D], lse [B, Hq, Sq]).
    The window and softcap go to the op only when set (fewer arguments on the common path)."""
    if window_left == -1 and window_right == -1 and softcap == 0.0:
        return _fwd(q, k, v, softmax_scale, causal_mode, backend)
    return _fwd(q, k, v, softmax_scale, causal_mode, backend, window_left, window_right, softcap)


def fwd_bhsd(q, k, v, softmax_scale: float, causal_mode: int, backend: str, window_left: int = -1,
             window_right: int = -1, softcap: float = 0.0):
    """q [B, Hq, Sq, D], k/v [B, Hk, Sk, D] (any strides, unit last stride) -> (out [B, Hq, Sq, D] (a view
    of a [B, Sq, Hq, D] buffer), lse [B, Hq, Sq])."""
    if window_left == -1 and window_right == -1 and softcap == 0.0:
        return _fwd_bhsd(q, k, v, softmax_scale, causal_mode, backend)
    return _fwd_bhsd(q, k, v, softmax_scale, causal_mode, backend, window_left, window_right, softcap)


_fwd_varlen = torch.ops.flashattn.fwd_varlen.default


def fwd_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float,
               causal_mode: int, backend: str, window_left: int = -1, window_right: int = -1, softcap: float = 0.0):
    """q [total_q, Hq, D], k/v [total_k, Hk, D], cu_seqlens int32 [B + 1] -> (out [total_q, Hq, D],
    lse float32 [Hq, total_q]). No validation here: see flashattn.interface.flash_attn_varlen_func."""
    return _fwd_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, causal_mode,
                       backend, window_left, window_right, softcap)


_bwd_varlen = torch.ops.flashattn.bwd_varlen.default


def bwd_varlen(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int,
               softmax_scale: float, causal_mode: int, deterministic: bool, backend: str, window_left: int = -1,
               window_right: int = -1, softcap: float = 0.0):
    """dout/q/out [total_q, Hq, D], k/v [total_k, Hk, D] (any row/head strides, unit last stride), lse
    float32 [Hq, total_q] from fwd_varlen, cu_seqlens int32 [B + 1] and the forward's max_seqlen,
    scalars, window and softcap -> (dq [total_q, Hq, D], dk, dv [total_k, Hk, D]): contiguous, q's
    dtype; rows no sequence owns are 0. The arguments are checked here, in Python (errors naming
    the argument; a C++ error thrown inside an autograd backward has crashed the process on torch
    2.11), before the op."""
    check_bwd_varlen_args(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, backend)
    return _bwd_varlen(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                       causal_mode, deterministic, backend, window_left, window_right, softcap)


def bwd(dout, q, k, v, out, lse, softmax_scale: float, causal_mode: int, deterministic: bool, backend: str,
        window_left: int = -1, window_right: int = -1, softcap: float = 0.0):
    """dout/q/out [B, Sq, Hq, D], k/v [B, Sk, Hk, D], lse float32 [B, Hq, Sq] from fwd (any strides,
    unit last stride) -> (dq, dk, dv): contiguous, q's dtype, shaped like q, k, v; window_left,
    window_right and softcap those the forward ran with."""
    return _bwd(dout, q, k, v, out, lse, softmax_scale, causal_mode, deterministic, backend, window_left, window_right,
                softcap)


# ==== KV-cache decoding (issue 7): flashattn::fwd_kvcache =======================================
# Owned by the decode path (flashattn/kvcache.py, csrc/binding_decode.cpp, csrc/flash_decode/).
# k_cache and v_cache are annotated as mutated (Tensor(a!), Tensor(b!)): with k/v given, the op
# writes them into the caches in place (rows cache_seqlens[b] .. + Sq_new - 1) before attending.
# cache_seqlens (Tensor?, int32 [B]) wins over cache_seqlen (the same count for every batch).
_lib.define(
    "fwd_kvcache(Tensor q, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor? k, Tensor? v, "
    "Tensor? cache_seqlens, int cache_seqlen, float softmax_scale, bool causal, int num_splits, "
    "int window_left=-1, int window_right=-1, float softcap=0.) -> (Tensor out, Tensor lse)"
)


@torch.library.register_fake("flashattn::fwd_kvcache")
def _fwd_kvcache_fake(q, k_cache, v_cache, k, v, cache_seqlens, cache_seqlen, softmax_scale, causal, num_splits,
                      window_left=-1, window_right=-1, softcap=0.0):
    b, sq, hq, d = q.shape
    out = q.new_empty((b, sq, hq, d))
    lse = q.new_empty((b, hq, sq), dtype=torch.float32)
    return out, lse


def fwd_kvcache_overload():
    """The op's OpOverload, for callers that call it on every decode step (skips the packet lookup)."""
    return torch.ops.flashattn.fwd_kvcache.default


def fwd_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, cache_seqlen: int, softmax_scale: float, causal: bool, num_splits: int,
                window_left: int = -1, window_right: int = -1, softcap: float = 0.0):
    """q [B, Sq, Hq, D], caches [B, Sk_max, Hk, D] (appended to in place when k/v are given)
    -> (out [B, Sq, Hq, D], lse float32 [B, Hq, Sq]). No validation here: see flashattn.kvcache."""
    return torch.ops.flashattn.fwd_kvcache(
        q, k_cache, v_cache, k, v, cache_seqlens, cache_seqlen, softmax_scale, causal, num_splits, window_left,
        window_right, softcap,
    )
