#!/usr/bin/env python3
"""Where a Hopper forward tile's time goes, phase by phase (issue 29: the short causal cells, where a
128 x 128 tile costs ~2.2 us besides its key blocks and cuDNN is 1.1-1.3x faster).

Needs a build with lab/ab/lab_fwd_tile_timeline.diff applied (`bash lab/gpu_run.sh fwdtimeline` builds
one): each consumer warpgroup's first thread writes SM clock stamps at the phases of every tile
(csrc/flash_fwd_sm90/lab_stamps.cuh in that build) into a buffer whose address this script passes in
FLASHATTN_LAB_STAMPS for one call. Per tile (standard grid: B*S = 16k, H = 2048 / D), phases in us:

  gap       the previous tile's end to this tile's start (the schedule: next tile; and the previous
            tile's own stamp stores, which the diff issues at a tile's end, not at its start)
  setup     the tile's start to its Q wait: coordinates, key window, registers cleared
  q_wait    then to its Q in shared memory
  k_wait    Q to the first K block
  turn      waiting for the ping-pong turn of the first S = Q K^T
  first_s   the first S GEMM, issue to completion
  first_sm  the first softmax (and, with two or more blocks, the wait for the next K block)
  loop      the other key blocks but the last P V (per block: loop / (blocks - 1))
  last_pv   the last O += P V, issue to completion
  epilogue  normalize, store O and LSE
Grouped by the tile's key-block count, warpgroup 0 (the others in --all-wgs). The kernel's own time
with and without the stamps is printed too (the stamps' cost), and SDPA's (cuDNN's) call.

usage: python3 lab/fwd_tile_timeline.py [--dtype bf16|fp16] [--json PATH] [--all-wgs] D:S:causal ...
       (default cells: 64:512:1 64:1024:1 64:4096:1 64:512:0 128:512:1 128:4096:1)
       python3 lab/fwd_tile_timeline.py --selftest     (the analysis on synthetic stamps, no GPU)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

# lab_stamps.cuh's layout: uint64 [kLabMaxCtas][kLabMaxTiles][kLabRows][kLabSlots].
MAX_CTAS, MAX_TILES, ROWS, SLOTS = 256, 256, 4, 16
# Slots: clock64 at the phase boundaries, the tile's (blocks << 32 | m_block) and index, globaltimer.
(S_START, S_Q, S_K, S_TURN, S_FIRST_S, S_FIRST_SM, S_LOOP_END, S_LAST_PV, S_END, S_META, S_TILE, G_START,
 G_END, S_SETUP) = range(14)
PHASES = ("gap", "setup", "q_wait", "k_wait", "turn", "first_s", "first_sm", "loop", "last_pv", "epilogue")
DEFAULT_CELLS = "64:512:1 64:1024:1 64:4096:1 64:512:0 128:512:1 128:4096:1"


def tiles_of(stamps, row: int) -> list[dict]:
    """Every stamped tile of consumer warpgroup `row`, in each CTA's order: its phases in clock cycles
    and the CTA's nanoseconds per cycle (globaltimer over clock64 across the CTA's tiles)."""
    out = []
    for cta in range(MAX_CTAS):
        ctiles = []
        for i in range(MAX_TILES):
            s = [int(x) for x in stamps[cta][i][row]]
            if s[S_START] == 0 or s[S_END] == 0:
                break
            ctiles.append(s)
        if not ctiles:
            continue
        cycles = ctiles[-1][S_END] - ctiles[0][S_START]
        ns = ctiles[-1][G_END] - ctiles[0][G_START]
        ns_per_cycle = ns / cycles if cycles > 0 and ns > 0 else float("nan")
        prev_end = None
        for s in ctiles:
            blocks = s[S_META] >> 32
            t = {"cta": cta, "tile": s[S_TILE], "blocks": blocks, "m_block": s[S_META] & 0xFFFFFFFF,
                 "ns_per_cycle": ns_per_cycle, "total": s[S_END] - s[S_START],
                 "gap": s[S_START] - prev_end if prev_end is not None else None}
            if blocks > 0:
                t.update(setup=s[S_SETUP] - s[S_START], q_wait=s[S_Q] - s[S_SETUP], k_wait=s[S_K] - s[S_Q],
                         turn=s[S_TURN] - s[S_K], first_s=s[S_FIRST_S] - s[S_TURN], first_sm=s[S_FIRST_SM] - s[S_FIRST_S],
                         loop=s[S_LOOP_END] - s[S_FIRST_SM], last_pv=s[S_LAST_PV] - s[S_LOOP_END],
                         epilogue=s[S_END] - s[S_LAST_PV])
            else:
                t["epilogue"] = s[S_END] - s[S_START]
            prev_end = s[S_END]
            out.append(t)
    return out


def summarize(tiles: list[dict]) -> dict:
    """Mean phase times in us by key-block count, plus each phase's share of the stamped time."""
    by_blocks: dict[int, list[dict]] = {}
    for t in tiles:
        by_blocks.setdefault(t["blocks"], []).append(t)
    rows = {}
    for blocks, ts in sorted(by_blocks.items()):
        row = {"tiles": len(ts)}
        for ph in PHASES + ("total",):
            vals = [t[ph] * t["ns_per_cycle"] / 1e3 for t in ts if t.get(ph) is not None]
            row[ph] = statistics.fmean(vals) if vals else float("nan")
        row["per_block"] = row["loop"] / (blocks - 1) if blocks > 1 else float("nan")
        rows[blocks] = row
    total = sum(t["total"] * t["ns_per_cycle"] for t in tiles) + sum(
        (t["gap"] or 0) * t["ns_per_cycle"] for t in tiles)
    share = {ph: sum((t.get(ph) or 0) * t["ns_per_cycle"] for t in tiles) / total if total > 0 else float("nan")
             for ph in PHASES}
    # A tile's cost besides its blocks: its time less (blocks x the steady block), the steady
    # block taken from the tiles with the most blocks (their loop per block).
    most = max((b for b in rows if b > 1), default=None)
    steady = rows[most]["per_block"] if most is not None else float("nan")
    for blocks, row in rows.items():
        row["besides_blocks"] = row["total"] + (row["gap"] if row["gap"] == row["gap"] else 0.0) - blocks * steady
    return {"by_blocks": rows, "share": share, "steady_block_us": steady}


def print_summary(title: str, summary: dict) -> None:
    print(title)
    print(f"  {'blocks':>6} {'tiles':>6} " + " ".join(f"{p:>9}" for p in PHASES) +
          f" {'total':>8} {'/block':>7} {'besides':>8}   (us, means)")
    for blocks, row in summary["by_blocks"].items():
        print(f"  {blocks:>6} {row['tiles']:>6} " + " ".join(f"{row[p]:>9.3f}" for p in PHASES) +
              f" {row['total']:>8.3f} {row['per_block']:>7.3f} {row['besides_blocks']:>8.3f}")
    print("  share of the stamped time: " + ", ".join(f"{p} {v:.1%}" for p, v in summary["share"].items()))
    print(f"  steady key block (loop / (blocks - 1) of the longest tiles): {summary['steady_block_us']:.3f} us")


def selftest() -> int:
    """Synthetic stamps: two CTAs, tiles of 1..3 blocks with known phases; the summary must give them back."""
    stamps = [[[[0] * SLOTS for _ in range(ROWS)] for _ in range(MAX_TILES)] for _ in range(MAX_CTAS)]
    phase_cycles = {"setup": 40, "q_wait": 100, "k_wait": 50, "turn": 10, "first_s": 300, "first_sm": 200,
                    "last_pv": 250, "epilogue": 400}
    block_cycles = 1000
    for cta in (0, 5):
        clock = 10_000 * (cta + 1)
        for i, blocks in enumerate((3, 1, 2, 3)):
            s = stamps[cta][i][0]
            clock += 70  # the gap
            s[S_START] = clock
            s[S_SETUP] = s[S_START] + phase_cycles["setup"]
            s[S_Q] = s[S_SETUP] + phase_cycles["q_wait"]
            s[S_K] = s[S_Q] + phase_cycles["k_wait"]
            s[S_TURN] = s[S_K] + phase_cycles["turn"]
            s[S_FIRST_S] = s[S_TURN] + phase_cycles["first_s"]
            s[S_FIRST_SM] = s[S_FIRST_S] + phase_cycles["first_sm"]
            s[S_LOOP_END] = s[S_FIRST_SM] + (blocks - 1) * block_cycles
            s[S_LAST_PV] = s[S_LOOP_END] + phase_cycles["last_pv"]
            s[S_END] = s[S_LAST_PV] + phase_cycles["epilogue"]
            s[S_META] = (blocks << 32) | i
            s[S_TILE] = i
            s[G_START], s[G_END] = 2 * s[S_START], 2 * s[S_END]  # 2 ns a cycle
            clock = s[S_END]
    summary = summarize(tiles_of(stamps, 0))
    rows = summary["by_blocks"]
    ok = sorted(rows) == [1, 2, 3] and rows[3]["tiles"] == 4 and rows[1]["tiles"] == 2
    ok &= all(abs(rows[b][p] - c * 2e-3) < 1e-9 for b in rows for p, c in phase_cycles.items())
    ok &= abs(rows[3]["per_block"] - block_cycles * 2e-3) < 1e-9 and abs(summary["steady_block_us"] - 2.0) < 1e-9
    ok &= abs(rows[2]["gap"] - 70 * 2e-3) < 1e-9  # every 2-block tile follows another tile
    fixed = sum(phase_cycles.values()) * 2e-3 + 70 * 2e-3
    ok &= abs(rows[3]["besides_blocks"] - (fixed - block_cycles * 2e-3)) < 1e-6
    print_summary("selftest (synthetic: 2 ns a cycle, a steady block 2 us)", summary)
    print("selftest:", "ok" if ok else "FAILED")
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cells", nargs="*", default=DEFAULT_CELLS.split())
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    ap.add_argument("--json", help="write every summary here")
    ap.add_argument("--all-wgs", action="store_true", help="every consumer warpgroup, not only the first")
    ap.add_argument("--selftest", action="store_true")
    args = ap.parse_args(argv)
    if args.selftest:
        return selftest()

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import torch
    from gpu_timing import median_ms  # lab/ is the script's own folder

    from benchmarks import bench_common as bc

    results = {}
    buf = torch.zeros(MAX_CTAS * MAX_TILES * ROWS * SLOTS, dtype=torch.int64, device="cuda")
    for cell in args.cells:
        d, s, causal = (int(x) for x in cell.split(":"))
        h, b = 2048 // d, 16384 // s
        shape = bc.Shape("standard", args.dtype, b, h, h, s, s, d, bool(causal))
        q, k, v = bc.make_inputs(shape)
        fn, ctx = bc.make_callable("flashattn", shape, q, k, v)
        with ctx():
            plain_ms = median_ms(fn, samples=15, reps=2)
            buf.zero_()
            os.environ["FLASHATTN_LAB_STAMPS"] = str(buf.data_ptr())
            try:
                stamped_ms = median_ms(fn, samples=5, reps=1, warmup=0)  # every call rewrites the same slots
                buf.zero_()
                fn()
                torch.cuda.synchronize()
            finally:
                del os.environ["FLASHATTN_LAB_STAMPS"]
        sdpa_ms = float("nan")
        try:
            sfn, sctx = bc.make_callable("sdpa-default", shape, q, k, v)
            with sctx():
                sdpa_ms = median_ms(sfn, samples=15, reps=2)
        except bc.Unavailable:
            pass
        stamps = buf.view(MAX_CTAS, MAX_TILES, ROWS, SLOTS).cpu().tolist()
        title = (f"D={d} S={s} {'causal' if causal else 'non-causal'} {args.dtype} B={b} H={h}: call {plain_ms * 1e3:.1f} us "
                 f"({stamped_ms * 1e3:.1f} stamped), SDPA default {sdpa_ms * 1e3:.1f} us")
        cell_result = {"plain_ms": plain_ms, "stamped_ms": stamped_ms, "sdpa_ms": sdpa_ms}
        for row in range(ROWS if args.all_wgs else 1):
            tiles = tiles_of(stamps, row)
            if not tiles:
                if row == 0:
                    print(f"{title}\n  no stamps: is lab/ab/lab_fwd_tile_timeline.diff applied to this build, "
                          "and did the call take the Hopper forward?")
                    return 1
                continue
            summary = summarize(tiles)
            ctas = len({t['cta'] for t in tiles})
            # What the stamps cost a tile: the stamped call's excess over the plain one, over a CTA's
            # tiles. A phase of about this size may be the stamps' own doing (2026-11-30: the
            # "Q wait" was about its size while the start stamps were stored at the tile's start).
            summary["stamp_cost_us_per_tile"] = (stamped_ms - plain_ms) * 1e3 / (len(tiles) / ctas)
            print_summary(f"{title}; consumer warpgroup {row}, {len(tiles)} tiles on {ctas} CTAs; "
                          f"the stamps cost {summary['stamp_cost_us_per_tile']:.2f} us a tile", summary)
            cell_result[f"wg{row}"] = summary
        results[cell] = cell_result
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
