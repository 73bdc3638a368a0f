#!/usr/bin/env bash
# Where our Hopper kernel's warps stall, per SASS instruction: Nsight Compute's source counters
# (warp-state samples by PC) for one shape, our kernel only (lab/ncu_fwd.py's calls, filtered to
# flash_fwd_sm90_kernel; NCU_KERNEL=flash_bwd_sm90 NCU_SCRIPT=lab/ncu_bwd.py for the backward). Writes ${OUT:-build}/ncu_source_D_S_causal.{txt,csv}: the
# WarpStateStats/SourceCounters sections, and the per-instruction table (SASS, samples, stall
# reasons) when this ncu can print the source page (NCU_TAG replaces D_S_causal in the names). Then summarizes the top stalled instructions
# (lab/ncu_source_top.py).
#   bash lab/ncu_source.sh [D:S:causal]        default 64:512:1 (the weakest standard-grid cell)
# NCU_LAUNCH_SKIP=n profiles the (n+1)-th matching launch of the profiled range (e.g. 1 with
# NCU_BWD_DET=1: the deterministic call's kernel, which lab/ncu_bwd.py runs after the default one).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${OUT:-build}
mkdir -p "$out"
shape=${1:-64:512:1}
tag=${NCU_TAG:-${shape//:/_}}  # NCU_TAG names the files when two kernels are profiled on one shape
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
timeout 300 ncu --profile-from-start off --kernel-name regex:"${NCU_KERNEL:-flash_fwd_sm90}" \
  --launch-skip "${NCU_LAUNCH_SKIP:-0}" --launch-count 1 \
  --section WarpStateStats --section SourceCounters --section SchedulerStats --import-source no \
  -f -o "$out/ncu_source_$tag" python3 "${NCU_SCRIPT:-lab/ncu_fwd.py}" "$shape" > "$out/ncu_source_$tag.log" 2>&1
rc=$?
ncu --import "$out/ncu_source_$tag.ncu-rep" --print-summary none > "$out/ncu_source_$tag.txt" 2>&1
ncu --import "$out/ncu_source_$tag.ncu-rep" --page source --print-source sass --csv > "$out/ncu_source_$tag.csv" 2>&1 ||
  echo "this ncu cannot print the source page" >> "$out/ncu_source_$tag.txt"
grep -E "Warp Cycles|No Eligible|Issue Slots|Stall|stall" "$out/ncu_source_$tag.txt" | head -40
head -c 600 "$out/ncu_source_$tag.csv"; echo
python3 lab/ncu_source_top.py "$out/ncu_source_$tag.csv" 25 2>/dev/null || true
exit $rc
