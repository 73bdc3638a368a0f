"""setup.py's decision to build the kernels, without building: a machine that can run the kernels
never gets a quiet install without them; a CPU machine gets the pure-Python package and the reason.

The functions are taken from setup.py without running its setup() call. Last, the pure-Python
wheel is built once, from a copy of the package, for what it holds.
"""

from __future__ import annotations

import ast
import builtins
import os
import pathlib
import shutil
import subprocess
import sys
import types
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def setup_py(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    tree = ast.parse((ROOT / "setup.py").read_text())
    keep = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef))]
    ns: dict = {"__file__": str(ROOT / "setup.py")}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "setup.py", "exec"), ns)
    monkeypatch.delenv("FLASHATTN_SKIP_CUDA_BUILD", raising=False)
    return types.SimpleNamespace(**ns)


def _machine(monkeypatch, mod, *, gpu: bool, nvcc: bool, torch_importable: bool = True) -> None:
    mod._cuda_build_possible.__globals__["_gpu_visible"] = lambda: gpu
    mod._cuda_build_possible.__globals__["_nvcc_found"] = lambda: nvcc
    if not torch_importable:
        real_import = builtins.__import__

        def no_torch(name, *args, **kwargs):
            if name == "torch" or name.startswith("torch."):
                raise ImportError(f"No module named {name!r}")
            return real_import(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", no_torch)


def test_the_opt_out_wins_everywhere(setup_py, monkeypatch) -> None:
    monkeypatch.setenv("FLASHATTN_SKIP_CUDA_BUILD", "1")
    _machine(monkeypatch, setup_py, gpu=True, nvcc=True)
    assert setup_py._cuda_build_possible() == (False, "FLASHATTN_SKIP_CUDA_BUILD=1")


@pytest.mark.parametrize(("gpu", "nvcc"), [(True, False), (False, True), (True, True)])
def test_no_torch_to_build_against_is_an_error_where_kernels_could_be_built(setup_py, monkeypatch, gpu, nvcc) -> None:
    _machine(monkeypatch, setup_py, gpu=gpu, nvcc=nvcc, torch_importable=False)
    with pytest.raises(SystemExit, match="Install torch first.*--no-build-isolation.*FLASHATTN_SKIP_CUDA_BUILD=1"):
        setup_py._cuda_build_possible()


def test_no_torch_on_a_plain_cpu_machine_installs_without_kernels(setup_py, monkeypatch) -> None:
    _machine(monkeypatch, setup_py, gpu=False, nvcc=False, torch_importable=False)
    ok, why = setup_py._cuda_build_possible()
    assert not ok and why.startswith("torch is not importable")


def test_cpu_only_torch(setup_py, monkeypatch) -> None:
    torch = pytest.importorskip("torch")
    if torch.version.cuda is not None:
        pytest.skip(f"torch {torch.__version__} has CUDA")
    _machine(monkeypatch, setup_py, gpu=False, nvcc=True)
    ok, why = setup_py._cuda_build_possible()
    assert not ok and why == f"torch {torch.__version__} is a CPU-only build"
    _machine(monkeypatch, setup_py, gpu=True, nvcc=True)  # a GPU machine: an error, never kernel-less
    with pytest.raises(SystemExit, match="CPU-only build, but this machine has a GPU"):
        setup_py._cuda_build_possible()


def test_the_wheel_holds_every_module_and_the_typed_marker(tmp_path: pathlib.Path) -> None:
    """What a user installs from a wheel: every module of flashattn/ and py.typed (PEP 561), so that
    their type checker reads the package's annotations (tests/infra/test_typing.py checks them)."""
    # from a copy: an in-tree build would reuse the checkout's build/ (a stale py.typed passes)
    src = tmp_path / "src"
    shutil.copytree(ROOT / "flashattn", src / "flashattn", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    env = dict(os.environ, FLASHATTN_SKIP_CUDA_BUILD="1")  # the pure-Python wheel: no kernels to build here
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                        str(tmp_path / "dist"), str(src)], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = (tmp_path / "dist").glob("flashattn-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {f"flashattn/{p.name}" for p in (ROOT / "flashattn").glob("*.py")}
    want = modules | {"flashattn/py.typed"}
    assert want <= names, f"the wheel lacks {sorted(want - names)}"
