"""Loading the compiled CUDA extension, and saying clearly when it is not there."""

from __future__ import annotations

import importlib
from typing import Any

_EXT: Any = None
_EXT_ERROR: str | None = None


def _not_built_reason(exc: ImportError) -> str:
    """The likeliest cause first: pip hides setup.py's own line on a successful install."""
    import torch

    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build"
    return str(exc)


def _load() -> None:
    global _EXT, _EXT_ERROR
    if _EXT is not None or _EXT_ERROR is not None:
        return
    try:
        _EXT = importlib.import_module("flashattn._C")
    except ImportError as exc:  # not built (CPU-only torch, no nvcc, or FLASHATTN_SKIP_CUDA_BUILD)
        _EXT_ERROR = (
            f"the flashattn CUDA extension is not built ({_not_built_reason(exc)}). Build it on a machine "
            "with CUDA-enabled PyTorch and nvcc: `python -m pip install --no-build-isolation -e .` "
            "(README.md, docs/build.md)."
        )


def extension_available() -> bool:
    """True when the compiled kernels are importable."""
    _load()
    return _EXT is not None


def extension_error() -> str | None:
    """Why the extension is unavailable, or None when it is loaded."""
    _load()
    return _EXT_ERROR


def require_extension() -> Any:
    _load()
    if _EXT is None:
        raise RuntimeError(_EXT_ERROR)
    return _EXT


def build_info() -> dict[str, str]:
    """How the extension was built: archs, nvcc and torch versions ({} when not built)."""
    _load()
    if _EXT is None:
        return {}
    return dict(_EXT.build_info())


def not_on_cuda(name: str, t: Any) -> ValueError:
    """The error for an input that is not on a CUDA device. Without the extension no device would
    do, so that is said first (a CPU tensor is the usual first call on a machine without kernels)."""
    msg = f"{name} must be on a CUDA device, got device {t.device}"
    _load()
    if _EXT is None:
        msg = f"{_EXT_ERROR} Besides, {msg}"
    return ValueError(msg)
