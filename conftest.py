"""Root pytest configuration for flashattn's test suite.

The machinery lives in tests/pytest_flashattn.py (an importable plugin, so that it is itself
tested): hardware markers (gpu, multigpu, sm80, sm89/l4, sm90/h100, slow) with skips that name
the device found, aliases applied at collection so `pytest -m h100` / `-m l4` select, the report
header (GPU, compute capability, driver, torch, CUDA, flashattn build and backend), the `backend`
fixture with `--flashattn-backend`, the `device`, `poisoned` and `measure` fixtures, and the
Hypothesis profiles `ci` (default) and `thorough`, chosen with FLASHATTN_HYPOTHESIS_PROFILE.
"""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent / "tests")
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)  # the suite's helper modules: hardware, numerics, strategies, ...

pytest_plugins = ["pytest_flashattn", "pytester"]  # pytester: tests/infra/test_hardware_markers.py
