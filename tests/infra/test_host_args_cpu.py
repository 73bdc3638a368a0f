"""csrc/host_args.h's aligned_or_copy on CPU tensors (a host program against libtorch): a view the
kernels cannot load 16 bytes at a time is copied, to an aligned address, and the same values; a
loadable one is handed on uncopied. The case that reached the kernels uncopied until 2026-12-02: a
contiguous view at an unaligned address, which contiguous() returns unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from repo_modules import ROOT, run_torch_program

pytest.importorskip("torch")

EXPECTED = [
    "offset aligned=1 same=0 equal=1 loadable=1",
    "offset-one-row aligned=1 same=0 equal=1 loadable=1",
    "pad-dim aligned=1 same=0 equal=1 loadable=1",
    "contiguous aligned=1 same=1 equal=1 loadable=1",
    "bhsd aligned=1 same=1 equal=1 loadable=1",
    "slice-heads aligned=1 same=1 equal=1 loadable=1",
]


def test_aligned_or_copy(tmp_path: Path) -> None:
    out = run_torch_program(tmp_path, ROOT / "tests" / "infra" / "data" / "aligned_copy.cpp",
                            libs=("torch_cpu", "c10"), cuda_headers=True)
    assert out == EXPECTED
