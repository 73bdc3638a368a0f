#!/usr/bin/env bash
# Nsight Compute on the forward kernels of flashattn, SDPA's cuDNN backend and FlashAttention-3
# (where its wheel is installed), side by side
# (lab/ncu_fwd.py makes one call of each per shape inside a profiler range; every kernel in it
# is profiled). Sections: speed of light, compute (pipe) and memory workload, scheduler and warp
# stall statistics. Text report to ${OUT:-build}/ncu_fwd.txt.
#   bash lab/ncu_fwd.sh [--fp8] [D:S:causal ...]      default: the short-sequence shapes
# (--fp8: the FP8 forward's calls, ours and FlashAttention-3's, lab/ncu_fwd.py says which shapes;
# with shared-memory wavefronts, bank conflicts and the instructions issued per scheduler)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${OUT:-build}
mkdir -p "$out"
shapes=("$@")
[ ${#shapes[@]} -eq 0 ] && shapes=(128:512:0 64:512:0 128:16384:0)
# Warp stall reasons, per issued instruction (as lab/ncu_bwd.sh).
stalls=$(printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' barrier short_scoreboard \
  long_scoreboard mio_throttle math_pipe_throttle lg_throttle wait not_selected dispatch_stall \
  membar sleeping selected no_instruction branch_resolving)
# The tensor pipe (wgmma included) busy share, and the L2's throughput.
stalls="${stalls}sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor.sum"
stalls="${stalls},lts__throughput.avg.pct_of_peak_sustained_elapsed"
stalls="${stalls},l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"
stalls="${stalls},smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active"
# NCU_FWD_EXTRA: more metrics, comma-separated (e.g. breakdown:lts__throughput.avg.pct_of_peak_sustained_elapsed).
stalls="${stalls}${NCU_FWD_EXTRA:+,$NCU_FWD_EXTRA}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
timeout 400 ncu --profile-from-start off --nvtx --print-summary none \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section SchedulerStats --section WarpStateStats --section LaunchStats --section Occupancy \
  --metrics "$stalls" \
  python3 lab/ncu_fwd.py "${shapes[@]}" > "$out/ncu_fwd.txt" 2>&1
rc=$?
grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Memory Throughput|L2 Hit|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Registers Per|Grid Size|Dynamic Shared|Executed Ipc A|issue_stalled|pipe_tensor|lts__|l1tex__|smsp__inst|smsp__issue" "$out/ncu_fwd.txt" | head -250
exit $rc
