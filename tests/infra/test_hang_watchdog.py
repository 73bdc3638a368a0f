"""A hung GPU test ends the run (tests/pytest_flashattn.py, FLASHATTN_TEST_HANG_S): the stack that
names it, then exit status 1, instead of a run that waits for an outer time limit. Checked in a
subprocess (the watchdog ends its process) that pretends an H100, so that the GPU tests run."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parents[1]
REPO = TESTS_DIR.parent

# Loaded by the inner run before collection: an H100 pretended, so that its GPU tests run.
INNER_CONFTEST = """
import pytest_flashattn
from hardware import DeviceInfo
pytest_flashattn.detect_device = lambda: DeviceInfo("2.13.0+cu128", "12.8", "NVIDIA H100 80GB HBM3", (9, 0), None, "9.0a")
"""

INNER_TESTS = """
import time
import pytest

@pytest.mark.gpu
def test_a_quick_one():
    time.sleep(0.2)

@pytest.mark.gpu
def test_hangs():
    time.sleep(120)

def test_cpu_outlasts_the_limit():
    time.sleep(3)
"""


def run_inner(pytester: pytest.Pytester, limit_s: str, *args: str) -> tuple[pytest.RunResult, float]:
    """The inner run in a subprocess, FLASHATTN_TEST_HANG_S=limit_s, the suite's plugin loaded."""
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(test_inner=INNER_TESTS)
    script = ("import os, sys, pytest; os.environ['FLASHATTN_TEST_HANG_S'] = sys.argv[1]; "
              f"sys.path[:0] = [{str(TESTS_DIR)!r}, {str(REPO)!r}]; "
              "sys.exit(pytest.main(['-p', 'pytest_flashattn', '-p', 'no:cacheprovider', '-q', *sys.argv[2:]]))")
    start = time.monotonic()
    result = pytester.run(sys.executable, "-c", script, limit_s, *args, timeout=100)
    return result, time.monotonic() - start


def test_a_hung_gpu_test_ends_the_run_with_its_stack(pytester: pytest.Pytester) -> None:
    result, took = run_inner(pytester, "2", "-k", "quick or hangs")
    err = "\n".join(result.errlines)
    assert result.ret == 1, (result.ret, err[-2000:])
    assert "test_inner.py::test_hangs still running after 2 s" in err and "in test_hangs" in err, err[-2000:]
    assert "test_a_quick_one still running" not in err  # its timer was cancelled when it returned
    assert took < 60, took


def test_cpu_tests_and_a_zero_limit_run_unwatched(pytester: pytest.Pytester) -> None:
    result, _ = run_inner(pytester, "1", "-k", "cpu_outlasts")
    assert result.ret == 0, "\n".join(result.outlines + result.errlines)[-2000:]
    result, _ = run_inner(pytester, "0", "-k", "quick")
    assert result.ret == 0, "\n".join(result.outlines + result.errlines)[-2000:]
