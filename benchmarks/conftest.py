"""Benchmark-suite plumbing: markers, skipping without a GPU, and machine metadata in the JSON.

benchmarks/ is outside pyproject's testpaths, so a plain `python -m pytest` never collects it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

_HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_configure(config):
    for line in (
        "bench: benchmark, kept out of the default run",
        "latency: benchmark grid of tiny, launch/latency-bound shapes (fp16, D=64, S 32..512)",
        "standard: benchmark grid bf16/fp16, D 64/128/256, H=2048/D, B*S=16k, S 512..16k, causal on/off; "
        "GQA at D=128: H=16/4 at S=4k, H=16/2 at S=16k",
        "decode: benchmark grid for decode (Sq=1, KV cache, GQA 32:8); runs once flash_attn_with_kvcache exists",
        "training: the standard grid's shapes, backward ('bwd') and forward+backward ('fwd+bwd')",
        "quick: a small subset of the benchmark grids, for a fast look (-m 'bench and quick')",
        "window: local attention: a 4k sliding window over S=32k against dense calls (-m 'bench and window')",
        "varlen: packed variable-length batches: 16k tokens of lengths 128..4k against the dense kernel and "
        "padded SDPA (-m 'bench and varlen')",
    ):
        config.addinivalue_line("markers", line)


def _cuda_skip_reason() -> str | None:
    try:
        import torch
    except ImportError as exc:
        return f"benchmarks need torch ({exc})"
    if not torch.cuda.is_available():
        built = torch.version.cuda or "none (CPU-only build)"
        return (
            f"no CUDA GPU: torch.cuda.is_available() is False (torch {torch.__version__}, CUDA {built}); "
            "the benchmarks time GPU kernels and only run on a GPU machine"
        )
    return None


def pytest_collection_modifyitems(config, items):
    mine = [it for it in items if str(getattr(it, "path", it.fspath)).startswith(_HERE + os.sep)]
    if not mine:
        return
    reason = None
    if not config.pluginmanager.hasplugin("benchmark"):
        reason = "the pytest-benchmark plugin is not installed or not loaded (pip install pytest-benchmark)"
    else:
        reason = _cuda_skip_reason()
    if reason is None:
        try:
            import flashattn  # noqa: F401
        except ImportError as exc:
            reason = f"cannot import flashattn: {exc}"
    for item in mine:
        item.add_marker(pytest.mark.bench)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


def _driver_version() -> str:
    try:
        r = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        with open("/proc/driver/nvidia/version") as f:
            for tok in f.readline().split():
                if tok[:1].isdigit() and "." in tok:
                    return tok
    except OSError:
        pass
    return "unknown"


def gpu_metadata() -> dict:
    """GPU and software versions; lands in the JSON under machine_info (gpu, software)."""
    info: dict = {"gpu": {}, "software": {}}
    try:
        import torch
    except ImportError:
        return info
    sw = info["software"]
    sw["torch"] = torch.__version__
    sw["cuda"] = torch.version.cuda
    try:
        sw["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001
        sw["cudnn"] = None
    try:
        import flashattn

        sw["flashattn"] = getattr(flashattn, "__version__", "?")
        sw["flashattn_extension"] = flashattn.extension_available()
        sw["flashattn_build"] = flashattn.build_info()
        sw["flashattn_backend"] = flashattn.get_backend()
        sw["flashattn_decode_api"] = hasattr(flashattn, "flash_attn_with_kvcache")
    except Exception as exc:  # noqa: BLE001
        sw["flashattn"] = f"import failed: {exc}"
    import bench_common as bc

    sw["flash_attn_3"] = bc.fa3_status()
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info["gpu"] = {
            "name": p.name,
            "count": torch.cuda.device_count(),
            "capability": f"{p.major}.{p.minor}",
            "sm_count": p.multi_processor_count,
            "memory_gib": round(p.total_memory / 2**30, 1),
            "driver": _driver_version(),
        }
    return info


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info.update(gpu_metadata())


def pytest_collection_finish(session):
    """The final test list (-m, -k applied) -> bench_common.PLAN: for each case, the
    implementations to time together in interleaved rounds (bench_common.CaseBench)."""
    import bench_common as bc

    bc.PLAN.clear()
    for item in session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        case = params.get("shape", params.get("case"))
        if case is not None and "impl" in params:
            impls = bc.PLAN.setdefault(case, [])
            if params["impl"] not in impls:
                impls.append(params["impl"])


def pytest_report_header(config):
    # GPU, driver, torch and build lines come from tests/pytest_flashattn.py (root conftest.py)
    import bench_common as bc

    line = "benchmarks: pytest-benchmark stats are GPU seconds per call from CUDA events"
    return [line + " (the implementations of a case timed in interleaved rounds; docs/benchmarks.md)",
            f"benchmarks: FlashAttention-3 comparator (fa3: latency, standard and decode grids): {bc.fa3_status()}"]
