#!/usr/bin/env bash
# The compile/resource check of every kernel with CUDA 12.8's assembler, on a machine whose
# nvcc is another release (here 13.0), no GPU needed. tools/ci_static.sh runs it, unless
# FLASHATTN_PTXAS_128 names this ptxas: then the test suite's build checks
# (tests/infra/test_build_checks.py) assemble the PTX of their one front-end pass with it too.
#
# CUDA 12.8's nvcc is not on PyPI; its ptxas is (nvidia-cuda-nvcc-cu12==12.8.*, which ships ptxas
# and libnvvm, no nvcc driver). So: the machine's nvcc compiles each kernel to PTX, 12.8's ptxas
# assembles that PTX for sm_89 and sm_90a with -v, and tools/check_resources.py checks the same
# things as for the default toolkit: 0 spills, 0 stack, registers within the launch bounds.
#
# nvcc 13.0 writes `.version 9.0`, which ptxas 12.8 refuses ("Unsupported .version 9.0; current
# version is '8.7'"), so the PTX's .version is lowered to 8.7 (--ptx-isa 8.7). That cannot pass a
# kernel that 12.8 does not understand: ptxas checks every instruction and directive against the
# declared version and fails on any that 8.7 lacks ("Feature 'X' requires PTX ISA .version 9.0 or
# later"); a canary in tools/check_resources.py shows this ptxas doing so. What it does not cover: 12.8's front end
# (cicc) may emit different PTX than 13.0's, so register counts can differ from a real 12.8 build.
# The image build (Dockerfile, real nvcc 12.8) and the suite run inside it (tests/infra/test_build_checks.py
# with 12.8's nvcc) are the full check; this one catches 12.8-assembler trouble before a GPU run.
#
# usage: tools/check_cuda128.sh [--ptxas PATH] [--archs sm_89,sm_90a] [--jobs N]
#   PTXAS defaults to the nvidia-cuda-nvcc-cu12 wheel in $PYTHON's environment (python3).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
ptxas=${PTXAS_128:-}
archs=${CUDA128_ARCHS:-sm_89,sm_90a}
jobs=$(nproc 2>/dev/null || echo 2)
while [ "$#" -gt 0 ]; do
  case "$1" in
    --ptxas) ptxas=$2; shift 2 ;;
    --archs) archs=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    *) echo "check_cuda128: unknown argument $1" >&2; exit 2 ;;
  esac
done

fail() { echo "check_cuda128: FAIL: $*" >&2; exit 1; }

if [ -z "$ptxas" ]; then
  ptxas=$("$PY" -c 'import nvidia.cuda_nvcc as m, os; print(os.path.join(os.path.dirname(m.__file__), "bin", "ptxas"))' 2>/dev/null) ||
    fail "no CUDA 12.8 ptxas: install nvidia-cuda-nvcc-cu12==12.8.* (requirements-ci.txt) into $PY's environment, or pass --ptxas"
fi
[ -x "$ptxas" ] || fail "$ptxas is not an executable"
version=$("$ptxas" --version)
grep -q "release 12\.8," <<<"$version" || fail "$ptxas is not CUDA 12.8's: $(grep release <<<"$version")"
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/bin/nvcc)}
[ -x "$nvcc" ] || fail "no nvcc to emit PTX (set NVCC)"
echo "check_cuda128: PTX from $("$nvcc" --version | grep -o 'release [0-9.]*'), assembled by ptxas $(grep -o 'release [0-9.]*' <<<"$version") ($ptxas)"

# tools/check_resources.py first checks that this ptxas gates features by the declared PTX ISA (a
# canary it must refuse under .version 7.8 and take under 8.0), which is what makes lowering safe.
NVCC=$nvcc "$PY" tools/check_resources.py --nvcc "$nvcc" --ptxas "$ptxas" --ptx-isa 8.7 --archs "$archs" --jobs "$jobs"
