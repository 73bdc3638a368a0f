#!/usr/bin/env bash
# The main benchmark job, on a machine with a CUDA GPU and the built extension:
#   benchmarks/run_benchmarks.sh [outdir [extra pytest args...]]   (default outdir: results/bench-YYYYmmdd-HHMMSS)
#   e.g. benchmarks/run_benchmarks.sh results/run1 --benchmark-autosave --benchmark-storage=file://results/storage
# runs the benchmark suite (latency, standard and decode grids, and the backward: "training", the
# standard grid's shapes as bwd and fwd+bwd) ->
#   outdir/bench.json (pytest-benchmark JSON), outdir/pytest.log
# then the report -> outdir/report.md, outdir/bench.png (PNG only where matplotlib is installed).
# Environment:
#   QUICK=1                     only the quick subset (-m "bench and quick"; forward and backward), a few minutes
#   BENCH_MARKERS="expr"        any other marker expression (default "bench and (latency or standard or decode or training)";
#                               e.g. "bench and training" for the backward only)
#   BENCH_K="expr"              a -k expression, e.g. "bf16 and D128"
#   FLASHATTN_BENCH_IMPLS, FLASHATTN_BENCH_ROUNDS, FLASHATTN_BENCH_ROUND_MS: see docs/benchmarks.md
#   PYTHON                      interpreter (default python3)
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-results/bench-$(date +%Y%m%d-%H%M%S)}
shift || true
py=${PYTHON:-python3}

fail() { echo "run_benchmarks.sh: error: $*" >&2; exit 2; }

"$py" -c 'import torch' 2>/dev/null || fail "cannot import torch with $py"
"$py" - <<'EOF' || fail "no usable CUDA GPU (see above); the benchmarks time GPU kernels and need one"
import sys, torch
if not torch.cuda.is_available():
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA GPU", file=sys.stderr)
    sys.exit(1)
print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}, CUDA {torch.version.cuda}")
EOF
"$py" - <<'EOF' || fail "the flashattn extension is not built: python -m pip install --no-build-isolation -e . (or bash lab/gpu_build.sh)"
import sys, flashattn
if not flashattn.extension_available():
    print(flashattn.extension_error(), file=sys.stderr)
    sys.exit(1)
print("flashattn build:", flashattn.build_info())
EOF
"$py" -c 'import pytest_benchmark' 2>/dev/null \
    || fail "pytest-benchmark is not installed for $py (pip install pytest-benchmark; offline: carry its wheel and py-cpuinfo's)"

if [[ -n "${BENCH_MARKERS:-}" ]]; then
    markers=$BENCH_MARKERS
elif [[ "${QUICK:-0}" == 1 ]]; then
    markers="bench and quick"
else
    markers="bench and (latency or standard or decode or training)"
fi
kargs=()
[[ -n "${BENCH_K:-}" ]] && kargs=(-k "$BENCH_K")

mkdir -p "$out"
echo "benchmarks: -m \"$markers\" ${BENCH_K:+-k \"$BENCH_K\"} -> $out/bench.json"
start=$(date +%s)
rc=0
PYTHONUNBUFFERED=1 "$py" -m pytest benchmarks -m "$markers" ${kargs[@]+"${kargs[@]}"} -p no:cacheprovider -q -rs "$@" \
    --benchmark-json="$out/bench.json" \
    --benchmark-group-by=group --benchmark-sort=name \
    --benchmark-columns=median,iqr,min,rounds,iterations \
    2>&1 | tee "$out/pytest.log" || rc=$?
echo "benchmarks took $(( $(date +%s) - start )) s (pytest exit status $rc)"

[[ -s "$out/bench.json" ]] || fail "no $out/bench.json was written (pytest exit status $rc; see $out/pytest.log)"

report_args=("$out/bench.json" --markdown "$out/report.md")
if "$py" -c 'import matplotlib' 2>/dev/null; then
    report_args+=(--png "$out/bench.png")
else
    echo "note: matplotlib is missing for $py: no PNG; make it elsewhere with" \
         "python3 benchmarks/bench_report.py $out/bench.json --png bench.png" >&2
fi
"$py" benchmarks/bench_report.py "${report_args[@]}" | tee "$out/report.txt"

if [[ $rc -ne 0 ]]; then
    echo "run_benchmarks.sh: pytest failed (exit status $rc): some benchmarks failed, see $out/pytest.log" >&2
    exit "$rc"
fi
echo "done:"; ls -l "$out"
