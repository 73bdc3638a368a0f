#!/usr/bin/env bash
# lab/fp8_time.py once per lab variant of the D=128 FP8 config (FLASHATTN_LAB_FP8=v, read by a tree
# with one of lab/ab/fp8_d128_variants*.diff applied: its instantiations/fwd_sm90_fp8_hdim128_lab<v>.cu;
# 0 = the shipped config), for run_ab.sh's AB_CMD: a tree without variants runs the shipped config
# once. The D=256 rows are the control (no variant touches them). Each variant runs with --check
# (its errors against the float64 reference next to FlashAttention-3's) before its timings.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
n=$(ls csrc/flash_fwd_sm90/instantiations/fwd_sm90_fp8_hdim128_lab*.cu 2>/dev/null | wc -l)
variants=(0)
[ "$n" -gt 0 ] && variants=(0 $(seq 1 "$n"))
for v in "${variants[@]}"; do
  echo "--- FLASHATTN_LAB_FP8=$v"
  check=(); [ "$v" != 0 ] && check=(--check)  # a variant's errors against the reference first
  FLASHATTN_LAB_FP8=$v timeout 150 python3 lab/fp8_time.py "${check[@]}"
done
