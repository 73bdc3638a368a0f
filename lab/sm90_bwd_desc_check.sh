#!/usr/bin/env bash
# CPU-only: builds and runs lab/sm90_bwd_desc_check.cu (the Hopper backward prototype's wgmma
# descriptors against CuTe's). CUTLASS headers as lab/sm90_desc_check.sh fetches them (or set
# CUTLASS_INCLUDE). Needs nvcc, no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
INC=${CUTLASS_INCLUDE:-build/cutlass-4.2.0/cutlass_library/source/include}
if [ ! -d "$INC/cute" ]; then
  mkdir -p build/cutlass-4.2.0
  python3 -m pip download nvidia-cutlass==4.2.0.0 --no-deps -q -d build/cutlass-4.2.0
  python3 -m zipfile -e build/cutlass-4.2.0/nvidia_cutlass-4.2.0.0-py3-none-any.whl build/cutlass-4.2.0
fi
mkdir -p build
nvcc -std=c++17 -O1 --expt-relaxed-constexpr -Icsrc -I"$INC" "$@" lab/sm90_bwd_desc_check.cu -o build/sm90_bwd_desc_check
./build/sm90_bwd_desc_check | grep -v "cast_smem_ptr_to_uint not supported"
