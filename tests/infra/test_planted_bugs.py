"""lab/planted_bug.sh's mutations still apply: each bug's sed pattern changes its file in today's
tree (a pattern that no longer matches would make the mutation check report a setup failure on the
GPU, after minutes of building, instead of a verdict)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "lab" / "planted_bug.sh"


def test_every_planted_bug_pattern_matches_its_file() -> None:
    run = subprocess.run(["bash", str(SCRIPT), "patterns"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    bugs = [line.split(":")[0] for line in run.stdout.splitlines()]
    assert {"causal", "bwd90_gqa", "fwd90_packed", "unaligned"} <= set(bugs), run.stdout


def test_an_unknown_bug_is_a_setup_failure_not_a_verdict() -> None:
    run = subprocess.run(["bash", str(SCRIPT), "no_such_bug"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "unknown bug 'no_such_bug'" in run.stderr
