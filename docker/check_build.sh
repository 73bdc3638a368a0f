#!/usr/bin/env bash
# Run at image build time, right after the extension is built (no GPU there): the extension
# imports, and its fat binary holds a cubin for every architecture of TORCH_CUDA_ARCH_LIST.
# usage: docker/check_build.sh "8.9;9.0a"
set -euo pipefail
archs=${1:?usage: check_build.sh TORCH_CUDA_ARCH_LIST}
PY=${PYTHON:-python3}

"$PY" - <<'EOF'
import flashattn, torch
if not flashattn.extension_available():
    raise SystemExit(f"check_build: {flashattn.extension_error()}")
print(f"check_build: torch {torch.__version__} (CUDA {torch.version.cuda}), flashattn build {flashattn.build_info()}")
EOF

command -v cuobjdump >/dev/null || { echo "check_build: no cuobjdump (CUDA devel images have it): cannot list the cubins" >&2; exit 1; }
so=$("$PY" -c 'import flashattn._C as c; print(c.__file__)')
elfs=$(cuobjdump --list-elf "$so")
missing=0
IFS=';, ' read -r -a wanted <<<"$archs"
for a in "${wanted[@]}"; do
  sm="sm_${a%+PTX}"
  sm=${sm/./}
  # cuobjdump names cubins like flashattn._C.2.sm_90a.cubin
  if ! grep -q "\.${sm}\.cubin" <<<"$elfs"; then
    echo "check_build: no ${sm} cubin in $so" >&2
    missing=1
  fi
done
echo "check_build: cubins in $so:"
grep -o 'sm_[0-9]*a\?\.cubin' <<<"$elfs" | sort | uniq -c
exit "$missing"
