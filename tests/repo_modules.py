"""Loading a repository script or module that is not a package (tools/*.py, benchmarks/*.py) into
a test, by path, under its own name."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

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
