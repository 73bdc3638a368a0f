#!/usr/bin/env bash
# On a GPU machine: build the extension in place for the local GPU (timed), for lab/gpu_run.sh and the lab scripts.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a} MAX_JOBS=${MAX_JOBS:-16} python3 setup.py -q build_ext --inplace
echo "build_ext took $(( $(date +%s) - start )) s"
