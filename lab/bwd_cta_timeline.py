#!/usr/bin/env python3
"""Where a Hopper backward CTA's time goes, and how it changes with the grid (issue 27: a causal call
costs 7-9% more than its work at 16 heads but matches cuDNN's ratio at two, perf-notes "The causal
step's two levers measured").

Needs a build with lab/ab/lab_bwd_cta_timeline.diff applied (`bash lab/gpu_run.sh bwdtimeline` builds
one): each consumer warpgroup's first thread writes SM clock stamps at a CTA's phases
(csrc/flash_bwd_sm90/lab_stamps.cuh in that build) into a buffer whose address this script passes in
FLASHATTN_LAB_STAMPS for one call. Per CTA, in us (consumer warpgroup 0):

  kv        the consumers' start to K and V landed (the CTA's launch to its first loads landing)
  first     K/V to step 0's Q/dO stage landed
  step0     step 0 itself (its stage landed to its dQ tile handed to the writer)
  steady    the steps after step 0 until the walk ends, per step
  epilogue  the walk's end to dK/dV stored
  gap       on the same SM, the previous CTA's end to this CTA's start (launch and setup between CTAs)
The fixed part of a CTA, kv + first + (step0 - steady) + epilogue + gap, is printed in us and in
steady steps; the SMs' busy share (CTA time over SMs x the call's span) and the steady step by the
time in the call (quarters: whether steps slow where two heads' CTAs share the SMs) follow. The main
kernel's time with and without the stamps is printed too (the stamps' cost).

usage: python3 lab/bwd_cta_timeline.py [--dtype bf16|fp16] [--json PATH] D:S:causal:heads ...
       (default cells: 128:16384:1:2 128:16384:0:2 128:16384:1:16 128:16384:0:16 64:16384:1:16 64:16384:0:16)
       python3 lab/bwd_cta_timeline.py --selftest     (the analysis on synthetic stamps, no GPU)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

# lab_stamps.cuh's layout: uint64 [MAX_CTAS][ROWS][SLOTS].
MAX_CTAS, ROWS, SLOTS = 8192, 2, 16
(S_START, S_KV, S_FIRST_READY, S_FIRST_DONE, S_LAST_READY, S_LOOP_END, S_END, G_START, G_END, S_META,
 S_WHERE) = range(11)
PHASES = ("gap", "kv", "first", "step0", "steady", "epilogue")
DEFAULT_CELLS = "128:16384:1:2 128:16384:0:2 128:16384:1:16 128:16384:0:16 64:16384:1:16 64:16384:0:16"


def ctas_of(stamps, row: int = 0) -> list[dict]:
    """Every stamped CTA with a step: its phases in us (cycles converted by the CTA's own globaltimer
    over clock64), its SM, head, key block, steps and start/end in ns; gaps filled per SM."""
    out = []
    for cta in range(len(stamps)):
        s = [int(x) for x in stamps[cta][row]]
        if s[S_START] == 0 or s[S_END] == 0:
            continue
        steps = s[S_META] & 0xFFFFFFFF
        cycles = s[S_END] - s[S_START]
        ns = s[G_END] - s[G_START]
        if steps < 1 or cycles <= 0 or ns <= 0:
            continue
        us = ns / cycles / 1e3  # us a cycle
        c = {"cta": cta, "sm": s[S_WHERE] & 0xFFFFFFFF, "head": s[S_WHERE] >> 32, "n_block": s[S_META] >> 32,
             "steps": steps, "start_ns": s[G_START], "end_ns": s[G_END], "total": cycles * us,
             "kv": (s[S_KV] - s[S_START]) * us, "first": (s[S_FIRST_READY] - s[S_KV]) * us,
             "step0": (s[S_FIRST_DONE] - s[S_FIRST_READY]) * us, "epilogue": (s[S_END] - s[S_LOOP_END]) * us}
        c["steady"] = (s[S_LOOP_END] - s[S_FIRST_DONE]) * us / (steps - 1) if steps > 1 else float("nan")
        out.append(c)
    by_sm: dict[int, list[dict]] = {}
    for c in out:
        by_sm.setdefault(c["sm"], []).append(c)
    for cs in by_sm.values():
        cs.sort(key=lambda c: c["start_ns"])
        prev = None
        for c in cs:
            c["gap"] = (c["start_ns"] - prev["end_ns"]) / 1e3 if prev is not None else None
            prev = c
    return out


def _mean(vals) -> float:
    vals = [v for v in vals if v is not None and v == v]
    return statistics.fmean(vals) if vals else float("nan")


def summarize(ctas: list[dict], sms: int) -> dict:
    """Means of each phase, the fixed part of a CTA, the SMs' busy share, the steady step by quarter."""
    row = {p: _mean(c[p] for c in ctas) for p in PHASES}
    steady = _mean(c["steady"] for c in ctas if c["steps"] > 1)
    fixed = (row["kv"] + row["first"] + (row["step0"] - steady) + row["epilogue"] +
             (row["gap"] if row["gap"] == row["gap"] else 0.0))
    t0 = min(c["start_ns"] for c in ctas)
    t1 = max(c["end_ns"] for c in ctas)
    span_us = (t1 - t0) / 1e3
    busy = sum((c["end_ns"] - c["start_ns"]) / 1e3 for c in ctas) / (sms * span_us) if span_us > 0 else float("nan")
    quarters = []
    for q in range(4):
        lo, hi = t0 + (t1 - t0) * q / 4, t0 + (t1 - t0) * (q + 1) / 4
        quarters.append(_mean(c["steady"] for c in ctas if c["steps"] > 1 and lo <= (c["start_ns"] + c["end_ns"]) / 2 < hi))
    return {"ctas": len(ctas), "mean_steps": _mean(c["steps"] for c in ctas), "phases_us": row,
            "steady_us": steady, "fixed_us": fixed, "fixed_steps": fixed / steady if steady > 0 else float("nan"),
            "span_us": span_us, "busy": busy, "steady_by_quarter_us": quarters}


def print_summary(title: str, s: dict) -> None:
    print(title)
    ph = s["phases_us"]
    print(f"  {s['ctas']} CTAs, {s['mean_steps']:.1f} steps a CTA; span {s['span_us']:.1f} us, SMs busy {s['busy']:.1%}")
    print("  means (us): " + ", ".join(f"{p} {ph[p]:.3f}" for p in PHASES))
    print(f"  fixed part a CTA {s['fixed_us']:.2f} us = {s['fixed_steps']:.2f} steady steps; steady step by "
          "quarter of the call: " + " / ".join(f"{q:.3f}" for q in s["steady_by_quarter_us"]))


def selftest() -> int:
    """Synthetic stamps: two SMs, CTAs of known phases back to back; the summary must give them back."""
    stamps = [[[0] * SLOTS for _ in range(ROWS)] for _ in range(8)]
    ph = {"kv": 3000, "first": 1000, "step0": 4000, "epilogue": 5000}  # cycles; 2 ns a cycle
    step_cycles, gap_ns = 1500, 800
    cta = 0
    for sm in (0, 1):
        ns = 1_000_000 * (sm + 1)
        for steps in (4, 2, 6, 3):
            s = stamps[cta][0]
            clock = ns // 2  # 2 ns a cycle
            s[S_START] = clock
            s[S_KV] = s[S_START] + ph["kv"]
            s[S_FIRST_READY] = s[S_KV] + ph["first"]
            s[S_FIRST_DONE] = s[S_FIRST_READY] + ph["step0"]
            s[S_LOOP_END] = s[S_FIRST_DONE] + (steps - 1) * step_cycles
            s[S_LAST_READY] = s[S_LOOP_END] - step_cycles // 2
            s[S_END] = s[S_LOOP_END] + ph["epilogue"]
            s[G_START], s[G_END] = 2 * s[S_START], 2 * s[S_END]
            s[S_META] = (cta << 32) | steps
            s[S_WHERE] = (7 << 32) | sm
            ns = s[G_END] + gap_ns
            cta += 1
    ctas = ctas_of(stamps)
    summ = summarize(ctas, sms=2)
    p = summ["phases_us"]
    ok = summ["ctas"] == 8 and all(abs(p[k] - v * 2e-3) < 1e-9 for k, v in ph.items())
    ok &= abs(summ["steady_us"] - step_cycles * 2e-3) < 1e-9 and abs(p["gap"] - gap_ns / 1e3) < 1e-9
    fixed = (ph["kv"] + ph["first"] + ph["step0"] - step_cycles + ph["epilogue"]) * 2e-3 + gap_ns / 1e3
    ok &= abs(summ["fixed_us"] - fixed) < 1e-6 and abs(summ["fixed_steps"] - fixed / (step_cycles * 2e-3)) < 1e-6
    ok &= sum(1 for c in ctas if c["gap"] is None) == 2  # each SM's first CTA has no gap
    ok &= 0.0 < summ["busy"] <= 1.0
    print_summary("selftest (synthetic: 2 ns a cycle, a steady step 3 us)", summ)
    print("selftest:", "ok" if ok else "FAILED")
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cells", nargs="*", default=DEFAULT_CELLS.split())
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    ap.add_argument("--json", help="write every summary here")
    ap.add_argument("--selftest", action="store_true")
    args = ap.parse_args(argv)
    if args.selftest:
        return selftest()

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch
    from gpu_timing import kernel_table

    import flashattn  # noqa: F401  (registers torch.ops.flashattn)

    bwd = torch.ops.flashattn.bwd.default
    fwd = torch.ops.flashattn.fwd.default
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{torch.cuda.get_device_name(0)}, {sms} SMs, {args.dtype}")
    buf = torch.zeros(MAX_CTAS * ROWS * SLOTS, dtype=torch.int64, device="cuda")
    results = {}
    for cell in args.cells:
        d, s, causal, heads = (int(x) for x in cell.split(":"))
        torch.manual_seed(0)
        q, k, v, dout = (torch.randn(1, s, heads, d, device="cuda", dtype=dtype) for _ in range(4))
        scale = d**-0.5
        out, lse = fwd(q, k, v, scale, causal, "auto")

        def call(o=out, l=lse, c=causal, sc=scale):
            return bwd(dout, q, k, v, o, l, sc, c, False, "auto")

        def main_us() -> float:
            rows = [r for r in kernel_table(call, calls=10) if "flash_bwd_sm90_kernel" in r[0]]
            return rows[0][2] if rows else float("nan")

        plain_us = main_us()
        os.environ["FLASHATTN_LAB_STAMPS"] = str(buf.data_ptr())
        try:
            stamped_us = main_us()
            buf.zero_()
            call()
            torch.cuda.synchronize()
        finally:
            del os.environ["FLASHATTN_LAB_STAMPS"]
        stamps = buf.view(MAX_CTAS, ROWS, SLOTS).cpu().tolist()
        ctas = ctas_of(stamps)
        title = (f"D={d} S={s} {'causal' if causal else 'non-causal'} B=1 H={heads}: main kernel {plain_us:.1f} us "
                 f"({stamped_us:.1f} stamped)")
        if not ctas:
            print(f"{title}\n  no stamps: is lab/ab/lab_bwd_cta_timeline.diff applied to this build, and did the "
                  "call take the Hopper backward (D <= 128 dense)?")
            return 1
        summ = summarize(ctas, sms)
        summ.update(plain_us=plain_us, stamped_us=stamped_us)
        print_summary(title, summ)
        results[cell] = summ
        del q, k, v, dout, out, lse
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
