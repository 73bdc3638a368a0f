#!/usr/bin/env bash
# Builds lab/bwd_lab.cu for a few head dims and candidate backward tile configs (ptxas report
# first: registers, spills), then runs them one after the other on the local GPU.
#   bash lab/bwd_lab.sh [build|run|all] [arch=90a]     binaries in ${LAB_BIN:-build/bwd_lab}
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-all}
ARCH=${2:-90a}
BIN=${LAB_BIN:-build/bwd_lab}
mkdir -p "$BIN"
# name D configs. d64's third: phase B's warps as 4 (keys) x 2 (head dim), FlashAttention-2's
# layout: 8 ldmatrix per 16 MMAs instead of 10 (the D=64 kernel is held back by the shared-memory
# instruction queue; perf-notes "Backward v20"); no spills for sm_90a, 24 B for sm_80.
CONFIGS=(
  "d64 64 LAB(128,128,8,2,2,4,1); LAB_LOADFLIP(128,128,8,2,2,4,1); LAB(128,128,8,2,4,4,1);"
  "d128 128 LAB(128,64,8,8,4,2,2);"
  "d256 256 LAB(32,64,8,2,2,4,1); LAB(64,64,8,2,2,2,1); LAB(64,64,8,4,2,2,1); LAB(64,64,8,2,2,4,1); LAB(64,64,8,4,4,4,1);"
)
# LAB_ONLY="d256": only the named entries.
if [ -n "${LAB_ONLY:-}" ]; then
  kept=()
  for c in "${CONFIGS[@]}"; do read -r name _ <<< "$c"; [[ " $LAB_ONLY " == *" $name "* ]] && kept+=("$c"); done
  CONFIGS=("${kept[@]}")
fi
build() {  # name D configs
  echo "$3" > "$BIN/$1.inc"
  nvcc -std=c++17 -O3 -Icsrc -gencode=arch=compute_${ARCH},code=sm_${ARCH} -Xptxas -v -DLAB_D="$2" \
    -DLAB_CONFIG_FILE="\"$PWD/$BIN/$1.inc\"" lab/bwd_lab.cu -o "$BIN/$1" 2> "$BIN/$1.ptxas"
  grep -A2 "flash_bwd_kernel" "$BIN/$1.ptxas" | grep -E "Compiling|registers|spill" | sed 's/^ptxas info *: //' > "$BIN/$1.resources" || true
}
if [ "$MODE" != run ]; then
  for c in "${CONFIGS[@]}"; do read -r name d cfg <<< "$c"; build "$name" "$d" "$cfg" & done
  wait
  for c in "${CONFIGS[@]}"; do read -r name _ <<< "$c"; echo "== $name"; cat "$BIN/$name.resources"; done
fi
if [ "$MODE" != build ]; then
  for c in "${CONFIGS[@]}"; do read -r name _ <<< "$c"; "$BIN/$name"; done
fi
