"""csrc/host_args.h's aligned_or_copy on CPU tensors (a host program against libtorch): a view the
kernels cannot load 16 bytes at a time is copied, to an aligned address, and the same values; a
loadable one is handed on uncopied. The case that reached the kernels uncopied until 2026-12-02: a
contiguous view at an unaligned address, which contiguous() returns unchanged."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
torch = pytest.importorskip("torch")

EXPECTED = [
    "offset aligned=1 same=0 equal=1 loadable=1",
    "offset-one-row aligned=1 same=0 equal=1 loadable=1",
    "pad-dim aligned=1 same=0 equal=1 loadable=1",
    "contiguous aligned=1 same=1 equal=1 loadable=1",
    "bhsd aligned=1 same=1 equal=1 loadable=1",
    "slice-heads aligned=1 same=1 equal=1 loadable=1",
]


def _cuda_include() -> Path | None:
    """Where cuda_runtime.h lies (host_args.h includes it for a declaration; nothing links CUDA)."""
    for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if base and (Path(base) / "include" / "cuda_runtime.h").is_file():
            return Path(base) / "include"
    nvcc = shutil.which("nvcc")
    if nvcc and (Path(nvcc).resolve().parents[1] / "include" / "cuda_runtime.h").is_file():
        return Path(nvcc).resolve().parents[1] / "include"
    return None


def test_aligned_or_copy(tmp_path: Path) -> None:
    cxx = shutil.which(os.environ.get("CXX", "g++"))
    if cxx is None:
        pytest.skip("no C++ compiler (g++ or $CXX) on PATH")
    cuda_include = _cuda_include()
    if cuda_include is None:
        pytest.skip("no CUDA headers (cuda_runtime.h under $CUDA_HOME, /usr/local/cuda or beside nvcc)")
    torch_dir = Path(torch.__file__).parent
    lib_dir = torch_dir / "lib"
    exe = tmp_path / "aligned_copy"
    abi = int(torch.compiled_with_cxx11_abi())
    build = subprocess.run(
        [cxx, "-std=c++17", "-O0", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-I", str(ROOT / "csrc"),
         "-I", str(torch_dir / "include"), "-I", str(torch_dir / "include" / "torch" / "csrc" / "api" / "include"),
         "-I", str(cuda_include), str(ROOT / "tests" / "infra" / "data" / "aligned_copy.cpp"),
         "-L", str(lib_dir), "-ltorch_cpu", "-lc10", f"-Wl,-rpath,{lib_dir}", "-o", str(exe)],
        capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    assert out.splitlines() == EXPECTED
