"""Loading a repository script or module that is not a package (tools/*.py, benchmarks/*.py) into
a test, by path, under its own name; and running a small C++ probe built against csrc/'s plain
headers with the host compiler, or a host program against torch's libraries (how the CPU tests
check host/device and binding code without a GPU)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_repo_module(relpath: str, name: str | None = None):
    """Executes ROOT/relpath as module `name` (default: the file's stem) and returns it. It is
    registered in sys.modules first, because dataclasses look their module up while the module
    runs."""
    path = ROOT / relpath
    name = name or path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, f"cannot load {path}"
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def run_cpp_probe(tmp_path_factory, name: str, source: str, stdin: str = "") -> list[str]:
    """Compiles `source` (C++17, -O1, csrc/ on the include path) with the host compiler, runs it on
    `stdin` and returns its stdout lines; skips the test when there is no host compiler."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip(f"no host C++ compiler (g++) to build the {name} probe")
    d = tmp_path_factory.mktemp(name)
    (d / "probe.cpp").write_text(source)
    subprocess.run([cxx, "-std=c++17", "-O1", f"-I{ROOT / 'csrc'}", str(d / "probe.cpp"), "-o", str(d / "probe")],
                   check=True)
    return subprocess.run([str(d / "probe")], input=stdin, capture_output=True, text=True, check=True).stdout.splitlines()


def _cuda_include() -> Path | None:
    """Where cuda_runtime.h lies: $CUDA_HOME, $CUDA_PATH, /usr/local/cuda, or beside nvcc."""
    for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if base and (Path(base) / "include" / "cuda_runtime.h").is_file():
            return Path(base) / "include"
    nvcc = shutil.which("nvcc")
    if nvcc and (Path(nvcc).resolve().parents[1] / "include" / "cuda_runtime.h").is_file():
        return Path(nvcc).resolve().parents[1] / "include"
    return None


def run_torch_program(tmp_path: Path, source: Path, libs: tuple[str, ...] = ("c10",), cuda_headers: bool = False) -> list[str]:
    """Builds `source` (C++17, -O0, csrc/ and torch's headers on the include path, linked against
    torch's `libs`) with the host compiler ($CXX or g++), runs it and returns its stdout lines;
    skips the test when there is no host compiler, or no CUDA headers where `cuda_headers` asks for
    them (declarations only: nothing links CUDA)."""
    import torch

    cxx = shutil.which(os.environ.get("CXX", "g++"))
    if cxx is None:
        pytest.skip("no C++ compiler (g++ or $CXX) on PATH")
    includes = [ROOT / "csrc", Path(torch.__file__).parent / "include",
                Path(torch.__file__).parent / "include" / "torch" / "csrc" / "api" / "include"]
    if cuda_headers:
        cuda_include = _cuda_include()
        if cuda_include is None:
            pytest.skip("no CUDA headers (cuda_runtime.h under $CUDA_HOME, /usr/local/cuda or beside nvcc)")
        includes.append(cuda_include)
    lib_dir = Path(torch.__file__).parent / "lib"
    exe = tmp_path / source.stem
    abi = int(torch.compiled_with_cxx11_abi())
    build = subprocess.run(
        [cxx, "-std=c++17", "-O0", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", *(f"-I{d}" for d in includes), str(source),
         f"-L{lib_dir}", *(f"-l{lib}" for lib in libs), f"-Wl,-rpath,{lib_dir}", "-o", str(exe)],
        capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()
