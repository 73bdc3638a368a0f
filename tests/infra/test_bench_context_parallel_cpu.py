"""The context-parallelism benchmark (benchmarks/bench_context_parallel.py) on the CPU: its
arguments, the plan that keeps it inside its budget and the GPUs' memory, the scaling efficiency,
the report and acceptance lines from hand-made records, the JSON that benchmarks/bench_report.py
reads, and the whole machinery end to end with gloo and the CPU stand-in kernels (1 and 2
processes, float64, host timers: numbers of no interest, the path they take is the GPU run's)."""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from repo_modules import load_repo_module

ROOT = Path(__file__).resolve().parents[2]
cpb = load_repo_module("benchmarks/bench_context_parallel.py")
br = load_repo_module("benchmarks/bench_report.py")
K, M, GiB = 1024, 1 << 20, 1 << 30


# ---- arguments ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "value"),
                         [("32k", 32 * K), ("1M", M), ("4096", 4096), ("256K", 256 * K), ("2m", 2 * M)])
def test_seqlen_parsing(text: str, value: int) -> None:
    assert cpb.parse_seqlen(text) == value
    assert cpb.parse_seqlen(cpb.seqlen_label(value)) == value


@pytest.mark.parametrize("text", ["", "k", "0", "-4k", "1.5M", "32kb"])
def test_bad_seqlens_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        cpb.parse_seqlen(text)


def test_default_arguments_are_issue_30s() -> None:
    ns = cpb.parser().parse_args([])
    cpb.check_args(ns, visible=4)
    assert ns.gpus == [1, 2, 4]
    assert ns.seqlens == [32 * K, 64 * K, 128 * K, 256 * K, 512 * K, M]
    assert ns.impls == ["flashattn", "sdpa-flash", "sdpa-cudnn"]
    assert (ns.batch, ns.heads, ns.kv_heads, ns.dim, ns.dtype, ns.rotate) == (1, 32, 8, 128, "bf16", "allgather")


@pytest.mark.parametrize(("visible", "gpus"),
                         [(1, [1]), (2, [1, 2]), (3, [1, 2, 3]), (4, [1, 2, 4]), (8, [1, 2, 4, 8])])
def test_default_gpus(visible: int, gpus: list[int]) -> None:
    assert cpb.default_gpus(visible) == gpus


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpus", "1,4"], "--gpus [1, 4]: 2 GPUs visible"),
        (["--impls", "flashattn,fa3"], "--impls: unknown ['fa3']"),
        (["--heads", "32", "--kv-heads", "5"], "--heads 32 must be a multiple of --kv-heads 5"),
    ],
)
def test_requests_that_cannot_run_say_why(args: list[str], message: str) -> None:
    ns = cpb.parser().parse_args(args)
    with pytest.raises(SystemExit, match=message.replace("[", r"\[").replace("]", r"\]")):
        cpb.check_args(ns, visible=2)


def test_no_gpu_is_a_clear_refusal() -> None:
    # No GPU visible to the child on any machine (on a GPU machine the benchmark would start).
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_context_parallel.py")], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "no CUDA GPU visible" in r.stderr


# ---- the plan -----------------------------------------------------------------------------------


def test_a_first_length_runs_with_the_first_iterations() -> None:
    d = cpb.decide("flashattn", 32 * K, [64 * K], {}, remaining_s=100, memory_bytes=80 * GiB)
    assert d.run and d.iters == cpb.FIRST_ITERS


def test_the_step_time_is_predicted_from_the_previous_length() -> None:
    history = {"flashattn": cpb.Measured(128 * K, 0.5, 10 * GiB)}
    assert cpb.predicted_step_s(history["flashattn"], 256 * K) == pytest.approx(2.0)  # (S / S_prev)^2
    d = cpb.decide("flashattn", 256 * K, [], history, remaining_s=100, memory_bytes=80 * GiB)
    assert d.run and d.iters == 1  # 2 s steps: one timed step (plus the warm-up)
    d = cpb.decide("flashattn", 256 * K, [], history, remaining_s=4.0, memory_bytes=80 * GiB)
    assert not d.run and d.reason == "time budget: predicted 5 s, 4 s left"  # setup 1 s + 2 steps of 2 s


def test_iterations_aim_at_the_timed_target() -> None:
    assert cpb.iters_for(0.001) == cpb.MAX_ITERS
    assert cpb.iters_for(0.3) == 5
    assert cpb.iters_for(20.0) == 1
    assert cpb.iters_for(None) == cpb.FIRST_ITERS


def test_memory_is_predicted_linear_in_the_length() -> None:
    history = {"flashattn": cpb.Measured(512 * K, 1.0, 40 * GiB)}
    d = cpb.decide("flashattn", M, [], history, remaining_s=1e6, memory_bytes=80 * GiB)
    assert not d.run and d.reason.startswith("predicted peak memory 80.0 GiB > 90% of 80.0 GiB (from 512k)")
    history = {"flashattn": cpb.Measured(512 * K, 1.0, 35 * GiB)}
    assert cpb.decide("flashattn", M, [], history, remaining_s=1e6, memory_bytes=80 * GiB).run
    no_peak = {"flashattn": cpb.Measured(512 * K, 1.0, None)}
    assert cpb.decide("flashattn", M, [], no_peak, 1e6, None).run  # the CPU: no memory figure, no limit


def test_torchs_kernels_leave_time_for_flashattns_longer_lengths() -> None:
    history = {"flashattn": cpb.Measured(256 * K, 1.0, 10 * GiB), "sdpa-flash": cpb.Measured(256 * K, 1.3, 10 * GiB)}
    # sdpa-flash at 512k: 5.2 s steps, 1 + 2 * 5.2 = 11.4 s; flashattn at 1M, the length after it:
    # 16 s steps, 1 + 2 * 16 = 33 s kept
    d = cpb.decide("sdpa-flash", 512 * K, [M], history, remaining_s=40, memory_bytes=80 * GiB)
    assert not d.run
    assert d.reason == "time budget: predicted 11 s and 33 s kept for flashattn at longer sequences, 40 s left"
    assert cpb.decide("sdpa-flash", 512 * K, [M], history, remaining_s=45, memory_bytes=80 * GiB).run
    assert cpb.decide("flashattn", 512 * K, [M], history, remaining_s=40, memory_bytes=80 * GiB).run


def test_no_time_is_kept_where_flashattn_will_not_fit_in_memory() -> None:
    history = {"flashattn": cpb.Measured(512 * K, 4.0, 40 * GiB), "sdpa-flash": cpb.Measured(256 * K, 1.3, 10 * GiB)}
    assert cpb.decide("sdpa-flash", 512 * K, [M], history, remaining_s=30, memory_bytes=80 * GiB).run


def test_the_budget_is_shared_by_the_numbers_of_gpus() -> None:
    assert cpb.shares([1, 2, 4], 300) == pytest.approx([60, 80, 160])
    assert cpb.shares([1, 2], 350) == pytest.approx([150, 200])
    assert sum(cpb.shares([2, 4, 8], 123)) == pytest.approx(123)


# ---- efficiency, report, JSON -------------------------------------------------------------------------


def test_scaling_efficiency() -> None:
    assert cpb.efficiency(100.0, 50.0, 2) == pytest.approx(1.0)
    assert cpb.efficiency(100.0, 27.0, 4) == pytest.approx(100 / 108)
    assert cpb.efficiency(None, 27.0, 4) is None and cpb.efficiency(100.0, None, 4) is None
    assert cpb.efficiency(0.0, 27.0, 4) is None


def _ok(world, impl, s, fwd, bwd, peak=None):
    return {"kind": "config", "world": world, "impl": impl, "s": s, "status": "ok", "iters": 2, "fwd_ms": fwd,
            "bwd_ms": bwd, "step_ms": fwd + bwd, "fwd_samples": [fwd, fwd], "bwd_samples": [bwd, bwd],
            "step_samples": [fwd + bwd] * 2, "peak_bytes": peak}


SETTINGS = {"gpus": [1, 2, 4], "seqlens": [256 * K, M], "impls": ["flashattn", "sdpa-flash", "sdpa-cudnn"], "batch": 1,
            "heads": 32, "kv_heads": 8, "dim": 128, "dtype": "bf16", "rotate": "allgather", "budget_s": 300,
            "cpu_standin": False}
ENV = {"kind": "environment", "world": 4, "gpu": "NVIDIA H100 80GB HBM3", "capability": "9.0", "memory_gib": 79.1,
       "visible_gpus": 4, "torch": "2.11.0+cu130", "cuda": "13.0", "cudnn": 91900, "nccl": "2.27.7", "driver": "580.1",
       "flashattn": "0.1.0", "flashattn_backend": "auto", "flashattn_build": {"cuda_archs": "9.0a"}, "python": "3.12.3"}
RECORDS = [
    ENV,
    _ok(1, "flashattn", 256 * K, 1000.0, 3000.0),
    _ok(1, "sdpa-flash", 256 * K, 1300.0, 3900.0),
    _ok(2, "flashattn", 256 * K, 520.0, 1580.0),  # efficiency 4000 / (2 * 2100) = 95%
    _ok(2, "sdpa-flash", 256 * K, 700.0, 1820.0),  # 2520 / 2100 = 1.20x
    _ok(2, "sdpa-cudnn", 256 * K, 500.0, 1500.0),  # 2000 / 2100 = 0.95x
    _ok(4, "flashattn", 256 * K, 280.0, 840.0),  # 4000 / (4 * 1120) = 89%
    _ok(4, "flashattn", M, 4000.0, 12000.0, peak=int(30.5 * GiB)),
    {"kind": "config", "world": 4, "impl": "sdpa-flash", "s": M, "status": "skipped",
     "reason": "time budget: predicted 40 s and 0 s kept for flashattn at longer sequences, 20 s left"},
    {"kind": "config", "world": 1, "impl": "sdpa-cudnn", "s": 256 * K, "status": "unsupported",
     "reason": "RuntimeError: No available kernel. Aborting execution."},
]
RUNS = [cpb.WorldRun(1, "ok", 50.0), cpb.WorldRun(2, "ok", 70.0), cpb.WorldRun(4, "ok", 150.0)]


def test_report_tables_efficiency_and_speedups() -> None:
    text = cpb.markdown(SETTINGS, RECORDS, RUNS)
    assert "4 x NVIDIA H100 80GB HBM3 (79.1 GiB), driver 580.1, torch 2.11.0+cu130" in text
    assert "B=1, H=32 (GQA 32:8), D=128, bf16, causal" in text
    step = text.split("### fwd+bwd")[1].split("###")[0]
    assert "| 256k | 1 | 4.00 s | 5.20 s | — | 1.30x | — | (baseline) | (baseline) | (baseline) |" in step
    assert "| 256k | 2 | 2.10 s | 2.52 s | 2.00 s | 1.20x | 0.95x | 95% | 103% | — |" in step
    assert "| 256k | 4 | 1.12 s | — | — | — | — | 89% | — | — |" in step
    assert "| 1M | 4 | 16.00 s | — | — | — | — | — | — | — |" in step
    fwd = text.split("### fwd\n")[1].split("###")[0]
    assert "| 256k | 2 | 520.0 | 700.0 | 500.0 | 1.35x | 0.96x | 96% | 93% | — |" in fwd
    assert "- 4 GPU(s), S=1M, sdpa-flash: skipped: time budget" in text
    assert "- 1 GPU(s), S=256k, sdpa-cudnn: unsupported: RuntimeError: No available kernel" in text


def test_acceptance_lines_say_met_not_met_or_not_measured() -> None:
    lines = cpb.acceptance(cpb.index(RECORDS), SETTINGS, {1: "ok", 2: "ok", 4: "ok"})
    assert lines[0] == "- scaling efficiency >= 90% at S >= 256k on 2 GPUs (flashattn, fwd+bwd): 95% at 256k: met"
    assert lines[1] == "- scaling efficiency >= 90% at S >= 256k on 4 GPUs (flashattn, fwd+bwd): 89% at 256k: NOT met"
    assert lines[2] == "- S = 1M causal forward+backward on 4 GPUs: ran, 16.00 s per step (peak 30.5 GiB per GPU): met"
    assert lines[3].startswith("- flashattn >= 1.2x FA2 (sdpa-flash) under the ring (fwd+bwd, 1 multi-GPU "
                               "configurations): lowest 1.20x") and lines[3].endswith(": met")
    assert lines[4].endswith("lowest 0.95x: NOT met")
    two_only = dict(SETTINGS, gpus=[1, 2])
    lines = cpb.acceptance(cpb.index(RECORDS[:6]), two_only, {1: "ok", 2: "ok"})
    assert lines[1].endswith("on 4 GPUs: not measured (4 GPUs not in this run)")
    assert lines[2] == "- S = 1M causal forward+backward on 4 GPUs: not measured (4 GPUs not in this run)"


def test_nothing_measured_says_so() -> None:
    text = cpb.markdown(SETTINGS, [], [cpb.WorldRun(2, "rank 1 exited with 1", 3.0)])
    assert "not yet measured: no set of processes reported its machine" in text
    assert text.count("not yet measured: no configuration ran for this pass") == 3
    assert "2 GPU(s) rank 1 exited with 1 in 3 s" in text
    assert "on 2 GPUs: not measured (no S >= 256k timed on both 1 and 2 GPUs)" in text


def test_bench_report_reads_the_json(tmp_path: Path) -> None:
    path = tmp_path / "cp_bench.json"
    path.write_text(json.dumps(cpb.bench_json(SETTINGS, RECORDS)))
    report = br.load(str(path))
    assert report.impls[0] == "flashattn" and set(report.impls) == {"flashattn", "sdpa-flash", "sdpa-cudnn"}
    (sh,) = [sh for sh in report.shapes if sh.grid == "cp2" and sh.pass_ == "fwd+bwd"]
    assert br.speedup(sh, "flashattn", "sdpa-flash") == pytest.approx(2520 / 2100)
    assert br.speedup(sh, "flashattn", "sdpa-cudnn") == pytest.approx(2000 / 2100)
    per_gpu = 4 * 32 * 128 * (256 * K) * (256 * K + 1) // 2 * 7 // 2 / 2  # causal fwd+bwd FLOPs on each of 2 GPUs
    assert sh.rows["flashattn"].tflops == pytest.approx(per_gpu / 2.1 / 1e12)
    assert {sh.grid for sh in report.shapes} == {"cp1", "cp2", "cp4"}
    lines = br.meta_lines(report)
    assert any(line.startswith("timing: CUDA events around the forward and the backward") for line in lines)
    assert report.meta["gpu"] == "NVIDIA H100 80GB HBM3" and report.meta["cudnn"] == 91900
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_report.py"), str(path), "--markdown",
                        str(tmp_path / "r.md")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "cp2 bf16 D=128 causal fwd+bwd" in (tmp_path / "r.md").read_text()


def test_a_record_cut_short_is_left_out(tmp_path: Path) -> None:
    path = tmp_path / "world2.jsonl"
    path.write_text(json.dumps(RECORDS[1]) + "\n" + '{"kind": "config", "wor')
    assert cpb.read_records(path) == [RECORDS[1]]
    assert cpb.read_records(tmp_path / "absent.jsonl") == []


# ---- the machinery, end to end on the CPU -------------------------------------------------------------


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_context_parallel.py"), "--cpu-standin",
                        "--heads", "2", "--kv-heads", "1", "--dim", "32", "--out", str(out), *args],
                       capture_output=True, text=True, timeout=300)
    results = json.loads((out / "cp_results.json").read_text()) if (out / "cp_results.json").exists() else {}
    return r, results


def test_end_to_end_on_cpu(tmp_path: Path) -> None:
    r, results = _run(tmp_path, "--gpus", "1,2", "--seqlens", "32,64", "--budget-s", "120")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    configs = [x for x in results["records"] if x["kind"] == "config"]
    assert {(x["world"], x["s"], x["status"]) for x in configs} == {(w, s, "ok") for w in (1, 2) for s in (32, 64)}
    for x in configs:
        assert x["step_ms"] > 0 and len(x["step_samples"]) == x["iters"]
        assert x["step_ms"] == pytest.approx(statistics.median(x["step_samples"]))
        if x["s"] == 32:  # nothing to predict from: the first iterations
            assert x["iters"] == cpb.FIRST_ITERS
    assert [w["status"] for w in results["worlds"]] == ["ok", "ok"]
    report = (tmp_path / "out" / "cp_report.md").read_text()
    assert "| 64 | 2 |" in report and "the benchmark's machinery checked without a GPU" in report
    assert br.load(str(tmp_path / "out" / "cp_bench.json")).shapes


def test_end_to_end_out_of_time_skips_with_the_reason(tmp_path: Path) -> None:
    r, results = _run(tmp_path, "--gpus", "2", "--seqlens", "32", "--budget-s", "0.5")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (config,) = [x for x in results["records"] if x["kind"] == "config"]
    assert config["status"] == "skipped" and config["reason"].startswith("time budget: predicted 1 s")
    assert "- 2 GPU(s), S=32, flashattn: skipped: time budget" in (tmp_path / "out" / "cp_report.md").read_text()


def test_a_failing_rank_ends_its_set_and_keeps_what_it_measured(tmp_path: Path, monkeypatch) -> None:
    def command(ns, rank, world, store, out_path, deadline):
        if rank == 1:
            return [sys.executable, "-c", "import sys; print('rank 1 broke'); sys.exit(5)"]
        line = json.dumps(_ok(world, "flashattn", 64, 1.0, 2.0))
        script = f"open({str(out_path)!r}, 'a').write({line!r} + '\\n'); import time; time.sleep(120)"
        return [sys.executable, "-c", script]

    monkeypatch.setattr(cpb, "worker_command", command)
    ns = cpb.parser().parse_args(["--cpu-standin", "--gpus", "2", "--seqlens", "64", "--out", str(tmp_path)])
    cpb.check_args(ns, visible=8)
    (run,) = cpb.launch(ns)
    assert run.status == "rank 1 exited with 5" and "rank 1 broke" in run.log_tail
    assert run.seconds < 60
    assert [x["s"] for x in run.records] == [64]
    assert math.isclose(run.records[0]["step_ms"], 3.0)
