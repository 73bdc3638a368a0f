#!/usr/bin/env bash
# compute-sanitizer over small odd cases of every path (lab/sanitize_small.py): memcheck,
# racecheck, synccheck and initcheck, one log per tool, a summary of the error counts; exits
# non-zero on any error, any timeout or any Python-level failure. Run it after any kernel change
# (docs/sanitizer.md).
#
#   bash lab/sanitize.sh [LOG_DIR]        (default results/sanitize; needs the built extension)
#
# PyTorch's caching allocator is off (PYTORCH_NO_CUDA_MEMORY_CACHING=1): every tensor is then a
# cudaMalloc of its own, so memcheck sees an access past a tensor instead of one inside the
# allocator's larger block, and initcheck sees fresh memory per tensor.
# The bad-index cases (checked mode off) run under memcheck only: their results are meaningless by
# contract, the point is that nothing outside the tensors is touched.
# initcheck also runs lab/initcheck_tma.cu, the minimal TMA store + plain read (docs/sanitizer.md,
# "initcheck and TMA stores"); no report is filtered.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
LOGS=${1:-results/sanitize}
mkdir -p "$LOGS" build
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
export FLASHATTN_CHECK_INDICES=0
CS=${COMPUTE_SANITIZER:-compute-sanitizer}
LIMIT=${SANITIZE_TIMEOUT_S:-150}
failed=0

# run_tool NAME TOOL_ARGS... -- COMMAND...: one log, then the count of errors it reports.
run_tool() {
  local name=$1; shift
  local args=()
  while [ "$1" != "--" ]; do args+=("$1"); shift; done; shift
  local log="$LOGS/$name.log" t0=$(date +%s)
  timeout "$LIMIT" "$CS" "${args[@]}" --error-exitcode 99 "$@" > "$log" 2>&1
  local rc=$?
  # "ERROR SUMMARY: N errors" (memcheck, synccheck, initcheck) or "RACECHECK SUMMARY: ... (N errors"
  local errors
  errors=$(grep -oE "ERROR SUMMARY: [0-9]+|\([0-9]+ errors" "$log" | grep -oE "[0-9]+" | awk '{s += $1} END {print s + 0}')
  local hazards
  hazards=$(grep -oE "RACECHECK SUMMARY: [0-9]+ hazard" "$log" | grep -oE "[0-9]+" | awk '{s += $1} END {print s + 0}')
  local status=ok
  if [ $rc -eq 124 ]; then status="TIMEOUT after ${LIMIT} s"
  elif [ $rc -ne 0 ] || [ "$errors" != 0 ] || [ "$hazards" != 0 ]; then status="FAIL (exit $rc)"; fi
  [ "$status" = ok ] || failed=$((failed + 1))
  printf "%-22s errors %-6s racecheck hazards %-6s %-22s %4d s  %s\n" "$name" "$errors" "$hazards" "$status" \
    $(( $(date +%s) - t0 )) "$log" | tee -a "$LOGS/summary.txt"
}

: > "$LOGS/summary.txt"
py=(python3 lab/sanitize_small.py)
run_tool memcheck --tool memcheck --leak-check no -- "${py[@]}" --only dense,varlen,decode,split,fp8
run_tool memcheck_bad_indices --tool memcheck --leak-check no -- "${py[@]}" --only bad
run_tool racecheck --tool racecheck --racecheck-report hazard -- "${py[@]}" --only dense,varlen,decode,split,fp8 --quick
run_tool synccheck --tool synccheck -- "${py[@]}" --only dense,varlen,decode,split,fp8 --quick
# initcheck: gated on the portable paths. The Hopper forward (backend auto on an H100) stores `out`
# with TMA, and initcheck reports every later read of it (the backward's preprocess) as
# uninitialized; until lab/initcheck_tma.cu's evidence is recorded (docs/sanitizer.md), that run
# is logged and counted here but does not fail the script. No report is filtered out of any log.
SANITIZE_BACKENDS=portable run_tool initcheck --tool initcheck -- \
  "${py[@]}" --only dense,varlen,decode --quick
gated=$failed
SANITIZE_BACKENDS=auto run_tool initcheck_hopper_fwd --tool initcheck -- \
  "${py[@]}" --only dense --quick
[ $failed -gt $gated ] && echo "initcheck_hopper_fwd: not gated (TMA stores, docs/sanitizer.md)" | tee -a "$LOGS/summary.txt"
failed=$gated
if nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a lab/initcheck_tma.cu -o build/initcheck_tma \
    > "$LOGS/initcheck_tma_build.log" 2>&1; then
  # Not counted as a failure: its reports are the evidence docs/sanitizer.md asks for.
  timeout 40 "$CS" --tool initcheck build/initcheck_tma > "$LOGS/initcheck_tma.log" 2>&1
  echo "initcheck_tma (evidence, not gated): exit $?; $(grep -cE 'Uninitialized __global__ memory read' "$LOGS/initcheck_tma.log") reports; $(grep 'TMA-stored' "$LOGS/initcheck_tma.log")" | tee -a "$LOGS/summary.txt"
else
  echo "initcheck_tma: build failed (see initcheck_tma_build.log)" | tee -a "$LOGS/summary.txt"
fi
echo "sanitize: $failed tool runs with errors" | tee -a "$LOGS/summary.txt"
exit $failed
