#!/usr/bin/env bash
# Nsight Compute on the backward's main kernels: flashattn's, SDPA's FlashAttention-2 and cuDNN's,
# side by side (lab/ncu_bwd.py, one call of each per shape). Only kernels whose name says
# backward (or cuDNN: its generated kernels are named by tile, not by pass) are profiled; only
# backward calls run inside the profiled range. Text report to ${OUT:-build}/ncu_bwd.txt.
#   bash lab/ncu_bwd.sh [D:S:causal[:Hk] ...]  default: D=64 and D=128 at S=4k, non-causal (Hk: GQA's K/V heads;
#                                             NCU_BWD_SPLITS: ours once per group split, lab/ncu_bwd.py;
#                                             NCU_BWD_EXTRA: more metrics)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${OUT:-build}
mkdir -p "$out"
shapes=("$@")
[ ${#shapes[@]} -eq 0 ] && shapes=(64:4096:0 128:4096:0)
# Warp stall reasons, per issued instruction: where the 8 warps of a block wait.
stalls=$(printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' barrier short_scoreboard \
  long_scoreboard mio_throttle math_pipe_throttle lg_throttle wait not_selected dispatch_stall \
  membar sleeping tex_throttle selected no_instruction drain misc branch_resolving imc_miss)
# The tensor pipe (wgmma included) busy share, and the L2 traffic of reductions (dQ adds).
stalls="${stalls}sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor.sum"
stalls="${stalls},lts__t_sectors_op_red.sum,lts__t_sectors_op_atom.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed"
# Instructions issued (two kernels doing the same MMAs compare per step) and shared-memory bank
# conflicts (the portable D=64 kernel waits on the shared-memory instruction queue).
stalls="${stalls},smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
stalls="${stalls},l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"
# DRAM bytes and the L2's hit rate: whether a grid's launch order re-reads Q/dO from memory.
stalls="${stalls},dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct"
# NCU_BWD_EXTRA: more metrics, comma-separated (e.g. the L2 partitions' fabric traffic).
[ -n "${NCU_BWD_EXTRA:-}" ] && stalls="${stalls},${NCU_BWD_EXTRA}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
timeout 400 ncu --profile-from-start off --nvtx --print-summary none \
  --kernel-name regex:'flash_bwd|bwd_dq_dk_dv|dgrad|backward|bprop|cudnn' \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section SchedulerStats --section WarpStateStats --section LaunchStats --section Occupancy \
  --metrics "$stalls" \
  python3 lab/ncu_bwd.py "${shapes[@]}" > "$out/ncu_bwd.txt" 2>&1
rc=$?
grep -E "^  [a-zA-Z_].*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Registers Per|Shared Memory Configuration|Dynamic Shared|Achieved Occupancy|Stall|Executed Ipc A|issue_stalled|pipe_tensor|lts__|dram__|inst_executed.sum|bank_conflicts" "$out/ncu_bwd.txt" | head -200
exit $rc
