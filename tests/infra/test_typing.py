"""flashattn/'s type annotations hold: mypy over the package with pyproject.toml's [tool.mypy]
settings (every function annotated, no unused `type: ignore`), against the installed torch's own
annotations, and over tests/infra/data/typed_usage.py: what a user's type checker infers from the
public calls (the output, or (out, lse) with return_lse=True). mypy comes with the `test` extra,
so a missing mypy fails here rather than skipping."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_type_checks(tmp_path: Path) -> None:
    try:
        import mypy  # noqa: F401
    except ImportError:
        pytest.fail("mypy is missing: it comes with the test extra (python -m pip install -e '.[test]')")
    # a cache of its own: the checkout may be read-only (the image's), and a stale cache can hide an error
    r = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache"), "flashattn",
                        "tests/infra/data/typed_usage.py"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"mypy over flashattn/ and typed_usage.py (pyproject.toml [tool.mypy]):\n{r.stdout}{r.stderr}"
    assert "Success" in r.stdout and "source files" in r.stdout, r.stdout
