"""lab/ab_summary.py on hand-written lab/ab/run_ab.sh logs: the rounds of each side are read per
cell from either timing table, B / A is taken of the round means, and a cell one side lacks is left
out of the geomean."""

from __future__ import annotations

import math

import pytest

from repo_modules import load_repo_module

ab = load_repo_module("lab/ab_summary.py")

_FWD_LOG = """
==> OUT/ab/ab_build_a.log <==
build_ext took 107 s
=== round 1 side A
bf16, B*S = 16k, H = 2048 / D unless a cell says B:H, TFLOP/s (median of 8 interleaved rounds)
   D      S causal     flashattn  sdpa-default           fa3  x cudnn   x fa3   B   H
  64    512      1         215.4         253.1         159.3    0.800   1.353
 128   4096      0         628.6         597.7         621.7    1.000   1.011   6  11
 256   1024      1         484.3           nan           nan      nan     nan
geomean x sdpa-default: 1.011 (9 cells)
=== round 1 side B
  64    512      1         222.2         253.1         159.3    0.900   1.353
 128   4096      0         654.0         620.1         646.9    1.100   1.011   6  11
  host-bound: flashattn (host 17.2 us a call, GPU 15.1 us)
  host-bound: fa3 (host 130.0 us a call, GPU 129.5 us)
=== round 2 side A
  64    512      1         219.4         253.1         159.3    0.800   1.353
 128   4096      0         630.0         597.7         621.7    1.000   1.011   6  11
=== round 2 side B
  64    512      1         221.9         253.1         159.3    1.000   1.353
 128   4096      0         650.0         620.1         646.9    1.100   1.011   6  11
"""

_FP8_LOG = """
=== round 1 side A
   D      S causal  fp8 ours   fp8 FA3 bf16 ours ours/FA3  (TFLOP/s)
 256   4096   True       919       982       609     0.94
=== round 1 side B
 256   4096   True       959       978       615     0.98
"""


def test_fwd_time_cells_by_round() -> None:
    cells = ab.parse(_FWD_LOG)
    assert cells["D=64 S=512 causal=1"] == {"A": [0.8, 0.8], "B": [0.9, 1.0]}
    assert cells["D=128 S=4096 causal=0 B=6 H=11"]["B"] == [1.1, 1.1]
    rows, geo = ab.summarize(cells)
    # D=256 has nan on side A and no side B: left out.
    assert [r[0] for r in rows] == ["D=64 S=512 causal=1", "D=128 S=4096 causal=0 B=6 H=11"]
    assert rows[0][3] == pytest.approx(0.95 / 0.8)
    assert geo == pytest.approx(math.sqrt((0.95 / 0.8) * 1.1))


def test_figure_tflops_and_fp8_table() -> None:
    cells = ab.parse(_FWD_LOG + _FP8_LOG, figure="tflops")
    assert cells["D=64 S=512 causal=1"]["A"] == [215.4, 219.4]
    assert cells["FP8 D=256 S=4096 causal=1"] == {"A": [919.0], "B": [959.0]}
    ratio = ab.parse(_FP8_LOG)["FP8 D=256 S=4096 causal=1"]
    assert ratio == {"A": [0.94], "B": [0.98]}


def test_main_fails_without_cells(tmp_path, capsys) -> None:
    log = tmp_path / "empty.log"
    log.write_text("=== round 1 side A\nnothing timed\n")
    assert ab.main([str(log)]) == 1
    log.write_text(_FP8_LOG)
    assert ab.main([str(log)]) == 0
    assert "geomean B/A over 1 cells: 1.0426" in capsys.readouterr().out


def test_host_bound_cells_are_marked(tmp_path, capsys) -> None:
    """The host-bound line names the cell above it; another implementation's does not count, and the
    timing rows are read as before."""
    assert ab.host_bound_cells(_FWD_LOG) == {"D=128 S=4096 causal=0 B=6 H=11"}
    assert ab.parse(_FWD_LOG)["D=128 S=4096 causal=0 B=6 H=11"]["B"] == [1.1, 1.1]
    log = tmp_path / "fwd.log"
    log.write_text(_FWD_LOG)
    assert ab.main([str(log)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("D=64 S=512 causal=1") and "host-bound" not in out[0]
    assert out[1].startswith("D=128 S=4096 causal=0 B=6 H=11") and out[1].endswith("(host-bound)")
