"""A GPU stage prepared and not yet run (lab/gpu_run.sh, its comment says "not yet run") must still
find its diffs applicable to the tree: a diff that no longer matches would spend the stage's device
time on a failed patch. Every lab/ab/*.diff such a stage names applies forward or in reverse
(`git apply --check`). Measured stages keep their diffs as records of the commit they ran on and are
not checked."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STAGE = re.compile(r"^  ([a-z0-9]+)\)(.*?)^    ;;", re.M | re.S)


def stage_comment(body: str) -> str:
    """The stage's comment: the text after `name)` up to its first command line."""
    lines = body.split("\n")
    out = [lines[0]]
    for line in lines[1:]:
        if not line.lstrip().startswith("#"):
            break
        out.append(line)
    return "\n".join(out)


def prepared_stage_diffs() -> dict[str, list[str]]:
    text = (REPO / "lab" / "gpu_run.sh").read_text()
    stages = {}
    for m in STAGE.finditer(text):
        name, body = m.group(1), m.group(2)
        if "not yet run" in stage_comment(body):
            stages[name] = sorted(set(re.findall(r"\b([a-z0-9_]+\.diff)\b", body)))
    return stages


def test_the_parser_sees_every_stage_and_its_comment() -> None:
    text = (REPO / "lab" / "gpu_run.sh").read_text()
    names = [m.group(1) for m in STAGE.finditer(text)]
    assert "fwdland" in names and "fwdgrid" in names and len(names) > 100
    assert stage_comment("  # a\n  # not yet run\n  step x\n  # later") == "  # a\n  # not yet run"


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed: `git apply --check` is the check")
def test_prepared_stages_diffs_apply_to_the_tree() -> None:
    stages = prepared_stage_diffs()
    stale = []
    for name, diffs in stages.items():
        for diff in diffs:
            path = REPO / "lab" / "ab" / diff
            assert path.is_file(), f"stage {name} names lab/ab/{diff}, which does not exist"
            ok = any(
                subprocess.run(["git", "apply", "--check", *flag, str(path)], cwd=REPO, capture_output=True).returncode
                == 0
                for flag in ([], ["-R"])
            )
            if not ok:
                stale.append(f"{name}: lab/ab/{diff}")
    assert not stale, "prepared stages whose diffs no longer apply (rebase them or mark the stage measured): " + ", ".join(
        stale
    )
