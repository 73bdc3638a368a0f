"""The bindings' check messages (csrc/check.h): built without a C++ stream, so that a build whose
compiler and runtime libstdc++ disagree still raises instead of crashing. A tiny program against
torch's c10 library raises one check per kind of message part; its output must read as written."""

from __future__ import annotations

from pathlib import Path

import pytest

from repo_modules import ROOT, run_torch_program

pytest.importorskip("torch")

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
    out = run_torch_program(tmp_path, ROOT / "tests" / "infra" / "data" / "check_messages.cpp")
    assert out == EXPECTED
