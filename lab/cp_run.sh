#!/usr/bin/env bash
# Context parallelism (issue 30) on a machine with 2 or more GPUs, in one call: build the
# extension, the multi-GPU test on every visible GPU (tests/kernels/test_context_parallel_gpu.py), then the
# benchmark on 1, 2, 4 ... GPUs (benchmarks/bench_context_parallel.py) within what is left of
# CP_TOTAL_S, and its report. About 8 minutes on 2 or 4 H100s; docs/context-parallel.md.
#
#   bash lab/cp_run.sh
#   CP_TOTAL_S=540 bash lab/cp_run.sh          the whole run's target in seconds (default 480)
#   CP_SKIP_BUILD=1 bash lab/cp_run.sh          the extension is already built in place
#   CP_BENCH_ARGS="--kv-heads 32" bash ...      more benchmark arguments (word-split)
#
# Writes to $OUT (default results/cp-run): summary.txt (a line per step: exit status, seconds),
# env.txt (GPUs, topology, driver, torch, CUDA, cuDNN, NCCL), build.log, test.log, bench.log,
# report.log, and cp/ (cp_report.md: the tables and the acceptance lines; cp_results.json,
# cp_bench.json, report.md from benchmarks/bench_report.py, raw/ per set of processes).
# A failed step does not stop the next ones, except a failed build; the exit status is the number
# of failed steps.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/cp-run}
mkdir -p "$OUT/cp"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# NVLink multicast: the ring needs none of it, and it stays off on shared machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
TOTAL_S=${CP_TOTAL_S:-480}
START=$SECONDS
failed=0

step() {  # step NAME TIMEOUT_S COMMAND...: the command under a timeout, its output to NAME.log and here
  local name=$1 limit=$2 rc=0 t0=$SECONDS
  shift 2
  echo "=== $name (limit ${limit} s): $*" | tee -a "$OUT/summary.txt"
  timeout --kill-after=20 "$limit" "$@" 2>&1 | tee "$OUT/$name.log" || rc=${PIPESTATUS[0]}
  [ "$rc" -ne 124 ] || echo "=== $name: ran past ${limit} s, stopped" | tee -a "$OUT/summary.txt"
  echo "=== $name: exit $rc in $((SECONDS - t0)) s" | tee -a "$OUT/summary.txt"
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
  return "$rc"
}

env_info() {
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi -L || true
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv || true
  nvidia-smi topo -m || true  # NVLink or PCIe between the GPUs: what the ring's transfers cross
  python3 - <<'EOF'
import torch
import torch.distributed as dist

print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}")
print(f"GPUs visible to torch: {torch.cuda.device_count()}")
if dist.is_available() and dist.is_nccl_available():
    v = torch.cuda.nccl.version()
    print("NCCL", ".".join(map(str, v)) if isinstance(v, tuple) else v)
else:
    print("NCCL: not available in this torch")
EOF
  env | grep -E '^(NCCL_|TORCH_SYMM|NVSHMEM|CUDA_VISIBLE|PYTORCH_CUDA)' | sort || true
}

env_info 2>&1 | tee "$OUT/env.txt"
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
[ "$gpus" -ge 2 ] || echo "WARNING: $gpus GPU(s) visible: the multi-GPU test skips, the benchmark has no ring to time" \
  | tee -a "$OUT/summary.txt"

if [ "${CP_SKIP_BUILD:-0}" != 1 ]; then
  step build 420 bash lab/gpu_build.sh || { echo "failed steps: $failed (the build)" | tee -a "$OUT/summary.txt"; exit "$failed"; }
fi

step test 300 python3 -m pytest -q -p no:cacheprovider -ra --durations=5 -m multigpu \
  tests/kernels/test_context_parallel_gpu.py || true

# What is left of the total, less the benchmark's grace for its last set of processes and the report.
budget=$((TOTAL_S - (SECONDS - START) - 75))
[ "$budget" -ge 90 ] || budget=90
read -r -a bench_args <<<"${CP_BENCH_ARGS:-}"
step bench $((budget + 120)) python3 benchmarks/bench_context_parallel.py --budget-s "$budget" --out "$OUT/cp" \
  ${bench_args[@]+"${bench_args[@]}"} || true
if [ -f "$OUT/cp/cp_bench.json" ]; then
  step report 60 python3 benchmarks/bench_report.py "$OUT/cp/cp_bench.json" --markdown "$OUT/cp/report.md" || true
fi

echo
cat "$OUT/cp/cp_report.md" 2>/dev/null || echo "no cp_report.md: see bench.log"
echo "failed steps: $failed in $((SECONDS - START)) s" | tee -a "$OUT/summary.txt"
exit "$failed"
