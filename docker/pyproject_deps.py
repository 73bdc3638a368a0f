#!/usr/bin/env python3
"""Print the pip requirements that pyproject.toml declares, one per line, for the image's
dependency layer: [build-system] requires, [project] dependencies, and the optional groups
named as arguments. torch is left out (the Dockerfile installs a pinned CUDA build of it first).

usage: python docker/pyproject_deps.py [PYPROJECT] [--extra test] [--extra report] > requirements.txt

Reading only pyproject.toml lets the Dockerfile install every dependency before it copies the
sources, so that layer is rebuilt only when pyproject.toml changes.
"""

from __future__ import annotations

import argparse
import re
import sys

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def requirement_name(req: str) -> str:
    m = _NAME.match(req)
    return re.sub(r"[-_.]+", "-", m.group(1)).lower() if m else ""


def requirements(data: dict, extras: list[str], exclude: set[str]) -> list[str]:
    reqs = list(data.get("build-system", {}).get("requires", []))
    project = data.get("project", {})
    reqs += project.get("dependencies", [])
    optional = project.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            raise SystemExit(f"pyproject_deps: no optional-dependencies group {extra!r} (have: {', '.join(optional)})")
        reqs += optional[extra]
    out: list[str] = []
    for r in reqs:
        if requirement_name(r) in exclude or r in out:
            continue
        out.append(r)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pyproject", nargs="?", default="pyproject.toml")
    ap.add_argument("--extra", action="append", default=[], help="optional-dependencies group to include")
    ap.add_argument("--exclude", action="append", default=["torch"], help="package names to leave out (default torch)")
    args = ap.parse_args(argv)
    with open(args.pyproject, "rb") as f:
        data = tomllib.load(f)
    exclude = {requirement_name(e) for e in args.exclude}
    sys.stdout.write("".join(r + "\n" for r in requirements(data, args.extra, exclude)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
