"""The README stays one screen a user reads, and README and docs/ stay true to the tree: its two
commands are the ones CI runs, every relative link (and its #anchor) resolves, and the layout
list names exactly the repository's top-level folders. No GPU, no torch needed.

The image holds README.md but neither docs/ nor .git (.dockerignore): the link and layout checks
need a checkout and skip inside it.
"""

from __future__ import annotations

import pathlib
import re
import subprocess

import pytest
from repo_modules import load_repo_module

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 150

needs_checkout = pytest.mark.skipif(
    not (ROOT / "docs").is_dir() or not (ROOT / ".git").exists(),
    reason="docs/ or .git absent (the image keeps only what the suite runs)",
)


def _outside_fences(text: str) -> list[str]:
    """The lines of a markdown text that are not inside a fenced code block."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
            continue
        if not inside:
            lines.append(line)
    return lines


def _anchors(path: pathlib.Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but '-' and '_' dropped, spaces to '-',
    repeats numbered -1, -2, ..."""
    seen: dict[str, int] = {}
    out = set()
    for line in _outside_fences(path.read_text()):
        m = re.match(r"#{1,6} (.*)", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _docs() -> list[pathlib.Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


def test_readme_is_one_screen() -> None:
    n = len(README.read_text().splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines (at most {MAX_README_LINES}: move detail to docs/)"


def test_readme_has_the_two_commands_ci_runs() -> None:
    rc = load_repo_module("tools/readme_commands.py")
    install, test = rc.readme_commands(README.read_text())
    # torch and the build tools first, then the build against that torch, then the report.
    assert install.startswith("python -m pip install ") and "torch" in install.split("&&")[0], install
    assert '--no-build-isolation -e ".[test,report]"' in install and install.endswith("python -m flashattn"), install
    assert test == "python -m pytest"


def test_readme_and_build_notes_state_no_counts_of_files() -> None:
    """Counts of translation units or bindings went stale before (35 and two, for 116 and five):
    the docs name the folders and globs instead."""
    for path in (README, ROOT / "docs" / "build.md"):
        if path.exists():
            text = path.read_text()
            assert not re.search(r"\b\d+ (translation units|bindings|kernel files)\b", text), path.name


@needs_checkout
def test_every_relative_link_resolves() -> None:
    broken = []
    for doc in _docs():
        for line in _outside_fences(doc.read_text()):
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"[a-z]+:", target):  # https:, mailto:
                    continue
                path_part, _, anchor = target.partition("#")
                dest = (doc.parent / path_part).resolve() if path_part else doc
                if not dest.exists():
                    broken.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
                elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                    broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


@needs_checkout
def test_readme_layout_lists_the_top_level_folders() -> None:
    section = README.read_text().split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    named = set()
    for line in section.splitlines():
        if line.startswith("- "):
            named |= set(re.findall(r"`([^`\s]+)`", line.split(":", 1)[0]))
    for name in named:
        assert (ROOT / name).exists(), f"README's layout names {name}, which is not in the tree"
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    folders = {f.split("/", 1)[0] + "/" for f in files if "/" in f}
    listed = {n for n in named if n.endswith("/")}
    assert listed == folders, f"README's layout lists {sorted(listed)}, the tree has {sorted(folders)}"


def _readme_names(folder: str) -> set[str]:
    """The names a folder's README.md gives in backticks, first word only (`gpu_run.sh STAGE`)."""
    text = "\n".join(_outside_fences((ROOT / folder / "README.md").read_text()))
    return {m.split()[0] for m in re.findall(r"`([^`]+)`", text) if m.split()}


@needs_checkout
@pytest.mark.parametrize("folder", ["lab", "tools", "benchmarks", "tests"])
def test_folder_readme_names_every_file(folder: str) -> None:
    """lab/, tools/, benchmarks/ and tests/ each describe their files in a README table; a file added
    without its row (or a row left behind by a removed file) is a README out of step with the tree.
    tests/README.md also names every file and folder under its subfolders (kernels/, infra/)."""
    files = subprocess.run(["git", "ls-files", folder], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    rel = [pathlib.Path(f).relative_to(folder) for f in files]
    if folder == "tests":  # kernels/ and infra/ have no README of their own
        here = {r.name for r in rel} | {f"{d.name}/" for r in rel for d in r.parents if d.name}
    else:
        here = {r.name for r in rel if len(r.parts) == 1}
    here -= {"README.md"}
    assert here, f"git ls-files lists nothing in {folder}/"
    text = "\n".join(_outside_fences((ROOT / folder / "README.md").read_text()))
    table = {m.split()[0] for row in re.findall(r"^\| (.+?) \|", text, re.MULTILINE)
             for m in re.findall(r"`([^`]+)`", row)}
    assert not here - _readme_names(folder), f"{folder}/README.md does not name {sorted(here - _readme_names(folder))}"
    stale = {n for n in table if re.fullmatch(r"[\w.-]+\.(py|sh|cu|cuh|cpp)", n)} - here
    assert not stale, f"{folder}/README.md's table names {sorted(stale)}, which {folder}/ does not hold"


def _gpu_run_stages() -> list[str]:
    text = (ROOT / "lab" / "gpu_run.sh").read_text()
    body = text.split('case "${1:-verify}" in', 1)[1].split("\nesac", 1)[0]
    # A branch may serve several stages (`a|b)`).
    return [stage for branch in re.findall(r"^  ([a-z0-9|]+)\)", body, re.MULTILINE) for stage in branch.split("|")]


def test_every_gpu_run_stage_is_documented() -> None:
    """lab/gpu_run.sh's stages: the ones its case statement runs are the ones its usage line, its
    header and lab/README.md name."""
    stages = _gpu_run_stages()
    assert len(stages) >= 10 and "verify" in stages and "final" in stages, stages
    text = (ROOT / "lab" / "gpu_run.sh").read_text()
    usage = re.search(r"usage: \$0 ([\w|]+)", text).group(1).split("|")
    assert sorted(usage) == sorted(stages), f"gpu_run.sh's usage line names {usage}"
    header = re.findall(r"^#   bash lab/gpu_run.sh (\w+)", text, re.MULTILINE)
    assert sorted(header) == sorted(stages), f"gpu_run.sh's header names {header}"
    row = next(line for line in (ROOT / "lab" / "README.md").read_text().splitlines() if line.startswith("| `gpu_run.sh"))
    named = set(re.findall(r"`(\w+)`", row.split("|")[2]))
    assert set(stages) <= named, f"lab/README.md's gpu_run.sh row lacks {sorted(set(stages) - named)}"


def test_every_planted_bug_is_documented() -> None:
    text = (ROOT / "lab" / "planted_bug.sh").read_text()
    bugs = set(re.search(r'^BUGS="([^"]*)"', text, re.MULTILINE).group(1).split())  # type: ignore[union-attr]
    assert {"causal", "bwd90_mask"} <= bugs, bugs
    row = next(line for line in (ROOT / "lab" / "README.md").read_text().splitlines()
               if line.startswith("| `planted_bug.sh"))
    named = set(re.findall(r"`(\w+)`", row.split("|")[2])) - {"list", "patterns"}
    assert named == bugs, f"lab/README.md names the planted bugs {sorted(named)}; planted_bug.sh has {sorted(bugs)}"
