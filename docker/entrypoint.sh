#!/usr/bin/env bash
# The image's entrypoint.
#
#   docker run --gpus all -v "$PWD/results:/results" IMAGE          the default job (below)
#   docker run --gpus all IMAGE pytest -m h100 -x                   runs that command as given
#   docker run --gpus all IMAGE -m h100 -x                          args starting with '-' go to pytest
#
# The same job runs without Docker, on a machine with a GPU, the project installed
# (pip install --no-build-isolation -e ".[test,report]") and nvidia-smi:
#
#   RESULTS_DIR=results/job bash docker/entrypoint.sh              from the source tree
#
# The default job:
#   1. finds the GPU (docker/detect_gpu.sh);
#   2. runs the test suite for it: `python -m pytest -m "(not gpu or smXY) and not multigpu"`, i.e.
#      every CPU test and every single-GPU test this architecture runs (tests/hardware.py gives each
#      GPU test the arch markers of the GPUs it runs on), so tests for other GPUs are deselected
#      rather than reported as skips. On a GPU with no marker of its own (not sm80/sm89/sm90) the
#      whole suite but the multi-GPU tests runs and skips what it cannot run, with a reason;
#   3. with 2 or more GPUs, if those pass, the multi-GPU tests in a run of their own (`-m multigpu`:
#      context parallelism over NCCL, one process per GPU; docs/context-parallel.md), after the
#      suite's process has let go of its GPU memory; with one GPU it says they are not run;
#   4. if the tests pass, runs the benchmarks and the report: benchmarks/run_benchmarks.sh RESULTS_DIR
#      (bench.json, pytest.log, report.md, report.txt, bench.png);
#   writing to RESULTS_DIR (default /results; mount a host folder there): env.txt, tests.log,
#   tests-junit.xml, with 2+ GPUs tests-multigpu.log and tests-multigpu-junit.xml, and the
#   benchmark files.
#   Without a GPU it says so, runs the CPU tests only and skips the benchmark.
#
# Environment:
#   RESULTS_DIR               where results go (default /results)
#   FLASHATTN_REQUIRE_GPU=1   no GPU is an error (exit 3) instead of a CPU-only run (CI sets it)
#   FLASHATTN_SKIP_TESTS=1    benchmark only;  FLASHATTN_SKIP_BENCH=1  tests only
#   FLASHATTN_PYTEST_ARGS     extra pytest arguments for the test step (word-split), e.g. "-x -q"
#   FLASHATTN_BUILT_ARCHS     what the image's kernels were built for (set by the Dockerfile)
#   FLASHATTN_REVISION        the source revision (set by the Dockerfile; else git's, if any)
#   PYTHON                    interpreter (default python3)
#   FLASHATTN_HOME            the source tree (default: this script's parent folder)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FLASHATTN_HOME=${FLASHATTN_HOME:-$(dirname "$here")}
PY=${PYTHON:-python3}

# Under `docker run --user UID:GID` with a uid the image does not know, HOME is / or another
# folder this user cannot write (caches of matplotlib, torch, triton go there): use a fresh one.
if [ -z "${HOME:-}" ] || [ ! -w "${HOME}" ]; then
  HOME=$(mktemp -d /tmp/home.XXXXXX)
  export HOME
fi

# Pass-through: any arguments are the command to run (exec, so it gets the signals).
if [ "$#" -gt 0 ]; then
  case "$1" in
    -*) cd "$FLASHATTN_HOME" && exec "$PY" -m pytest "$@" ;;
    *) exec "$@" ;;
  esac
fi

say() { printf 'flashattn: %s\n' "$*" >&2; }
rule() { printf '\n===== %s =====\n' "$*" >&2; }

RESULTS_DIR=${RESULTS_DIR:-/results}
if ! mkdir -p "$RESULTS_DIR" 2>/dev/null || ! touch "$RESULTS_DIR/.write-test" 2>/dev/null; then
  say "ERROR: cannot write to the results folder $RESULTS_DIR (running as uid $(id -u))."
  say "Mount a folder this user may write, e.g.:"
  say "  docker run --gpus all --user \"\$(id -u):\$(id -g)\" -v \"\$PWD/results:/results\" IMAGE"
  exit 2
fi
rm -f "$RESULTS_DIR/.write-test"

cd "$FLASHATTN_HOME"

# --- 1. the GPU -------------------------------------------------------------------------------
GPU_MARKER=none GPU_CC="" GPU_NAME="" GPU_COUNT=0 GPU_DRIVER="" GPU_REASON=""
while IFS='=' read -r key value; do
  case "$key" in
    GPU_MARKER) GPU_MARKER=$value ;;
    GPU_CC) GPU_CC=$value ;;
    GPU_NAME) GPU_NAME=$value ;;
    GPU_COUNT) GPU_COUNT=$value ;;
    GPU_DRIVER) GPU_DRIVER=$value ;;
    GPU_REASON) GPU_REASON=$value ;;
  esac
done < <(bash "$here/detect_gpu.sh" || true)

revision=${FLASHATTN_REVISION:-}
if [ -z "$revision" ] && command -v git >/dev/null 2>&1; then
  revision=$(git -C "$FLASHATTN_HOME" rev-parse --short HEAD 2>/dev/null || true)
fi
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "gpu_marker: $GPU_MARKER"
  echo "gpu: ${GPU_NAME:-none} (compute capability ${GPU_CC:-n/a}, ${GPU_COUNT} GPU(s), driver ${GPU_DRIVER:-n/a})"
  [ -z "$GPU_REASON" ] || echo "no_gpu_reason: $GPU_REASON"
  echo "image_built_archs: ${FLASHATTN_BUILT_ARCHS:-unknown (not run from the image)}"
  echo "revision: ${revision:-unknown}"
  # What the tests will use: the interpreter, torch and the extension's build.
  "$PY" - <<'EOF' 2>&1 || echo "python: cannot import torch ($PY)"
import sys
import torch
print(f"python: {sys.version.split()[0]} ({sys.executable})")
print(f"torch: {torch.__version__} (CUDA {torch.version.cuda})")
try:
    import flashattn
    if flashattn.extension_available():
        print(f"flashattn_build: {flashattn.build_info()}")
    else:
        print(f"flashattn_build: none: {flashattn.extension_error()}")
except Exception as e:  # noqa: BLE001  (reported, the tests say the rest)
    print(f"flashattn_build: import failed: {e}")
EOF
} >"$RESULTS_DIR/env.txt"

read -r -a extra_args <<<"${FLASHATTN_PYTEST_ARGS:-}"
junit=(--junitxml "$RESULTS_DIR/tests-junit.xml")

if [ "$GPU_MARKER" = none ]; then
  rule "NO GPU"
  say "no NVIDIA GPU is visible here: $GPU_REASON."
  say "The GPU tests and the benchmark need one: start the container with"
  say "  docker run --gpus all -v \"\$PWD/results:/results\" IMAGE"
  say "on a host with an NVIDIA driver and the NVIDIA Container Toolkit (docs/docker.md)."
  if [ "${FLASHATTN_REQUIRE_GPU:-0}" = 1 ]; then
    say "FLASHATTN_REQUIRE_GPU=1: failing."
    exit 3
  fi
  say "Running the CPU tests only (pytest -m \"not gpu\"); no benchmark."
  rule "TESTS (CPU only)"
  set +e
  "$PY" -m pytest -m "not gpu" "${junit[@]}" ${extra_args[@]+"${extra_args[@]}"} 2>&1 | tee "$RESULTS_DIR/tests.log"
  status=${PIPESTATUS[0]}
  set -e
  say "CPU tests exit status $status; results in $RESULTS_DIR. No GPU: GPU tests and benchmark not run."
  exit "$status"
fi

say "GPU: $GPU_NAME, compute capability $GPU_CC ($GPU_MARKER), $GPU_COUNT GPU(s), driver $GPU_DRIVER"

# Kernels built for other architectures do not load here: say so before the tests do.
if [ -n "${FLASHATTN_BUILT_ARCHS:-}" ]; then
  covered=0
  IFS=';, ' read -r -a built <<<"$FLASHATTN_BUILT_ARCHS"
  gpu_major=${GPU_CC%%.*} gpu_minor=${GPU_CC#*.}
  for a in "${built[@]}"; do
    base=${a%+PTX}
    base=${base%a}
    major=${base%%.*} minor=${base#*.}
    case "$a" in
      *+PTX) covered=1 ;;                                        # JIT-compiled for newer GPUs
      *a) [ "$base" = "$GPU_CC" ] && covered=1 ;;                 # 9.0a: exactly 9.0
      *) [ "$major" = "$gpu_major" ] && [ "$minor" -le "$gpu_minor" ] 2>/dev/null && covered=1 ;;  # 8.0 runs on 8.x
    esac
  done
  if [ "$covered" = 0 ]; then
    say "WARNING: this image's kernels are built for $FLASHATTN_BUILT_ARCHS, not for compute capability $GPU_CC."
    say "Rebuild it with: docker build --build-arg TORCH_CUDA_ARCH_LIST=\"$GPU_CC\" ..."
  fi
fi

status=0
if [ "${FLASHATTN_SKIP_TESTS:-0}" != 1 ]; then
  case "$GPU_MARKER" in
    sm80 | sm89 | sm90) select=(-m "(not gpu or $GPU_MARKER) and not multigpu") ;;
    *)
      say "no test marker for $GPU_MARKER (the suite knows sm80, sm89, sm90): running the whole suite; tests for other GPUs skip with a reason"
      select=(-m "not multigpu")
      ;;
  esac
  rule "TESTS ($GPU_MARKER)"
  printf -v shown ' %q' ${select[@]+"${select[@]}"} ${extra_args[@]+"${extra_args[@]}"}
  say "$PY -m pytest${shown}"
  set +e
  "$PY" -m pytest ${select[@]+"${select[@]}"} "${junit[@]}" ${extra_args[@]+"${extra_args[@]}"} 2>&1 | tee "$RESULTS_DIR/tests.log"
  status=${PIPESTATUS[0]}
  set -e
  if [ "$status" -ne 0 ]; then
    say "tests failed (pytest exit status $status): not running the benchmark. Log: $RESULTS_DIR/tests.log"
    exit "$status"
  fi
  if [ "$GPU_COUNT" -ge 2 ] 2>/dev/null; then
    rule "MULTI-GPU TESTS ($GPU_COUNT GPUs)"
    say "$PY -m pytest -m multigpu"
    set +e
    "$PY" -m pytest -m multigpu --junitxml "$RESULTS_DIR/tests-multigpu-junit.xml" ${extra_args[@]+"${extra_args[@]}"} 2>&1 \
      | tee "$RESULTS_DIR/tests-multigpu.log"
    status=${PIPESTATUS[0]}
    set -e
    if [ "$status" -ne 0 ]; then
      say "multi-GPU tests failed (pytest exit status $status): not running the benchmark. Log: $RESULTS_DIR/tests-multigpu.log"
      exit "$status"
    fi
  else
    say "one GPU: the multi-GPU tests (pytest -m multigpu, context parallelism over NCCL) need 2 or more; not run"
  fi
fi

if [ "${FLASHATTN_SKIP_BENCH:-0}" != 1 ]; then
  rule "BENCHMARK"
  bench="$FLASHATTN_HOME/benchmarks/run_benchmarks.sh"
  if [ ! -f "$bench" ]; then
    say "ERROR: $bench is missing from the image"
    exit 4
  fi
  bash "$bench" "$RESULTS_DIR"
fi

say "done; results in $RESULTS_DIR:"
ls -l "$RESULTS_DIR" >&2
