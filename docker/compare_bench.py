#!/usr/bin/env python3
"""Compare a benchmark run with a baseline: both pytest-benchmark JSONs from benchmarks/
(benchmarks/run_benchmarks.sh writes OUTDIR/bench.json). Used by the GPU workflow.

usage: python docker/compare_bench.py BASELINE.json CURRENT.json [--threshold 0.10]
       [--impl-prefix flashattn] [--markdown OUT.md]

Per benchmark present in both files (matched by its full name) whose extra_info.impl starts with
--impl-prefix (our kernels; the SDPA baselines change with torch, not with this code), compares
the median time (extra_info.median_ms, else stats.median). Prints one row per benchmark and the
geometric mean of current/baseline. Exit status: 1 when any benchmark is slower than the baseline
by more than --threshold (a fraction: 0.10 = 10 %), or when the geometric mean is slower by more
than --geomean-threshold (default half of --threshold); 0 otherwise, and also when there is
nothing to compare (no common benchmark, or the baseline was taken on another GPU: a notice
says so, as a comparison across GPUs means nothing).
"""

from __future__ import annotations

import argparse
import json
import math
import sys


def _load(path: str) -> dict:
    with open(path) as f:
        data = json.load(f)
    if not isinstance(data.get("benchmarks"), list):
        raise SystemExit(f"compare_bench: {path} is not a pytest-benchmark JSON (no 'benchmarks' list)")
    return data


def _gpu(data: dict) -> str | None:
    gpu = (data.get("machine_info") or {}).get("gpu") or {}
    return gpu.get("name") if isinstance(gpu, dict) else None


def _median_ms(bench: dict) -> float | None:
    info = bench.get("extra_info") or {}
    if info.get("median_ms") is not None:
        return float(info["median_ms"])
    median = (bench.get("stats") or {}).get("median")
    return float(median) * 1e3 if median is not None else None


def timings(data: dict, impl_prefix: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for b in data["benchmarks"]:
        impl = str((b.get("extra_info") or {}).get("impl", ""))
        if impl_prefix and not impl.startswith(impl_prefix):
            continue
        ms = _median_ms(b)
        if ms is not None and ms > 0:
            out[b.get("fullname") or b.get("name", "?")] = ms
    return out


def compare(baseline: dict, current: dict, impl_prefix: str = "flashattn", threshold: float = 0.10,
            geomean_threshold: float | None = None) -> tuple[int, list[str]]:
    """(exit status, report lines)."""
    if geomean_threshold is None:
        geomean_threshold = threshold / 2
    lines: list[str] = []
    g_base, g_cur = _gpu(baseline), _gpu(current)
    if g_base and g_cur and g_base != g_cur:
        return 0, [f"NOTICE: baseline ran on {g_base}, this run on {g_cur}: not comparable, nothing compared."]
    base, cur = timings(baseline, impl_prefix), timings(current, impl_prefix)
    common = sorted(set(base) & set(cur))
    if not common:
        return 0, [f"NOTICE: no benchmark of impl '{impl_prefix}*' is in both files: nothing compared."]
    lines.append("| benchmark | baseline ms | current ms | change |")
    lines.append("|---|---:|---:|---:|")
    worse: list[str] = []
    logs = []
    for name in common:
        ratio = cur[name] / base[name]
        logs.append(math.log(ratio))
        flag = ""
        if ratio > 1 + threshold:
            flag = " REGRESSION"
            worse.append(name)
        lines.append(f"| {name} | {base[name]:.4f} | {cur[name]:.4f} | {100 * (ratio - 1):+.1f}%{flag} |")
    geo = math.exp(sum(logs) / len(logs))
    lines.append("")
    lines.append(f"{len(common)} benchmarks compared (only in baseline: {len(set(base) - set(cur))}, "
                 f"only in current: {len(set(cur) - set(base))}); geometric mean of current/baseline time: "
                 f"{geo:.3f} ({100 * (geo - 1):+.1f}%)")
    status = 0
    if worse:
        lines.append(f"FAIL: {len(worse)} benchmark(s) slower than the baseline by more than {100 * threshold:.0f}%: "
                     + ", ".join(worse))
        status = 1
    if geo > 1 + geomean_threshold:
        lines.append(f"FAIL: the geometric mean is slower than the baseline by more than {100 * geomean_threshold:.1f}%")
        status = 1
    if status == 0:
        lines.append(f"OK: no regression beyond {100 * threshold:.0f}% per benchmark / "
                     f"{100 * geomean_threshold:.1f}% geometric mean")
    return status, lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("baseline")
    ap.add_argument("current")
    ap.add_argument("--threshold", type=float, default=0.10)
    ap.add_argument("--geomean-threshold", type=float)
    ap.add_argument("--impl-prefix", default="flashattn")
    ap.add_argument("--markdown", help="also write the report here (e.g. $GITHUB_STEP_SUMMARY)")
    args = ap.parse_args(argv)
    status, lines = compare(_load(args.baseline), _load(args.current), args.impl_prefix, args.threshold,
                            args.geomean_threshold)
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write("## Benchmark vs baseline\n\n" + text)
    return status


if __name__ == "__main__":
    sys.exit(main())
