#!/usr/bin/env python3
"""The extension's torch-side host layer built for the CPU: csrc/autograd.cpp and csrc/module.cpp
(no CUDA kernel, no CUDA library) as flashattn._C, so that a machine without a GPU can run the CPU
suite's autograd tests against the C++ autograd (the suite's CPU stand-in kernels serve as the
ops' CPU kernels) and time the host path (lab/host_overhead.py, with lab/host_stub_kernels.cpp).
Builds with torch's JIT extension builder into build/host_cpu/ (a few minutes on 2 cores the first
time, cached after).

usage: python3 lab/host_cpu_build.py test [pytest arguments]
       (default: the autograd, validation and API tests of the CPU suite)
"""

from __future__ import annotations

import glob
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build" / "host_cpu"
HOST_SOURCES = ("csrc/autograd.cpp", "csrc/module.cpp")
STUB_SOURCES = ("lab/host_stub_kernels.cpp",)
DEFAULT_TESTS = ("tests/kernels/test_backward_cpu.py", "tests/kernels/test_varlen_cpu.py",
                 "tests/kernels/test_window_cpu.py", "tests/kernels/test_validation.py",
                 "tests/kernels/test_api_cpu.py", "tests/kernels/test_kvcache.py",
                 "tests/kernels/test_torch_impl_cpu.py", "tests/kernels/test_torch_varlen_cpu.py",
                 "tests/kernels/test_check_indices_cpu.py")


def _cuda_include() -> list[str]:
    """csrc/module.cpp reads CUDART_VERSION: the toolkit's header where there is one, else a stand-in."""
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    if os.path.exists(os.path.join(home, "include", "cuda_runtime_api.h")):
        return [os.path.join(home, "include")]
    shim = Path(tempfile.gettempdir()) / "flashattn_host_cpu_shim"
    shim.mkdir(exist_ok=True)
    (shim / "cuda_runtime_api.h").write_text("#pragma once\n#define CUDART_VERSION 0\n")
    return [str(shim)]


def _build(name: str, sources: tuple[str, ...], python_module: bool) -> Path:
    """Builds in a child process (torch's builder also loads what it built; the caller loads it
    once, under the name it needs) and returns the shared library."""
    out = BUILD / name
    out.mkdir(parents=True, exist_ok=True)
    code = (
        "import sys, torch.utils.cpp_extension as c; "
        f"c.load(name={name!r}, sources={[str(ROOT / s) for s in sources]!r}, "
        f"extra_include_paths={[str(ROOT / 'csrc'), *_cuda_include()]!r}, "
        "extra_cflags=['-O2', '-DFLASHATTN_ARCHS=cpu-host-layer', '-DFLASHATTN_NVCC_VERSION=none', "
        "'-DFLASHATTN_TORCH_VERSION=cpu'], "
        f"build_directory={str(out)!r}, is_python_module={python_module}, verbose=False)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    libs = sorted(glob.glob(str(out / f"{name}*.so")))
    if not libs:
        raise RuntimeError(f"no {name}*.so under {out}")
    return Path(libs[0])


def load_host_layer() -> None:
    """Builds (once) and imports the CPU host layer as flashattn._C; call before importing flashattn."""
    import torch  # noqa: F401  (loads the libraries the extension links against)

    path = _build("_C", HOST_SOURCES, python_module=True)
    spec = importlib.util.spec_from_file_location("flashattn._C", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["flashattn._C"] = module
    spec.loader.exec_module(module)


def load_stub_kernels() -> None:
    """Builds (once) and loads the CPU stand-ins of the CUDA kernels (lab/host_stub_kernels.cpp)."""
    import torch

    torch.ops.load_library(str(_build("flashattn_host_stubs", STUB_SOURCES, python_module=False)))


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] != "test":
        print(__doc__)
        return 2
    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)
    load_host_layer()
    import pytest

    return pytest.main(["-q", "-p", "no:cacheprovider", *(sys.argv[2:] or DEFAULT_TESTS)])


if __name__ == "__main__":
    sys.exit(main())
