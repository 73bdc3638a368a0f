"""The bindings' check messages (csrc/check.h): built without a C++ stream, so that a build whose
compiler and runtime libstdc++ disagree still raises instead of crashing. A tiny program against
torch's c10 library raises one check per kind of message part; its output must read as written."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
torch = pytest.importorskip("torch")

EXPECTED = [
    "no error",
    "Error|op: causal_mode must be 0, 1 or 2, got 5",
    "Error|ints 7 -3 42 1099511627776",
    "Error|float 0.5 1.5 -2e-30",
    "Error|shape [2, 128, 8, 64] empty []",
    "Error|dtype BFloat16 Half",
    "Error|device cuda:1 cpu",
    "Error|text str view c true",
    "ValueError|value 3",
]


def test_check_messages(tmp_path: Path) -> None:
    cxx = shutil.which(os.environ.get("CXX", "g++"))
    if cxx is None:
        pytest.skip("no C++ compiler (g++ or $CXX) on PATH")
    torch_dir = Path(torch.__file__).parent
    lib_dir = torch_dir / "lib"
    exe = tmp_path / "check_messages"
    abi = int(torch.compiled_with_cxx11_abi())
    subprocess.run(
        [cxx, "-std=c++17", "-O0", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-I", str(ROOT / "csrc"),
         "-I", str(torch_dir / "include"), str(ROOT / "tests" / "infra" / "data" / "check_messages.cpp"),
         "-L", str(lib_dir), "-lc10", f"-Wl,-rpath,{lib_dir}", "-o", str(exe)],
        check=True, capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    assert out.splitlines() == EXPECTED
