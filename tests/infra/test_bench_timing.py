"""CPU tests of the benchmark suite's timing schedule (benchmarks/bench_common.py): interleaved
rounds, the replay into pytest-benchmark, and the per-case sharing of one measurement. A fake
GPU clock stands in for CUDA events, so the schedule's properties are checked exactly."""

from __future__ import annotations

import dataclasses
import statistics

import pytest
from repo_modules import load_repo_module

bc = load_repo_module("benchmarks/bench_common.py")

SETTINGS = bc.Settings(rounds=12, warmup_rounds=2, round_ms=2.0, max_calls_per_round=1000, latency_samples=3)


class DriftingGpu:
    """A fake GPU whose clock slows down as it works: a call that costs `cost` ms at full speed
    takes cost * (1 + drift * elapsed_ms) ms, like an H100 settling under power limits."""

    def __init__(self, drift: float = 0.0):
        self.elapsed = 0.0
        self.drift = drift
        self.log: list[str] = []  # implementation of each timed batch, in order
        self.syncs = 0

    def impl(self, name: str, cost_ms: float):
        def fn():
            self.elapsed += cost_ms * (1.0 + self.drift * self.elapsed)

        fn.impl_name = name
        return fn

    def time_calls(self, fn, n: int) -> float:
        self.log.append(fn.impl_name)
        t0 = self.elapsed
        for _ in range(n):
            fn()
        return self.elapsed - t0

    def synchronize(self):
        self.syncs += 1

    def host_calls(self, fn, n: int) -> float:
        """Host ms to issue n calls: each implementation's own host cost (fn.host_ms), apart from
        its GPU time."""
        self.log.append(f"host:{fn.impl_name}")
        return n * getattr(fn, "host_ms", 0.0)


def _measure(gpu: DriftingGpu, costs: dict, settings=SETTINGS, host_ms: dict | None = None):
    runnables = {name: bc.Runnable(gpu.impl(name, c)) for name, c in costs.items()}
    for name, ms in (host_ms or {}).items():
        runnables[name].fn.host_ms = ms
    return bc.measure_interleaved(runnables, settings, time_calls=gpu.time_calls, synchronize=gpu.synchronize,
                                  host_calls=gpu.host_calls)


def test_every_round_times_every_impl_in_a_rotated_order():
    gpu = DriftingGpu()
    names = ["a", "b", "c"]
    _measure(gpu, {n: 0.5 for n in names})
    # 2 batches per impl for warm-up and the estimate, then (warm-up + timed) rounds of all three.
    rounds = gpu.log[2 * len(names) :][: len(names) * (SETTINGS.warmup_rounds + SETTINGS.rounds)]
    chunks = [rounds[i : i + 3] for i in range(0, len(rounds), 3)]
    assert all(sorted(c) == names for c in chunks)
    firsts = [c[0] for c in chunks[:6]]
    assert all(firsts.count(n) == 2 for n in names)  # who goes first rotates (a cycle is 2 x 3 rounds)
    predecessors = {(c[i - 1], c[i]) for c in chunks for i in range(1, 3)}
    assert ("a", "b") in predecessors and ("c", "b") in predecessors  # b follows both neighbours


@pytest.mark.parametrize("n", [2, 3, 6])
def test_round_orders_balance_who_goes_first_and_who_follows_whom(n):
    names = [chr(ord("a") + i) for i in range(n)]
    orders = [bc.round_order(names, r) for r in range(2 * n)]
    assert all(sorted(o) == names for o in orders)
    firsts = [o[0] for o in orders]
    assert all(firsts.count(x) == 2 for x in names)
    follows = {(o[i - 1], o[i]) for o in orders for i in range(1, n)}
    for i, x in enumerate(names):  # each follows both of its neighbours in the list, cyclically
        assert (names[i - 1], x) in follows and (names[(i + 1) % n], x) in follows


def test_samples_are_per_call_and_rounds_last_round_ms():
    gpu = DriftingGpu()
    res = _measure(gpu, {"fast": 0.01, "slow": 5.0})
    assert res["fast"].calls_per_round == 200  # 2 ms / 0.01 ms
    assert res["slow"].calls_per_round == 1
    for name, cost in (("fast", 0.01), ("slow", 5.0)):
        assert len(res[name].samples_ms) == SETTINGS.rounds
        assert all(s == pytest.approx(cost) for s in res[name].samples_ms)
        assert res[name].latency_ms == [pytest.approx(cost)] * SETTINGS.latency_samples
    assert gpu.syncs == 2 * SETTINGS.latency_samples  # the GPU idles before every latency sample
    latency_log = [e for e in gpu.log if not e.startswith("host:")][-2 * SETTINGS.latency_samples :]
    assert latency_log[0::2] == ["fast", "slow", "slow"]  # single calls alternate their order too


def test_host_time_per_call_is_probed_after_the_rounds_and_marks_host_bound_impls():
    """Each implementation's host time per call is measured apart (settings.host_probe_calls calls
    from an idle GPU), after its rounds; where it reaches HOST_BOUND_FRACTION of the GPU time per
    call, back-to-back timing measured the launch rate, and add_timing_info says so."""
    gpu = DriftingGpu()
    res = _measure(gpu, {"kernel_bound": 1.0, "host_bound": 0.1}, host_ms={"kernel_bound": 0.03, "host_bound": 0.1})
    assert res["kernel_bound"].host_ms == pytest.approx(0.03) and res["host_bound"].host_ms == pytest.approx(0.1)
    probes = [e for e in gpu.log if e.startswith("host:")]
    assert sorted(probes) == ["host:host_bound", "host:kernel_bound"]
    assert gpu.log[-2:] == probes  # last: the probes never sit between timed rounds
    assert not bc.is_host_bound(0.03, 1.0)
    assert bc.is_host_bound(0.1, 0.1) and bc.is_host_bound(0.085, 0.1) and not bc.is_host_bound(0.075, 0.1)
    assert not bc.is_host_bound(None, 0.1) and not bc.is_host_bound(0.1, None)

    off = DriftingGpu()
    res = _measure(off, {"a": 1.0}, settings=dataclasses.replace(SETTINGS, host_probe_calls=0))
    assert res["a"].host_ms is None and not any(e.startswith("host:") for e in off.log)


def test_drift_does_not_favour_either_of_two_equal_kernels():
    # Timed one after the other, the second of two identical kernels would look ~10% slower on
    # this clock; interleaved and rotated, their medians agree to well under 1%.
    gpu = DriftingGpu(drift=2e-3)
    res = _measure(gpu, {"ours": 1.0, "theirs": 1.0})
    ratio = statistics.median(res["theirs"].samples_ms) / statistics.median(res["ours"].samples_ms)
    assert ratio == pytest.approx(1.0, abs=0.01)

    seq = DriftingGpu(drift=2e-3)
    first = _measure(seq, {"ours": 1.0})
    second = _measure(seq, {"theirs": 1.0})
    seq_ratio = statistics.median(second["theirs"].samples_ms) / statistics.median(first["ours"].samples_ms)
    assert seq_ratio > 1.05  # the bias the interleaving removes is really there on this clock


def test_replay_timer_hands_back_the_samples_as_durations():
    t = bc.ReplayTimer([0.25, 1.5, 0.125])
    durations = []
    for _ in range(3):
        start = t()
        end = t()
        durations.append(end - start)
    assert durations == [0.25, 1.5, 0.125]


def test_record_timing_puts_the_measured_rounds_into_pytest_benchmark(benchmark):
    timing = bc.ImplTiming(samples_ms=[2.0, 1.0, 4.0, 3.0, 5.0], calls_per_round=7, latency_ms=[])
    bc.record_timing(benchmark, timing, "cpu-test group")
    if benchmark.disabled:
        pytest.skip("pytest-benchmark is disabled in this run (--benchmark-disable)")
    st = benchmark.stats.stats
    assert st.rounds == 5
    assert st.median == pytest.approx(3.0e-3) and st.min == pytest.approx(1.0e-3)
    bc.add_timing_info(benchmark, timing, flops=6e9, io_bytes=3e6)
    info = benchmark.extra_info
    assert info["median_ms"] == pytest.approx(3.0) and info["calls_per_round"] == 7
    assert info["tflops"] == pytest.approx(2.0)  # 6 GFLOP in 3 ms
    assert info["timing"] == "interleaved"
    assert "host_ms" not in info and "host_bound" not in info and "host_bound_fraction" not in info  # no probe, no claim

    probed = bc.ImplTiming(samples_ms=[2.0, 1.0, 4.0, 3.0, 5.0], calls_per_round=7, latency_ms=[], host_ms=2.9)
    bc.add_timing_info(benchmark, probed, flops=6e9, io_bytes=3e6)
    assert info["host_ms"] == pytest.approx(2.9) and info["host_bound"] is True  # 2.9 >= 0.8 x 3.0
    assert info["host_bound_fraction"] == bc.HOST_BOUND_FRACTION  # the criterion, for the report's note


def test_case_bench_measures_a_case_once_for_all_its_impls(monkeypatch):
    prepared, measured = [], []

    def prepare(name):
        prepared.append(name)
        if name == "missing":
            raise bc.Unavailable("not built here")
        if name == "broken":
            raise bc.BenchFailure("output is not attention")
        return bc.Runnable(lambda: None), 0.001

    def measure(runnables, settings):
        measured.append(sorted(runnables))
        return {n: bc.ImplTiming([1.0], 1, []) for n in runnables}

    monkeypatch.setitem(bc.PLAN, "case1", ["ours", "missing", "broken", "theirs"])
    cb = bc.CaseBench()
    outcomes = {n: cb.outcome("case1", n, prepare, SETTINGS, measure=measure) for n in bc.PLAN["case1"]}
    assert prepared == ["ours", "missing", "broken", "theirs"]  # each prepared once
    assert measured == [["ours", "theirs"]]  # one interleaved measurement of the ready ones
    assert outcomes["missing"].skip == "not built here" and outcomes["missing"].timing is None
    assert outcomes["broken"].fail == "output is not attention"
    assert outcomes["theirs"].timing.samples_ms == [1.0] and outcomes["ours"].rel_err == 0.001

    cb.outcome("case2", "solo", prepare, SETTINGS, measure=measure)  # not in the plan: itself only
    assert measured[-1] == ["solo"]


def test_record_outcome_skips_fails_or_records(benchmark):
    with pytest.raises(pytest.skip.Exception, match="not built here"):
        bc.record_outcome(benchmark, bc.Outcome(skip="not built here"), "g")
    with pytest.raises(pytest.fail.Exception, match="not attention"):
        bc.record_outcome(benchmark, bc.Outcome(fail="output is not attention"), "g")
    bc.record_outcome(benchmark, bc.Outcome(timing=bc.ImplTiming([2.0, 4.0, 3.0], 5, [])), "g")
    if not benchmark.disabled:
        assert benchmark.stats.stats.median == pytest.approx(3.0e-3)


def test_the_tools_time_with_the_suites_engine(monkeypatch):
    """lab/gpu_timing.interleaved_ms (all of decode_check's timing) runs
    measure_interleaved: two copies of one cost measure equal under drift, the rounds interleave."""
    gt = load_repo_module("lab/gpu_timing.py")
    engine = gt._bench_common()
    gpu = DriftingGpu(drift=0.002)
    monkeypatch.setattr(engine, "time_calls_ms", gpu.time_calls)
    res = gt.interleaved_ms({"x": gpu.impl("x", 0.5), "y": gpu.impl("y", 0.5), "slow": gpu.impl("slow", 1.0)},
                            round_ms=2.0, rounds=8)
    assert set(res) == {"x", "y", "slow"}
    assert res["x"] == pytest.approx(res["y"], rel=0.01)
    assert res["slow"] > 1.8 * res["x"]
    timed = gpu.log[6:]  # after the warm-up and estimate batches (2 per function)
    assert all(sorted(timed[i : i + 3]) == ["slow", "x", "y"] for i in range(0, len(timed), 3))


def test_the_tools_median_is_the_suites_event_timer(monkeypatch):
    """lab/gpu_timing.median_ms (ceilings, quick_check, sm90_check) times through
    time_calls_ms: per-call ms of `reps` back-to-back calls, median over samples."""
    gt = load_repo_module("lab/gpu_timing.py")
    engine = gt._bench_common()
    gpu = DriftingGpu()
    monkeypatch.setattr(engine, "time_calls_ms", gpu.time_calls)
    monkeypatch.setattr(gt.torch.cuda, "synchronize", lambda: None)
    assert gt.median_ms(gpu.impl("x", 0.25), samples=5, reps=4, warmup=2) == pytest.approx(0.25)
    assert gpu.log == ["x"] * 5  # five timed batches (the warm-up calls are not timed)


class QueueClock:
    """A fake torch.cuda and host clock on one timeline (ms): the host issues work in order, the GPU
    runs each item from when it is issued or when the GPU frees up, whichever is later. Enough of
    torch for time_calls_ms: Event(record, synchronize, elapsed_time) and _sleep (1 cycle = 1 us)."""

    def __init__(self):
        self.host = 0.0
        self.gpu_free = 0.0
        self.sleeps: list[float] = []
        outer = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                self.t = outer.gpu_free = max(outer.host, outer.gpu_free)

            def synchronize(self):
                outer.host = max(outer.host, self.t)

            def elapsed_time(self, other):
                return other.t - self.t

        def _sleep(cycles):
            self.sleeps.append(cycles / 1000.0)
            self.gpu_free = max(self.host, self.gpu_free) + cycles / 1000.0

        self.cuda = type("cuda", (), {"Event": Event, "_sleep": staticmethod(_sleep)})

    def perf_counter(self):
        return self.host / 1e3

    def call(self, host_ms: float, kernel_ms: float):
        def fn():
            self.host += host_ms  # the Python, dispatch and launch work before the kernel is queued
            self.gpu_free = max(self.host, self.gpu_free) + kernel_ms

        return fn


@pytest.fixture
def queue_clock(monkeypatch):
    import sys
    import time
    import weakref

    clock = QueueClock()
    monkeypatch.setitem(sys.modules, "torch", clock)
    monkeypatch.setattr(time, "perf_counter", clock.perf_counter)
    monkeypatch.setattr(bc, "_EVENTS", [])
    monkeypatch.setitem(bc._LEAD, "cycles_per_ms", None)
    monkeypatch.setitem(bc._LEAD, "host_ms", weakref.WeakKeyDictionary())
    return clock


def test_a_timed_batch_counts_no_host_time_before_its_first_kernel(queue_clock):
    """A 3 ms kernel behind 0.25 ms of host work a call (FlashAttention-3's long cells): from an idle
    GPU the events would read 3.25 ms a call; led by a GPU spin, 3.0, the kernel's time. Back to
    back, the host's later calls hide behind the running kernels as in a model."""
    peer = queue_clock.call(host_ms=0.25, kernel_ms=3.0)
    assert bc.time_calls_ms(peer, 1) == pytest.approx(3.0)
    assert bc.time_calls_ms(peer, 4) == pytest.approx(12.0)
    assert bc.time_calls_ms(peer, 1, lead=False) == pytest.approx(3.25)  # a latency sample: host counted


def test_the_lead_follows_the_functions_host_time(queue_clock):
    """The first batch of a function is led by LEAD_FIRST_MS; a call whose host work outlasts it
    shows that work once, then the lead is LEAD_HOST_FACTOR x its host time plus a margin."""
    slow_host = queue_clock.call(host_ms=2.0, kernel_ms=3.0)
    assert bc.time_calls_ms(slow_host, 1) == pytest.approx(3.0 + 2.0 - bc.LEAD_FIRST_MS)
    assert bc.time_calls_ms(slow_host, 1) == pytest.approx(3.0)
    assert queue_clock.sleeps[-1] == pytest.approx(bc.LEAD_HOST_FACTOR * 2.0 + bc.LEAD_MARGIN_MS, rel=1e-3)
    assert bc.lead_ms(None) == bc.LEAD_FIRST_MS and bc.lead_ms(1e3) == bc.LEAD_MAX_MS


def test_a_host_bound_call_still_times_at_its_launch_rate(queue_clock):
    """0.3 ms of host work for a 0.1 ms kernel: back to back the GPU waits on the host after the
    lead, so ten calls take ~ten host times (the host-bound mark then names it), not ten kernels."""
    tiny = queue_clock.call(host_ms=0.3, kernel_ms=0.1)
    bc.time_calls_ms(tiny, 10)
    per_call = bc.time_calls_ms(tiny, 10) / 10
    assert 0.25 < per_call <= 0.3 and bc.is_host_bound(0.3, per_call)


def test_latency_samples_keep_their_host_time(queue_clock):
    """measure_interleaved's rounds are led; its latency samples (one call from an idle GPU) are not."""
    fn = queue_clock.call(host_ms=0.25, kernel_ms=3.0)
    settings = bc.Settings(rounds=3, warmup_rounds=1, round_ms=2.0, max_calls_per_round=10, latency_samples=2,
                           host_probe_calls=0)
    res = bc.measure_interleaved({"peer": bc.Runnable(fn)}, settings, synchronize=lambda: None)["peer"]
    assert res.samples_ms == pytest.approx([3.0] * 3)
    assert res.latency_ms == pytest.approx([3.25] * 2)
