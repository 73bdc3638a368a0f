#!/usr/bin/env bash
# A/B of a kernel change on one GPU machine: this tree (B) against this tree with lab/ab/$PATCH
# reversed (A), both built, then lab/bench_method_check.py alternated A B A B on the same shapes.
#   PATCH=revert_lse.diff bash lab/ab/run_ab.sh D:S:causal ...
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
out=${OUT:-build}
root=$PWD
base=/tmp/flashattn-ab-base
rm -rf "$base" && mkdir -p "$base"
tar --exclude=./build --exclude='*.so' --exclude=./.git -cf - . | tar -C "$base" -xf -
(cd "$base" && patch -R -p1 < "$root/lab/ab/${PATCH:?}") > "$out/ab_patch.log" 2>&1 || { echo "patch failed"; exit 2; }
(cd "$base" && MAX_JOBS=8 bash lab/gpu_build.sh > "$out/ab_build_a.log" 2>&1) &
(MAX_JOBS=8 bash lab/gpu_build.sh > "$out/ab_build_b.log" 2>&1) &
wait
tail -n 1 "$out/ab_build_a.log" "$out/ab_build_b.log"
for round in 1 2; do
  for side in A B; do
    dir=$root; [ $side = A ] && dir=$base
    echo "=== round $round side $side"
    (cd "$dir" && PYTHONPATH=$dir timeout 200 python3 lab/bench_method_check.py "$@" 2>&1 | grep -E "flashattn|sdpa|shape")
  done
done
