"""What machine the suite runs on, and which tests it can run there.

Pure functions over a `DeviceInfo` so that the skip decisions are unit-tested on CPU with fake
device descriptions (tests/infra/test_hardware_markers.py); `detect_device()` fills one in for real.

Marker semantics (see also pyproject.toml):
  gpu               needs a CUDA GPU and the built extension, any supported architecture
  multigpu          needs 2 or more CUDA GPUs and NCCL (one process per GPU), and what `gpu` needs
  sm80, sm89, sm90  needs exactly that architecture (several arch markers: any of them)
  l4, h100          aliases of sm89 and sm90
An arch marker implies `gpu` and its alias. A `gpu` (or `multigpu`) test without an arch marker
runs on every architecture, so it also carries every arch marker and alias: `pytest -m h100`
selects all the tests an H100 runs, `pytest -m "sm90 and not sm89"` only the Hopper-specific ones,
`pytest -m multigpu` the multi-GPU ones (which a 1-GPU machine skips with the reason).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Iterable

# canonical arch marker -> (compute capability, example GPU)
ARCH_MARKERS: dict[str, tuple[tuple[int, int], str]] = {
    "sm80": ((8, 0), "A100"),
    "sm89": ((8, 9), "L4"),
    "sm90": ((9, 0), "H100"),
}
ALIASES: dict[str, str] = {"l4": "sm89", "h100": "sm90"}
MULTI_GPU = "multigpu"
GPU_MARKERS: frozenset[str] = frozenset({"gpu", MULTI_GPU, *ARCH_MARKERS, *ALIASES})


@dataclass(frozen=True)
class DeviceInfo:
    """The facts the skip logic depends on."""

    torch_version: str
    torch_cuda: str | None  # torch.version.cuda; None for a CPU-only torch build
    gpu_name: str | None = None  # None when no CUDA device is visible
    capability: tuple[int, int] | None = None
    extension_error: str | None = None  # None when flashattn._C loaded
    built_archs: str | None = None  # build_info()["cuda_archs"], e.g. "8.0_8.9_9.0a"
    driver: str | None = None
    gpu_count: int | None = None  # CUDA devices visible; None: one where a GPU was found, else none
    nccl: str | None = None  # the NCCL version torch was built with ("2.27.3"); None without NCCL

    @property
    def visible_gpus(self) -> int:
        if self.gpu_count is not None:
            return self.gpu_count
        return 0 if self.capability is None else 1

    @property
    def sm(self) -> str | None:
        """"sm90" for compute capability 9.0; None without a GPU."""
        return None if self.capability is None else f"sm{self.capability[0]}{self.capability[1]}"

    def describe(self) -> str:
        """"NVIDIA L4 sm89", or why there is no GPU ("no CUDA GPU: torch 2.13.0+cpu")."""
        if self.capability is None:
            if self.torch_cuda is None:
                return f"no CUDA GPU: torch {self.torch_version}"
            return f"no CUDA GPU: torch {self.torch_version} (CUDA {self.torch_cuda}) sees no device"
        return f"{self.gpu_name} {self.sm}"


def canonical_arch_markers(names: Iterable[str]) -> set[str]:
    """The canonical arch markers among `names`, aliases resolved ({"h100"} -> {"sm90"})."""
    return {ALIASES.get(n, n) for n in names if n in ARCH_MARKERS or n in ALIASES}


def implied_markers(names: Iterable[str]) -> set[str]:
    """Markers to add to a test carrying `names` (see the module docstring)."""
    names = set(names)
    arch = canonical_arch_markers(names)
    if not arch:
        if "gpu" not in names and MULTI_GPU not in names:
            return set()
        arch = set(ARCH_MARKERS)
    out = {"gpu", *arch}
    out |= {alias for alias, canonical in ALIASES.items() if canonical in arch}
    return out - names


def _parse_arch(token: str) -> tuple[int, int, str] | None:
    m = re.fullmatch(r"(?:sm_?)?(\d+)\.?(\d)([a-z]?)(\+PTX)?", token.strip(), flags=re.IGNORECASE)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), "ptx" if m.group(4) else m.group(3).lower()


def arch_covered(built_archs: str | None, capability: tuple[int, int]) -> bool:
    """Whether an extension built for `built_archs` ("8.0_8.9_9.0a", TORCH_CUDA_ARCH_LIST with
    ';' -> '_') has kernels that run on `capability`. Unknown lists ("local", names) count as
    covered: then the kernels themselves say what is wrong."""
    if not built_archs:
        return True
    tokens = [t for t in re.split(r"[_;,\s]+", built_archs) if t]
    parsed = [_parse_arch(t) for t in tokens]
    if not parsed or any(p is None for p in parsed):
        return True
    major, minor = capability
    for a_major, a_minor, suffix in parsed:  # type: ignore[misc]
        if suffix == "ptx" and (a_major, a_minor) <= (major, minor):
            return True
        if suffix == "a" and (a_major, a_minor) == (major, minor):
            return True
        if suffix == "" and a_major == major and a_minor <= minor:
            return True
    return False


def skip_reason(markers: Iterable[str], device: DeviceInfo) -> str | None:
    """Why a test carrying `markers` (as written, before `implied_markers`) cannot run on
    `device`, or None when it can."""
    markers = set(markers)
    if not markers & GPU_MARKERS:
        return None
    wanted = sorted(canonical_arch_markers(markers))
    if wanted and device.sm not in wanted:
        need = " or ".join(f"{m} ({ARCH_MARKERS[m][1]})" for m in wanted)
        return f"needs {need}; found {device.describe()}"
    if MULTI_GPU in markers:
        n = device.visible_gpus
        if n < 2:
            found = device.describe() if n == 0 else f"1: {device.describe()}"
            return f"needs 2 or more GPUs (multigpu); found {found}"
        if device.nccl is None:
            return f"needs NCCL (multigpu: one process per GPU); torch {device.torch_version} has no NCCL"
    if device.capability is None:
        return device.describe()
    if device.extension_error is not None:
        return f"extension not built: {device.extension_error}"
    if not arch_covered(device.built_archs, device.capability):
        major, minor = device.capability
        return (
            f"extension built for {device.built_archs}, which does not run on {device.describe()} "
            f"(rebuild with TORCH_CUDA_ARCH_LIST={major}.{minor})"
        )
    return None


def _nvidia_smi_driver() -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[0].strip() if out.returncode == 0 and lines else None


def _nccl_version() -> str | None:
    """The NCCL version torch was built with, or None when torch.distributed has no NCCL."""
    import torch

    try:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_nccl_available()):
            return None
        version = torch.cuda.nccl.version()
    except (ImportError, RuntimeError, AttributeError):
        return None
    return ".".join(str(part) for part in version) if isinstance(version, tuple) else str(version)


def detect_device() -> DeviceInfo:
    """The current machine: torch build, the current CUDA device and how many there are, NCCL,
    the flashattn extension."""
    import torch

    import flashattn

    name = capability = driver = None
    count = 0
    if torch.cuda.is_available():
        index = torch.cuda.current_device()
        name = torch.cuda.get_device_name(index)
        capability = tuple(torch.cuda.get_device_capability(index))
        driver = _nvidia_smi_driver()
        count = torch.cuda.device_count()
    return DeviceInfo(
        torch_version=torch.__version__,
        torch_cuda=torch.version.cuda,
        gpu_name=name,
        capability=capability,  # type: ignore[arg-type]
        extension_error=flashattn.extension_error(),
        built_archs=flashattn.build_info().get("cuda_archs"),
        driver=driver,
        gpu_count=count,
        nccl=_nccl_version(),
    )


def header_lines(device: DeviceInfo, build_info: dict[str, str], backend: str, tested_backends: list[str]) -> list[str]:
    """The lines pytest prints in its report header."""
    if device.capability is None:
        gpu = device.describe()
    else:
        major, minor = device.capability
        gpu = (
            f"GPU {device.gpu_name}, compute capability {major}.{minor} ({device.sm}), "
            f"driver {device.driver or 'unknown (no nvidia-smi)'}"
        )
    lines = [
        f"flashattn: {gpu}",
        f"flashattn: torch {device.torch_version}, CUDA {device.torch_cuda or 'none (CPU build)'}",
    ]
    if device.visible_gpus >= 2:
        lines.append(f"flashattn: {device.visible_gpus} GPUs visible (multigpu tests), NCCL {device.nccl or 'none'}")
    if device.extension_error is None:
        info = ", ".join(f"{k}={v}" for k, v in sorted(build_info.items()))
        lines.append(f"flashattn: extension built ({info})")
    else:
        lines.append(f"flashattn: extension not built: {device.extension_error}")
    env = os.environ.get("FLASHATTN_BACKEND")
    lines.append(
        f"flashattn: backend {backend}" + (f" (FLASHATTN_BACKEND={env})" if env else "")
        + f"; `backend` fixture runs: {', '.join(tested_backends)}"
    )
    return lines
