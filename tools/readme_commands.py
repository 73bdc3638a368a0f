#!/usr/bin/env python3
"""Prints the README's two commands (install, test), one per line, as a user would paste them:
the command lines of the first fenced block under the heading "## The two commands". .ci/run
runs exactly these lines in a fresh virtual environment, so the README cannot drift from what CI
proves; tests/infra/test_readme.py checks that there are two.

usage: tools/readme_commands.py [README]
"""

from __future__ import annotations

import pathlib
import sys

HEADING = "## The two commands"


def readme_commands(text: str) -> list[str]:
    lines = text.splitlines()
    try:
        start = lines.index(HEADING)
    except ValueError:
        raise SystemExit(f"readme_commands: no line {HEADING!r} in the README") from None
    commands: list[str] = []
    inside = False
    for line in lines[start + 1 :]:
        if line.startswith("## ") and not inside:
            break
        if line.startswith("```"):
            if inside:
                return commands
            inside = True
            continue
        if inside and line.strip() and not line.lstrip().startswith("#"):
            commands.append(line.strip())
    raise SystemExit(f"readme_commands: no closed fenced block under {HEADING!r}")


def main() -> int:
    path = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[1] / "README.md")
    for command in readme_commands(path.read_text()):
        print(command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
