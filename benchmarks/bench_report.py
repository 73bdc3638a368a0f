#!/usr/bin/env python3
"""Turn a pytest-benchmark JSON from benchmarks/ into a speedup report (forward, and where the JSON
has them the backward passes: "bwd" alone and "fwd+bwd").

usage: python benchmarks/bench_report.py results.json [--png out.png] [--markdown out.md] [--ours NAME]

Prints, per shape, each implementation's time and TFLOP/s and flashattn's speedup over it
(time_other / time_ours, so > 1 means flashattn is faster), then the geometric mean of those
speedups per category (grid x dtype x D x causal x pass; the standard grid's GQA shapes in
categories of their own, "... GQA"), per grid and pass and overall, and a training table (fwd,
bwd, fwd+bwd side by side against SDPA's default and FlashAttention-2 backends). --markdown
writes the same as tables for the README; --png draws the figure: first a summary panel, ours'
geometric-mean speedup over each peer per suite (forward, backward, fwd+bwd, decode, latency; 1.0
marked), then TFLOP/s (µs, GB/s) against S, one line per implementation, one panel per dtype x D
x causal x pass (x GQA) where there are two or more S to draw, each with its legend.
Needs only the standard library, plus matplotlib for --png.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass, field

OURS = "flashattn"
GRID_ORDER = {"latency": 0, "latency-graph": 1, "standard": 2, "decode": 3}
PASS_ORDER = {"fwd": 0, "bwd": 1, "fwd+bwd": 2}
TRAINING_BASELINES = ("sdpa-default", "sdpa-flash")  # the training table's columns (sdpa-flash: FlashAttention-2)
IMPL_ORDER = (
    "flashattn",
    "flashattn-hopper",
    "flashattn-portable",
    "flashattn-fwd",
    "sdpa-default",
    "sdpa-flash",
    "sdpa-cudnn",
    "sdpa-efficient",
    "sdpa-math",
    "flashattn-paged16",
    "flashattn-paged64",
    "flashattn-paged256",
    "fa3",
    "fa3-paged16",
    "fa3-paged64",
    "fa3-paged256",
    "flex",
    "copy-floor",
)
MISSING = "—"
# Grids that hold MHA and GQA shapes of the same dtype, D and mask (the standard grid: its GQA
# shapes share D=128 and S=4k/16k with MHA ones). There a GQA shape gets a category, a figure panel
# and a training-table row of its own, so the MHA ones keep their meaning from run to run; in the
# other grids (decode, context parallelism) every shape is GQA, and their labels stay as they were.
MIXED_HEADS_GRIDS = ("standard",)
# Per shape, the fastest of the other libraries that ran (SDPA's backends, FlashAttention-3): the
# bar to clear is the best of them on each shape, not each one on average. Not peers: our own
# variants, SDPA's reference math backend, the copy floor.
BEST_PEER = "best peer"
NOT_PEERS = ("sdpa-math", "copy-floor")
NOISE_MARGIN = 0.98  # a speedup below this against the best peer marks a shape where a peer wins
# Marks a speedup where either side was host-bound (extra_info.host_bound, set by the suite where an
# implementation's host time per call reached extra_info.host_bound_fraction of its GPU time per
# call, bench_common.HOST_BOUND_FRACTION): back to back it ran at its launch rate, so the ratio is
# partly host work, not kernel speed.
HOST_MARK = "†"
# The criterion of JSONs written before the suite recorded it (extra_info.host_bound_fraction).
HOST_BOUND_FRACTION_BEFORE_RECORDED = 0.9


def is_peer(impl: str, ours: str = OURS) -> bool:
    return impl != ours and not impl.startswith("flashattn") and impl not in NOT_PEERS


class ReportError(Exception):
    pass


@dataclass
class Row:
    """One benchmark: an implementation on a shape."""

    name: str
    group: str
    impl: str
    grid: str
    dtype: str
    b: int
    hq: int
    hk: int
    sq: int
    sk: int
    d: int
    causal: bool
    flops: float
    io_bytes: float
    ms: float  # median GPU time per call (back-to-back)
    latency_ms: float | None = None  # median single-call latency, where measured
    pass_: str = "fwd"  # "fwd", "bwd" or "fwd+bwd"
    host_bound: bool = False  # its host work per call nearly or wholly covered its GPU time per call
    host_bound_fraction: float = HOST_BOUND_FRACTION_BEFORE_RECORDED  # the criterion host_bound was taken with

    @property
    def tflops(self) -> float:
        return self.flops / (self.ms * 1e-3) / 1e12

    @property
    def gbps(self) -> float:
        return self.io_bytes / (self.ms * 1e-3) / 1e9


@dataclass
class Shape:
    group: str
    grid: str
    dtype: str
    d: int
    causal: bool
    b: int
    hq: int
    hk: int
    sq: int
    sk: int
    rows: dict = field(default_factory=dict)  # impl -> Row
    pass_: str = "fwd"

    @property
    def gqa(self) -> bool:
        """A GQA shape of a grid that mixes them with MHA ones (MIXED_HEADS_GRIDS)."""
        return self.grid in MIXED_HEADS_GRIDS and self.hq != self.hk

    @property
    def mask_label(self) -> str:
        return "causal" if self.causal else "noncausal"

    @property
    def kind(self) -> str:
        """grid, dtype, D, mask and GQA, without the pass: a training-table row, a figure panel."""
        return f"{self.grid} {self.dtype} D={self.d} {self.mask_label}" + (" GQA" if self.gqa else "")

    @property
    def category(self) -> str:
        if self.grid == "decode":
            return f"decode {self.dtype} D={self.d}"
        return self.kind + _pass_suffix(self.pass_)

    @property
    def section(self) -> tuple:
        """(grid, pass): one shape table, one "(all)" summary line."""
        return (self.grid, self.pass_)

    def sort_key(self):
        # latency: the B=1 H=1 sweep before the multi-head case; decode: by B, then Sk
        sub = self.b * self.hq if self.grid.startswith("latency") else (self.b if self.grid == "decode" else 0)
        return (GRID_ORDER.get(self.grid, 9), self.grid, PASS_ORDER.get(self.pass_, 9), self.dtype, self.d, self.causal,
                self.gqa, sub, self.sk, self.sq, self.b)


def _pass_suffix(pass_: str) -> str:
    return "" if pass_ == "fwd" else f" {pass_}"


@dataclass
class Report:
    meta: dict
    shapes: list  # of Shape, sorted
    impls: list  # implementation names present, ours first
    ours: str

    def baselines(self) -> list:
        """The implementations ours is compared with, then BEST_PEER where two or more peers ran."""
        others = [i for i in self.impls if i != self.ours]
        return others + ([BEST_PEER] if sum(is_peer(i, self.ours) for i in others) >= 2 else [])


def _impl_key(name: str):
    return (IMPL_ORDER.index(name) if name in IMPL_ORDER else len(IMPL_ORDER), name)


def _row_from_bench(bench: dict) -> Row:
    info = bench.get("extra_info") or {}
    missing = [k for k in ("impl", "grid", "dtype", "b", "hq", "sq", "sk", "d", "causal", "flops") if k not in info]
    if missing:
        raise ReportError(
            f"benchmark {bench.get('name')!r} lacks extra_info {missing}: not from flashattn's benchmarks/ suite?"
        )
    if info.get("median_ms") is not None:
        ms = float(info["median_ms"])
    elif bench.get("stats", {}).get("median") is not None:
        ms = float(bench["stats"]["median"]) * 1e3
    else:
        raise ReportError(f"benchmark {bench.get('name')!r} has no timing (extra_info.median_ms or stats.median)")
    if not ms > 0:
        raise ReportError(f"benchmark {bench.get('name')!r} has a non-positive time {ms}")
    hq = int(info["hq"])
    pass_ = str(info.get("pass", "fwd"))
    if pass_ not in PASS_ORDER:
        raise ReportError(f"benchmark {bench.get('name')!r} has an unknown pass {pass_!r} (expected {list(PASS_ORDER)})")
    return Row(
        name=bench.get("name", ""),
        group=bench.get("group") or info.get("group") or "",
        impl=str(info["impl"]),
        grid=str(info["grid"]),
        dtype=str(info["dtype"]),
        b=int(info["b"]),
        hq=hq,
        hk=int(info.get("hk", hq)),
        sq=int(info["sq"]),
        sk=int(info["sk"]),
        d=int(info["d"]),
        causal=bool(info["causal"]),
        flops=float(info["flops"]),
        io_bytes=float(info.get("io_bytes") or 0.0),
        ms=ms,
        latency_ms=float(info["latency_ms"]) if info.get("latency_ms") is not None else None,
        pass_=pass_,
        host_bound=bool(info.get("host_bound", False)),
        host_bound_fraction=float(info.get("host_bound_fraction", HOST_BOUND_FRACTION_BEFORE_RECORDED)),
    )


def load(path: str, ours: str = OURS) -> Report:
    with open(path) as f:
        data = json.load(f)
    return build(data, ours)


def build(data: dict, ours: str = OURS) -> Report:
    benches = data.get("benchmarks")
    if not isinstance(benches, list):
        raise ReportError("not a pytest-benchmark JSON: no 'benchmarks' list")
    if not benches:
        raise ReportError("the JSON holds no benchmarks (all skipped or deselected?)")
    shapes: dict = {}
    for bench in benches:
        row = _row_from_bench(bench)
        key = (row.grid, row.group)
        sh = shapes.get(key)
        if sh is None:
            sh = shapes[key] = Shape(
                row.group, row.grid, row.dtype, row.d, row.causal, row.b, row.hq, row.hk, row.sq, row.sk, pass_=row.pass_
            )
        if row.impl in sh.rows:
            raise ReportError(f"two results for {row.impl} on {row.group!r}")
        sh.rows[row.impl] = row
    impls = sorted({i for sh in shapes.values() for i in sh.rows}, key=_impl_key)
    if ours in impls:
        impls.remove(ours)
        impls.insert(0, ours)
    mi = data.get("machine_info") or {}
    ci = data.get("commit_info") or {}
    gpu, sw = mi.get("gpu") or {}, mi.get("software") or {}
    meta = {
        "date": data.get("datetime", "?"),
        "gpu": gpu.get("name", "?"),
        "gpu_count": gpu.get("count"),
        "capability": gpu.get("capability"),
        "driver": gpu.get("driver", "?"),
        "torch": sw.get("torch", "?"),
        "cuda": sw.get("cuda", "?"),
        "cudnn": sw.get("cudnn"),
        "flashattn": sw.get("flashattn", "?"),
        "flashattn_build": sw.get("flashattn_build"),
        "python": mi.get("python_version"),
        "commit": (ci.get("id") or "")[:12] + (" (dirty)" if ci.get("dirty") else ""),
        "pytest_benchmark": data.get("version"),
        "timing": mi.get("timing"),  # a JSON written by another timer says how it timed
    }
    return Report(meta, sorted(shapes.values(), key=Shape.sort_key), impls, ours)


def best_peer(shape: Shape, ours: str, latency: bool = False) -> str | None:
    """The peer with the shortest time on this shape (None where no peer ran)."""
    def t(r: Row) -> float | None:
        return r.latency_ms if latency else r.ms

    peers = [(t(r), i) for i, r in shape.rows.items() if is_peer(i, ours) and t(r) is not None]
    return min(peers)[1] if peers else None


def speedup(shape: Shape, ours: str, other: str, latency: bool = False) -> float | None:
    """time(other) / time(ours) on one shape (> 1: ours is faster); None where either is missing.
    other == BEST_PEER: against the fastest peer on this shape."""
    if other == BEST_PEER:
        other = best_peer(shape, ours, latency)
        if other is None:
            return None
    a, b = shape.rows.get(ours), shape.rows.get(other)
    if a is None or b is None:
        return None
    if latency:
        if a.latency_ms is None or b.latency_ms is None:
            return None
        return b.latency_ms / a.latency_ms
    return b.ms / a.ms


def host_mark(shape: Shape, ours: str, other: str) -> str:
    """HOST_MARK where ours or `other` (BEST_PEER: the fastest peer) ran host-bound on this shape."""
    if other == BEST_PEER:
        other = best_peer(shape, ours) or ""
    rows = [shape.rows.get(ours), shape.rows.get(other)]
    return HOST_MARK if any(r is not None and r.host_bound for r in rows) else ""


def host_bound_counts(report: Report) -> dict:
    """{implementation: shapes where it ran host-bound}, in report order."""
    counts: dict = {}
    for sh in report.shapes:
        for impl, r in sh.rows.items():
            if r.host_bound:
                counts[impl] = counts.get(impl, 0) + 1
    return {i: counts[i] for i in report.impls if i in counts}


def host_bound_note(report: Report) -> str | None:
    counts = host_bound_counts(report)
    if not counts:
        return None
    who = ", ".join(f"{impl} on {n} shape{'s' if n > 1 else ''}" for impl, n in counts.items())
    fractions = sorted({r.host_bound_fraction for sh in report.shapes for r in sh.rows.values() if r.host_bound})
    at_least = " or ".join(f"{f:.0%}" for f in fractions)
    return (f"{HOST_MARK}: host-bound ({who}): that implementation's host work per call (Python, dispatch, "
            f"launch; timed apart from an idle GPU) was at least {at_least} of its GPU time per call, so back to "
            "back it ran at its launch rate: the ratio is partly host time, not kernel speed.")


def kernel_bound_lines(report: Report) -> list:
    """Per grid and pass with a host-bound (HOST_MARK) pair: ours' geometric-mean speedup over each
    baseline on the shapes where neither side ran host-bound, i.e. the kernels' ratio alone, with the
    number of shapes kept. Empty where nothing ran host-bound."""
    out = []
    for grid, pass_ in sections(report):
        shapes = [sh for sh in report.shapes if sh.section == (grid, pass_)]
        parts = []
        for bl in report.baselines():
            pairs = [(speedup(sh, report.ours, bl), host_mark(sh, report.ours, bl)) for sh in shapes]
            pairs = [(x, m) for x, m in pairs if x is not None]
            kept = [x for x, m in pairs if not m]
            if len(kept) < len(pairs) and kept:
                parts.append(f"{bl} {_x(geomean(kept))} ({len(kept)} of {len(pairs)} shapes)")
        if parts:
            out.append(f"{grid}{_pass_suffix(pass_)} without the {HOST_MARK} shapes: vs " + ", ".join(parts))
    return out


def geomean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _geomeans(report: Report, label: str, shapes: list, latency: bool = False) -> tuple:
    """(label, n_shapes, {baseline: (geomean speedup or None, n_pairs)}) over `shapes`: n_shapes
    counts the shapes ours ran on, n_pairs those where the baseline ran too."""
    n = sum(1 for sh in shapes if report.ours in sh.rows)
    res = {}
    for bl in report.baselines():
        xs = [x for x in (speedup(sh, report.ours, bl, latency) for sh in shapes) if x is not None]
        res[bl] = (geomean(xs), len(xs))
    return (label, n, res)


def summary(report: Report, latency: bool = False) -> list:
    """[(label, n_shapes, {baseline: (geomean speedup or None, n_pairs)})] per category, then per
    grid and pass (where it has several categories), then overall (where there are several grids
    or passes)."""
    out = []
    by_cat, by_grid = defaultdict(list), defaultdict(list)
    for sh in report.shapes:
        if latency and not any(r.latency_ms is not None for r in sh.rows.values()):
            continue
        by_cat[sh.category].append(sh)
        by_grid[sh.section].append(sh)

    for (grid, pass_), shapes in by_grid.items():  # shapes are sorted, so grids and categories come in order
        cats = list(dict.fromkeys(sh.category for sh in shapes))
        for cat in cats:
            out.append(_geomeans(report, cat, by_cat[cat], latency))
        if len(cats) > 1:
            out.append(_geomeans(report, f"{grid}{_pass_suffix(pass_)} (all)", shapes, latency))
    if len(by_grid) > 1:
        out.append(_geomeans(report, "all", [sh for shapes in by_grid.values() for sh in shapes], latency))
    return out


# The suites of the figure's summary panel, in its order: the forward, backward and fwd+bwd passes
# of the throughput grids, the shared decode grid (its variants, decode-step, decode-kv, ..., are
# categories of their own in the tables, so the headline stays the grid's), the latency grid
# (time per call back to back, as in the tables' summary) and its kernel time (CUDA-graph replays).
SUITES = (
    ("forward", lambda sh: sh.pass_ == "fwd" and not sh.grid.startswith(("latency", "decode"))),
    ("backward", lambda sh: sh.pass_ == "bwd"),
    ("fwd+bwd", lambda sh: sh.pass_ == "fwd+bwd"),
    ("decode", lambda sh: sh.grid == "decode"),
    ("latency", lambda sh: sh.grid == "latency"),
    ("latency kernels", lambda sh: sh.grid == "latency-graph"),
)


def suite_summary(report: Report) -> list:
    """[(suite, n_shapes, {peer: (geomean speedup, n_pairs)})] for each suite ours ran in: the
    geometric mean of ours' speedup over each peer (and the best peer per shape, where two or more
    ran), over the suite's shapes where both ran; peers that ran on none of them are left out."""
    peers = [b for b in report.baselines() if b == BEST_PEER or is_peer(b, report.ours)]
    out = []
    for suite, member in SUITES:
        label, n, res = _geomeans(report, suite, [sh for sh in report.shapes if member(sh)])
        if n:
            out.append((label, n, {b: res[b] for b in peers if res[b][1]}))
    return out


# ---------------------------------------------------------------------------------------------
# Text and markdown
# ---------------------------------------------------------------------------------------------


def _x(v: float | None) -> str:
    return MISSING if v is None else f"{v:.2f}x"


def _num(v: float) -> str:
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.3g}"


def _gbps(v: float) -> str:
    return f"{v:.0f}" if v >= 100 else _num(v)


def _tf(r: Row | None) -> str:
    return MISSING if r is None else _num(r.tflops)


def _time(ms: float) -> str:
    return f"{ms * 1e3:.1f} µs" if ms < 1 else f"{ms:.3f} ms"


def _us(v: float | None) -> str:
    return MISSING if v is None else f"{v * 1e3:.1f}"


def meta_lines(report: Report) -> list:
    m = report.meta
    build = m.get("flashattn_build") or {}
    build_s = ", ".join(f"{k}={v}" for k, v in build.items()) if isinstance(build, dict) else str(build)
    return [
        f"date: {m['date']}",
        f"GPU: {m['gpu']}"
        + (f" (sm_{str(m['capability']).replace('.', '')})" if m.get("capability") else "")
        + f", driver {m['driver']}",
        f"torch {m['torch']}, CUDA {m['cuda']}, cuDNN {m['cudnn']}, flashattn {m['flashattn']}"
        + (f" [{build_s}]" if build_s else ""),
        f"commit: {m['commit'] or '?'}; pytest-benchmark {m['pytest_benchmark']}",
        "timing: " + (m.get("timing") or "CUDA events; median over rounds of (round time / N back-to-back calls), "
                      "the implementations of a shape in interleaved rounds") + "; "
        "speedup = time(other) / time(" + report.ours + "), > 1 means " + report.ours + " is faster",
    ]


def _table(header: list, rows: list) -> list:
    out = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|",
    ]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def _text_table(header: list, rows: list) -> list:
    cols = [header] + [[str(c) for c in r] for r in rows]
    w = [max(len(c[i]) for c in cols) for i in range(len(header))]

    def fmt(r):
        return "  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r))

    return [fmt(header), "  ".join("-" * x for x in w)] + [fmt([str(c) for c in r]) for r in rows]


def summary_table(report: Report, latency: bool = False):
    header = ["category", "shapes"] + [f"vs {b}" for b in report.baselines()]

    def cell(g, k, n):  # the number of shapes is shown where the baseline ran on fewer than ours
        return _x(g) if g is None or k == n else f"{_x(g)} ({k})"

    rows = [[label, n] + [cell(*g[b], n) for b in report.baselines()] for label, n, g in summary(report, latency)]
    return header, rows


def passes(report: Report) -> list:
    return sorted({sh.pass_ for sh in report.shapes}, key=lambda p: PASS_ORDER.get(p, 9))


def training_table(report: Report):
    """Where the JSON has backward passes: one row per (grid, dtype, D, causal) category, the
    geometric-mean speedup of ours for each pass (fwd, bwd, fwd+bwd) against each of
    TRAINING_BASELINES that ran. None (no table) without backward passes."""
    have = passes(report)
    if have == ["fwd"] or not have:
        return None
    baselines = [b for b in TRAINING_BASELINES if b in report.impls and b != report.ours]
    if not baselines:
        return None
    keyed = defaultdict(lambda: defaultdict(list))
    labels = {}
    for sh in report.shapes:
        if sh.grid == "decode":
            continue
        key = (GRID_ORDER.get(sh.grid, 9), sh.grid, sh.dtype, sh.d, sh.causal, sh.gqa)
        labels[key] = sh.kind
        keyed[key][sh.pass_].append(sh)
    header = ["category"] + [f"{p} vs {b}" for p in have for b in baselines]
    rows = []
    for key in sorted(keyed):
        if set(keyed[key]) == {"fwd"}:
            continue  # a grid without backward passes (latency)
        cells = [labels[key]]
        for p in have:
            for b in baselines:
                cells.append(_x(geomean(speedup(sh, report.ours, b) for sh in keyed[key].get(p, []))))
        rows.append(cells)
    return header, rows


def shape_table(report: Report, grid: str, pass_: str = "fwd"):
    """Per-shape rows for one grid and pass: TFLOP/s (or µs for latency, GB/s for decode) per
    implementation, then ours' speedup over each other implementation."""
    shapes = [sh for sh in report.shapes if sh.grid == grid and sh.pass_ == pass_]
    if grid == "latency":
        header = ["shape"] + [f"{i} µs/call (1-call)" for i in report.impls]
    elif grid == "latency-graph":
        header = ["shape"] + [f"{i} µs/call" for i in report.impls]
    elif grid == "decode":
        header = ["shape"] + [f"{i} GB/s" for i in report.impls]
    else:
        header = ["shape"] + [f"{i} TFLOP/s" for i in report.impls]
    header += [f"speedup vs {b}" for b in report.baselines()]
    rows = []
    for sh in shapes:
        cells = [sh.group]
        for i in report.impls:
            r = sh.rows.get(i)
            if grid == "latency":
                cells.append(MISSING if r is None else f"{_us(r.ms)} ({_us(r.latency_ms)})")
            elif grid == "latency-graph":
                cells.append(MISSING if r is None else _us(r.ms))
            elif grid == "decode":
                cells.append(MISSING if r is None or not r.io_bytes else _gbps(r.gbps))
            else:
                cells.append(_tf(r))
        cells += [_x(speedup(sh, report.ours, b)) + host_mark(sh, report.ours, b)
                  for b in report.baselines() if b != BEST_PEER]
        if BEST_PEER in report.baselines():
            cells.append(_best_peer_cell(sh, report.ours))
        rows.append(cells)
    return header, rows


def _best_peer_cell(sh: Shape, ours: str) -> str:
    """Ours' speedup over the fastest peer, naming it; marked where it wins beyond the noise margin."""
    x, who = speedup(sh, ours, BEST_PEER), best_peer(sh, ours)
    if x is None:
        return MISSING
    return f"{_x(x)}{host_mark(sh, ours, BEST_PEER)} {who}" + (" (peer wins)" if x < NOISE_MARGIN else "")


def grids(report: Report) -> list:
    return sorted({sh.grid for sh in report.shapes}, key=lambda g: (GRID_ORDER.get(g, 9), g))


def sections(report: Report) -> list:
    """The (grid, pass) pairs present, in report order."""
    return list(dict.fromkeys(sh.section for sh in report.shapes))


def _title(report: Report) -> str:
    return "attention forward" if passes(report) == ["fwd"] else "attention forward and backward"


def markdown(report: Report) -> str:
    out = [f"## {_title(report)[0].upper()}{_title(report)[1:]} benchmark", ""]
    out += [f"- {line}" for line in meta_lines(report)]
    out += ["", f"### Geometric-mean speedup of {report.ours}", ""]
    out += _table(*summary_table(report))
    if any(r.latency_ms is not None for sh in report.shapes for r in sh.rows.values()):
        out += ["", f"Single-call latency (one call, GPU idle before it), geometric-mean speedup of {report.ours}:", ""]
        out += _table(*summary_table(report, latency=True))
    training = training_table(report)
    if training is not None:
        out += ["", f"### Training: geometric-mean speedup of {report.ours} per pass", ""]
        out += [
            "fwd: the forward; bwd: the backward alone (forward once, then the timed torch.autograd.grad); "
            "fwd+bwd: both. sdpa-flash is FlashAttention-2.",
            "",
        ]
        out += _table(*training)
    notes = {
        "latency": "µs per call back to back, single-call latency in parentheses",
        "latency-graph": "µs per call replayed from a CUDA graph (kernel time)",
        "standard": "TFLOP/s (causal counts only the visible query/key pairs)",
        "decode": "GB/s of Q, K, V read and O written",
    }
    pass_notes = {"bwd": "; backward FLOPs = 2.5x the forward's", "fwd+bwd": "; forward + backward FLOPs = 3.5x the forward's"}
    for grid, pass_ in sections(report):
        out += ["", f"### {grid} grid{_pass_suffix(pass_)}: {notes.get(grid, '')}{pass_notes.get(pass_, '')}", ""]
        out += _table(*shape_table(report, grid, pass_))
    out += [
        "",
        f"{MISSING}: no result (the implementation refused the shape or is not built here; pytest's skip summary says why).",
        f"{BEST_PEER}: per shape, the fastest of the other libraries that ran ({', '.join(NOT_PEERS)} and "
        f"{report.ours}'s own variants excluded), named in the shape tables; \"peer wins\": "
        f"{report.ours} is slower than it by more than the noise margin (speedup < {NOISE_MARGIN}).",
    ]
    note = host_bound_note(report)
    if note is not None:
        out.append(note)
        out += ["", *kernel_bound_lines(report)]
    return "\n".join(out) + "\n"


def print_report(report: Report, file=None) -> None:
    file = file or sys.stdout
    for line in meta_lines(report):
        print(line, file=file)
    print(file=file)
    total = len(report.shapes)
    for n, sh in enumerate(report.shapes, 1):
        ours = sh.rows.get(report.ours)
        head = f"[{n:>{len(str(total))}}/{total}] {sh.grid:8} {sh.group}:"
        if ours is None:
            body = f" {report.ours} missing;"
        else:
            rate = f"{_gbps(ours.gbps)} GB/s" if sh.grid == "decode" and ours.io_bytes else f"{_num(ours.tflops)} TFLOP/s"
            body = f" {report.ours} {_time(ours.ms)} {rate}"
            if ours.latency_ms is not None:
                body += f" (1-call {ours.latency_ms * 1e3:.1f} µs)"
            body += " |"
        others = [f"{b} {_x(speedup(sh, report.ours, b))}{host_mark(sh, report.ours, b)}"
                  for b in report.baselines() if b in sh.rows]
        if BEST_PEER in report.baselines() and best_peer(sh, report.ours) is not None:
            others.append(f"best peer {_best_peer_cell(sh, report.ours)}")
        print(head + body + (" vs " + ", ".join(others) if others else " no other implementation"), file=file)
    print(file=file)
    print(f"geometric-mean speedup of {report.ours} (time_other / time_{report.ours}):", file=file)
    for line in _text_table(*summary_table(report)):
        print(line, file=file)
    training = training_table(report)
    if training is not None:
        print(file=file)
        print(f"training: geometric-mean speedup of {report.ours} per pass (fwd, bwd alone, fwd+bwd):", file=file)
        for line in _text_table(*training):
            print(line, file=file)
    if any(r.latency_ms is not None for sh in report.shapes for r in sh.rows.values()):
        print(file=file)
        print("single-call latency, geometric-mean speedup:", file=file)
        for line in _text_table(*summary_table(report, latency=True)):
            print(line, file=file)
    note = host_bound_note(report)
    if note is not None:
        print(file=file)
        print(note, file=file)
        for line in kernel_bound_lines(report):
            print(line, file=file)


# ---------------------------------------------------------------------------------------------
# Plot
# ---------------------------------------------------------------------------------------------


def panels(report: Report) -> list:
    """[(title, xlabel, ylabel, {impl: [(x, y), ...]})], one per grid x dtype x D x causal (x GQA in
    MIXED_HEADS_GRIDS). standard: TFLOP/s vs S. latency: µs per call vs S (B=1, H=1 shapes).
    decode: GB/s vs Sk."""
    keyed: dict = {}
    heads: dict = defaultdict(set)  # GQA panels: key -> {(S, Hq, Hk)}
    for sh in report.shapes:
        if sh.grid.startswith("latency") and (sh.b != 1 or sh.hq != 1):
            continue
        if sh.grid == "decode":
            key = (GRID_ORDER.get(sh.grid, 9), sh.grid, sh.dtype, sh.d, sh.b)
            title, xl, yl = f"decode {sh.dtype} D={sh.d} B={sh.b} H={sh.hq}/{sh.hk}", "Sk", "GB/s"
        elif sh.grid.startswith("latency"):
            key = (GRID_ORDER.get(sh.grid, 9), sh.grid, sh.dtype, sh.d, sh.causal)
            title, xl, yl = (
                f"{sh.grid} {sh.dtype} D={sh.d} B=1 H=1 {sh.mask_label}",
                "S",
                "µs per call",
            )
        else:
            key = (GRID_ORDER.get(sh.grid, 9), sh.grid, PASS_ORDER.get(sh.pass_, 9), sh.dtype, sh.causal, sh.d, sh.gqa)
            title = sh.kind + _pass_suffix(sh.pass_)
            xl, yl = "S (B*S and H*D fixed)" if sh.grid == "standard" else "S", "TFLOP/s"
            if sh.gqa:
                heads[key].add((sh.sq, sh.hq, sh.hk))
        p = keyed.setdefault(key, (title, xl, yl, defaultdict(list)))
        for impl, r in sh.rows.items():
            if sh.grid == "decode":
                if r.io_bytes:
                    p[3][impl].append((sh.sk, r.gbps))
            elif sh.grid.startswith("latency"):
                p[3][impl].append((sh.sq, r.ms * 1e3))
            else:
                p[3][impl].append((sh.sq, r.tflops))
    out = []
    for key in sorted(keyed):
        title, xl, yl, lines = keyed[key]
        if key in heads:  # a GQA panel's K/V heads differ from one S to the next: its axis names them
            xl = "S (Hq/Hk: " + ", ".join(f"{_s_label(s)} {hq}/{hk}" for s, hq, hk in sorted(heads[key])) + ")"
        out.append((title, xl, yl, {i: sorted(v) for i, v in lines.items()}))
    return out


def _s_label(x: int) -> str:
    return f"{x // 1024}k" if x >= 1024 and x % 1024 == 0 else str(x)


def curve_panels(report: Report) -> list:
    """The panels of panels() that have an axis to draw: two or more values of S (or Sk). A grid
    with one shape per panel (decode-step, decode-graph, ...) is in the tables and the summary."""
    return [p for p in panels(report) if len({x for pts in p[3].values() for x, _ in pts}) >= 2]


def _ratio_ticks(lo: float, hi: float) -> list:
    return [t for t in (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0) if lo <= t <= hi]


def _draw_summary(ax, report: Report, rows: list, color_of: dict) -> None:
    """Grouped bars: one group per suite, one bar per peer, rising from 1.0 (parity) to ours'
    geometric-mean speedup over it, on a log axis so that 2x faster and 2x slower look alike."""
    peers = [b for b in report.baselines() if any(b in res for _, _, res in rows)]
    width = 0.8 / max(1, len(peers))
    values = [g for _, _, res in rows for g, _ in res.values()]
    lo, hi = min(values + [1.0]) / 1.25, max(values + [1.0]) * 1.25
    for j, peer in enumerate(peers):
        xs, ys = [], []
        for i, (_, _, res) in enumerate(rows):
            if peer in res:
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(res[peer][0])
        bars = ax.bar(xs, [y - 1.0 for y in ys], width * 0.9, bottom=1.0, color=color_of.get(peer, "0.2"),
                      label=f"vs {peer}", zorder=2)
        ax.bar_label(bars, labels=[f"{y:.2f}x" for y in ys], fontsize=7, padding=1)
    ax.axhline(1.0, color="black", linewidth=1.0, zorder=3)
    ax.set_yscale("log", base=2)
    ax.set_ylim(lo, hi)
    ticks = _ratio_ticks(lo, hi)
    ax.set_yticks(ticks)
    ax.set_yticklabels([f"{t:g}x" for t in ticks])
    ax.minorticks_off()
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"{suite}\n{n} shape{'s' if n != 1 else ''}" for suite, n, _ in rows])
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_ylabel(f"speedup of {report.ours}")
    ax.set_title(f"{report.ours} against each peer: geometric mean of time(peer) / time({report.ours}) per suite "
                 f"(above 1.0: {report.ours} faster)", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)


def draw(report: Report):
    """The report's figure: the summary panel (suite_summary) across the top, then the curves
    (curve_panels), three a row, each grid starting a row, each panel with its own legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in suite_summary(report) if r[2]]  # suites where some peer ran
    ps = curve_panels(report)
    if not rows and not ps:
        raise ReportError("nothing to plot")
    ncols = 3
    slots, row, col, last_grid = [], 0, 0, None
    for title, *_ in ps:
        grid = title.split()[0]
        if (last_grid is not None and grid != last_grid and col) or col == ncols:
            row, col = row + 1, 0
        slots.append((row, col))
        col, last_grid = col + 1, grid
    nrows = (row + 1 if ps else 0) + (1 if rows else 0)
    top = 1 if rows else 0
    fig = plt.figure(figsize=(5.2 * ncols, 3.8 * nrows + (0.6 if rows else 0)))
    gs = fig.add_gridspec(nrows, ncols, height_ratios=([1.25] if rows else []) + [1.0] * (nrows - top))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    style = {impl: (colors[n % len(colors)], "os^vD<>ph*"[n % 10]) for n, impl in enumerate(report.impls)}
    if rows:
        # The summary spans two thirds of the row; its legend takes the rest.
        _draw_summary(fig.add_subplot(gs[0, : ncols - 1]), report, rows,
                      {**{i: c for i, (c, _) in style.items()}, BEST_PEER: "0.15"})
    for (r, c), (title, xl, yl, lines) in zip(slots, ps):
        ax = fig.add_subplot(gs[top + r, c])
        for impl in report.impls:
            pts = lines.get(impl)
            if not pts:
                continue
            c_, m = style[impl]
            ours = impl == report.ours
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                marker=m,
                color=c_,
                label=impl,
                linewidth=2.4 if ours else 1.3,
                markersize=5 if ours else 4,
                zorder=3 if ours else 2,
            )
        ax.set_xscale("log", base=2)
        xs = sorted({p[0] for pts in lines.values() for p in pts})
        ax.set_xticks(xs)
        ax.set_xticklabels([_s_label(x) for x in xs])
        ax.minorticks_off()
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7, loc="best", framealpha=0.8)
    m = report.meta
    fig.suptitle(
        f"{_title(report)} on {m['gpu']} (torch {m['torch']}, CUDA {m['cuda']}, {str(m['date'])[:10]})", fontsize=12
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return fig


def plot(report: Report, path: str) -> None:
    import matplotlib.pyplot as plt

    fig = draw(report)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("json", help="pytest-benchmark JSON (--benchmark-json) from benchmarks/")
    ap.add_argument("--png", help="write the TFLOP/s-vs-S plot here (needs matplotlib)")
    ap.add_argument("--markdown", help="write markdown tables here")
    ap.add_argument("--ours", default=OURS, help=f"implementation the speedups are computed for (default {OURS})")
    ap.add_argument("--quiet", action="store_true", help="do not print the tables")
    args = ap.parse_args(argv)
    try:
        report = load(args.json, args.ours)
    except (OSError, ValueError, ReportError) as exc:
        print(f"bench_report: {args.json}: {exc}", file=sys.stderr)
        return 2
    if args.ours not in report.impls:
        print(
            f"bench_report: warning: no results for {args.ours!r} (have {report.impls}); speedups are empty",
            file=sys.stderr,
        )
    if not args.quiet:
        print_report(report)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(report))
        print(f"wrote {args.markdown}")
    if args.png:
        try:
            plot(report, args.png)
        except ImportError as exc:
            print(
                f"bench_report: cannot write {args.png}: matplotlib is missing ({exc}); pip install matplotlib",
                file=sys.stderr,
            )
            return 3
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
