#!/usr/bin/env bash
# On an H100/H200: builds lab/sm90_bwd_lab.cu (the Hopper backward prototype against the portable
# backward; nvcc and the CUDA runtime only, no torch) and runs it.
#   bash lab/sm90_bwd_lab.sh [all|check|time|build]   binary and ptxas log in ${LAB_BIN:-build}
# Prints the ptxas resources of the sm90 backward kernels (registers, spills, smem) first.
# Exit status: 0 all PASS; 1 a FAIL; 2 CUDA error; 3 HANG (a kernel did not finish); 4 build failure.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 4
MODE=${1:-all}
BIN=${LAB_BIN:-build}
mkdir -p "$BIN"
if [ "$MODE" = build ] || [ ! -x "$BIN/sm90_bwd_lab" ] || [ -n "${LAB_REBUILD:-}" ]; then
  nvcc -std=c++17 -O3 --expt-relaxed-constexpr -Icsrc -gencode=arch=compute_90a,code=sm_90a -Xptxas -v \
    lab/sm90_bwd_lab.cu csrc/common/sm90/tma_host.cu -o "$BIN/sm90_bwd_lab" > "$BIN/sm90_bwd_lab.ptxas" 2>&1 || { cat "$BIN/sm90_bwd_lab.ptxas"; exit 4; }
  grep -A3 "Compiling entry function.*flash_bwd_sm90_kernel" "$BIN/sm90_bwd_lab.ptxas" |
    grep -E "Compiling|registers|spill" | sed -e 's/^ptxas info *: //' -e 's/Compiling entry function //'
  grep -i "wgmma.*serializ\|Potential Performance Loss" "$BIN/sm90_bwd_lab.ptxas" || true
fi
[ "$MODE" = build ] && exit 0
"$BIN/sm90_bwd_lab" "$MODE"
