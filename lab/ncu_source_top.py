#!/usr/bin/env python3
"""The most stalled SASS instructions of one kernel, from lab/ncu_source.sh's per-instruction CSV
(plain or gzipped): warp-state samples by reason over the whole kernel, then the top instructions
with their share of all samples, how often they ran, their main stall reason and the instruction
before them (what a scoreboard stall usually waits on).
usage: python3 lab/ncu_source_top.py build/ncu_source_256_4096_1.csv[.gz] [N]
       python3 lab/ncu_source_top.py --compare OURS.csv THEIRS.csv [REASON]
       python3 lab/ncu_source_top.py --waits A.csv [B.csv ...]
--compare: two kernels' samples by stall reason side by side (largest excess first), their executed
instructions by opcode family side by side, REASON's
samples (default stall_mio) by opcode family for each, and each kernel's executed shared-memory,
tensor and reduction instructions with their shared-memory wavefronts.
--waits: each barrier wait and arrival (mbarrier try_wait, bar.sync, bar.arrive) with how often it
ran, its samples and those of the instruction after it (the branch on a try_wait's result holds
the wait), then the samples by stall reason split into the hot loop (instructions run at least
half as often as the most-run one outside the spin loops, and no more often) and the rest, for
each CSV given.
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


def load(path: str) -> tuple[dict[str, int], list[list[str]]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = f.read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"Address"'))
    header, *rows = list(csv.reader(lines[start:]))
    return {k: i for i, k in enumerate(header)}, [r for r in rows if len(r) == len(header)]


def stall_reasons(ix: dict[str, int]) -> list[str]:
    return [k for k in ix if k.startswith("stall_") and "Not Issued" not in k]


def opcode(sass: str) -> str:
    words = [w for w in sass.split() if not w.startswith("@")]
    return words[0] if words else "?"


def by_family(ix: dict[str, int], rows: list[list[str]], column: str) -> dict[str, float]:
    """`column` (a stall reason's samples, the instructions executed) summed per opcode family (the
    opcode without its modifiers)."""
    fam: dict[str, float] = {}
    for r in rows:
        family = opcode(r[1]).split(".")[0]
        fam[family] = fam.get(family, 0.0) + num(r[ix[column]])
    return fam


def executed_by_family(ix: dict[str, int], rows: list[list[str]]) -> dict[str, float]:
    """Warp instructions executed per opcode family."""
    return by_family(ix, rows, "Instructions Executed")


def compare(ours: str, theirs: str, reason: str) -> int:
    (ia, ra), (ib, rb) = load(ours), load(theirs)
    reasons = [k for k in stall_reasons(ia) if k in ib]
    tot = {k: (sum(num(r[ia[k]]) for r in ra), sum(num(r[ib[k]]) for r in rb)) for k in reasons}
    print(f"{'samples':24s} {'ours':>9s} {'theirs':>9s} {'excess':>9s}")
    for k in sorted(reasons, key=lambda k: tot[k][1] - tot[k][0]):
        a, b = tot[k]
        if a or b:
            print(f"{k[6:]:24s} {a:9.0f} {b:9.0f} {a - b:+9.0f}")
    print(f"{'total':24s} {sum(a for a, _ in tot.values()):9.0f} {sum(b for _, b in tot.values()):9.0f}")
    # What each kernel executes, by opcode family (warp instructions): the same work in more
    # instructions, or the same instructions at a lower rate?
    executed = [executed_by_family(ia, ra), executed_by_family(ib, rb)]
    print(f"{'executed (M)':24s} {'ours':>9s} {'theirs':>9s} {'ratio':>9s}")
    for fam in sorted(set(executed[0]) | set(executed[1]), key=lambda f: -(executed[0].get(f, 0) + executed[1].get(f, 0)))[:16]:
        a, b = executed[0].get(fam, 0.0), executed[1].get(fam, 0.0)
        print(f"{fam:24s} {a / 1e6:9.2f} {b / 1e6:9.2f} {a / b if b else float('inf'):9.2f}")
    a, b = sum(executed[0].values()), sum(executed[1].values())
    print(f"{'total':24s} {a / 1e6:9.2f} {b / 1e6:9.2f} {a / b if b else float('inf'):9.2f}")
    for name, ix, rows in (("ours", ia, ra), ("theirs", ib, rb)):
        fam = by_family(ix, rows, reason)
        total = sum(fam.values()) or 1.0
        top = sorted(fam.items(), key=lambda kv: -kv[1])[:6]
        print(f"{name} {reason[6:]} by opcode: " + ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in top))
        kinds: dict[str, list[float]] = {}
        wavefronts = ix.get("L1 Wavefronts Shared")
        for r in rows:
            op = opcode(r[1])
            if op.startswith(("LDSM", "LDS", "STS", "LDGSTS", "HMMA", "HGMMA", "RED", "BAR")):
                k = kinds.setdefault(op, [0.0, 0.0])
                k[0] += num(r[ix["Instructions Executed"]])
                k[1] += num(r[wavefronts]) if wavefronts is not None else 0.0
        for op, (n, w) in sorted(kinds.items()):
            print(f"  {name:6s} {op:40s} {n / 1e6:9.2f} M executed, {w / 1e6:9.2f} M shared wavefronts")
    return 0


def hot_loop(ix: dict[str, int], rows: list[list[str]]) -> list[bool]:
    """Whether each instruction belongs to the hot loop: run at least half as often as the most-run
    instruction outside spin loops (a 2x unrolled loop's instructions run half as often as a
    plain one's; a spin loop's, far more often, so the reference is the most-run non-wait one)."""
    executed = [num(r[ix["Instructions Executed"]]) for r in rows]
    spin = ("SYNCS", "YIELD", "BRA", "NANOSLEEP")
    ref = max((e for e, r in zip(executed, rows) if not opcode(r[1]).startswith(spin)), default=0.0)
    return [ref / 2 <= e <= ref for e in executed]


def waits(paths: list[str]) -> int:
    for path in paths:
        ix, rows = load(path)
        samples, executed = ix["Warp Stall Sampling (All Samples)"], ix["Instructions Executed"]
        print(path)
        print(f"  {'addr':>6s} {'ran':>10s} {'here':>6s} {'next':>6s}  instruction")
        for i, r in enumerate(rows):
            if any(k in r[1] for k in ("TRYWAIT", "BAR.SYNC", "BAR.ARV")):
                after = num(rows[i + 1][samples]) if i + 1 < len(rows) else 0.0
                print(f"  {r[0][-6:]:>6s} {num(r[executed]):10.0f} {num(r[samples]):6.0f} {after:6.0f}  {r[1].strip()[:64]}")
        hot = hot_loop(ix, rows)
        for name, keep in (("hot loop", True), ("rest", False)):
            tot = {k[6:]: sum(num(r[ix[k]]) for r, h in zip(rows, hot) if h == keep) for k in stall_reasons(ix)}
            top = sorted(((v, k) for k, v in tot.items() if v), reverse=True)
            print(f"  {name}: {sum(tot.values()):.0f} samples, " + " ".join(f"{k} {v:.0f}" for v, k in top[:11]))
    return 0


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--compare":
        return compare(argv[1], argv[2], argv[3] if len(argv) > 3 else "stall_mio")
    if argv and argv[0] == "--waits":
        return waits(argv[1:])
    path, n = argv[0], int(argv[1]) if len(argv) > 1 else 25
    ix, rows = load(path)
    reasons = stall_reasons(ix)
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
