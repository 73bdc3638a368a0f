#!/usr/bin/env bash
# On a GPU machine: builds lab/decode_lab.cu (the decode kernel's tile-config and split-count
# variants against the library's own plan, CUDA-graph replayed, outputs cross-checked) and runs it.
# ~30 s on an H100.
#   bash lab/decode_lab.sh [arch=90a]      log: build/decode_lab.log (also $OUT/ if set)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ARCH=${1:-90a}
mkdir -p build
nvcc -std=c++17 -O3 --expt-relaxed-constexpr -Icsrc -gencode=arch=compute_${ARCH},code=sm_${ARCH} \
  lab/decode_lab.cu csrc/common/sm90/tma_host.cu -o build/decode_lab || { echo "decode_lab: BUILD FAILED"; exit 3; }
timeout 300 ./build/decode_lab 2>&1 | tee build/decode_lab.log
rc=${PIPESTATUS[0]}
if [ -n "${OUT:-}" ]; then cp build/decode_lab.log "$OUT/"; fi
exit "$rc"
