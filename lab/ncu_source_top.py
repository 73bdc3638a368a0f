#!/usr/bin/env python3
"""The most stalled SASS instructions of one kernel, from lab/ncu_source.sh's per-instruction CSV
(plain or gzipped): warp-state samples by reason over the whole kernel, then the top instructions
with their share of all samples, how often they ran, their main stall reason and the instruction
before them (what a scoreboard stall usually waits on).
usage: python3 lab/ncu_source_top.py build/ncu_source_256_4096_1.csv[.gz] [N]
"""

from __future__ import annotations

import csv
import gzip
import sys


def num(x: str) -> float:
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


def main(argv: list[str]) -> int:
    path, n = argv[0], int(argv[1]) if len(argv) > 1 else 25
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = f.read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"Address"'))
    header, *rows = list(csv.reader(lines[start:]))
    ix = {k: i for i, k in enumerate(header)}
    reasons = [k for k in header if k.startswith("stall_") and "Not Issued" not in k]
    samples, executed = ix["Warp Stall Sampling (All Samples)"], ix["Instructions Executed"]
    total = sum(num(r[samples]) for r in rows) or 1.0
    by_reason = sorted(((sum(num(r[ix[k]]) for r in rows), k) for k in reasons), reverse=True)
    print(f"samples {total:.0f}: " + " ".join(f"{k[6:]} {100 * v / total:.1f}%" for v, k in by_reason[:8]))
    for i in sorted(range(len(rows)), key=lambda i: -num(rows[i][samples]))[:n]:
        r = rows[i]
        top = max(reasons, key=lambda k: num(r[ix[k]]))
        prev = rows[i - 1][1][:40] if i else ""
        print(f"{r[0][-5:]} {100 * num(r[samples]) / total:5.1f}% ran {num(r[executed]):9.0f}  {r[1][:58]:58s} "
              f"{top[6:]} | after: {prev}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
