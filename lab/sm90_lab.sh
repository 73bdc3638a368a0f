#!/usr/bin/env bash
# On an H100/H200: builds lab/sm90_lab.cu with the Hopper path's sources (no torch) and runs it.
#   bash lab/sm90_lab.sh          correctness (~1 min), then speed tables (~3 min)
#   bash lab/sm90_lab.sh check    correctness only
#   bash lab/sm90_lab.sh schedule correctness, then static vs dynamic tile schedule (causal, ~30 s)
#   bash lab/sm90_lab.sh variants [NAME..]  lab variants (kVariants in sm90_lab.cu; default two D=128
#                                   ones): their correctness cases, then alternating-sample
#                                   timing vs the default config; no hang-check build (short GPU slots;
#                                   a variant never run before is safer through "check" first)
#   bash lab/sm90_lab.sh l2 [MB..] the L2 group budget A/B (alternating samples), no hang-check build;
#                                   with budgets: each vs the default on the causal cells
#   bash lab/sm90_lab.sh dynamic-cost  both schedules forced on calls without a mask (what the
#                                   dynamic one costs apart from balance), no hang-check build
# Two builds, compiled in parallel: build/sm90_lab (the kernels exactly as the extension compiles
# them) runs everything; build/sm90_lab_hangcheck (FLASHATTN_SM90_HANG_CHECK: a wait stuck for
# 10 s reports its barrier/block/thread and traps) runs only when the first one times out or
# crashes, to say where the pipeline stuck. Logs: build/sm90_lab*.log, also copied to $OUT if set.
# Exit status: 0 all correct; 1 a correctness failure; 2 CUDA error; 3 build failure; 124 timeout.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
mkdir -p build/sm90_lab_obj build/sm90_lab_hc_obj
# The modes that time without a correctness run first, so without the hang-check build.
case "${1:-full}" in variants | l2 | dynamic-cost) quick=1 ;; *) quick=0 ;; esac
BASE="-std=c++17 -O3 --expt-relaxed-constexpr -Icsrc -gencode=arch=compute_90a,code=sm_90a -lineinfo"
SRCS="lab/sm90_lab.cu csrc/flash_fwd_sm90/dispatch.cu csrc/common/sm90/tma_host.cu $(ls csrc/flash_fwd_sm90/instantiations/fwd_sm90_*.cu)"
start=$(date +%s)
pids=()
for src in $SRCS; do
  name=$(basename "${src%.cu}")
  nvcc $BASE -Xptxas -v -c "$src" -o "build/sm90_lab_obj/$name.o" > "build/sm90_lab_obj/$name.log" 2>&1 &
  pids+=($!)
  if [ $quick -eq 0 ]; then
    nvcc $BASE -DFLASHATTN_SM90_HANG_CHECK -c "$src" -o "build/sm90_lab_hc_obj/$name.o" > "build/sm90_lab_hc_obj/$name.log" 2>&1 &
    pids+=($!)
  fi
done
fail=0
for pid in "${pids[@]}"; do wait "$pid" || fail=1; done
if [ $fail -ne 0 ]; then
  grep -h -B2 -A6 "error" build/sm90_lab_obj/*.log build/sm90_lab_hc_obj/*.log | head -80
  echo "sm90_lab: BUILD FAILED"
  exit 3
fi
nvcc -gencode=arch=compute_90a,code=sm_90a build/sm90_lab_obj/*.o -o build/sm90_lab || { echo "LINK FAILED"; exit 3; }
if [ $quick -eq 1 ]; then
  timeout 300 ./build/sm90_lab "$@" 2>&1 | tee build/sm90_lab_speed.log
  rs=${PIPESTATUS[0]}
  [ -n "${OUT:-}" ] && cp build/sm90_lab_speed.log "$OUT/"
  exit "$rs"
fi
nvcc -gencode=arch=compute_90a,code=sm_90a build/sm90_lab_hc_obj/*.o -o build/sm90_lab_hangcheck || { echo "LINK FAILED"; exit 3; }
echo "build took $(( $(date +%s) - start )) s"
echo "== ptxas resources (expect 0 spill bytes and no C75xx wgmma-serialization warnings) =="
python3 tools/sm90_ptxas_report.py build/sm90_lab_obj/*.log

save() { if [ -n "${OUT:-}" ]; then cp build/sm90_lab*.log "$OUT/" 2>/dev/null; fi; }
timeout 300 ./build/sm90_lab check 2>&1 | tee build/sm90_lab_check.log
rc=${PIPESTATUS[0]}
if [ $rc -ne 0 ] && [ $rc -ne 1 ]; then
  echo "sm90_lab: correctness run ended with status $rc ($([ $rc -eq 124 ] && echo timeout || echo crash)); rerunning the hang-check build"
  timeout 300 ./build/sm90_lab_hangcheck check 2>&1 | tail -40 | tee build/sm90_lab_hangcheck.log
  save
  exit $rc
fi
if [ "${1:-full}" != "check" ]; then
  speed_mode=speed
  [ "${1:-full}" = "schedule" ] && speed_mode=schedule
  timeout 600 ./build/sm90_lab $speed_mode 2>&1 | tee build/sm90_lab_speed.log
  rs=${PIPESTATUS[0]}
  [ $rs -ne 0 ] && echo "sm90_lab: speed run ended with status $rs" && [ $rc -eq 0 ] && rc=$rs
fi
save
echo "sm90_lab exit status: $rc"
exit $rc
