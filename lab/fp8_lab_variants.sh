#!/usr/bin/env bash
# lab/fp8_time.py once per lab variant of the D=128 FP8 config (FLASHATTN_LAB_FP8=v, read by a tree
# with lab/ab/fp8_d128_variants.diff applied; 0 = the shipped config), for run_ab.sh's AB_CMD: a
# tree without the variants runs the shipped config once. The D=256 rows are the control (no
# variant touches them).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
variants=(0)
grep -q Sm90Fp8LabConfig csrc/flash_fwd_sm90/traits.h && variants=(0 1 2 3 4)
for v in "${variants[@]}"; do
  echo "--- FLASHATTN_LAB_FP8=$v"
  FLASHATTN_LAB_FP8=$v timeout 120 python3 lab/fp8_time.py
done
