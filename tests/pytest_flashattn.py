"""The suite's pytest plugin (loaded by the root conftest.py): hardware markers and skips, the
report header, the `backend` fixture, Hypothesis profiles and a measurements summary.

Kept as an importable module, not inline in conftest.py, so that tests/infra/test_hardware_markers.py
can load it into an inner pytest run (`pytester`) and check marker selection end to end.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading

import pytest
import torch
from hypothesis import HealthCheck, settings

import flashattn
from gpu_helpers import backend_unavailable_reason, poison_cuda_allocator
from hardware import ALIASES, ARCH_MARKERS, DeviceInfo, detect_device, header_lines, implied_markers, skip_reason

# ---- Hypothesis profiles ------------------------------------------------------------------------
# `ci`: the default; few examples, derandomized (the same examples on every run and machine), no
# per-example deadline (the first CUDA call of a process is slow). `thorough`: for hunting bugs.
settings.register_profile(
    "ci",
    max_examples=40,
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough",
    max_examples=1000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
HYPOTHESIS_PROFILE = os.environ.get("FLASHATTN_HYPOTHESIS_PROFILE", "ci")
settings.load_profile(HYPOTHESIS_PROFILE)

DEFAULT_TESTED_BACKENDS = ("portable", "hopper")
_DEVICE_KEY = pytest.StashKey[DeviceInfo]()
_MEASURE_PREFIX = "measure:"
_MARKER_LINES = {
    "gpu": "needs a CUDA GPU and the built extension",
    "multigpu": "needs 2 or more CUDA GPUs, NCCL and the built extension (one process per GPU)",
    **{m: f"needs compute capability {cc[0]}.{cc[1]} ({gpu})" for m, (cc, gpu) in ARCH_MARKERS.items()},
    **{a: f"alias of {c}" for a, c in ALIASES.items()},
    "slow": "long-running",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("flashattn")
    group.addoption(
        "--flashattn-backend",
        default=",".join(DEFAULT_TESTED_BACKENDS),
        help=(
            "comma-separated forward paths the `backend` fixture runs each backend-aware test on "
            "(auto, portable, hopper; default: portable,hopper). 'portable' forces the mma.sync "
            "path, also on Hopper; 'hopper' runs only on sm90 builds that have it."
        ),
    )


def tested_backends(config: pytest.Config) -> list[str]:
    names = [n.strip() for n in str(config.getoption("--flashattn-backend")).split(",") if n.strip()]
    unknown = [n for n in names if n not in ("auto", "portable", "hopper")]
    if unknown or not names:
        raise pytest.UsageError(f"--flashattn-backend: unknown backend(s) {unknown}; choose from auto, portable, hopper")
    return names


def device_info(config: pytest.Config) -> DeviceInfo:
    if _DEVICE_KEY not in config.stash:
        config.stash[_DEVICE_KEY] = detect_device()
    return config.stash[_DEVICE_KEY]


def pytest_configure(config: pytest.Config) -> None:
    registered = {line.split(":")[0].strip() for line in config.getini("markers")}
    for name, text in _MARKER_LINES.items():
        if name not in registered:  # an inner pytester run has no pyproject.toml
            config.addinivalue_line("markers", f"{name}: {text}")


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = header_lines(device_info(config), flashattn.build_info(), flashattn.get_backend(), tested_backends(config))
    return lines + [f"flashattn: hypothesis profile {HYPOTHESIS_PROFILE} (FLASHATTN_HYPOTHESIS_PROFILE)"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        params = [
            pytest.param(name, id=name, marks=[pytest.mark.sm90] if name == "hopper" else [pytest.mark.gpu])
            for name in tested_backends(metafunc.config)
        ]
        metafunc.parametrize("backend", params, indirect=True, scope="session")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselection, which must see the implied markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    device = device_info(config)
    for item in items:
        names = {m.name for m in item.iter_markers()}
        reason = skip_reason(names, device)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
        for name in sorted(implied_markers(names)):
            item.add_marker(name)


# ---- a hung GPU test ends the run ----------------------------------------------------------------
# A kernel that never finishes (a deterministic backward whose dQ tickets never come, a barrier no
# one arrives at) blocks the test's next synchronization forever: no failure, no name, until an
# outer time limit kills the run. Past FLASHATTN_TEST_HANG_S seconds (default 900; 0 turns it off)
# of one GPU test's call, a timer thread lifts pytest's output capture, names the test, prints every
# thread's stack and ends the process with status 1: a failed run (lab/planted_bug.sh counts it as
# caught). torch's ops release the GIL while they wait on the GPU, so the thread runs; should it
# not, faulthandler's own timer (no GIL needed, its output possibly captured) ends the process a
# minute later.
def hang_limit_s() -> float:
    return float(os.environ.get("FLASHATTN_TEST_HANG_S", "900"))


def _end_hung_run(item: pytest.Item, limit: float) -> None:
    capman = item.config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        capman.suspend_global_capture(in_=True)
    sys.stderr.write(f"\nflashattn: {item.nodeid} still running after {limit:.0f} s (FLASHATTN_TEST_HANG_S): a hang; "
                     "every thread's stack follows, then exit status 1\n")
    sys.stderr.flush()
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    limit = hang_limit_s()
    timer = None
    if limit > 0 and item.get_closest_marker("gpu") is not None:
        timer = threading.Timer(limit, _end_hung_run, args=(item, limit))
        timer.daemon = True
        timer.start()
        faulthandler.dump_traceback_later(limit + 60, exit=True, file=sys.__stderr__)
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
            faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest) -> str:
    """The forward path under test ("portable", "hopper", or "auto"); see --flashattn-backend.
    Skips when the extension says that path is unavailable here."""
    name = str(request.param)
    reason = backend_unavailable_reason(name)
    if reason is not None:
        pytest.skip(reason)
    return name


@pytest.fixture(scope="session")
def device() -> torch.device:
    """The CUDA device the GPU tests run on."""
    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture
def poisoned(device: torch.device) -> None:
    """Fresh CUDA allocations hold NaN from the test body on; see poison_cuda_allocator."""
    poison_cuda_allocator()


@pytest.fixture
def measure(record_property):
    """measure(name, value, unit): record a number; it is listed in the 'flashattn measurements'
    summary at the end of the run (and in --junitxml output)."""

    def _measure(name: str, value: float, unit: str = "") -> None:
        record_property(f"{_MEASURE_PREFIX}{name}", f"{value:.4g}{(' ' + unit) if unit else ''}")

    return _measure


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    rows = []
    for status in ("passed", "failed"):
        for report in terminalreporter.stats.get(status, []):
            if getattr(report, "when", None) != "call":
                continue
            for key, value in report.user_properties:
                if str(key).startswith(_MEASURE_PREFIX):
                    rows.append(f"{report.nodeid}: {key[len(_MEASURE_PREFIX):]} = {value}")
    # What ran where, also under -q (which hides the report header), so that a saved log of a
    # run says which GPU, driver, torch, CUDA and build its results belong to.
    terminalreporter.section("flashattn environment")
    for line in pytest_report_header(config):
        terminalreporter.write_line(line)
    if rows:
        terminalreporter.section("flashattn measurements")
        for row in rows:
            terminalreporter.write_line(row)
