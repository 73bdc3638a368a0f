"""Argument checks of every entry point, with errors that name the argument and what was expected
(TypeError for a wrong type or dtype, ValueError for anything else).

The one statement of what each entry accepts, run wherever a call must be explained or traced: the
checked path of the public functions (flashattn.interface, flashattn.kvcache: on a machine without
the extension, under torch.compile, and after the compiled extension refused a call), torch's
flash-attention ops (flashattn.torch_impl) and the fake kernels of the backward ops
(flashattn._ops). On the eager path with the extension built, the C++ bindings check the same
conditions without building a message, and a refusal there sends the call here to be explained.
Nothing here reads tensor values: no host-device synchronization.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import torch

from . import _ext

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
MIN_HEAD_DIM = 8
MAX_HEAD_DIM = 256
BACKENDS = ("auto", "portable", "hopper")
# Paged caches: page sizes the decode kernels take (csrc/flash_decode/decode_traits.h, kDecodeMinPageSize).
PAGE_SIZE_MULTIPLE = 16
_INT32_MAX = 2**31 - 1

VARLEN_HOPPER_MESSAGE = (
    "backend 'hopper' does not support packed variable-length batches (it names the dense Hopper kernels); "
    "use set_backend('auto'), which runs the Hopper kernels' packed flavours on an H100 and the portable ones "
    "elsewhere, or 'portable'"
)


# ==== one tensor, one scalar ========================================================================


def tensor(name: str, t: object, rank_min: int) -> None:
    """A float16/bfloat16 CUDA tensor of at least rank_min dimensions, last dimension contiguous."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() < rank_min:
        raise ValueError(f"{name} must have at least {rank_min} dimensions, got shape {tuple(t.shape)}")
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name}.dtype must be torch.float16 or torch.bfloat16, got {t.dtype}")
    if not t.is_cuda:
        raise _ext.not_on_cuda(name, t)
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(
            f"{name} must have a contiguous last dimension (stride(-1) == 1), got strides {tuple(t.stride())}"
        )


def common(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """query, key and value together: one dtype, one device, a head dim the kernels take."""
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"query, key and value must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if k.get_device() != q.get_device() or v.get_device() != q.get_device():
        raise ValueError(f"query, key and value must be on one device, got {q.device}, {k.device}, {v.device}")
    d = q.shape[-1]
    if d < MIN_HEAD_DIM or d > MAX_HEAD_DIM or d % 8 != 0:
        raise ValueError(
            f"head dim (query.shape[-1]) must be a multiple of 8 in [{MIN_HEAD_DIM}, {MAX_HEAD_DIM}], got {d}"
        )
    k_shape = k.shape
    if k_shape != v.shape:
        raise ValueError(f"key and value must have the same shape, got {tuple(k_shape)} and {tuple(v.shape)}")
    if k_shape[-1] != d:
        raise ValueError(f"key head dim must equal query head dim {d}, got key shape {tuple(k_shape)}")


def softmax_scale(scale: float | None, d: int) -> float:
    """The scale as a float: 1/sqrt(d) for None, else finite."""
    if scale is None:
        return 1.0 / math.sqrt(d)
    scale = float(scale)
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    return scale


def window(window_size: tuple[int, int]) -> tuple[int, int]:
    """(left, right) from window_size: a pair of ints, each -1 (unbounded on that side) or >= 0."""
    if window_size == (-1, -1):
        return -1, -1
    if isinstance(window_size, (str, bytes)) or not hasattr(window_size, "__len__") or len(window_size) != 2:
        raise TypeError(f"window_size must be a pair of ints (left, right), -1 meaning unbounded, got {window_size!r}")
    left, right = window_size
    for name, w in (("left", left), ("right", right)):
        if isinstance(w, bool) or not isinstance(w, int):
            raise TypeError(
                f"window_size must be a pair of ints (left, right), got {type(w).__name__} {w!r} for {name}"
            )
        if w < -1:
            raise ValueError(f"window_size values must be >= -1 (-1: unbounded), got {tuple(window_size)}")
    return int(left), int(right)


def softcap(value: object) -> float:
    """softcap as a float: 0 (off) or a finite value > 0 within float32's normal range."""
    if value == 0.0 and not isinstance(value, bool):
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"softcap must be a float (0.0: off), got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value < 0.0:
        raise ValueError(f"softcap must be finite and >= 0 (0.0: off), got {value}")
    if value > 0.0 and not 1.2e-38 < value < 3.4e38:
        raise ValueError(f"softcap must be 0 or a positive value within float32's normal range, got {value}")
    return value


def cu_seqlens(name: str, cu: object, q: torch.Tensor) -> None:
    """Cumulative sequence lengths: int32 [batch + 1], contiguous, on q's device."""
    if not isinstance(cu, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (int32 [batch + 1]), got {type(cu).__name__}")
    if cu.dtype != torch.int32:
        raise TypeError(f"{name}.dtype must be torch.int32, got {cu.dtype}")
    if cu.get_device() != q.get_device():
        raise ValueError(f"{name} must be on q's device {q.device}, got device {cu.device}")
    if cu.dim() != 1 or cu.shape[0] < 1:
        raise ValueError(f"{name} must be 1-D [batch + 1] (cumulative sequence lengths), got shape {tuple(cu.shape)}")
    if not cu.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got strides {tuple(cu.stride())}")


def max_seqlen(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a Python int (a bound the caller knows, never read from the device), "
                        f"got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)


def backend(name: str) -> None:
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")


def varlen_backend(op: str, name: str) -> None:
    """Packed batches run the portable forward on every GPU (the backward: the Hopper kernels on an
    H100 under 'auto'); 'hopper', which would force the Hopper forward (TMA over dense tensors), is
    refused."""
    if name == "hopper":
        raise ValueError(f"{op}: {VARLEN_HOPPER_MESSAGE}")


# ==== the public entry points (flashattn.interface) =================================================


def sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None, dropout_p: float,
         scale: float | None, enable_gqa: bool) -> float:
    """scaled_dot_product_attention's arguments but the emptiness of keys (empty_keys(), on the
    [B, S, H, D] views); returns the scale."""
    if attn_mask is not None:
        raise ValueError("attn_mask is not supported by flashattn (use is_causal, or torch's SDPA for masks)")
    if dropout_p != 0.0:
        raise ValueError(f"dropout_p must be 0.0 (dropout is not supported by flashattn), got {dropout_p}")
    min_rank = 3 if enable_gqa else 2
    for name, t in (("query", query), ("key", key), ("value", value)):
        tensor(name, t, min_rank)
    if not (query.dim() == key.dim() == value.dim()):
        raise ValueError(
            f"query, key and value must have the same rank, got {query.dim()}, {key.dim()}, {value.dim()}"
        )
    common(query, key, value)
    if query.dim() >= 3:
        hq, hk = query.shape[-3], key.shape[-3]
        if hk == 0:
            raise ValueError(f"key/value must have at least one head, got key shape {tuple(key.shape)}")
        if query.shape[:-3] != key.shape[:-3]:
            raise ValueError(
                f"query and key batch dims must match, got {tuple(query.shape[:-3])} and {tuple(key.shape[:-3])}"
            )
        if enable_gqa:
            if hq % hk != 0:
                raise ValueError(f"with enable_gqa, query heads ({hq}) must be a multiple of key/value heads ({hk})")
        elif hq != hk:
            raise ValueError(
                f"query heads ({hq}) and key/value heads ({hk}) differ: pass enable_gqa=True for grouped-query attention"
            )
    return softmax_scale(scale, query.shape[-1])


def empty_keys(q4: torch.Tensor, k4: torch.Tensor, bhsd: bool) -> None:
    """Attention over no keys is undefined: refused unless there is no query either."""
    if q4.numel() > 0 and k4.shape[2 if bhsd else 1] == 0:
        order = "[B, H, S, D]" if bhsd else "[B, S, H, D]"
        raise ValueError(
            f"key/value sequence length must be >= 1 when query is not empty, got key shape {tuple(k4.shape)} "
            f"in {order} order (attention over no keys is undefined)"
        )


def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None,
                    window_size: tuple[int, int], cap: float) -> tuple[float, tuple[int, int], float]:
    """flash_attn_func's arguments: q [B, Sq, Hq, D], k/v [B, Sk, Hk, D], Hq a multiple of Hk.
    Returns (scale, (window_left, window_right), softcap)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        tensor(name, t, 4)
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D [batch, seqlen, heads, head_dim], got shape {tuple(t.shape)}")
    common(q, k, v)
    if k.shape[2] == 0:
        raise ValueError(f"k/v must have at least one head, got k shape {tuple(k.shape)}")
    if k.shape[0] != q.shape[0]:
        raise ValueError(f"q and k batch sizes differ: {q.shape[0]} vs {k.shape[0]}")
    if q.shape[2] % k.shape[2] != 0:
        raise ValueError(f"q heads ({q.shape[2]}) must be a multiple of k/v heads ({k.shape[2]})")
    left_right = window(window_size)
    cap = softcap(cap)
    scale = softmax_scale(scale, q.shape[-1])
    empty_keys(q, k, bhsd=False)
    return scale, left_right, cap


# ==== the FP8 forward (issue 29) ===================================================================
FP8_DTYPE = torch.float8_e4m3fn
_FP8_DTYPES = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
                    if hasattr(torch, n))


def is_fp8_call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_descale: torch.Tensor | None,
                k_descale: torch.Tensor | None, v_descale: torch.Tensor | None) -> bool:
    """Whether flash_attn_func's call asks for the FP8 forward: a descale factor given, or any of q,
    k, v in an 8-bit float dtype (the checks in fp8() then say what is wrong with the mix)."""
    if q_descale is not None or k_descale is not None or v_descale is not None:
        return True
    return any(isinstance(t, torch.Tensor) and t.dtype in _FP8_DTYPES for t in (q, k, v))


def fp8(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_descale: torch.Tensor | None,
        k_descale: torch.Tensor | None, v_descale: torch.Tensor | None, scale: float | None,
        window_size: tuple[int, int] = (-1, -1), cap: float = 0.0) -> float:
    """The FP8 forward's arguments: q [B, Sq, Hq, D], k/v [B, Sk, Hk, D], all float8_e4m3fn on one
    CUDA device (last dim contiguous, head dim a multiple of 16 in [16, 256], Hq a multiple of Hk);
    q_descale, k_descale, v_descale float32 [B, Hk] on q's device, all three required; no window, no
    softcap; nothing requiring grad (no backward). Returns the softmax scale. Metadata only (no
    device query: see fp8_device for that)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    dtypes = (q.dtype, k.dtype, v.dtype)
    if any(d != FP8_DTYPE for d in dtypes):
        if any(d in _FP8_DTYPES for d in dtypes) and any(d not in _FP8_DTYPES for d in dtypes):
            raise TypeError(
                f"q, k and v must all be torch.float8_e4m3fn for the FP8 forward (FP8 mixed with 16-bit inputs "
                f"is not supported), got {q.dtype}, {k.dtype}, {v.dtype}"
            )
        if all(d in SUPPORTED_DTYPES for d in dtypes):
            raise ValueError(
                "q_descale, k_descale and v_descale apply to float8_e4m3fn inputs only; q, k, v are "
                f"{q.dtype}, {k.dtype}, {v.dtype}"
            )
        raise TypeError(f"the FP8 forward takes torch.float8_e4m3fn q, k and v, got {q.dtype}, {k.dtype}, {v.dtype}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D [batch, seqlen, heads, head_dim], got shape {tuple(t.shape)}")
        if not t.is_cuda:
            raise _ext.not_on_cuda(name, t)
        if t.shape[-1] > 1 and t.stride(-1) != 1:
            raise ValueError(
                f"{name} must have a contiguous last dimension (stride(-1) == 1), got strides {tuple(t.stride())}"
            )
        if t.requires_grad:
            raise RuntimeError(f"the FP8 forward has no backward: {name} must not require grad (use .detach())")
    if k.get_device() != q.get_device() or v.get_device() != q.get_device():
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    b, _, hq, d = q.shape
    hk = k.shape[2]
    if d < 16 or d > MAX_HEAD_DIM or d % 16 != 0:
        raise ValueError(f"head dim (q.shape[-1]) must be a multiple of 16 in [16, {MAX_HEAD_DIM}] for FP8, got {d}")
    if k.shape[3] != d:
        raise ValueError(f"k head dim must equal q head dim {d}, got k shape {tuple(k.shape)}")
    if k.shape[0] != b:
        raise ValueError(f"q and k batch sizes differ: {b} vs {k.shape[0]}")
    if hk == 0 or hq % hk != 0:
        raise ValueError(f"q heads ({hq}) must be a multiple of k/v heads ({hk})")
    for name, descale in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale)):
        if descale is None:
            raise ValueError(
                f"{name} is required for float8_e4m3fn inputs: a float32 tensor [batch, k/v heads] = [{b}, {hk}] "
                "(FlashAttention-3's form; torch.ones for unscaled inputs)"
            )
        if not isinstance(descale, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(descale).__name__}")
        if descale.dtype != torch.float32:
            raise TypeError(f"{name} must be float32, got {descale.dtype}")
        if tuple(descale.shape) != (b, hk):
            raise ValueError(f"{name} must have shape [batch, k/v heads] = [{b}, {hk}], got {tuple(descale.shape)}")
        if descale.device != q.device:
            raise ValueError(f"{name} must be on q's device {q.device}, got {descale.device}")
        if descale.requires_grad:
            raise RuntimeError(f"the FP8 forward has no backward: {name} must not require grad")
    if window(window_size) != (-1, -1):
        raise ValueError(f"window_size is not supported by the FP8 forward, got {tuple(window_size)}")
    if softcap(cap) != 0.0:
        raise ValueError(f"softcap is not supported by the FP8 forward, got {cap}")
    scale = softmax_scale(scale, d)
    empty_keys(q, k, bhsd=False)
    return scale


def fp8_device(q: torch.Tensor) -> None:
    """What the FP8 forward needs of the machine, for an eager call on a real tensor: an sm_90 GPU,
    an extension built with 9.0a. RuntimeError otherwise."""
    major, minor = torch.cuda.get_device_capability(q.device)
    if (major, minor) != (9, 0):
        raise RuntimeError(
            f"the FP8 forward needs a Hopper GPU (compute capability 9.0: H100/H200); q is on "
            f"{torch.cuda.get_device_name(q.device)} (compute capability {major}.{minor})"
        )
    archs = _ext.build_info().get("cuda_archs", "")
    if archs and "9.0a" not in archs:
        raise RuntimeError(
            f"the FP8 forward needs an extension built for 9.0a (TORCH_CUDA_ARCH_LIST containing 9.0a); this build: "
            f"{archs}"
        )


def varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
           max_q: int, max_k: int, scale: float | None, window_size: tuple[int, int], cap: float,
           backend_name: str) -> tuple[int, int, float, tuple[int, int], float]:
    """flash_attn_varlen_func's arguments. Returns (max_seqlen_q, max_seqlen_k, scale,
    (window_left, window_right), softcap)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        tensor(name, t, 3)
        if t.dim() != 3:
            raise ValueError(f"{name} must be 3-D [total_tokens, heads, head_dim], got shape {tuple(t.shape)}")
    common(q, k, v)
    if k.shape[1] == 0:
        raise ValueError(f"k/v must have at least one head, got k shape {tuple(k.shape)}")
    if q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"q heads ({q.shape[1]}) must be a multiple of k/v heads ({k.shape[1]})")
    cu_seqlens("cu_seqlens_q", cu_seqlens_q, q)
    cu_seqlens("cu_seqlens_k", cu_seqlens_k, q)
    if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0]:
        raise ValueError(
            f"cu_seqlens_q and cu_seqlens_k must have the same length (batch + 1), got {cu_seqlens_q.shape[0]} "
            f"and {cu_seqlens_k.shape[0]}"
        )
    max_q = max_seqlen("max_seqlen_q", max_q)
    max_k = max_seqlen("max_seqlen_k", max_k)
    left_right = window(window_size)
    cap = softcap(cap)
    varlen_backend("flash_attn_varlen_func", backend_name)
    return max_q, max_k, softmax_scale(scale, q.shape[-1]), left_right, cap


# ==== decoding (flashattn.kvcache) ===================================================================
# Each check reads tensor metadata once: a decode step's GPU work can be a few microseconds.


def _meta(name: str, t: object) -> tuple[torch.Size, tuple[int, ...]]:
    """(shape, strides) of a 4-D fp16/bf16 CUDA tensor with a contiguous last dimension."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    shape = t.shape
    if len(shape) != 4:
        if len(shape) < 4:
            raise ValueError(f"{name} must have at least 4 dimensions, got shape {tuple(shape)}")
        raise ValueError(f"{name} must be 4-D [batch, seqlen, heads, head_dim], got shape {tuple(shape)}")
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name}.dtype must be torch.float16 or torch.bfloat16, got {t.dtype}")
    if not t.is_cuda:
        raise _ext.not_on_cuda(name, t)
    stride = t.stride()
    if shape[3] > 1 and stride[3] != 1:
        raise ValueError(f"{name} must have a contiguous last dimension (stride(-1) == 1), got strides {stride}")
    return shape, stride


def _cache_layout(name: str, t: torch.Tensor, shape: torch.Size, stride: tuple[int, ...]) -> None:
    # The caches are read and appended to in place, so a layout the kernels cannot stream 16 bytes
    # at a time cannot be fixed by a copy: refuse it. Under torch.compile the storage offset is not
    # traceable (a graph break); the binding still checks the data pointer's alignment there.
    offset = 0 if torch.compiler.is_compiling() else t.storage_offset()
    if (
        (shape[0] > 1 and stride[0] % 8)
        or (shape[1] > 1 and stride[1] % 8)
        or (shape[2] > 1 and stride[2] % 8)
        or offset % 8
    ):
        raise ValueError(
            f"{name} must have strides of dims 0-2 and a storage offset that are multiples of 8 elements "
            f"(16-byte aligned rows; the cache is used in place and cannot be copied), got strides "
            f"{stride} and storage offset {offset}"
        )


def kvcache_grad(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor | None,
                 v: torch.Tensor | None) -> None:
    """The decode op has no backward: an input that requires grad would get none, silently."""
    if not torch.is_grad_enabled():
        return
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("k", k), ("v", v)):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            raise RuntimeError(
                f"flash_attn_with_kvcache is inference-only (no backward), but {name} requires grad: "
                "use flashattn.flash_attn_func (or scaled_dot_product_attention) to train, or call it "
                "under torch.no_grad() / torch.inference_mode()"
            )


def _block_table(block_table: object, b: int, device: torch.device, c_shape: torch.Size) -> int:
    """Validates a paged cache's block table against q and k_cache; returns Sk_max, the capacity of
    one sequence (max_blocks_per_seq * page_size). Reads metadata only: page indices are the
    caller's contract (checking them would synchronize with the GPU)."""
    if not isinstance(block_table, torch.Tensor):
        raise TypeError(f"block_table must be an int32 tensor or None, got {type(block_table).__name__}")
    if block_table.dtype != torch.int32:
        raise TypeError(f"block_table must be an int32 tensor, got dtype {block_table.dtype}")
    bt_shape = block_table.shape
    if len(bt_shape) != 2:
        raise ValueError(f"block_table must be 2-D [B, max_blocks_per_seq], got shape {list(bt_shape)}")
    if bt_shape[0] != b:
        raise ValueError(f"block_table batch size ({bt_shape[0]}) must equal q's ({b})")
    if bt_shape[1] < 1:
        raise ValueError("block_table must have at least one column (max_blocks_per_seq >= 1), got shape "
                         f"{list(bt_shape)}")
    if block_table.device != device:
        raise ValueError(f"block_table must be on q's device {device}, got {block_table.device}")
    num_blocks, page_size = c_shape[0], c_shape[1]
    if page_size < PAGE_SIZE_MULTIPLE or page_size % PAGE_SIZE_MULTIPLE:
        raise ValueError(
            f"with block_table, k_cache/v_cache are [num_blocks, page_size, Hk, D] and page_size (k_cache.shape[1]) "
            f"must be a positive multiple of {PAGE_SIZE_MULTIPLE}, got {page_size}"
        )
    if num_blocks < 1:
        raise ValueError("with block_table, k_cache/v_cache must hold at least one page (k_cache.shape[0] >= 1), got 0")
    sk_max = bt_shape[1] * page_size
    if sk_max > _INT32_MAX or num_blocks > _INT32_MAX:
        raise ValueError(
            f"block_table: max_blocks_per_seq * page_size = {bt_shape[1]} * {page_size} and the page count "
            f"{num_blocks} must fit in int32"
        )
    return sk_max


def _seqused_k(seqused_k: object, b: int, device: torch.device) -> None:
    if not isinstance(seqused_k, torch.Tensor):
        raise TypeError(f"seqused_k must be an int32 tensor or None, got {type(seqused_k).__name__}")
    if seqused_k.dtype != torch.int32:
        raise TypeError(f"seqused_k must be an int32 tensor, got dtype {seqused_k.dtype}")
    shape = seqused_k.shape
    if len(shape) != 1 or shape[0] != b:
        raise ValueError(f"seqused_k must have shape [B] = [{b}], got {list(shape)}")
    if seqused_k.device != device:
        raise ValueError(f"seqused_k must be on q's device {device}, got {seqused_k.device}")


class KvcacheArgs(NamedTuple):
    seqlens: torch.Tensor | None
    seqlen: int
    scale: float
    window: tuple[int, int]
    softcap: float
    sq_new: int
    sk_max: int
    page_size: int
    num_pages: int


def kvcache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor | None,
            v: torch.Tensor | None, cache_seqlens: torch.Tensor | int | None, scale: float | None,
            window_size: tuple[int, int], cap: float, num_splits: int, block_table: torch.Tensor | None,
            seqused_k: torch.Tensor | None) -> KvcacheArgs:
    """flash_attn_with_kvcache's arguments. Returns KvcacheArgs: the cache lengths as the op takes
    them (seqlens None stands for seqlen on every batch), the scale, window and softcap, and what
    the checked indices mode needs."""
    kvcache_grad(q, k_cache, v_cache, k, v)
    q_shape, _ = _meta("q", q)
    c_shape, c_stride = _meta("k_cache", k_cache)
    v_shape, v_stride = _meta("v_cache", v_cache)
    dtype, device = q.dtype, q.device
    if k_cache.dtype != dtype or v_cache.dtype != dtype:
        raise TypeError(f"q, k_cache and v_cache must share one dtype, got {dtype}, {k_cache.dtype}, {v_cache.dtype}")
    if k_cache.device != device or v_cache.device != device:
        raise ValueError(f"q, k_cache and v_cache must be on one device, got {device}, {k_cache.device}, {v_cache.device}")
    b, sq, hq, d = q_shape
    if d < MIN_HEAD_DIM or d > MAX_HEAD_DIM or d % 8 != 0:
        raise ValueError(f"head dim (q.shape[-1]) must be a multiple of 8 in [{MIN_HEAD_DIM}, {MAX_HEAD_DIM}], got {d}")
    if c_shape != v_shape:
        raise ValueError(f"k_cache and v_cache must have the same shape, got {tuple(c_shape)} and {tuple(v_shape)}")
    cache_b, sk_max, hk, cache_d = c_shape
    if block_table is None:
        if cache_b != b:
            raise ValueError(f"k_cache batch size ({cache_b}) must equal q's ({b})")
    else:
        sk_max = _block_table(block_table, b, device, c_shape)
    if cache_d != d:
        raise ValueError(f"k_cache head dim ({cache_d}) must equal q's ({d})")
    if hk == 0 or hq % hk != 0:
        raise ValueError(f"q heads ({hq}) must be a multiple of k_cache/v_cache heads ({hk})")
    _cache_layout("k_cache", k_cache, c_shape, c_stride)
    _cache_layout("v_cache", v_cache, v_shape, v_stride)

    if (k is None) != (v is None):
        raise ValueError(f"k and v must be given together (got k {'None' if k is None else 'a tensor'}, "
                         f"v {'None' if v is None else 'a tensor'})")
    sq_new = 0
    if k is not None:
        if TYPE_CHECKING:  # v is given with k (checked above)
            assert v is not None
        k_shape, _ = _meta("k", k)
        vn_shape, _ = _meta("v", v)
        if k.dtype != dtype or v.dtype != dtype:
            raise TypeError(f"k and v must have q's dtype {dtype}, got {k.dtype} and {v.dtype}")
        if k.device != device or v.device != device:
            raise ValueError(f"k and v must be on q's device {device}, got {k.device} and {v.device}")
        if k_shape[0] != b or k_shape[2] != hk or k_shape[3] != d:
            raise ValueError(f"k must be [B={b}, Sq_new, Hk={hk}, D={d}] to match the cache, got shape {tuple(k_shape)}")
        if vn_shape != k_shape:
            raise ValueError(f"v must have k's shape {tuple(k_shape)}, got {tuple(vn_shape)}")
        sq_new = k_shape[1]
        if sq_new > sk_max:
            raise ValueError(f"k/v have {sq_new} new rows but the cache holds only Sk_max = {sk_max}")

    seqlens_tensor = None
    seqlen_fixed = 0
    if cache_seqlens is None:
        if sq_new > 0:
            raise ValueError(
                "cache_seqlens is required when appending k/v: its default (the whole cache, "
                f"Sk_max = {sk_max}) leaves no room for {sq_new} new rows"
            )
        seqlen_fixed = sk_max
    elif isinstance(cache_seqlens, torch.Tensor):
        if cache_seqlens.dtype != torch.int32:
            raise TypeError(f"cache_seqlens must be an int32 tensor, got dtype {cache_seqlens.dtype}")
        cs_shape = cache_seqlens.shape
        if len(cs_shape) != 1 or cs_shape[0] != b:
            raise ValueError(f"cache_seqlens must have shape [B] = [{b}], got {list(cs_shape)}")
        if cache_seqlens.device != device:
            raise ValueError(f"cache_seqlens must be on q's device {device}, got {cache_seqlens.device}")
        seqlens_tensor = cache_seqlens
    elif isinstance(cache_seqlens, bool) or not isinstance(cache_seqlens, int):
        raise TypeError(f"cache_seqlens must be an int32 tensor, an int or None, got {type(cache_seqlens).__name__}")
    else:
        if not 0 <= cache_seqlens <= sk_max - sq_new:
            what = f"Sk_max - Sq_new = {sk_max} - {sq_new}" if sq_new else f"Sk_max = {sk_max}"
            raise ValueError(f"cache_seqlens must be in [0, {what}], got {cache_seqlens}")
        seqlen_fixed = cache_seqlens

    scale = softmax_scale(scale, d)
    left_right = window(window_size)
    cap = softcap(cap)
    if isinstance(num_splits, bool) or not isinstance(num_splits, int):
        raise TypeError(f"num_splits must be an int, got {type(num_splits).__name__}")
    if num_splits < 0:
        raise ValueError(f"num_splits must be >= 0 (0: heuristic, 1: no split), got {num_splits}")
    if seqused_k is not None:
        _seqused_k(seqused_k, b, device)
    return KvcacheArgs(seqlens_tensor, seqlen_fixed, scale, left_right, cap, sq_new, sk_max, c_shape[1], c_shape[0])


# ==== the backward ops (flashattn._ops: fake kernels and the Python wrapper) ==========================


def _bwd_tensors(op: str, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 ndim: int, layout: str) -> None:
    """The shapes both backward ops check alike: ranks, and out, dout, v against q's and k's (lse's
    shape is each op's own)."""
    if q.dim() != ndim or k.dim() != ndim or v.dim() != ndim:
        raise ValueError(
            f"{op}: q, k and v must be {ndim}-D {layout}, got shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if out.shape != q.shape:
        raise ValueError(f"{op}: out must have q's shape {tuple(q.shape)}, got {tuple(out.shape)}")
    if dout.shape != q.shape:
        raise ValueError(f"{op}: dout must have out's shape {tuple(q.shape)}, got {tuple(dout.shape)}")
    if k.shape != v.shape:
        raise ValueError(f"{op}: k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")


def _bwd_dtypes(op: str, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                lse: torch.Tensor) -> None:
    """lse float32, every other tensor q's dtype."""
    if lse.dtype != torch.float32:
        raise TypeError(f"{op}: lse must be float32, got {lse.dtype}")
    for name, t in (("dout", dout), ("k", k), ("v", v), ("out", out)):
        if t.dtype != q.dtype:
            raise TypeError(f"{op}: {name}.dtype must be q's dtype {q.dtype}, got {t.dtype}")


def bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
        lse: torch.Tensor) -> None:
    """flashattn::bwd's tensors (the fake kernel runs this, so a compiled graph fails at trace time;
    the binding checks the same)."""
    op = "flashattn::bwd"
    _bwd_tensors(op, dout, q, k, v, out, 4, "[B, S, H, D]")
    b, sq, hq, _ = q.shape
    if lse.shape != (b, hq, sq):
        raise ValueError(f"{op}: lse must be [B, Hq, Sq] = {[b, hq, sq]}, got {list(lse.shape)}")
    _bwd_dtypes(op, dout, q, k, v, out, lse)


def bwd_varlen(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
               lse: torch.Tensor, cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, max_seqlen_q: int,
               max_seqlen_k: int, backend_name: str) -> None:
    """flashattn::bwd_varlen's arguments (its fake kernel and the Python wrapper run this; the
    binding checks the same)."""
    op = "flashattn::bwd_varlen"
    _bwd_tensors(op, dout, q, k, v, out, 3, "[total, H, D]")
    total_q, hq, d = q.shape
    if k.shape[2] != d:
        raise ValueError(f"{op}: k's head dim must be q's {d}, got k shape {tuple(k.shape)}")
    if k.shape[1] == 0 or hq % k.shape[1] != 0:
        raise ValueError(f"{op}: q heads ({hq}) must be a multiple of k/v heads ({k.shape[1]})")
    if lse.shape != (hq, total_q):
        raise ValueError(f"{op}: lse must be [Hq, total_q] = {[hq, total_q]} (fwd_varlen's layout), got {list(lse.shape)}")
    _bwd_dtypes(op, dout, q, k, v, out, lse)
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if cu.dtype != torch.int32:
            raise TypeError(f"{op}: {name}.dtype must be torch.int32, got {cu.dtype}")
        if cu.dim() != 1 or cu.shape[0] < 1:
            raise ValueError(f"{op}: {name} must be 1-D [batch + 1], got shape {tuple(cu.shape)}")
        if cu.device != q.device:
            raise ValueError(f"{op}: {name} must be on q's device {q.device}, got {cu.device}")
    if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0]:
        raise ValueError(
            f"{op}: cu_seqlens_q and cu_seqlens_k must have the same length (batch + 1), got "
            f"{cu_seqlens_q.shape[0]} and {cu_seqlens_k.shape[0]}"
        )
    for name, m in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if m < 0:
            raise ValueError(f"{op}: {name} must be >= 0, got {m}")
    varlen_backend(op, backend_name)


# ==== torch's flash-attention ops (flashattn.torch_impl) =============================================


def aten_dense(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
    """The forward's tensors, FlashAttention's layout: query [B, Sq, Hq, D], key/value [B, Sk, Hk, D]."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        tensor(name, t, 4)
        if t.dim() != 4:
            raise ValueError(
                f"{name} must be 4-D [B, S, H, D] (dense; a packed [total, H, D] batch comes with cum_seq_q and "
                f"cum_seq_k), got shape {tuple(t.shape)}"
            )
    common(query, key, value)
    b, sq, hq, _ = query.shape
    _, sk, hk, _ = key.shape
    if key.shape[0] != b:
        raise ValueError(f"query and key batch sizes differ: {b} vs {key.shape[0]}")
    if hk == 0 or hq % hk != 0:
        raise ValueError(f"query heads ({hq}) must be a multiple of key/value heads ({hk})")
    if sk == 0 and query.numel() > 0:
        raise ValueError(
            f"key/value sequence length must be >= 1 when query is not empty, got key shape {tuple(key.shape)}"
        )


def aten_packed(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cum_seq_q: torch.Tensor,
                cum_seq_k: torch.Tensor, max_q: int, max_k: int) -> tuple[int, int]:
    """A packed batch's tensors: query [total_q, Hq, D], key/value [total_k, Hk, D], cum_seq_q /
    cum_seq_k int32 [B + 1] on query's device, max_q / max_k ints. Returns (max_q, max_k)."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        tensor(name, t, 3)
        if t.dim() != 3:
            raise ValueError(
                f"{name} must be 3-D [total, H, D] with cum_seq_q and cum_seq_k (a packed batch), got shape "
                f"{tuple(t.shape)}"
            )
    common(query, key, value)
    hq, hk = query.shape[1], key.shape[1]
    if hk == 0 or hq % hk != 0:
        raise ValueError(f"query heads ({hq}) must be a multiple of key/value heads ({hk})")
    cu_seqlens("cum_seq_q", cum_seq_q, query)
    cu_seqlens("cum_seq_k", cum_seq_k, query)
    if cum_seq_q.shape[0] != cum_seq_k.shape[0]:
        raise ValueError(
            f"cum_seq_q and cum_seq_k must have the same length (batch + 1), got {cum_seq_q.shape[0]} and "
            f"{cum_seq_k.shape[0]}"
        )
    return max_seqlen("max_q", max_q), max_seqlen("max_k", max_k)


def like_query(query: torch.Tensor, **tensors: object) -> None:
    """The backward's grad_out and out: query's shape, dtype and device (any strides)."""
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.shape != query.shape:
            raise ValueError(f"{name} must have query's shape {tuple(query.shape)}, got {tuple(t.shape)}")
        if t.dtype != query.dtype:
            raise TypeError(f"{name}.dtype must be query's dtype {query.dtype}, got {t.dtype}")
        if t.device != query.device:
            raise ValueError(f"{name} must be on query's device {query.device}, got {t.device}")


def logsumexp(lse: object, query: torch.Tensor, layout: str, shape: tuple[int, ...]) -> None:
    if not isinstance(lse, torch.Tensor):
        raise TypeError(f"logsumexp must be a torch.Tensor, got {type(lse).__name__}")
    if lse.dtype != torch.float32 or tuple(lse.shape) != shape:
        got = f"{lse.dtype} {list(lse.shape)}"
        raise ValueError(f"logsumexp must be the forward's float32 {layout} = {list(shape)}, got {got}")
    if lse.device != query.device:
        raise ValueError(f"logsumexp must be on query's device {query.device}, got {lse.device}")
