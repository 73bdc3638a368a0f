#!/usr/bin/env python3
"""The A/B of a lab/ab/run_ab.sh log, cell by cell: each side's rounds (the log's "=== round R side
A|B" sections) and B / A of the cell's figure, with the geomean over the cells. Two tables are
understood, whichever the log holds:

  lab/fwd_time.py   D S causal TFLOP/s(flashattn, cuDNN, FA3) x-cudnn x-fa3 [B H]: the figure is
                    x-cudnn (cuDNN's time over ours in the same round, so that a drift of the
                    machine between rounds cancels); B / A > 1 means B is faster
  lab/fp8_time.py   D S causal TFLOP/s(ours FP8, FA3 FP8, ours bf16) ours/FA3: the figure is
                    ours/FA3 (FlashAttention-3's time over ours in the same round)

A cell that lab/fwd_time.py found host-bound for flashattn on either side ("  host-bound: flashattn"
after its row) is marked: its B / A is partly the two processes' host time, not the kernels'.

usage: python3 lab/ab_summary.py LOG [--figure tflops]   (tflops: our own TFLOP/s instead)
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections import defaultdict

_ROUND = re.compile(r"^=== round (\d+) side ([AB])\s*$")
_NUM = r"(-?[\d.]+|nan)"
# D S causal ours cudnn fa3 x_cudnn x_fa3 [B H]
_FWD = re.compile(rf"^\s*(\d+)\s+(\d+)\s+([01])\s+{_NUM}\s+{_NUM}\s+{_NUM}\s+{_NUM}\s+{_NUM}(?:\s+(\d+)\s+(\d+))?\s*$")
# lab/fwd_time.py's line under a cell whose flashattn calls ran at the host's launch rate
_HOST_BOUND = re.compile(r"^\s+host-bound: flashattn\b")
# D S causal(False/True) fp8_ours fp8_fa3 bf16_ours ratio
_FP8 = re.compile(rf"^\s*(\d+)\s+(\d+)\s+(True|False)\s+{_NUM}\s+{_NUM}\s+{_NUM}\s+{_NUM}\s*$")


def _fwd_cell(d: str, s: str, c: str, b: str | None, h: str | None) -> str:
    return f"D={d} S={s} causal={c}" + (f" B={b} H={h}" if b else "")


def parse(text: str, figure: str = "ratio") -> dict[str, dict[str, list[float]]]:
    """{cell: {"A": [figure per round], "B": [...]}} in the order the cells first appear."""
    cells: dict[str, dict[str, list[float]]] = defaultdict(lambda: {"A": [], "B": []})
    side = None
    for line in text.splitlines():
        m = _ROUND.match(line)
        if m:
            side = m.group(2)
            continue
        if side is None:
            continue
        m = _FWD.match(line)
        if m:
            d, s, c, ours, _, _, x_cudnn, _, b, h = m.groups()
            cells[_fwd_cell(d, s, c, b, h)][side].append(float(ours if figure == "tflops" else x_cudnn))
            continue
        m = _FP8.match(line)
        if m:
            d, s, c, ours, _, _, ratio = m.groups()
            cell = f"FP8 D={d} S={s} causal={int(c == 'True')}"
            cells[cell][side].append(float(ours if figure == "tflops" else ratio))
    return dict(cells)


def host_bound_cells(text: str) -> set[str]:
    """The fwd_time cells (parse's names) after whose row, on either side, flashattn was host-bound."""
    out: set[str] = set()
    cell = None
    for line in text.splitlines():
        m = _FWD.match(line)
        if m:
            d, s, c, *_, b, h = m.groups()
            cell = _fwd_cell(d, s, c, b, h)
        elif cell is not None and _HOST_BOUND.match(line):
            out.add(cell)
    return out


def summarize(cells: dict[str, dict[str, list[float]]]) -> tuple[list[tuple[str, list[float], list[float], float]], float]:
    """(cell, A rounds, B rounds, B / A of the round means) for the cells both sides measured, and
    the geomean of those ratios (nan without any)."""
    rows = []
    for cell, sides in cells.items():
        a, b = sides["A"], sides["B"]
        if not a or not b or any(math.isnan(x) for x in a + b):
            continue
        rows.append((cell, a, b, (sum(b) / len(b)) / (sum(a) / len(a))))
    geo = math.exp(sum(math.log(r) for *_, r in rows) / len(rows)) if rows else float("nan")
    return rows, geo


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--figure", choices=("ratio", "tflops"), default="ratio")
    args = ap.parse_args(argv)
    with open(args.log, encoding="utf-8") as f:
        text = f.read()
    rows, geo = summarize(parse(text, args.figure))
    host_bound = host_bound_cells(text)
    if not rows:
        print(f"{args.log}: no cell timed on both sides", file=sys.stderr)
        return 1
    fmt = ".3f" if args.figure == "ratio" else ".1f"
    for cell, a, b, r in rows:
        sa = " / ".join(format(x, fmt) for x in a)
        sb = " / ".join(format(x, fmt) for x in b)
        mark = "  (host-bound)" if cell in host_bound else ""
        print(f"{cell:<36} A {sa:<22} B {sb:<22} B/A {r:.3f}{mark}")
    print(f"geomean B/A over {len(rows)} cells: {geo:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
