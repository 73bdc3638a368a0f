"""The include graph of csrc/ points only down, and the Python folders depend only as documented
(CPU only, no compiler).

Layers, top to bottom:
  csrc/*.cpp, csrc/*.h   the torch bindings and their host helpers: may include anything;
  path folders           flash_fwd, flash_fwd_sm90, flash_bwd, flash_bwd_sm90, flash_decode: each
                         includes only itself, common/ and common/sm90/;
  common/sm90/           the Hopper primitives (PTX wrappers, wgmma ops, the swizzled layout, TMA
                         encoding): itself and common/;
  common/                what several paths share: only itself.
So a change inside one path cannot reach another path's kernels, and what two paths share is found
in common/, not in whichever path happened to need it first.

The second half holds the Python folders (flashattn/, tools/, docker/, benchmarks/, lab/, tests/)
to the rule docs/build.md states: which folder's code may import or load another's.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"

PATHS = ("flash_fwd", "flash_fwd_sm90", "flash_bwd", "flash_bwd_sm90", "flash_decode")
TOP = "."
ALLOWED = {
    "common": {"common"},
    "common/sm90": {"common", "common/sm90"},
    **{p: {p, "common", "common/sm90"} for p in PATHS},
}

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
_SUFFIXES = {".h", ".cuh", ".cu", ".cpp"}


def layer(path: pathlib.Path) -> str:
    """The layer of a file under csrc/: '.', 'common', 'common/sm90' or a path folder (its
    instantiations/ included)."""
    parts = path.resolve().relative_to(CSRC.resolve()).parts[:-1]
    if not parts:
        return TOP
    if parts[0] == "common":
        return "common/sm90" if len(parts) > 1 and parts[1] == "sm90" else "common"
    return parts[0]


def resolve(src: pathlib.Path, name: str) -> pathlib.Path | None:
    """Where nvcc finds a quoted include: the including file's folder first, then -Icsrc."""
    for base in (src.parent, CSRC):
        cand = (base / name).resolve()
        if cand.is_file():
            return cand
    return None


def include_edges() -> list[tuple[pathlib.Path, str, pathlib.Path | None]]:
    edges = []
    for src in sorted(CSRC.rglob("*")):
        if src.suffix not in _SUFFIXES or not src.is_file():
            continue
        for name in _INCLUDE.findall(src.read_text()):
            edges.append((src, name, resolve(src, name)))
    return edges


def violations(edges) -> list[str]:
    bad = []
    for src, name, dst in edges:
        rel = src.relative_to(CSRC)
        if dst is None:
            bad.append(f"{rel}: #include \"{name}\" resolves to no file under csrc/")
            continue
        if CSRC.resolve() not in dst.parents:
            bad.append(f"{rel}: #include \"{name}\" leaves csrc/")
            continue
        src_layer, dst_layer = layer(src), layer(dst)
        if src_layer == TOP:
            continue
        allowed = ALLOWED.get(src_layer)
        if allowed is None:
            bad.append(f"{rel}: folder {src_layer}/ has no layer in tests/infra/test_layering.py (add it)")
        elif dst_layer not in allowed:
            bad.append(f"{rel}: #include \"{name}\" reaches {dst_layer}/ (allowed: {', '.join(sorted(allowed))})")
    return bad


def test_every_folder_has_a_layer():
    folders = {layer(p) for p in CSRC.rglob("*") if p.is_file() and p.suffix in _SUFFIXES}
    assert folders - {TOP} <= set(ALLOWED), f"unclassified folders: {sorted(folders - {TOP} - set(ALLOWED))}"
    # Every path folder and both common layers exist: a rename must update this test, not bypass it.
    assert set(ALLOWED) <= folders, f"layers with no source: {sorted(set(ALLOWED) - folders)}"


def test_includes_point_only_down():
    edges = include_edges()
    assert len(edges) > 100, "found too few includes: the parser is broken"
    bad = violations(edges)
    assert not bad, "csrc/ layering broken:\n  " + "\n  ".join(bad)


@pytest.mark.parametrize(
    "src,name,ok",
    [
        ("flash_bwd_sm90/x.cuh", "../flash_fwd_sm90/traits.h", False),  # a sibling path
        ("flash_decode/x.cuh", "../flash_fwd/kernel.cuh", False),
        ("common/x.cuh", "../flash_fwd/traits.h", False),  # common reaching up
        ("common/x.cuh", "sm90/ptx.cuh", False),  # common reaching into the Hopper layer
        ("common/sm90/x.cuh", "../params.h", True),
        ("flash_bwd_sm90/x.cuh", "../common/sm90/ptx.cuh", True),
        ("flash_fwd/instantiations/x.cu", "../launch.cuh", True),
        ("binding.cpp", "flash_fwd_sm90/api.h", True),  # the bindings sit on top
    ],
)
def test_rule_catches_sibling_includes(src, name, ok):
    """The checker itself: violations() on hand-made edges to files that exist."""
    s = CSRC / src
    dst = resolve(s, name)
    assert dst is not None, f"{name} from {src} should resolve"
    assert (not violations([(s, name, dst)])) == ok


# --- Python: which folder's code may load which ------------------------------------------------
# A file depends on a folder when it imports a module from it or loads one of its files by path
# (importlib, sys.path, Path arithmetic). Running another folder's script as a command is not a
# dependency: lab/gpu_run.sh runs the suite and the benchmarks, which is what it is for.
#   flashattn/   the package users install: only itself;
#   tools/       build and CI, run where torch may be absent: only itself;
#   docker/      runs inside and around the image: only itself;
#   benchmarks/  the benchmark: the package, itself and the suite's helper modules in tests/ (the
#                numerics criterion, the input makers: tests/*.py), never a test module
#                (tests/kernels/test_*.py, tests/infra/test_*.py, conftest.py): a benchmark may
#                check its outputs as the suite does;
#   lab/         GPU experiments: the package, itself, benchmarks/ (the timing engine, the shape
#                grids) and the suite's helper modules in tests/, never a test module;
#   tests/       the suite checks all of the above: anything.
PY_FOLDERS = ("flashattn", "tools", "docker", "benchmarks", "lab", "tests")
PY_ALLOWED = {
    "flashattn": {"flashattn"},
    "tools": {"tools"},
    "docker": {"docker"},
    "benchmarks": {"benchmarks", "flashattn", "tests"},
    "lab": {"lab", "flashattn", "benchmarks", "tests"},
    "tests": set(PY_FOLDERS),
}
# (from, to) pairs allowed for helper modules only.
PY_HELPERS_ONLY = {("lab", "tests"), ("benchmarks", "tests")}


def _py_modules() -> dict[str, list[pathlib.Path]]:
    mods: dict[str, list[pathlib.Path]] = {}
    for folder in PY_FOLDERS:
        for p in sorted((ROOT / folder).rglob("*.py")):
            mods.setdefault(p.stem, []).append(p)
    return mods


# Calls that execute a file named by path (a string or a path expression as an argument).
LOADERS = {"spec_from_file_location", "load_repo_module", "run_path", "SourceFileLoader"}


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _path_parts(node: ast.AST) -> list[str]:
    """The string constants of a path expression (a / "b" / "c", os.path.join(a, "b", "c"))."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return _path_parts(node.left) + _path_parts(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join":
        return [s for a in node.args for s in _path_parts(a)]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    return []


def py_deps(src: pathlib.Path, text: str, mods: dict[str, list[pathlib.Path]]) -> list[tuple[str, str, str | None]]:
    """(what, folder, file name or None) for each repository folder `text` (the code of src)
    imports from, loads by path or names in a path expression. A path as a plain string (a pytest
    argument, a message) is not a dependency unless a loader call takes it."""
    home = src.parent
    tree = ast.parse(text)
    deps: list[tuple[str, str, str | None]] = []
    for node in ast.walk(tree):
        names = []  # (top-level name, the module under it where one is named)
        if isinstance(node, ast.Import):
            names = [(a.name.split(".")[0], (a.name.split(".") + [""])[1]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            top, *rest = node.module.split(".")
            names = [(top, rest[0])] if rest else [(top, a.name) for a in node.names]
        for name, sub in names:
            if name == "flashattn":
                deps.append((f"import {name}", "flashattn", "__init__.py"))
                continue
            if name in PY_FOLDERS:  # a folder imported as a namespace package (from benchmarks import x)
                deps.append((f"import {name}.{sub}", name, f"{sub}.py" if sub else None))
                continue
            found = mods.get(name, [])
            own = [p for p in found if p.parent == home]
            for p in own or found:  # as Python finds it: its own folder first
                deps.append((f"import {name}", p.relative_to(ROOT).parts[0], p.name))
                break
        if isinstance(node, ast.Call) and _call_name(node) in LOADERS:
            # a file loaded by path: the folder and the file, so that a test module is told apart
            for arg in node.args:
                parts = [q for part in _path_parts(arg) for q in part.split("/")]
                for i, part in enumerate(parts):
                    if part in PY_FOLDERS:
                        py = [q for q in parts[i + 1:] if q.endswith(".py")]
                        deps.append((f"load {'/'.join(parts)}", part, py[-1] if py else None))
        elif isinstance(node, (ast.BinOp, ast.Call)):
            # a path into another folder (sys.path, a file to load or to run): the folder only
            for part in _path_parts(node):
                if part in PY_FOLDERS and part != "flashattn":  # "flashattn" in a path is the op namespace's
                    deps.append((f"path {'/'.join(_path_parts(node))}", part, None))
    return deps


def py_violations(src: pathlib.Path, text: str, mods: dict[str, list[pathlib.Path]]) -> list[str]:
    frm = src.relative_to(ROOT).parts[0]
    bad = []
    for what, to, name in py_deps(src, text, mods):
        if to not in PY_ALLOWED[frm]:
            bad.append(f"{src.relative_to(ROOT)}: {what} reaches {to}/ (allowed: {', '.join(sorted(PY_ALLOWED[frm]))})")
        elif (frm, to) in PY_HELPERS_ONLY and name is not None and (name.startswith("test_") or name == "conftest.py"):
            bad.append(f"{src.relative_to(ROOT)}: {what} loads the test module {to}/{name} (helpers only)")
    return bad


def test_python_folders_depend_only_as_documented():
    mods = _py_modules()
    files = [p for f in PY_FOLDERS if f != "tests" for p in sorted((ROOT / f).rglob("*.py"))]
    assert len(files) > 30, "found too few Python files: the scan is broken"
    deps = [d for p in files for d in py_deps(p, p.read_text(), mods)]
    # The scan sees the dependencies the rule admits (so it would see others): lab's timers on
    # benchmarks/bench_common.py, the suite's helpers from lab/.
    assert ("benchmarks", "bench_common.py") in {(to, n) for _, to, n in deps}
    assert ("tests", "gpu_helpers.py") in {(to, n) for _, to, n in deps}
    bad = [v for p in files for v in py_violations(p, p.read_text(), mods)]
    assert not bad, "folder dependency rule broken (tests/infra/test_layering.py, docs/build.md):\n  " + "\n  ".join(bad)


@pytest.mark.parametrize(
    "src,text,ok",
    [
        ("tools/x.py", "import flashattn\n", False),  # tools run where the package may not import
        ("tools/x.py", "from check_resources import ARCH_GENCODE\n", True),
        ("tools/x.py", "from bench_common import time_calls_ms\n", False),
        ("flashattn/x.py", "import numerics\n", False),
        ("benchmarks/x.py", "import sys, pathlib\nsys.path.insert(0, str(pathlib.Path(__file__).parent / '..' / 'lab'))\n",
         False),
        ("benchmarks/x.py", "from numerics import assert_attention_matches\n", True),
        ("benchmarks/x.py", "from test_kvcache import CASES\n", False),  # a test module, not a helper
        ("benchmarks/x.py", "from quick_check import sdpa_same_dtype\n", False),  # lab/
        ("lab/x.py", "import flashattn\nfrom gpu_helpers import nan_filled_allocations\n", True),
        ("lab/x.py", "from benchmarks import bench_common as bc\n", True),
        ("lab/x.py", "from tests import test_kvcache\n", False),
        ("tools/x.py", "import benchmarks.bench_common\n", False),
        ("lab/x.py", "p = ROOT / 'benchmarks' / 'bench_common.py'\n", True),
        ("lab/x.py", "s = spec_from_file_location('m', ROOT / 'tests' / 'kernels' / 'test_kvcache.py')\n", False),  # a test module
        ("lab/x.py", "m = load_repo_module('tests/numerics.py')\n", True),
        ("lab/x.py", "subprocess.run(['pytest', 'tests/kernels/test_kvcache.py'])\n", True),  # running the suite is no load
        ("lab/x.py", "import os\np = os.path.join(HERE, '..', 'tools')\n", False),
        ("docker/x.py", "m = load_repo_module('benchmarks/bench_common.py')\n", False),
        ("docker/x.py", "'''Reads benchmarks/bench_common.py's JSON.'''\nkey = 'benchmarks'\n", True),  # words, not loads
    ],
)
def test_python_rule_catches_cross_folder_loads(src, text, ok):
    """The checker itself, on hand-made sources."""
    assert (not py_violations(ROOT / src, text, _py_modules())) == ok


@pytest.mark.skipif(not (ROOT / "docs").is_dir(), reason="docs/ absent (the image keeps only what the suite runs)")
def test_documented_python_rule_is_the_checked_one():
    """docs/build.md's table of folder dependencies names, for each folder, the folders this test
    allows it (besides itself): the rule a reader sees is the rule CI holds."""
    text = (ROOT / "docs" / "build.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)/` \| (.+) \|$", text, re.MULTILINE))
    assert set(rows) == set(PY_ALLOWED), f"docs/build.md's table has rows for {sorted(rows)}"
    for folder, cell in rows.items():
        named = {m for m in re.findall(r"`([^`]+)`", cell) for m in [m.rstrip("/")] if m in PY_FOLDERS}
        expected = set() if folder == "tests" else PY_ALLOWED[folder] - {folder}
        assert named == expected, f"docs/build.md says {folder}/ may load {sorted(named)}; the test allows {sorted(expected)}"
