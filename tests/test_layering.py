"""The include graph of csrc/ points only down (CPU only, no compiler).

Layers, top to bottom:
  csrc/*.cpp, csrc/*.h   the torch bindings and their host helpers: may include anything;
  path folders           flash_fwd, flash_fwd_sm90, flash_bwd, flash_bwd_sm90, flash_decode: each
                         includes only itself, common/ and common/sm90/;
  common/sm90/           the Hopper primitives (PTX wrappers, wgmma ops, the swizzled layout, TMA
                         encoding): itself and common/;
  common/                what several paths share: only itself.
So a change inside one path cannot reach another path's kernels, and what two paths share is found
in common/, not in whichever path happened to need it first.
"""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
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
            bad.append(f"{rel}: folder {src_layer}/ has no layer in tests/test_layering.py (add it)")
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
