"""Builds the flashattn CUDA extension (flashattn._C) with ninja against the torch already
installed (hence `pip install --no-build-isolation`: the kernels must match the runtime torch's
ABI, which a torch fetched into an isolated build environment need not).

- CUDA torch and nvcc here: the kernels are built; a failed build fails the install.
- A GPU visible but no torch to build against, a CPU-only torch, or no nvcc: an error, never a
  quiet kernel-less install on a machine meant to run the kernels.
- No GPU, and torch without CUDA or no nvcc (a CPU machine): the pure-Python package, and a line
  saying why the kernels are not built (pip shows it with -v; `python -m flashattn` says it too).

Targets: TORCH_CUDA_ARCH_LIST (e.g. "8.0;8.9;9.0a"), else the local GPU(s), else 8.0;8.9;9.0a.
Parallel jobs: MAX_JOBS. Skip the build on any machine: FLASHATTN_SKIP_CUDA_BUILD=1.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

from setuptools import setup

ROOT = os.path.dirname(os.path.abspath(__file__))


def _gpu_visible() -> bool:
    """An NVIDIA GPU this process may use, found without torch (which may be absent or CPU-only)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*")) or bool(glob.glob("/proc/driver/nvidia/gpus/*"))


def _nvcc_found() -> bool:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    return bool(shutil.which("nvcc")) or (home is not None and os.path.exists(os.path.join(home, "bin", "nvcc")))


def _cuda_build_possible() -> tuple[bool, str]:
    """(build, why not). Raises where a kernel-less install would hide a broken setup."""
    if os.environ.get("FLASHATTN_SKIP_CUDA_BUILD", "0") == "1":
        return False, "FLASHATTN_SKIP_CUDA_BUILD=1"
    gpu = _gpu_visible()
    try:
        import torch
        from torch.utils.cpp_extension import CUDA_HOME
    except ImportError as exc:
        why = f"torch is not importable in the build environment ({exc})"
        if gpu or _nvcc_found():
            # pip's default build isolation (or no torch installed yet): building here would give
            # a package without kernels on a machine that can build them.
            raise SystemExit(
                f"flashattn: {why}, but this machine has {'a GPU' if gpu else 'nvcc'}. Install torch first and "
                "build against it: python -m pip install torch \"setuptools>=64\" wheel ninja && "
                "python -m pip install --no-build-isolation -e . (README.md); or set FLASHATTN_SKIP_CUDA_BUILD=1 "
                "for the package without kernels."
            )
        return False, why
    if torch.version.cuda is None:
        why = f"torch {torch.__version__} is a CPU-only build"
        if gpu:
            raise SystemExit(
                f"flashattn: {why}, but this machine has a GPU. Install a CUDA build of torch (docs/build.md), "
                "or set FLASHATTN_SKIP_CUDA_BUILD=1 for the package without kernels."
            )
        return False, why
    if CUDA_HOME is None:
        why = "no CUDA toolkit (nvcc) found; set CUDA_HOME"
        if gpu:
            raise SystemExit(f"flashattn: {why} (this machine has a GPU and torch {torch.__version__} has CUDA "
                             f"{torch.version.cuda}); or set FLASHATTN_SKIP_CUDA_BUILD=1 for the package without kernels.")
        return False, why
    return True, ""


def _nvcc_version(cuda_home: str) -> str:
    try:
        out = subprocess.run([os.path.join(cuda_home, "bin", "nvcc"), "--version"], capture_output=True, text=True)
        return out.stdout.strip().splitlines()[-1].split(",")[0].replace(" ", "_")
    except OSError:
        return "unknown"


ext_modules = []
cmdclass = {}
ok, why = _cuda_build_possible()
if ok:
    import torch
    from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CUDAExtension

    if not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        if torch.cuda.is_available():
            # The local GPUs. Hopper gets "9.0a": wgmma/TMA/setmaxnreg exist only in the
            # arch-specific target, and torch's own default would pick plain 9.0.
            ccs = {torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}
            os.environ["TORCH_CUDA_ARCH_LIST"] = ";".join(
                f"{ma}.{mi}a" if (ma, mi) == (9, 0) else f"{ma}.{mi}" for ma, mi in sorted(ccs)
            )
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = "8.0;8.9;9.0a"
    archs = os.environ.get("TORCH_CUDA_ARCH_LIST", "local").replace(" ", "").replace(";", "_")
    # Every .cpp directly under csrc/ is a torch binding; every .cu anywhere under csrc/ is a kernel
    # translation unit (generated instantiations included), so new kernels need no edit here.
    sources = sorted(glob.glob("csrc/*.cpp")) + sorted(glob.glob("csrc/**/*.cu", recursive=True))
    defines = [
        f"-DFLASHATTN_ARCHS={archs}",
        f"-DFLASHATTN_NVCC_VERSION={_nvcc_version(CUDA_HOME)}",
        f"-DFLASHATTN_TORCH_VERSION={torch.__version__.replace('+', '_')}",
    ]
    ext_modules.append(
        CUDAExtension(
            name="flashattn._C",
            sources=sources,
            include_dirs=[os.path.join(ROOT, "csrc")],
            extra_compile_args={
                "cxx": ["-O3", "-std=c++17", *defines],
                "nvcc": ["-O3", "-std=c++17", "--expt-relaxed-constexpr", "-lineinfo", *defines],
            },
        )
    )
    cmdclass = {"build_ext": BuildExtension.with_options(use_ninja=True)}
else:
    print(f"flashattn: installing WITHOUT the CUDA kernels: {why}. The package imports and its calls "
          "raise that reason; `python -m flashattn` prints it.", file=sys.stderr)

setup(ext_modules=ext_modules, cmdclass=cmdclass)
