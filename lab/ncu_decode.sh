#!/usr/bin/env bash
# Nsight Compute on the decode kernels of flashattn, SDPA's default and FlashAttention-3 (where its
# wheel is installed), side by side (lab/decode_profile.py --ncu makes one call of each per shape
# inside a profiler range; every kernel in it is profiled). Sections: speed of light, memory
# workload, occupancy, launch, scheduler and warp stall statistics. Text report to
# ${OUT:-build}/ncu_decode.txt.
#   bash lab/ncu_decode.sh [B:Sk ...]      default: 1:1024 64:16384
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${OUT:-build}
mkdir -p "$out"
shapes=("$@")
[ ${#shapes[@]} -eq 0 ] && shapes=(1:1024 64:16384)
stalls=$(printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' barrier short_scoreboard \
  long_scoreboard mio_throttle lg_throttle wait not_selected dispatch_stall membar sleeping no_instruction)
stalls="${stalls}dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
timeout 400 ncu --profile-from-start off --nvtx --print-summary none \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
  --section LaunchStats --section Occupancy --metrics "$stalls" \
  python3 lab/decode_profile.py --ncu "${shapes[@]}" > "$out/ncu_decode.txt" 2>&1
rc=$?
grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput|L2 Hit|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Registers Per|Grid Size|Block Size|Dynamic Shared|Achieved Occupancy|Theoretical Occupancy|issue_stalled|dram__|lts__" "$out/ncu_decode.txt" | head -300
exit $rc
