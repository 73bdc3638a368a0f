"""Marker and skip logic (tests/hardware.py, tests/pytest_flashattn.py), with fake devices."""

from __future__ import annotations

import pytest

import hardware
import pytest_flashattn
from hardware import DeviceInfo, arch_covered, implied_markers, skip_reason

NO_GPU = DeviceInfo(torch_version="2.13.0+cpu", torch_cuda=None)
NO_DEVICE = DeviceInfo(torch_version="2.13.0+cu128", torch_cuda="12.8")
L4 = DeviceInfo("2.13.0+cu128", "12.8", "NVIDIA L4", (8, 9), None, "8.0_8.9_9.0a")
H100 = DeviceInfo("2.13.0+cu128", "12.8", "NVIDIA H100 80GB HBM3", (9, 0), None, "9.0a")
A100 = DeviceInfo("2.13.0+cu128", "12.8", "NVIDIA A100-SXM4-80GB", (8, 0), None, "8.0_8.9_9.0a")
H100_NO_EXT = DeviceInfo("2.13.0+cu128", "12.8", "NVIDIA H100 80GB HBM3", (9, 0), "the flashattn CUDA extension is not built (...)")
L4_HOPPER_BUILD = DeviceInfo("2.13.0+cu128", "12.8", "NVIDIA L4", (8, 9), None, "9.0a")


@pytest.mark.parametrize(
    ("markers", "device", "expected"),
    [
        ({"slow"}, NO_GPU, None),
        (set(), NO_GPU, None),
        ({"gpu"}, NO_GPU, "no CUDA GPU: torch 2.13.0+cpu"),
        ({"gpu"}, NO_DEVICE, "no CUDA GPU: torch 2.13.0+cu128 (CUDA 12.8) sees no device"),
        ({"gpu"}, L4, None),
        ({"gpu"}, H100, None),
        ({"gpu"}, H100_NO_EXT, "extension not built: the flashattn CUDA extension is not built (...)"),
        ({"sm90"}, L4, "needs sm90 (H100); found NVIDIA L4 sm89"),
        ({"h100"}, L4, "needs sm90 (H100); found NVIDIA L4 sm89"),
        ({"gpu", "sm90"}, NO_GPU, "needs sm90 (H100); found no CUDA GPU: torch 2.13.0+cpu"),
        ({"sm90"}, H100, None),
        ({"l4"}, H100, "needs sm89 (L4); found NVIDIA H100 80GB HBM3 sm90"),
        ({"sm89"}, L4, None),
        ({"sm80", "sm89"}, A100, None),
        ({"sm80", "sm89"}, H100, "needs sm80 (A100) or sm89 (L4); found NVIDIA H100 80GB HBM3 sm90"),
        ({"sm90"}, H100_NO_EXT, "extension not built: the flashattn CUDA extension is not built (...)"),
        (
            {"gpu"},
            L4_HOPPER_BUILD,
            "extension built for 9.0a, which does not run on NVIDIA L4 sm89 (rebuild with TORCH_CUDA_ARCH_LIST=8.9)",
        ),
    ],
)
def test_skip_reason(markers: set[str], device: DeviceInfo, expected: str | None) -> None:
    assert skip_reason(markers, device) == expected


@pytest.mark.parametrize(
    ("markers", "added"),
    [
        (set(), set()),
        ({"slow"}, set()),
        ({"gpu"}, {"sm80", "sm89", "l4", "sm90", "h100"}),
        ({"sm90"}, {"gpu", "h100"}),
        ({"h100"}, {"gpu", "sm90"}),
        ({"l4", "slow"}, {"gpu", "sm89"}),
        ({"gpu", "sm89", "l4"}, set()),
        ({"sm80"}, {"gpu"}),
    ],
)
def test_implied_markers(markers: set[str], added: set[str]) -> None:
    assert implied_markers(markers) == added


@pytest.mark.parametrize(
    ("archs", "capability", "covered"),
    [
        ("8.0_8.9_9.0a", (8, 9), True),
        ("8.0_8.9_9.0a", (9, 0), True),
        ("9.0a", (8, 9), False),
        ("9.0a", (9, 0), True),
        ("8.0", (8, 6), True),  # sm_80 cubins run on later 8.x
        ("8.0", (9, 0), False),
        ("8.0+PTX", (9, 0), True),  # PTX is JIT-compiled for newer GPUs
        ("8.9", (8, 0), False),
        ("local", (8, 9), True),  # unknown: let the kernels speak
        ("", (8, 9), True),
        (None, (9, 0), True),
    ],
)
def test_arch_covered(archs: str | None, capability: tuple[int, int], covered: bool) -> None:
    assert arch_covered(archs, capability) is covered


def test_header_names_gpu_capability_driver_and_build() -> None:
    device = DeviceInfo("2.13.0+cu128", "12.8", "NVIDIA H100 80GB HBM3", (9, 0), None, "9.0a", driver="570.86")
    lines = hardware.header_lines(device, {"cuda_archs": "9.0a", "nvcc": "V12.8"}, "auto", ["portable", "hopper"])
    text = "\n".join(lines)
    assert "GPU NVIDIA H100 80GB HBM3, compute capability 9.0 (sm90), driver 570.86" in text
    assert "torch 2.13.0+cu128, CUDA 12.8" in text
    assert "extension built (cuda_archs=9.0a, nvcc=V12.8)" in text
    assert "backend auto" in text and "portable, hopper" in text


def test_header_without_gpu() -> None:
    lines = hardware.header_lines(NO_GPU, {}, "auto", ["portable"])
    assert lines[0] == "flashattn: no CUDA GPU: torch 2.13.0+cpu"


# ---- the plugin end to end, in an inner pytest run -------------------------------------------------

INNER_TESTS = """
import pytest

@pytest.mark.sm90
def test_hopper_only():
    pass

@pytest.mark.h100
def test_hopper_alias():
    pass

@pytest.mark.l4
def test_ada_only():
    pass

@pytest.mark.gpu
def test_any_gpu():
    pass

def test_cpu():
    pass

def test_paths(backend):
    pass
"""


PLUGIN_ARGS = ("-p", "pytest_flashattn", "-p", "no:cacheprovider")


@pytest.fixture
def pretend(monkeypatch: pytest.MonkeyPatch):
    """pretend(device, unavailable={backend: reason}): make the plugin see `device`, with every
    backend available but those in `unavailable`."""

    def _pretend(device: DeviceInfo, unavailable: dict[str, str] | None = None) -> None:
        monkeypatch.setattr(pytest_flashattn, "detect_device", lambda: device)
        monkeypatch.setattr(pytest_flashattn, "backend_unavailable_reason", lambda name: (unavailable or {}).get(name))

    return _pretend


@pytest.fixture
def inner(pytester: pytest.Pytester, pretend):
    """Run pytest on INNER_TESTS with the suite's plugin, pretending to be on `device`."""
    pytester.makepyfile(test_inner=INNER_TESTS)

    def run(device: DeviceInfo, *args: str) -> pytest.RunResult:
        pretend(device)
        return pytester.runpytest_inprocess(*PLUGIN_ARGS, *args)

    return run


@pytest.fixture
def skips(pytester: pytest.Pytester, pretend):
    """skips(device) -> {test id: skip reason} of an inner run of INNER_TESTS on `device`."""
    pytester.makepyfile(test_inner=INNER_TESTS)

    def run(device: DeviceInfo, unavailable: dict[str, str] | None = None) -> dict[str, str]:
        pretend(device, unavailable)
        recorder = pytester.inline_run(*PLUGIN_ARGS)
        return {
            report.nodeid.split("::")[1]: report.longrepr[2].removeprefix("Skipped: ")
            for report in recorder.getreports("pytest_runtest_logreport")
            if report.skipped
        }

    return run


def selected(result: pytest.RunResult) -> set[str]:
    return {line.split("::")[1] for line in result.outlines if line.startswith("test_inner.py::")}


def test_marker_h100_selects_what_an_h100_runs(inner) -> None:
    result = inner(NO_GPU, "-m", "h100", "--collect-only", "-q")
    assert selected(result) == {"test_hopper_only", "test_hopper_alias", "test_any_gpu", "test_paths[portable]", "test_paths[hopper]"}


def test_marker_l4_selects_what_an_l4_runs(inner) -> None:
    result = inner(NO_GPU, "-m", "l4", "--collect-only", "-q")
    assert selected(result) == {"test_ada_only", "test_any_gpu", "test_paths[portable]"}


def test_hopper_specific_selection(inner) -> None:
    result = inner(NO_GPU, "-m", "sm90 and not sm89", "--collect-only", "-q")
    assert selected(result) == {"test_hopper_only", "test_hopper_alias", "test_paths[hopper]"}


def test_backend_option_limits_the_backend_fixture(inner) -> None:
    result = inner(NO_GPU, "--flashattn-backend=portable", "--collect-only", "-q", "-k", "paths")
    assert selected(result) == {"test_paths[portable]"}


def test_skips_name_the_device_found_on_an_l4(skips) -> None:
    assert skips(L4) == {
        "test_hopper_only": "needs sm90 (H100); found NVIDIA L4 sm89",
        "test_hopper_alias": "needs sm90 (H100); found NVIDIA L4 sm89",
        "test_paths[hopper]": "needs sm90 (H100); found NVIDIA L4 sm89",
    }


def test_everything_but_cpu_tests_skips_without_a_gpu(skips) -> None:
    assert skips(NO_GPU) == {
        "test_hopper_only": "needs sm90 (H100); found no CUDA GPU: torch 2.13.0+cpu",
        "test_hopper_alias": "needs sm90 (H100); found no CUDA GPU: torch 2.13.0+cpu",
        "test_ada_only": "needs sm89 (L4); found no CUDA GPU: torch 2.13.0+cpu",
        "test_any_gpu": "no CUDA GPU: torch 2.13.0+cpu",
        "test_paths[portable]": "no CUDA GPU: torch 2.13.0+cpu",
        "test_paths[hopper]": "needs sm90 (H100); found no CUDA GPU: torch 2.13.0+cpu",
    }


def test_nothing_skips_on_an_h100(skips) -> None:
    assert skips(H100) == {"test_ada_only": "needs sm89 (L4); found NVIDIA H100 80GB HBM3 sm90"}


def test_hopper_backend_skips_when_the_build_lacks_it(skips) -> None:
    reason = "hopper backend unavailable: flashattn::fwd: backend 'hopper' is not available in this build"
    assert skips(H100, {"hopper": reason}) == {
        "test_ada_only": "needs sm89 (L4); found NVIDIA H100 80GB HBM3 sm90",
        "test_paths[hopper]": reason,
    }


def test_report_header_names_the_gpu(inner) -> None:
    result = inner(H100, "--collect-only")
    result.stdout.fnmatch_lines(["flashattn: GPU NVIDIA H100 80GB HBM3, compute capability 9.0 (sm90), driver *"])


def test_measurements_are_summarized_at_the_end(pytester: pytest.Pytester, pretend) -> None:
    pretend(NO_GPU)
    pytester.makepyfile(test_measured="def test_ratio(measure):\n    measure('SDPA math / ours peak memory', 123.456, 'x')\n")
    result = pytester.runpytest_inprocess(*PLUGIN_ARGS)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*flashattn measurements*", "test_measured.py::test_ratio: SDPA math / ours peak memory = 123.5 x"])


# ---- multigpu ------------------------------------------------------------------------------------

H100_X2 = DeviceInfo("2.11.0+cu130", "13.0", "NVIDIA H100 80GB HBM3", (9, 0), None, "9.0a", gpu_count=2, nccl="2.27.7")


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        (NO_GPU, "needs 2 or more GPUs (multigpu); found no CUDA GPU: torch 2.13.0+cpu"),
        (NO_DEVICE,
         "needs 2 or more GPUs (multigpu); found no CUDA GPU: torch 2.13.0+cu128 (CUDA 12.8) sees no device"),
        (H100, "needs 2 or more GPUs (multigpu); found 1: NVIDIA H100 80GB HBM3 sm90"),
        (DeviceInfo("2.11.0+cu130", "13.0", "NVIDIA H100 80GB HBM3", (9, 0), None, "9.0a", gpu_count=1, nccl="2.27.7"),
         "needs 2 or more GPUs (multigpu); found 1: NVIDIA H100 80GB HBM3 sm90"),
        (DeviceInfo("2.11.0+cu130", "13.0", "NVIDIA H100 80GB HBM3", (9, 0), None, "9.0a", gpu_count=4),
         "needs NCCL (multigpu: one process per GPU); torch 2.11.0+cu130 has no NCCL"),
        (H100_X2, None),
        (DeviceInfo("2.11.0+cu130", "13.0", "NVIDIA H100 80GB HBM3", (9, 0), "not built", "9.0a", gpu_count=2,
                    nccl="2.27.7"), "extension not built: not built"),
    ],
)
def test_multigpu_skip_reason(device: DeviceInfo, expected: str | None) -> None:
    assert skip_reason({"multigpu"}, device) == expected


def test_multigpu_implies_gpu_and_every_arch() -> None:
    assert implied_markers({"multigpu"}) == {"gpu", "sm80", "sm89", "l4", "sm90", "h100"}
    assert implied_markers({"multigpu", "sm90"}) == {"gpu", "h100"}
    assert skip_reason({"multigpu", "sm89"}, H100_X2) == "needs sm89 (L4); found NVIDIA H100 80GB HBM3 sm90"


def test_header_counts_the_gpus_when_several() -> None:
    text = "\n".join(hardware.header_lines(H100_X2, {}, "auto", ["portable"]))
    assert "flashattn: 2 GPUs visible (multigpu tests), NCCL 2.27.7" in text
    assert "GPUs visible" not in "\n".join(hardware.header_lines(H100, {}, "auto", ["portable"]))


MULTI_TESTS = """
import pytest

@pytest.mark.multigpu
def test_ring():
    pass

@pytest.mark.gpu
def test_one():
    pass

def test_cpu():
    pass
"""


def test_marker_multigpu_selects_and_skips_with_the_reason(pytester: pytest.Pytester, pretend) -> None:
    pytester.makepyfile(test_multi=MULTI_TESTS)
    pretend(H100)
    result = pytester.runpytest_inprocess(*PLUGIN_ARGS, "-m", "multigpu", "-rs")
    result.assert_outcomes(skipped=1, deselected=2)
    result.stdout.fnmatch_lines(["*needs 2 or more GPUs (multigpu); found 1: NVIDIA H100 80GB HBM3 sm90*"])
    pretend(H100_X2)
    result = pytester.runpytest_inprocess(*PLUGIN_ARGS, "-m", "h100 and not multigpu")
    result.assert_outcomes(passed=1, deselected=2)
    result = pytester.runpytest_inprocess(*PLUGIN_ARGS, "-m", "multigpu")
    result.assert_outcomes(passed=1, deselected=2)
