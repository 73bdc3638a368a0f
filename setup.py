"""Builds the flashattn CUDA extension (flashattn._C) with ninja when CUDA-enabled torch and nvcc
are present; otherwise installs the pure-Python package, which says at import that the kernels
are not built. Targets: TORCH_CUDA_ARCH_LIST (e.g. "8.0;8.9;9.0a"), else the local GPU(s).
Parallel jobs: MAX_JOBS. Skip the build: FLASHATTN_SKIP_CUDA_BUILD=1.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

from setuptools import setup

ROOT = os.path.dirname(os.path.abspath(__file__))


def _cuda_build_possible() -> tuple[bool, str]:
    if os.environ.get("FLASHATTN_SKIP_CUDA_BUILD", "0") == "1":
        return False, "FLASHATTN_SKIP_CUDA_BUILD=1"
    try:
        import torch
        from torch.utils.cpp_extension import CUDA_HOME
    except ImportError as exc:
        return False, f"torch is not importable ({exc})"
    if torch.version.cuda is None:
        return False, f"torch {torch.__version__} is a CPU-only build"
    if CUDA_HOME is None:
        return False, "no CUDA toolkit (nvcc) found; set CUDA_HOME"
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
    print(f"flashattn: building without the CUDA extension: {why}", file=sys.stderr)

setup(ext_modules=ext_modules, cmdclass=cmdclass)
