#!/usr/bin/env bash
# Builds and runs lab/kernel_lab.cu for a few head dims and candidate tile configs.
# usage: lab/kernel_lab.sh [arch=90a]
set -euo pipefail
cd "$(dirname "$0")/.."
ARCH=${1:-90a}
build() {  # D, configs: builds /tmp/kernel_lab_D
  local out=/tmp/kernel_lab_$1
  echo "$2" > "$out.inc"
  nvcc -std=c++17 -O3 -Icsrc -gencode=arch=compute_${ARCH},code=sm_${ARCH} -DLAB_D="$1" \
    -DLAB_CONFIG_FILE="\"$out.inc\"" lab/kernel_lab.cu -o "$out"
}
# Builds in parallel, runs one after the other so timings do not share the GPU.
build 64  "LAB(128,64,4); LAB(128,128,8); LAB(128,64,8);" &
build 128 "LAB(128,32,4); LAB(128,64,8); LAB(128,128,8); LAB(128,64,4);" &
wait
/tmp/kernel_lab_64
/tmp/kernel_lab_128
