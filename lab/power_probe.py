#!/usr/bin/env python3
"""Each implementation's forward held for a few seconds on one cell while nvidia-smi samples the SM
clock, the power draw and the active clock-event (throttle) reasons: whether a cell's rate is
bounded by the board's power limit, and what each implementation's rate is per GHz of SM clock.

Why: the same SASS but for P's conversion opcode runs 3-5% slower on fp16 than on bf16 (D=128,
perf-notes "fp16 against bf16"), and so does cuDNN's, while FlashAttention-3's fp16 rate matches
its bf16 one. The grid's clock log (lab/gpu_run.sh fwdgrid, 5 samples a second over the whole grid)
cannot say which call a sample belongs to; this holds one call at a time.

usage: python3 lab/power_probe.py [--seconds 3] [--dtypes bf16,fp16] D:S:causal[:B:H] ...
       (default cells: 128:16384:0 128:4096:0 64:512:1)
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import bench_common as bc  # noqa: E402

IMPLS = ("flashattn", "sdpa-default", "fa3")
DEFAULT_CELLS = "128:16384:0 128:4096:0 64:512:1"
# nvidia-smi's clocks_event_reasons bits (nvml.h nvmlClocksEventReason*): the ones that cap a clock.
REASONS = {0x4: "sw-power", 0x8: "hw-slowdown", 0x20: "sw-thermal", 0x40: "hw-thermal", 0x80: "hw-power-brake"}


def reasons_field() -> str:
    """The active clock-event reasons' query name (clocks_throttle_reasons before driver 535)."""
    for name in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        r = subprocess.run(["nvidia-smi", f"--query-gpu={name}", "--format=csv,noheader"], capture_output=True, text=True)
        if r.returncode == 0:
            return name
    return "clocks_throttle_reasons.active"


def sampler(field: str) -> subprocess.Popen | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    return subprocess.Popen([smi, f"--query-gpu=clocks.sm,power.draw,{field}", "--format=csv,noheader,nounits",
                             "-lms", "100"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def parse_samples(text: str) -> list[tuple[float, float, int]]:
    """nvidia-smi's csv lines (noheader, nounits: "1980, 544.81, 0x0000000000000004") as (MHz, W,
    reason bits); lines it could not fill ([N/A], a partial last line) are left out."""
    samples = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            samples.append((float(parts[0]), float(parts[1]), int(parts[2], 16)))
        except (ValueError, IndexError):
            continue
    return samples


def summarize(samples: list[tuple[float, float, int]]) -> tuple[float, float, str]:
    """Median MHz, median W, and each active capping reason with its share of the samples."""
    if not samples:
        return float("nan"), float("nan"), "no samples"
    mhz = statistics.median(x[0] for x in samples)
    watts = statistics.median(x[1] for x in samples)
    shares = {name: sum(1 for x in samples if x[2] & bit) / len(samples) for bit, name in REASONS.items()}
    capped = ", ".join(f"{name} {share:.0%}" for name, share in shares.items() if share > 0) or "-"
    return mhz, watts, capped


def held(fn: Callable[[], object], seconds: float, field: str) -> tuple[float, list[tuple[float, float, int]]]:
    """Calls fn back to back for `seconds` (after a 0.5 s ramp that is not counted); the mean time a
    call in ms and the samples (MHz, W, reasons) taken while the counted calls ran."""
    import torch

    t_end = time.time() + 0.5
    while time.time() < t_end:
        fn()
    torch.cuda.synchronize()
    proc = sampler(field)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls = 0
    start.record()
    t_end = time.time() + seconds
    while time.time() < t_end:
        for _ in range(8):
            fn()
        calls += 8
        if calls % 256 == 0:  # a bounded launch queue: the loop's clock stays the GPU's
            torch.cuda.current_stream().synchronize()
    stop.record()
    torch.cuda.synchronize()
    samples: list[tuple[float, float, int]] = []
    if proc is not None:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
        samples = parse_samples(out)
    return start.elapsed_time(stop) / calls, samples


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cells", nargs="*", default=DEFAULT_CELLS.split())
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--dtypes", default="bf16,fp16")
    args = ap.parse_args(argv)
    import torch

    field = reasons_field() if shutil.which("nvidia-smi") else ""
    limit = subprocess.run(["nvidia-smi", "--query-gpu=power.limit", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True).stdout.strip() if shutil.which("nvidia-smi") else "?"
    print(f"{torch.cuda.get_device_name()}, power limit {limit} W; each call held {args.seconds} s, "
          "samples every 100 ms; clock and power: medians of the samples")
    print(f"{'cell':>22} {'dtype':>5} {'impl':>13} {'TFLOP/s':>8} {'MHz':>6} {'W':>6} {'TFLOP/s/GHz':>11}  capped by")
    for cell in args.cells:
        fields = [int(x) for x in cell.split(":")]
        d, s, causal = fields[:3]
        b, h = fields[3:] if len(fields) == 5 else (16384 // s, 2048 // d)
        for dtype in args.dtypes.split(","):
            shape = bc.Shape("standard", dtype, b, h, h, s, s, d, bool(causal))
            q, k, v = bc.make_inputs(shape)
            for impl in IMPLS:
                try:
                    fn, ctx = bc.make_callable(impl, shape, q, k, v)
                except bc.Unavailable as exc:
                    print(f"  {impl}: {exc}")
                    continue
                with ctx():
                    ms, samples = held(fn, args.seconds, field)
                tf = shape.flops / (ms * 1e-3) / 1e12
                mhz, watts, capped = summarize(samples)
                print(f"{cell:>22} {dtype:>5} {impl:>13} {tf:8.1f} {mhz:6.0f} {watts:6.0f} {tf / mhz * 1e3:11.1f}  {capped}")
            del q, k, v
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
