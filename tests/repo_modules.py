"""Loading a repository script or module that is not a package (tools/*.py, benchmarks/*.py) into
a test, by path, under its own name; and running a small C++ probe built against csrc/'s plain
headers with the host compiler (how the CPU tests check host/device code without a GPU)."""

from __future__ import annotations

import importlib.util
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


def run_cpp_probe(tmp_path_factory, name: str, source: str) -> list[str]:
    """Compiles `source` (C++17, -O1, csrc/ on the include path) with the host compiler and returns
    its stdout lines; skips the test when there is no host compiler."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip(f"no host C++ compiler (g++) to build the {name} probe")
    d = tmp_path_factory.mktemp(name)
    (d / "probe.cpp").write_text(source)
    subprocess.run([cxx, "-std=c++17", "-O1", f"-I{ROOT / 'csrc'}", str(d / "probe.cpp"), "-o", str(d / "probe")],
                   check=True)
    return subprocess.run([str(d / "probe")], capture_output=True, text=True, check=True).stdout.splitlines()
