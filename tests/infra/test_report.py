"""CPU tests of the benchmark report (benchmarks/bench_report.py) and of the benchmark suite's pure
parts (benchmarks/bench_common.py: grids, FLOP counting), on a hand-made pytest-benchmark JSON
(tests/infra/data/bench_small.json) whose numbers give exact speedups."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from repo_modules import load_repo_module

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "infra" / "data" / "bench_small.json"


br = load_repo_module("benchmarks/bench_report.py")
bc = load_repo_module("benchmarks/bench_common.py")


@pytest.fixture(scope="module")
def report():
    return br.load(str(FIXTURE))


def _shape(report, group):
    (sh,) = [s for s in report.shapes if s.group == group]
    return sh


NC1 = "bf16 D=64 S=1024 B=16 H=32 noncausal"
NC2 = "bf16 D=64 S=2048 B=8 H=32 noncausal"
C1 = "bf16 D=64 S=1024 B=16 H=32 causal"
LAT = "fp16 D=64 S=128 B=1 H=1 noncausal"
DEC = "bf16 D=128 Sq=1 Sk=4096 B=8 H=32/8 decode"


# ---------------------------------------------------------------------------------- the fixture


def test_fixture_has_pytest_benchmark_structure():
    data = json.loads(FIXTURE.read_text())
    assert set(data) >= {"machine_info", "commit_info", "benchmarks", "datetime", "version"}
    assert data["machine_info"]["gpu"]["name"] and data["machine_info"]["software"]["torch"]
    for b in data["benchmarks"]:
        assert set(b) >= {"group", "name", "fullname", "params", "param", "extra_info", "options", "stats"}
        assert set(b["stats"]) >= {"min", "max", "mean", "median", "iqr", "rounds", "data", "iterations"}
        assert b["options"]["timer"] == "cuda_event_timer"
        info = b["extra_info"]
        # the fixture's FLOPs and group names are the suite's own
        shape = bc.Shape(
            info["grid"],
            info["dtype"],
            info["b"],
            info["hq"],
            info["hk"],
            info["sq"],
            info["sk"],
            info["d"],
            info["causal"],
        )
        assert info["flops"] == shape.flops
        assert b["group"] == shape.group


# ---------------------------------------------------------------------------------- loading


def test_load_groups_shapes_and_orders_implementations(report):
    assert [s.group for s in report.shapes] == [LAT, NC1, NC2, C1, DEC]
    assert report.impls == ["flashattn", "sdpa-flash", "sdpa-cudnn"]
    assert report.baselines() == ["sdpa-flash", "sdpa-cudnn", br.BEST_PEER]  # two peers: the best of them too
    assert set(_shape(report, C1).rows) == {"flashattn", "sdpa-flash"}  # cudnn skipped there


def test_metadata(report):
    m = report.meta
    assert m["gpu"] == "NVIDIA H100 80GB HBM3"
    assert m["driver"] == "580.159.04"
    assert m["torch"] == "2.11.0+cu130"
    assert m["cuda"] == "13.0"
    assert m["date"].startswith("2026-11-22T21:30")
    assert m["commit"] == "0123456789ab"


def test_time_from_extra_info_and_fallback_to_stats_median(report):
    assert _shape(report, NC1).rows["flashattn"].ms == pytest.approx(0.50)
    # this one has no extra_info.median_ms: stats.median (seconds) is used
    raw = next(
        b
        for b in json.loads(FIXTURE.read_text())["benchmarks"]
        if b["group"] == NC2 and b["extra_info"]["impl"] == "sdpa-cudnn"
    )
    assert "median_ms" not in raw["extra_info"]
    assert _shape(report, NC2).rows["sdpa-cudnn"].ms == pytest.approx(1.25)


def test_tflops_and_gbps(report):
    r = _shape(report, NC1).rows["flashattn"]
    assert r.flops == 4 * 16 * 32 * 1024 * 1024 * 64
    assert r.tflops == pytest.approx(137438953472 / 0.5e-3 / 1e12)  # 274.88
    c = _shape(report, C1).rows["flashattn"]
    assert c.flops == 4 * 16 * 32 * 64 * (1024 * 1025 // 2)
    assert c.tflops == pytest.approx(68786585600 / 0.32e-3 / 1e12)
    d = _shape(report, DEC).rows["flashattn"]
    assert d.gbps == pytest.approx(2 * 128 * (2 * 8 * 32 * 1 + 2 * 8 * 8 * 4096) / 0.05e-3 / 1e9)


# ---------------------------------------------------------------------------------- speedups


def test_speedup_per_shape(report):
    def sp(g, other, **kw):
        return br.speedup(_shape(report, g), "flashattn", other, **kw)

    assert sp(NC1, "sdpa-flash") == pytest.approx(1.25)
    assert sp(NC1, "sdpa-cudnn") == pytest.approx(0.80)
    assert sp(NC2, "sdpa-flash") == pytest.approx(2.0)
    assert sp(NC2, "sdpa-cudnn") == pytest.approx(1.25)
    assert sp(C1, "sdpa-flash") == pytest.approx(1.5)
    assert sp(C1, "sdpa-cudnn") is None
    assert sp(LAT, "sdpa-cudnn") == pytest.approx(2.0)
    assert sp(LAT, "sdpa-cudnn", latency=True) == pytest.approx(0.040 / 0.030)
    assert sp(NC1, "sdpa-flash", latency=True) is None  # not measured on the standard grid


def test_best_peer_is_the_fastest_other_library_per_shape(report):
    assert br.best_peer(_shape(report, NC1), "flashattn") == "sdpa-cudnn"  # 0.80x: cuDNN faster than us
    assert br.speedup(_shape(report, NC1), "flashattn", br.BEST_PEER) == pytest.approx(0.80)
    assert br.speedup(_shape(report, NC2), "flashattn", br.BEST_PEER) == pytest.approx(1.25)
    assert br.best_peer(_shape(report, C1), "flashattn") == "sdpa-flash"  # the only peer that ran there
    assert br.speedup(_shape(report, C1), "flashattn", br.BEST_PEER) == pytest.approx(1.5)
    assert br._best_peer_cell(_shape(report, NC1), "flashattn") == "0.80x sdpa-cudnn (peer wins)"
    assert br._best_peer_cell(_shape(report, NC2), "flashattn") == "1.25x sdpa-cudnn"
    g = {label: g for label, _, g in br.summary(report)}
    assert g["standard bf16 D=64 noncausal"][br.BEST_PEER] == (pytest.approx(1.0), 2)  # sqrt(0.8 * 1.25)
    # our own variants, the math backend and the copy floor are never the bar
    assert not any(br.is_peer(i) for i in ("flashattn", "flashattn-hopper", "sdpa-math", "copy-floor"))
    assert all(br.is_peer(i) for i in ("sdpa-default", "sdpa-cudnn", "fa3", "fa3-paged64"))
    one_peer = br.load(str(FIXTURE), ours="sdpa-flash")  # flashattn is no peer, cuDNN alone: no best-peer column
    assert br.BEST_PEER not in one_peer.baselines()


def test_host_bound_rows_mark_their_ratios(capsys):
    """A row the suite found host-bound (extra_info.host_bound) marks every speedup it takes part
    in, in the printed report and the markdown, and the report says which implementation and why;
    without such a row nothing is marked."""
    data = json.loads(FIXTURE.read_text())
    for b in data["benchmarks"]:
        if b["name"] == "test_standard[bf16-D64-S1024-B16-H32-full-sdpa-cudnn]":
            b["extra_info"].update(host_ms=0.45, host_bound=True)
    rep = br.build(data)
    nc1, nc2 = _shape(rep, NC1), _shape(rep, NC2)
    assert br.host_mark(nc1, "flashattn", "sdpa-cudnn") == br.HOST_MARK
    assert br.host_mark(nc1, "flashattn", br.BEST_PEER) == br.HOST_MARK  # cuDNN is NC1's best peer
    assert br.host_mark(nc1, "flashattn", "sdpa-flash") == "" and br.host_mark(nc2, "flashattn", "sdpa-cudnn") == ""
    assert br.host_bound_counts(rep) == {"sdpa-cudnn": 1}
    br.print_report(rep)
    out = capsys.readouterr().out
    assert f"{NC1}: flashattn 500.0 µs 274.9 TFLOP/s | vs sdpa-flash 1.25x, sdpa-cudnn 0.80x{br.HOST_MARK}," in out
    assert br.HOST_MARK not in out.split(f"{NC2}:")[1].split("\n")[0]  # no host-bound row there
    assert f"{br.HOST_MARK}: host-bound (sdpa-cudnn on 1 shape)" in out
    md = br.markdown(rep)
    assert f"| 0.80x{br.HOST_MARK} | 0.80x{br.HOST_MARK} sdpa-cudnn (peer wins) |" in md
    assert f"{br.HOST_MARK}: host-bound (sdpa-cudnn on 1 shape)" in md
    # The note states the criterion the flag was taken with: the JSON's, else the one before it was recorded.
    assert "was at least 90% of its GPU time per call" in md
    for b in data["benchmarks"]:
        if b["extra_info"].get("host_bound"):
            b["extra_info"]["host_bound_fraction"] = 0.8
    assert "was at least 80% of its GPU time per call" in br.markdown(br.build(data))
    plain = br.load(str(FIXTURE))
    assert br.host_bound_counts(plain) == {} and br.HOST_MARK not in br.markdown(plain)


def test_the_kernels_ratio_leaves_the_host_bound_shapes_out(capsys):
    """Where a pair ran host-bound, the report adds each baseline's geometric mean over the shapes
    where neither side did (the kernels' ratio alone), with how many shapes it kept; a baseline
    with no such pair gets none, and a report with none gets no line."""
    data = json.loads(FIXTURE.read_text())
    for b in data["benchmarks"]:
        if b["name"] == "test_standard[bf16-D64-S1024-B16-H32-full-sdpa-cudnn]":
            b["extra_info"].update(host_ms=0.45, host_bound=True)
    rep = br.build(data)
    lines = br.kernel_bound_lines(rep)
    assert len(lines) == 1 and lines[0].startswith(f"standard without the {br.HOST_MARK} shapes: vs ")
    cudnn = [sh for sh in rep.shapes if sh.section == ("standard", "fwd") and "sdpa-cudnn" in sh.rows
             and br.host_mark(sh, "flashattn", "sdpa-cudnn") == ""]
    kept = br.geomean(br.speedup(sh, "flashattn", "sdpa-cudnn") for sh in cudnn)
    assert f"sdpa-cudnn {br._x(kept)} ({len(cudnn)} of {len(cudnn) + 1} shapes)" in lines[0]
    assert "sdpa-flash" not in lines[0]  # none of its pairs is host-bound
    br.print_report(rep)
    assert lines[0] in capsys.readouterr().out
    assert lines[0] in br.markdown(rep)
    assert br.kernel_bound_lines(br.load(str(FIXTURE))) == []


def test_geomean():
    assert br.geomean([1.25, 2.0]) == pytest.approx(math.sqrt(2.5))
    assert br.geomean([0.5, 2.0]) == pytest.approx(1.0)
    assert br.geomean([None, 4.0]) == pytest.approx(4.0)
    assert br.geomean([]) is None


def test_summary_geomeans(report):
    rows = {label: (n, g) for label, n, g in br.summary(report)}
    assert list(rows) == [
        "latency fp16 D=64 noncausal",
        "standard bf16 D=64 noncausal",
        "standard bf16 D=64 causal",
        "standard (all)",
        "decode bf16 D=128",
        "all",
    ]
    n, g = rows["standard bf16 D=64 noncausal"]
    assert n == 2
    assert g["sdpa-flash"] == (pytest.approx(math.sqrt(2.5)), 2)
    assert g["sdpa-cudnn"] == (pytest.approx(1.0), 2)
    assert rows["standard bf16 D=64 causal"][1]["sdpa-cudnn"] == (None, 0)
    n, g = rows["standard (all)"]
    assert n == 3 and g["sdpa-flash"] == (pytest.approx(3.75 ** (1 / 3)), 3)
    n, g = rows["all"]
    assert n == 5
    assert g["sdpa-flash"] == (pytest.approx(11.25**0.2), 5)  # 1.25 * 2 * 1.5 * 1.5 * 2
    assert g["sdpa-cudnn"] == (pytest.approx(2.0 ** (1 / 3)), 3)  # 0.8 * 1.25 * 2
    lat = {label: g for label, _, g in br.summary(report, latency=True)}
    assert lat["latency fp16 D=64 noncausal"]["sdpa-flash"][0] == pytest.approx(1.5)
    assert lat["decode bf16 D=128"]["sdpa-flash"][0] == pytest.approx(2.0)


def test_ours_can_be_another_implementation():
    rep = br.load(str(FIXTURE), ours="sdpa-flash")
    assert rep.impls[0] == "sdpa-flash"
    assert br.speedup(_shape(rep, NC2), "sdpa-flash", "flashattn") == pytest.approx(0.5)


# ---------------------------------------------------------------------------------- output


def test_markdown_tables(report):
    md = br.markdown(report)
    for s in ("NVIDIA H100 80GB HBM3", "580.159.04", "2.11.0+cu130", "CUDA 13.0", "2026-11-22", "0123456789ab"):
        assert s in md
    assert "| category | shapes | vs sdpa-flash | vs sdpa-cudnn |" in md
    assert "| standard bf16 D=64 noncausal | 2 | 1.58x | 1.00x |" in md
    assert "| standard bf16 D=64 causal | 1 | 1.50x | — |" in md
    assert "| all | 5 | 1.62x | 1.26x (3) |" in md
    assert f"| {NC1} | 274.9 | 219.9 | 343.6 | 1.25x | 0.80x |" in md
    assert f"| {C1} | 215.0 | 143.3 | — | 1.50x | — |" in md
    assert f"| {LAT} | 10.0 (30.0) | 15.0 (45.0) | 20.0 (40.0) | 1.50x | 2.00x |" in md
    assert f"| {DEC} | 2687 | 1343 | — | 2.00x | — |" in md
    # single-call latency summary: cudnn 40 us vs ours 30 us
    assert "| latency fp16 D=64 noncausal | 1 | 1.50x | 1.33x |" in md


def test_printed_report_has_per_group_lines(report, capsys):
    br.print_report(report)
    out = capsys.readouterr().out
    assert f"[2/5] standard {NC1}: flashattn 500.0 µs 274.9 TFLOP/s | vs sdpa-flash 1.25x, sdpa-cudnn 0.80x" in out
    assert f"[4/5] standard {C1}: flashattn 320.0 µs 215.0 TFLOP/s | vs sdpa-flash 1.50x" in out
    assert "GPU: NVIDIA H100 80GB HBM3 (sm_90), driver 580.159.04" in out
    assert "standard bf16 D=64 noncausal       2          1.58x          1.00x" in out


def test_cli_markdown(tmp_path, capsys):
    md = tmp_path / "report.md"
    assert br.main([str(FIXTURE), "--markdown", str(md)]) == 0
    text = md.read_text()
    assert text.startswith("## Attention forward benchmark")
    assert "1.58x" in text
    assert "geometric-mean speedup" in capsys.readouterr().out


def test_cli_png(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed: the PNG part of the report is untested")
    png = tmp_path / "bench.png"
    assert br.main([str(FIXTURE), "--png", str(png), "--quiet"]) == 0
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000


def test_panels(report):
    ps = {title: (xl, yl, lines) for title, xl, yl, lines in br.panels(report)}
    _, yl, lines = ps["standard bf16 D=64 noncausal"]
    assert yl == "TFLOP/s"
    assert [x for x, _ in lines["flashattn"]] == [1024, 2048]
    assert lines["sdpa-flash"][1][1] == pytest.approx(137438953472 * 2 / 2.0e-3 / 1e12)
    assert ps["latency fp16 D=64 B=1 H=1 noncausal"][2]["flashattn"] == [(128, pytest.approx(10.0))]
    assert ps["decode bf16 D=128 B=8 H=32/8"][0] == "Sk"


def test_rejects_foreign_or_empty_json(tmp_path, capsys):
    data = json.loads(FIXTURE.read_text())
    for b in data["benchmarks"]:
        b["extra_info"] = {}
    bad = tmp_path / "foreign.json"
    bad.write_text(json.dumps(data))
    assert br.main([str(bad)]) == 2
    assert "lacks extra_info" in capsys.readouterr().err
    data["benchmarks"] = []
    bad.write_text(json.dumps(data))
    assert br.main([str(bad)]) == 2
    assert "no benchmarks" in capsys.readouterr().err
    assert br.main([str(tmp_path / "missing.json")]) == 2


def test_duplicate_result_is_an_error():
    data = json.loads(FIXTURE.read_text())
    data["benchmarks"].append(data["benchmarks"][0])
    with pytest.raises(br.ReportError, match="two results"):
        br.build(data)


# ---------------------------------------------------------------------------------- FLOPs, grids


def _brute_pairs(sq, sk, mode):
    n = 0
    for i in range(sq):
        for j in range(sk):
            if (
                mode == bc.CAUSAL_NONE
                or (mode == bc.CAUSAL_TOP_LEFT and j <= i)
                or (mode == bc.CAUSAL_BOTTOM_RIGHT and j <= i + sk - sq)
            ):
                n += 1
    return n


def test_visible_pairs_matches_brute_force():
    for sq in range(10):
        for sk in range(10):
            for mode in (bc.CAUSAL_NONE, bc.CAUSAL_TOP_LEFT, bc.CAUSAL_BOTTOM_RIGHT):
                assert bc.visible_pairs(sq, sk, mode) == _brute_pairs(sq, sk, mode), (sq, sk, mode)


def test_causal_flops_when_sq_differs_from_sk():
    tl, br_ = bc.CAUSAL_TOP_LEFT, bc.CAUSAL_BOTTOM_RIGHT
    assert bc.visible_pairs(4, 8, tl) == 1 + 2 + 3 + 4
    assert bc.visible_pairs(4, 8, br_) == 5 + 6 + 7 + 8
    assert bc.visible_pairs(8, 4, tl) == 1 + 2 + 3 + 4 * 5
    assert bc.visible_pairs(8, 4, br_) == 0 + 0 + 0 + 0 + 1 + 2 + 3 + 4  # the first 4 rows see no key
    assert bc.visible_pairs(1, 131072, br_) == 131072  # decode: one query sees the whole cache
    assert bc.visible_pairs(1, 131072, tl) == 1
    s = 16384  # Sq == Sk: S(S+1)/2, the halving convention up to 1 + 1/S
    assert bc.attention_flops(1, 16, s, s, 128, tl) == 4 * 16 * 128 * s * (s + 1) // 2
    assert bc.attention_flops(2, 3, 5, 7, 64) == 4 * 2 * 3 * 5 * 7 * 64
    with pytest.raises(ValueError):
        bc.visible_pairs(2, 2, "diagonal")


def test_standard_grid():
    shapes = bc.standard_shapes()
    mha = [s for s in shapes if s.hq == s.hk]
    gqa = [s for s in shapes if s.hq != s.hk]
    assert len(mha) == 2 * 3 * 6 * 2 and len(gqa) == 2 * 4  # four GQA shapes a dtype, as the issues' grid
    assert len(shapes) == 80
    assert all(s.b * s.sq == 16384 and s.hq * s.d == 2048 and s.sq == s.sk for s in shapes)
    assert {s.d for s in shapes} == {64, 128, 256}
    assert {s.sq for s in shapes} == {512, 1024, 2048, 4096, 8192, 16384}
    assert {(s.dtype, s.causal) for s in shapes} == {("bf16", False), ("bf16", True), ("fp16", False), ("fp16", True)}
    assert len({s.group for s in shapes}) == len(shapes) and len({s.id for s in shapes}) == len(shapes)
    assert "bf16 D=128 S=4096 B=4 H=16 causal" in {s.group for s in shapes}
    assert 0 < sum(s.quick for s in shapes) < len(shapes)


def test_standard_grid_gqa_shapes():
    """D=128, Hq=16: Hk=4 (group 4) at S=4k B=4, Hk=2 (group 8) at S=16k B=1, both masks, both
    dtypes; groups and ids name the K/V heads, so each differs from its MHA twin's (same D, S, B);
    FLOPs count the query heads; quick: bf16 S=4k alone."""
    gqa = [s for s in bc.standard_shapes() if s.hq != s.hk]
    assert {(s.dtype, s.d, s.sq, s.b, s.hq, s.hk, s.causal) for s in gqa} == {
        (dt, 128, s, b, 16, hk, c) for dt in ("bf16", "fp16") for s, b, hk in ((4096, 4, 4), (16384, 1, 2))
        for c in (False, True)}
    assert {s.hq // s.hk for s in gqa} == {4, 8}
    groups = {s.group for s in gqa}
    assert "bf16 D=128 S=4096 B=4 H=16/4 causal" in groups and "fp16 D=128 S=16384 B=1 H=16/2 noncausal" in groups
    assert "bf16-D128-S4096-B4-H16kv4-causal" in {s.id for s in gqa}
    twins = {(s.dtype, s.sq, s.causal): s for s in bc.standard_shapes() if s.hq == s.hk and s.d == 128}
    for s in gqa:
        twin = twins[(s.dtype, s.sq, s.causal)]
        assert (twin.b, twin.hq) == (s.b, s.hq) and twin.group != s.group and twin.id != s.id
        assert s.flops == twin.flops  # Hq's work: fewer K/V heads do not shrink it
        assert s.io_bytes < twin.io_bytes  # but K and V are smaller
    assert {(s.dtype, s.sq, s.causal) for s in gqa if s.quick} == {("bf16", 4096, False), ("bf16", 4096, True)}


def test_latency_and_decode_grids():
    lat = bc.latency_shapes()
    assert {(s.b, s.hq, s.sq) for s in lat} >= {(1, 1, 32), (1, 1, 512), (8, 16, 512)}
    assert all(s.dtype == "fp16" and s.d == 64 for s in lat)
    dec = bc.decode_shapes()
    assert {s.b for s in dec} == {1, 8, 64} and {s.sq for s in dec} == {1}
    assert all(s.hq == 32 and s.hk == 8 and s.d == 128 and not s.causal for s in dec)
    assert min(s.sk for s in dec) == 1024 and max(s.sk for s in dec) == 131072
    all_groups = [s.group for s in lat + bc.standard_shapes() + dec]
    assert len(set(all_groups)) == len(all_groups)


def test_latency_graph_grid_is_the_latency_grid_replayed(tmp_path):
    """The latency grid's kernel-time twin (issue 28's two bars on the seed shapes): the same shapes
    as grid "latency-graph", with groups and ids of their own; the report gives it its own table
    (µs per call, no single-call column), its own summary lines and figure panels, and keeps it out
    of the forward suite."""
    lat, graph = bc.latency_shapes(), bc.latency_graph_shapes()
    assert {(1, 1, s) for s in (32, 64, 128, 256, 512, 1024, 2048)} <= {(s.b, s.hq, s.sq) for s in lat}
    assert [(s.b, s.hq, s.sq, s.causal) for s in graph] == [(s.b, s.hq, s.sq, s.causal) for s in lat]
    assert {s.grid for s in graph} == {"latency-graph"}
    every = lat + graph
    assert len({s.group for s in every}) == len(every) and len({s.id for s in every}) == len(every)

    data = json.loads(FIXTURE.read_text())
    for bench in [b for b in data["benchmarks"] if b["extra_info"]["grid"] == "latency"]:
        twin = copy.deepcopy(bench)
        info = twin["extra_info"]
        info.update(grid="latency-graph", median_ms=info["median_ms"] / 2)  # kernel time: half the call
        info.pop("latency_ms", None)
        twin["group"] = bc.Shape("latency-graph", info["dtype"], info["b"], info["hq"], info["hk"], info["sq"],
                                 info["sk"], info["d"], info["causal"]).group
        twin["name"] = twin["name"].replace("test_latency[", "test_latency_graph[")
        data["benchmarks"].append(twin)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data))
    rep = br.load(str(path))
    assert br.grids(rep) == ["latency", "latency-graph", "standard", "decode"]
    header, rows = br.shape_table(rep, "latency-graph")
    assert header[1] == "flashattn µs/call" and rows[0][0] == LAT + " graph"
    assert rows[0][1] == "5.0"  # 10 us back to back in the fixture, halved
    md = br.markdown(rep)
    assert "### latency-graph grid: µs per call replayed from a CUDA graph (kernel time)" in md
    assert "latency-graph fp16 D=64 noncausal" in md
    suites = {name: n for name, n, _ in br.suite_summary(rep)}
    assert suites["latency kernels"] == 1 and suites["latency"] == 1
    assert suites["forward"] == len([s for s in rep.shapes if s.grid == "standard"])
    assert any(title.startswith("latency-graph fp16 D=64 B=1 H=1") for title, *_ in br.panels(rep))


def test_calls_per_round():
    assert bc.calls_per_round(0.01, 1.0, 1000) == 100
    assert bc.calls_per_round(0.3, 1.0, 1000) == 4
    assert bc.calls_per_round(5.0, 1.0, 1000) == 1
    assert bc.calls_per_round(1e-6, 1.0, 1000) == 1000
    assert bc.calls_per_round(0.0, 1.0, 50) == 50


def test_selected_impls(monkeypatch):
    monkeypatch.delenv("FLASHATTN_BENCH_IMPLS", raising=False)
    assert bc.selected_impls(bc.DEFAULT_IMPLS) == list(bc.DEFAULT_IMPLS)
    monkeypatch.setenv("FLASHATTN_BENCH_IMPLS", "flashattn, sdpa-cudnn,flashattn-portable")
    assert bc.selected_impls(bc.DEFAULT_IMPLS) == ["flashattn", "sdpa-cudnn", "flashattn-portable"]
    # One list for every grid: a decode variant's name is known, and a grid runs only its own.
    monkeypatch.setenv("FLASHATTN_BENCH_IMPLS", "flashattn,sdpa-default,fa3,copy-floor")
    assert bc.selected_impls(bc.DEFAULT_IMPLS) == ["flashattn", "sdpa-default", "fa3"]
    assert bc.selected_impls(("flashattn", "flashattn-paged16", "sdpa-default", "fa3", "copy-floor")) == [
        "flashattn", "sdpa-default", "fa3", "copy-floor"]
    monkeypatch.setenv("FLASHATTN_BENCH_IMPLS", "flashattn,nope")
    with pytest.raises(ValueError, match="nope"):
        bc.selected_impls(bc.DEFAULT_IMPLS)


def test_benchmark_suite_collects_and_skips_without_gpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the benchmarks would run, not skip (run them with benchmarks/run_benchmarks.sh)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHATTN_BENCH")}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks", "-q", "-rs", "-m", "bench and quick", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert " skipped" in out and "passed" not in out and "error" not in out.lower(), out
    assert "no CUDA GPU" in out or "pytest-benchmark" in out, out


# ---------------------------------------------------------------------------------- backward passes

NC1_BWD, NC1_FB = f"{NC1} bwd", f"{NC1} fwd+bwd"
C1_BWD = f"{C1} bwd"
# (pass, ms per impl) added to the fixture for NC1, NC2 and C1; speedups of flashattn follow exactly
TRAINING_MS = {
    "bwd": {"flashattn": 1.0, "sdpa-flash": 1.5, "sdpa-default": 0.8},
    "fwd+bwd": {"flashattn": 1.6, "sdpa-flash": 2.4, "sdpa-default": 1.6},
}


def _with_backward(data: dict) -> dict:
    """The fixture plus bwd and fwd+bwd results for its standard-grid shapes, as
    benchmarks/test_attention.py::test_training writes them."""
    data = json.loads(json.dumps(data))
    extra = []
    for b in data["benchmarks"]:
        info = b["extra_info"]
        if info["grid"] != "standard" or info["impl"] != "flashattn":
            continue
        for pass_, times in TRAINING_MS.items():
            shape = bc.Shape(info["grid"], info["dtype"], info["b"], info["hq"], info["hk"], info["sq"], info["sk"],
                             info["d"], info["causal"], pass_=pass_)
            for impl, ms in times.items():
                nb = json.loads(json.dumps(b))
                nb["group"] = shape.group
                nb["name"] = f"test_training[{shape.id}-{impl}]"
                nb["extra_info"].update(impl=impl, flops=shape.flops, io_bytes=shape.io_bytes, median_ms=ms)
                nb["extra_info"]["pass"] = pass_
                nb["stats"]["median"] = ms * 1e-3
                extra.append(nb)
    data["benchmarks"] += extra
    return data


@pytest.fixture(scope="module")
def training_report():
    return br.build(_with_backward(json.loads(FIXTURE.read_text())))


def test_pass_flops():
    assert bc.pass_flops(4000, "fwd") == 4000
    assert bc.pass_flops(4000, "bwd") == 10000
    assert bc.pass_flops(4000, "fwd+bwd") == 14000
    with pytest.raises(ValueError, match="unknown pass"):
        bc.pass_flops(4000, "bwd2")
    s = bc.Shape("standard", "bf16", 4, 16, 16, 4096, 4096, 128, True, pass_="bwd")
    fwd = bc.attention_flops(4, 16, 4096, 4096, 128, bc.CAUSAL_TOP_LEFT)
    assert s.flops * 2 == 5 * fwd  # causal halves every pass alike
    assert bc.Shape("standard", "bf16", 4, 16, 16, 4096, 4096, 128, False, pass_="fwd+bwd").flops == 14 * 4 * 16 * 128 * 4096 * 4096


def test_training_grid():
    shapes = bc.training_shapes()
    standard = bc.standard_shapes()
    assert len(shapes) == 2 * len(standard)
    assert {s.pass_ for s in shapes} == {"bwd", "fwd+bwd"}
    assert {(s.dtype, s.d, s.sq, s.causal) for s in shapes} == {(s.dtype, s.d, s.sq, s.causal) for s in standard}
    assert "bf16 D=128 S=4096 B=4 H=16 causal bwd" in {s.group for s in shapes}
    assert "bf16-D128-S4096-B4-H16-causal-fwd+bwd" in {s.id for s in shapes}
    gqa = [s for s in shapes if s.hq != s.hk]
    assert len(gqa) == 2 * len([s for s in standard if s.hq != s.hk]) == 16
    assert {(s.sq, s.hk) for s in gqa} == {(4096, 4), (16384, 2)}
    assert "bf16 D=128 S=16384 B=1 H=16/2 causal bwd" in {s.group for s in gqa}
    assert "bf16-D128-S4096-B4-H16kv4-full-fwd+bwd" in {s.id for s in gqa}
    assert sum(s.quick for s in shapes) == 2 * sum(s.quick for s in standard)
    every = bc.latency_shapes() + standard + shapes + bc.decode_shapes()
    assert len({s.group for s in every}) == len(every) and len({s.id for s in every}) == len(every)
    assert "sdpa-flash" in bc.TRAINING_IMPLS and "flashattn-hopper" not in bc.TRAINING_IMPLS


def test_backward_io_bytes():
    s = bc.Shape("standard", "bf16", 2, 4, 4, 100, 100, 64, False)
    fwd = s.io_bytes
    bwd = bc.Shape("standard", "bf16", 2, 4, 4, 100, 100, 64, False, pass_="bwd").io_bytes
    assert bwd == 2 * fwd  # reads Q, K, V, O, dO, writes dQ, dK, dV: 8 tensors against the forward's 4
    assert bc.Shape("standard", "bf16", 2, 4, 4, 100, 100, 64, False, pass_="fwd+bwd").io_bytes == fwd + bwd


def test_report_separates_passes(training_report):
    rep = training_report
    groups = [s.group for s in rep.shapes]
    assert groups[:4] == [LAT, NC1, NC2, C1]  # the forward first, as before
    assert groups.index(NC1_BWD) < groups.index(NC1_FB) < groups.index(DEC)
    sh = _shape(rep, NC1_BWD)
    assert sh.pass_ == "bwd" and sh.category == "standard bf16 D=64 noncausal bwd"
    assert sh.rows["flashattn"].flops == 5 * 4 * 16 * 32 * 1024 * 1024 * 64 // 2
    assert br.speedup(sh, "flashattn", "sdpa-flash") == pytest.approx(1.5)
    assert br.speedup(_shape(rep, NC1_FB), "flashattn", "sdpa-default") == pytest.approx(1.0)
    labels = [label for label, _, _ in br.summary(rep)]
    assert "standard (all)" in labels and "standard bwd (all)" in labels and "standard fwd+bwd (all)" in labels
    assert labels.index("standard bwd (all)") < labels.index("standard fwd+bwd (all)")


def test_training_table(training_report):
    header, rows = br.training_table(training_report)
    assert header == ["category", "fwd vs sdpa-default", "fwd vs sdpa-flash", "bwd vs sdpa-default", "bwd vs sdpa-flash",
                      "fwd+bwd vs sdpa-default", "fwd+bwd vs sdpa-flash"]
    by_cat = {r[0]: r[1:] for r in rows}
    assert set(by_cat) == {"standard bf16 D=64 noncausal", "standard bf16 D=64 causal"}
    # fwd: no sdpa-default in the fixture; sdpa-flash geomean sqrt(1.25 * 2); bwd 1.5 and 0.8; fwd+bwd 1.5 and 1.0
    assert by_cat["standard bf16 D=64 noncausal"] == ["—", "1.58x", "0.80x", "1.50x", "1.00x", "1.50x"]
    assert by_cat["standard bf16 D=64 causal"] == ["—", "1.50x", "0.80x", "1.50x", "1.00x", "1.50x"]
    assert br.training_table(br.load(str(FIXTURE))) is None  # a forward-only JSON has none


def test_markdown_and_text_with_backward(training_report, capsys):
    md = br.markdown(training_report)
    assert md.startswith("## Attention forward and backward benchmark")
    assert "### Training: geometric-mean speedup of flashattn per pass" in md
    assert "| standard bf16 D=64 noncausal | — | 1.58x | 0.80x | 1.50x | 1.00x | 1.50x |" in md
    assert "### standard grid bwd: TFLOP/s (causal counts only the visible query/key pairs); backward FLOPs = 2.5x" in md
    assert "### standard grid fwd+bwd:" in md and "### standard grid: TFLOP/s" in md
    # the bwd table's TFLOP/s: 2.5x the forward's FLOPs in 1.0 ms
    assert f"| {NC1_BWD} | {br._num(5 * 137438953472 / 2 / 1e-3 / 1e12)} |" in md
    br.print_report(training_report)
    out = capsys.readouterr().out
    assert "training: geometric-mean speedup of flashattn per pass" in out
    assert f"standard {NC1_BWD}: flashattn 1.000 ms" in out


def test_panels_with_backward(training_report):
    titles = [t for t, *_ in br.panels(training_report)]
    assert "standard bf16 D=64 noncausal" in titles
    assert "standard bf16 D=64 noncausal bwd" in titles and "standard bf16 D=64 causal fwd+bwd" in titles
    assert titles.index("standard bf16 D=64 causal") < titles.index("standard bf16 D=64 noncausal bwd")


def _standard_d128_with_gqa() -> dict:
    """The fixture's JSON with its benchmarks replaced by the standard grid's bf16 D=128 shapes at S 4k
    and 16k, MHA and GQA alike, forward and both training passes: ours 1.0 ms, sdpa-default 1.2 ms on
    MHA and 1.5 ms on GQA; the bf16 D=128 S=4096 shapes as the suite writes them."""
    data = json.loads(FIXTURE.read_text())
    (proto,) = [b for b in data["benchmarks"] if b["group"] == NC1 and b["extra_info"]["impl"] == "flashattn"]
    shapes = [s for s in bc.standard_shapes() + bc.training_shapes()
              if s.dtype == "bf16" and s.d == 128 and s.sq in (4096, 16384)]
    benches = []
    for shape in shapes:
        for impl, ms in (("flashattn", 1.0), ("sdpa-default", 1.5 if shape.hq != shape.hk else 1.2)):
            b = json.loads(json.dumps(proto))
            b["group"], b["name"] = shape.group, f"test_x[{shape.id}-{impl}]"
            b["extra_info"].update(impl=impl, grid=shape.grid, dtype=shape.dtype, b=shape.b, hq=shape.hq, hk=shape.hk,
                                   sq=shape.sq, sk=shape.sk, d=shape.d, causal=shape.causal, flops=shape.flops,
                                   io_bytes=shape.io_bytes, median_ms=ms)
            b["extra_info"]["pass"] = shape.pass_
            b["stats"]["median"] = ms * 1e-3
            benches.append(b)
    return {**data, "benchmarks": benches}


def test_report_keeps_gqa_shapes_apart_from_their_mha_twins():
    """The standard grid's GQA shapes share D, S and B with MHA ones: they get shapes, categories,
    training rows and figure panels of their own, never mixed into (or colliding with) the MHA ones."""
    rep = br.build(_standard_d128_with_gqa())
    assert len(rep.shapes) == 2 * 2 * 2 * 3  # (MHA, GQA) x S x mask x pass
    assert len({sh.group for sh in rep.shapes}) == len(rep.shapes)
    fwd = [sh.group for sh in rep.shapes if sh.pass_ == "fwd"]
    assert fwd == ["bf16 D=128 S=4096 B=4 H=16 noncausal", "bf16 D=128 S=16384 B=1 H=16 noncausal",
                   "bf16 D=128 S=4096 B=4 H=16/4 noncausal", "bf16 D=128 S=16384 B=1 H=16/2 noncausal",
                   "bf16 D=128 S=4096 B=4 H=16 causal", "bf16 D=128 S=16384 B=1 H=16 causal",
                   "bf16 D=128 S=4096 B=4 H=16/4 causal", "bf16 D=128 S=16384 B=1 H=16/2 causal"]
    table = {label: (n, g) for label, n, g in br.summary(rep)}
    assert table["standard bf16 D=128 noncausal"] == (2, {"sdpa-default": (pytest.approx(1.2), 2)})
    assert table["standard bf16 D=128 noncausal GQA"] == (2, {"sdpa-default": (pytest.approx(1.5), 2)})
    assert table["standard bf16 D=128 causal GQA bwd"][1]["sdpa-default"] == (pytest.approx(1.5), 2)
    assert table["standard (all)"][0] == 8
    header, rows = br.training_table(rep)
    by_cat = {r[0]: r[1:] for r in rows}
    assert by_cat["standard bf16 D=128 causal GQA"] == ["1.50x"] * 3
    assert by_cat["standard bf16 D=128 causal"] == ["1.20x"] * 3
    panels = {title: (xl, lines) for title, xl, _, lines in br.panels(rep)}
    assert len(panels) == 2 * 2 * 3
    xl, lines = panels["standard bf16 D=128 causal GQA bwd"]
    assert xl == "S (Hq/Hk: 4k 16/4, 16k 16/2)"
    assert [x for x, _ in lines["flashattn"]] == [4096, 16384]
    for _, lines in panels.values():  # one point a value of S: no two shapes on one x
        assert all(len({x for x, _ in pts}) == len(pts) for pts in lines.values())
    md = br.markdown(rep)
    assert "| standard bf16 D=128 noncausal GQA | 2 | 1.50x |" in md
    assert "| bf16 D=128 S=16384 B=1 H=16/2 causal |" in md


def test_cli_png_with_backward(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed: the PNG part of the report is untested")
    js = tmp_path / "bench.json"
    js.write_text(json.dumps(_with_backward(json.loads(FIXTURE.read_text()))))
    png = tmp_path / "bench.png"
    assert br.main([str(js), "--png", str(png), "--quiet"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------------- the figure


def test_suite_summary_is_ours_against_each_peer_per_suite(report, training_report):
    rows = {suite: (n, res) for suite, n, res in br.suite_summary(report)}
    assert list(rows) == ["forward", "decode", "latency"]  # no backward passes in the fixture
    n, res = rows["forward"]
    assert n == 3
    assert res == {
        "sdpa-flash": (pytest.approx(3.75 ** (1 / 3)), 3),  # 1.25 * 2 * 1.5
        "sdpa-cudnn": (pytest.approx(1.0), 2),  # 0.8 * 1.25; not run on the causal shape
        br.BEST_PEER: (pytest.approx(1.5 ** (1 / 3)), 3),  # cuDNN 0.8 and 1.25, then sdpa-flash 1.5
    }
    # the suite's geomeans are the summary table's for the same shapes
    table = {label: g for label, _, g in br.summary(report)}
    assert res["sdpa-flash"] == table["standard (all)"]["sdpa-flash"]
    assert rows["decode"] == (1, {"sdpa-flash": (pytest.approx(2.0), 1), br.BEST_PEER: (pytest.approx(2.0), 1)})
    # latency: time per call back to back (10 us against 15 and 20), as in the table; best peer sdpa-flash
    assert rows["latency"][1] == {"sdpa-flash": (pytest.approx(1.5), 1), "sdpa-cudnn": (pytest.approx(2.0), 1),
                                  br.BEST_PEER: (pytest.approx(1.5), 1)}

    rows = {suite: res for suite, _, res in br.suite_summary(training_report)}
    assert list(rows) == ["forward", "backward", "fwd+bwd", "decode", "latency"]
    assert rows["backward"] == {"sdpa-default": (pytest.approx(0.8), 3), "sdpa-flash": (pytest.approx(1.5), 3),
                                br.BEST_PEER: (pytest.approx(0.8), 3)}
    assert rows["fwd+bwd"][br.BEST_PEER] == (pytest.approx(1.0), 3)


def test_suite_summary_leaves_out_our_variants_and_non_peers():
    data = json.loads(FIXTURE.read_text())
    for b in list(data["benchmarks"]):
        if b["extra_info"]["impl"] == "sdpa-cudnn":
            for impl, ms in (("flashattn-hopper", 0.1), ("sdpa-math", 0.1)):
                nb = json.loads(json.dumps(b))
                nb["extra_info"].update(impl=impl, median_ms=ms)
                data["benchmarks"].append(nb)
    rep = br.build(data)
    assert "flashattn-hopper" in rep.baselines() and "sdpa-math" in rep.baselines()  # the tables keep them
    for _, _, res in br.suite_summary(rep):
        assert set(res) <= {"sdpa-flash", "sdpa-cudnn", br.BEST_PEER}


def test_curve_panels_only_where_there_is_an_axis(report):
    # one S per panel everywhere but the non-causal standard panel (S 1k and 2k)
    assert [t for t, *_ in br.panels(report)] == [
        "latency fp16 D=64 B=1 H=1 noncausal", "standard bf16 D=64 noncausal", "standard bf16 D=64 causal",
        "decode bf16 D=128 B=8 H=32/8"]
    assert [t for t, *_ in br.curve_panels(report)] == ["standard bf16 D=64 noncausal"]


def test_figure_is_the_summary_then_curves_each_with_its_legend(training_report):
    pytest.importorskip("matplotlib", reason="matplotlib not installed: the PNG part of the report is untested")
    import matplotlib.pyplot as plt

    fig = br.draw(training_report)
    try:
        summary, *curves = fig.axes
        assert "against each peer" in summary.get_title()
        assert [t.get_text() for t in summary.get_legend().get_texts()] == [
            "vs sdpa-default", "vs sdpa-flash", "vs sdpa-cudnn", f"vs {br.BEST_PEER}"]
        # each bar rises (or falls) from parity to its geomean, which its label prints
        tops = {}
        for bars in summary.containers:
            for bar in bars:
                tops.setdefault(bars.get_label(), []).append(bar.get_y() + bar.get_height())
        expected = {f"vs {peer}": [] for peer in ("sdpa-default", "sdpa-flash", "sdpa-cudnn", br.BEST_PEER)}
        for _, _, res in br.suite_summary(training_report):
            for peer, (g, _) in res.items():
                expected[f"vs {peer}"].append(g)
        assert tops == {k: pytest.approx(v) for k, v in expected.items()}
        assert all(bar.get_y() == 1.0 for bars in summary.containers for bar in bars)
        assert any(list(line.get_ydata()) == [1.0, 1.0] for line in summary.get_lines())  # parity marked
        labels = [t.get_text() for t in summary.get_xticklabels()]
        assert [lab.split("\n")[0] for lab in labels] == ["forward", "backward", "fwd+bwd", "decode", "latency"]
        assert [ax.get_title() for ax in curves] == [t for t, *_ in br.curve_panels(training_report)]
        for ax in curves:  # a legend per panel, naming only what the panel draws
            assert [t.get_text() for t in ax.get_legend().get_texts()] == [ln.get_label() for ln in ax.get_lines()]
        assert not fig.legends
    finally:
        plt.close(fig)


def test_unknown_pass_is_an_error():
    data = json.loads(FIXTURE.read_text())
    data["benchmarks"][0]["extra_info"]["pass"] = "bwd2"
    with pytest.raises(br.ReportError, match="unknown pass"):
        br.build(data)


# ---------------------------------------------------------------------------------- decode-kv grid


@pytest.fixture(scope="module")
def bench_decode(request):
    # Its parameters carry marks that benchmarks/conftest.py registers for the benchmark suite; this
    # suite runs with --strict-markers, where an unregistered mark fails at import.
    for line in ("decode: the benchmark suite's decode grids (benchmarks/conftest.py)",
                 "quick: the benchmark suite's quick subset (benchmarks/conftest.py)"):
        if line.split(":")[0] not in {m.split(":")[0].strip() for m in request.config.getini("markers")}:
            request.config.addinivalue_line("markers", line)
    return load_repo_module("benchmarks/test_bench_decode.py", name="bench_decode_grid")


def test_decode_kv_grid_covers_the_decode_grid_contiguous_and_paged_eager_and_replayed(bench_decode):
    kv = [c for c in bench_decode.cases() if c.kind == "kv"]
    small = [c for c in bench_decode.cases() if c.kind == "kv-small"]
    assert {(c.b, c.sk) for c in small} == {(b, s) for b in (2, 4) for s in (32768, 65536, 131072)}
    assert {c.grid for c in small} == {"decode-kv-small", "decode-kv-small-graph"} and all(c.is_kv for c in small)
    assert bench_decode.IMPLS["kv-small"] == bench_decode.IMPLS["kv"]
    shapes = {(c.b, c.sk, c.hq, c.hk, c.d, c.dtype, c.graph) for c in kv}
    assert len(shapes) == len(kv) == 3 * 6 * 2 * 2
    assert {c.b for c in kv} == {1, 8, 64} and {c.sk for c in kv} == {1024, 4096, 16384, 32768, 65536, 131072}
    assert {(c.hq, c.hk) for c in kv} == {(32, 8), (8, 1)} and {(c.d, c.dtype) for c in kv} == {(128, "bf16")}
    assert {c.grid for c in kv} == {"decode-kv", "decode-kv-graph"}
    impls = bench_decode.IMPLS["kv"]
    assert impls[0] == "flashattn" and len(set(impls)) == len(impls)
    assert {"sdpa-default", "fa3", "copy-floor"} <= set(impls)
    for page in (16, 64, 256):
        assert f"flashattn-paged{page}" in impls and f"fa3-paged{page}" in impls
        assert bench_decode.page_size_of(f"flashattn-paged{page}") == bench_decode.page_size_of(f"fa3-paged{page}") == page
    assert bench_decode.page_size_of("fa3") is None and bench_decode.page_size_of("flashattn") is None
    # an eager case and its replayed twin share their inputs; no two shapes do
    keys = {}
    for c in kv:
        keys.setdefault(c.tensors_key, set()).add(c.graph)
    assert len(keys) == len(kv) // 2 and all(v == {False, True} for v in keys.values())
    every = bench_decode.cases()
    assert len({c.group for c in every}) == len({c.id for c in every}) == len(every)


def test_decode_kv_paths_on_cpu_tensors(bench_decode, monkeypatch):
    """What of a decode-kv case runs without a GPU, on CPU inputs put in its input cache: the paged
    view and table (every page once), the paged reference (the first and last sequence gathered
    through the table, as the kernels read them), SDPA's callable, and FA3 absent -> a skip reason."""
    torch = pytest.importorskip("torch")
    case = bench_decode.DecodeCase("kv", 3, 64, hq=4, hk=2, d=8)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(3, 1, 4, 8, generator=gen)
    kc, vc = torch.randn(3, 64, 2, 8, generator=gen), torch.randn(3, 64, 2, 8, generator=gen)
    cache = bench_decode._CACHE
    cache.clear()
    cache.update(case=case.tensors_key, tensors=(q, kc, vc, None, None, torch.full((3,), 64, dtype=torch.int32)))
    try:
        for page in (16, 32):
            k_pool, v_pool, table = bench_decode._paged(kc, vc, page)
            assert k_pool.data_ptr() == kc.data_ptr() and k_pool.shape == (3 * 64 // page, page, 2, 8)
            assert table.dtype == torch.int32 and sorted(table.flatten().tolist()) == list(range(3 * 64 // page))
            rows, ref = bench_decode._paged_reference(case, page)
            assert rows == [0, 2]
            for r, want in zip(rows, ref):
                keys = torch.cat([k_pool[p] for p in table[r].tolist()])  # key j: row j % P of page table[r, j // P]
                vals = torch.cat([v_pool[p] for p in table[r].tolist()])
                got = torch.nn.functional.scaled_dot_product_attention(
                    q[r : r + 1].transpose(1, 2), keys[None].transpose(1, 2), vals[None].transpose(1, 2), enable_gqa=True)
                torch.testing.assert_close(want, got.transpose(1, 2)[0])
        out = bench_decode.make_callable(case, "sdpa-default")()
        assert bc.rel_err(out, bench_decode._reference(case)) == 0 and out.shape == (3, 1, 4, 8)
        monkeypatch.setattr(bc, "FA3_MODULE", "flashattn_tests_no_such_fa3_module")
        monkeypatch.setattr(bc, "_FA3", {})
        for impl in ("fa3", "fa3-paged64"):
            with pytest.raises(Exception, match="FlashAttention-3 absent") as info:
                bench_decode.make_callable(case, impl)
            assert type(info.value).__name__ == "Unavailable"
    finally:
        cache.clear()


def test_fa3_absent_is_a_reason_to_skip_not_a_failure(monkeypatch):
    monkeypatch.setattr(bc, "FA3_MODULE", "flashattn_tests_no_such_fa3_module")
    monkeypatch.setattr(bc, "_FA3", {})
    with pytest.raises(bc.Unavailable, match=r"FlashAttention-3 absent \(ModuleNotFoundError: .*tokenspeed-fa3"):
        bc.fa3_kvcache()
    assert bc.fa3_status().startswith("absent (ModuleNotFoundError")


def test_fa3_is_used_where_it_imports(monkeypatch):
    import types

    def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, page_table=None):
        return q

    def old_signature(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None):
        return q

    for fn, usable in ((flash_attn_with_kvcache, True), (old_signature, False)):
        mod = types.ModuleType("flashattn_tests_fake_fa3")
        mod.flash_attn_with_kvcache = fn
        monkeypatch.setitem(sys.modules, mod.__name__, mod)
        monkeypatch.setattr(bc, "FA3_MODULE", mod.__name__)
        monkeypatch.setattr(bc, "_FA3", {})
        if usable:
            assert bc.fa3_kvcache() is fn and not bc.fa3_status().startswith("absent")
        else:
            with pytest.raises(bc.Unavailable, match="takes no page_table"):
                bc.fa3_kvcache()


def test_fa3_forward_comparator_runs_on_the_same_memory(monkeypatch):
    """The forward grids' fa3 runs FlashAttention-3's flash_attn_func on [B, S, H, D] views of the
    suite's [B, H, S, D] tensors and hands back SDPA's layout (a fake module, CPU tensors)."""
    import types

    import torch

    seen = {}

    def flash_attn_func(q, k, v, softmax_scale=None, causal=False):
        seen.update(shapes=(q.shape, k.shape), causal=causal, shares=q.data_ptr())
        o = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                            is_causal=causal, enable_gqa=True)
        return o.transpose(1, 2), None  # FlashAttention-3 releases that return (out, lse)

    mod = types.ModuleType("flashattn_tests_fake_fa3_fwd")
    mod.flash_attn_func = flash_attn_func
    mod.flash_attn_with_kvcache = lambda q, k_cache, v_cache, cache_seqlens=None, page_table=None: q
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setattr(bc, "FA3_MODULE", mod.__name__)
    monkeypatch.setattr(bc, "_FA3", {})
    assert "fa3" in bc.DEFAULT_IMPLS
    shape = bc.Shape("standard", "bf16", 2, 4, 2, 64, 64, 32, True)
    q, k, v = (torch.randn(2, h, 64, 32, dtype=torch.float64) for h in (4, 2, 2))
    fn, ctx = bc.make_callable("fa3", shape, q, k, v)
    with ctx():
        out = fn()
    assert seen == {"shapes": ((2, 64, 4, 32), (2, 64, 2, 32)), "causal": True, "shares": q.data_ptr()}
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    assert out.shape == ref.shape and bc.rel_err(out, ref) < 1e-12
    del mod.flash_attn_func
    monkeypatch.setattr(bc, "_FA3", {})
    with pytest.raises(bc.Unavailable, match="no flash_attn_func"):
        bc.make_callable("fa3", shape, q, k, v)


def test_a_refused_backward_forward_skips_with_torchs_reasons(monkeypatch):
    """The "bwd" pass runs the forward at preparation: a backend that refuses the shape (SDPA's "No
    available kernel", e.g. a forced backend that takes no GQA) skips with the warnings torch gave
    its reasons in, as the forward's first call does (bench_common.refusal_reason)."""
    import contextlib
    import warnings

    torch = pytest.importorskip("torch")

    def forward():
        warnings.warn("Memory efficient kernel not used because:")
        warnings.warn("For dense inputs, both fused kernels require query, key and value to have the same num_heads.")
        raise RuntimeError("No available kernel. Aborting execution.")

    monkeypatch.setattr(bc, "make_callable", lambda *a: (forward, contextlib.nullcontext))
    shape = bc.Shape("standard", "bf16", 4, 16, 4, 4096, 4096, 128, False, pass_="bwd")
    q, k, v = (torch.zeros(1) for _ in range(3))
    with pytest.raises(bc.Unavailable) as info:
        bc.make_training_callable("sdpa-efficient", shape, q, k, v, None)
    assert str(info.value) == (
        "sdpa-efficient cannot run this shape's forward: No available kernel. Aborting execution. | Memory efficient "
        "kernel not used because: | For dense inputs, both fused kernels require query, key and value to have the "
        "same num_heads.")


def test_report_of_the_decode_kv_grid():
    """flashattn against SDPA, FA3, its paged runs and the copy floor on one replayed shape: the
    report's ratios and column order."""
    data = json.loads(FIXTURE.read_text())
    (proto,) = [b for b in data["benchmarks"] if b["extra_info"]["grid"] == "decode" and b["extra_info"]["impl"] == "flashattn"]
    group = "bf16 D=128 Sq=1 Sk=32768 B=1 H=8/1 decode-kv-graph"
    ms = {"flashattn": 0.02, "flashattn-paged64": 0.0206, "sdpa-default": 0.05, "fa3": 0.025, "fa3-paged64": 0.03,
          "copy-floor": 0.019}
    benches = []
    for impl, t in ms.items():
        b = json.loads(json.dumps(proto))
        b["group"], b["name"] = group, f"test_decode_variant[bf16-D128-Sk32768-B1-H8kv1-decode-kv-graph-{impl}]"
        b["extra_info"].update(impl=impl, grid="decode-kv-graph", hq=8, hk=1, b=1, sk=32768, median_ms=t)
        benches.append(b)
    rep = br.build({**data, "benchmarks": benches})
    assert rep.impls == ["flashattn", "sdpa-default", "flashattn-paged64", "fa3", "fa3-paged64", "copy-floor"]
    (sh,) = rep.shapes
    assert sh.category == "decode-kv-graph bf16 D=128 noncausal"
    assert br.speedup(sh, "flashattn", "sdpa-default") == pytest.approx(2.5)
    assert br.speedup(sh, "flashattn", "fa3") == pytest.approx(1.25)
    assert br.speedup(sh, "flashattn", "flashattn-paged64") == pytest.approx(1.03)  # time(paged) / time(contiguous)
    assert br.speedup(sh, "flashattn", "copy-floor") == pytest.approx(0.95)  # floor / time
    assert br.speedup(sh, "flashattn-paged64", "fa3-paged64") == pytest.approx(0.03 / 0.0206)


# ---- FlexAttention, an opt-in peer (bench_common.flex_call) -----------------------------------


def test_flex_is_an_opt_in_peer_of_the_forward_and_training_grids(monkeypatch):
    monkeypatch.delenv("FLASHATTN_BENCH_IMPLS", raising=False)
    assert "flex" not in bc.selected_impls(bc.DEFAULT_IMPLS)  # each shape compiles: never by default
    monkeypatch.setenv("FLASHATTN_BENCH_IMPLS", "flashattn,flex")
    assert bc.selected_impls(bc.DEFAULT_IMPLS) == ["flashattn", "flex"]
    assert bc.selected_impls(bc.TRAINING_IMPLS) == ["flashattn", "flex"]
    assert br.is_peer("flex")
    decode = bc.decode_shapes()[0]
    with pytest.raises(bc.Unavailable, match="decode grid"):
        bc.make_callable("flex", decode, None, None, None)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flex_glue_computes_sdpa_semantics(causal):
    """The mask and GQA flex is called with give SDPA's result (is_causal top-left, Sq != Sk),
    through eager flex_attention on the CPU (the glue, not the compiled kernels)."""
    import torch
    import torch.nn.functional as F

    shape = bc.Shape("standard", "bf16", 2, 4, 2, 5, 9, 16, causal)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, h, s, 16, generator=gen) for h, s in ((4, 5), (2, 9), (2, 9)))
    flex, block_mask = bc.flex_call(shape, "cpu", compiled=False)
    assert (block_mask is None) == (not causal)
    got = flex(q, k, v, block_mask=block_mask, enable_gqa=True)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
