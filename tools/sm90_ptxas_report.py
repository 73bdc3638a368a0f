#!/usr/bin/env python3
"""Summarizes `nvcc -Xptxas -v` logs of the Hopper kernels: one line per flash_fwd_sm90_kernel
instantiation (head dim, block N, stages, ping-pong, Q buffers, O via TMA, softmax chains, consumer warpgroups, dtype,
tile schedule) with
registers, stack, spills, and any ptxas C75xx performance warning (wgmma serialization).
usage: sm90_ptxas_report.py LOG..."""

import re
import sys

from check_resources import SM90_KERNEL as pat
rows = {}
warn = {}
for path in sys.argv[1:]:
    cur = None
    for line in open(path, errors="replace"):
        m = pat.search(line)
        if "C75" in line and m:
            warn.setdefault(m.groups(), set()).add(re.search(r"\((C75\d\d)\)", line).group(1))
            continue
        if "Compiling entry function" in line and m:
            cur = m.groups()
            rows[cur] = ""
        elif cur and "stack frame" in line:
            rows[cur] += line.strip() + "; "
        elif cur and "Used" in line and "registers" in line:
            rows[cur] += line.split("info    :")[-1].strip()
            cur = None
for k in sorted(rows, key=lambda k: (int(k[0]), int(k[1]), int(k[2]), k[3], int(k[4]), k[5], int(k[6]), int(k[7]), k[8], k[9])):
    d, n, st, pp, qst, otma, chains, wgs, dt, dyn = k
    w = ",".join(sorted(warn.get(k, []))) or "-"
    sched = "dynamic" if dyn == "1" else "static"
    print(f"D={d:>3} N={n:>3} stages={st} pingpong={pp} q={qst} otma={otma} chains={chains} wgs={wgs} {dt.strip('_'):12} {sched:7} {rows[k]}  "
          f"warnings: {w}")
