#!/usr/bin/env bash
# Nsight Compute on the Hopper forward's split over the keys at the seed shapes (lab/ncu_split.py:
# S=256 unsplit against cuDNN, 2 and 8 splits merged in a cluster against the combine kernel), with
# lab/ncu_fwd.sh's sections and stall metrics. Text report to ${OUT:-build}/ncu_split.txt.
#   bash lab/ncu_split.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${OUT:-build}
mkdir -p "$out"
stalls=$(printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' barrier short_scoreboard \
  long_scoreboard mio_throttle math_pipe_throttle lg_throttle wait not_selected dispatch_stall \
  membar sleeping selected no_instruction branch_resolving)
stalls="${stalls}sm__cycles_active.max,gpc__cycles_elapsed.max"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
timeout 300 ncu --profile-from-start off --nvtx --print-summary none \
  --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section LaunchStats \
  --metrics "$stalls" \
  python3 lab/ncu_split.py > "$out/ncu_split.txt" 2>&1
rc=$?
grep -E "^  [a-zA-Z_].*\(|Duration|Elapsed Cycles|Issue Slots Busy|Warp Cycles Per Issued|Registers Per|Grid Size|Cluster Size|Dynamic Shared|issue_stalled|cycles_active|cycles_elapsed" "$out/ncu_split.txt" | head -200
exit $rc
