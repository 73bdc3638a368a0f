#!/usr/bin/env bash
# On a GPU machine: the README's install command, verbatim, in a fresh virtual environment, and
# whether it gives working kernels. The GPU machines have no package index, so the venv sees the
# machine's packages (--system-site-packages and the machine python's own folders: torch, pytest,
# ...) and pip may not reach an index (PIP_NO_INDEX=1: a requirement the machine lacks fails at
# once instead of retrying); wheels carried in .whl/ are installed into the venv first. Everything else is what a
# user gets: the command builds the extension for the local GPU, then `python -m flashattn` reports.
# Then: extension_available(), the Hopper path, and the GPU tests named in $FRESH_VENV_TESTS
# (default: the forward's split tests and the attention tests) with the venv's python.
#   bash lab/fresh_venv_gpu.sh [VENV_DIR]          (~2 min on an H100: the build is most of it)
set -uo pipefail
cd "$(dirname "$0")/.."
venv=${1:-${TMPDIR:-/tmp}/flashattn-fresh-venv}
rm -rf "$venv"
# The machine's python3 may itself be a virtual environment (torch installed there, not in the base
# interpreter that --system-site-packages exposes): its package folders go into the new venv by a
# .pth file, so "torch>=2.4" in the README's command is found installed, as on a user's machine.
machine_sites=$(python3 -c "import sysconfig; p = sysconfig.get_paths(); print(p['purelib']); print(p['platlib'])" | sort -u)
python3 -m venv --system-site-packages "$venv" || exit 2
# shellcheck disable=SC1091
. "$venv/bin/activate"
venv_site=$(python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
printf '%s\n' "$machine_sites" > "$venv_site/_machine_packages.pth"
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
if compgen -G ".whl/*.whl" > /dev/null; then
  python -m pip install -q --no-deps .whl/*.whl || echo "fresh_venv: carried wheels failed to install"
fi
install=$(python tools/readme_commands.py | sed -n 1p)
echo "fresh_venv: README install command: $install"
t0=$(date +%s)
bash -c "$install"
rc=$?
echo "fresh_venv: install exit $rc in $(( $(date +%s) - t0 )) s"
[ $rc -eq 0 ] || exit 1
python - <<'PY' || exit 1
import sys, torch, flashattn
print("fresh_venv: python", sys.executable, "flashattn from", flashattn.__file__)
if not flashattn.extension_available():
    sys.exit(f"fresh_venv: no kernels: {flashattn.extension_error()}")
info = flashattn.build_info()
print("fresh_venv: build", info)
q = torch.randn(1, 512, 2, 128, device="cuda", dtype=torch.bfloat16)
out = flashattn.flash_attn_func(q, q, q, causal=True)
ref = torch.nn.functional.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, q, q)), is_causal=True)
err = (out.float() - ref.transpose(1, 2).float()).abs().max().item()
print(f"fresh_venv: a call works, max |out - SDPA| = {err:.3g}")
if torch.cuda.get_device_capability() == (9, 0):
    with flashattn.use_backend("hopper"):
        flashattn.flash_attn_func(q, q, q, causal=True)
    print("fresh_venv: the Hopper path runs")
sys.exit(0 if err < 2e-2 else 1)
PY
tests=${FRESH_VENV_TESTS:-tests/kernels/test_fwd_split_gpu.py tests/kernels/test_attention_gpu.py}
# shellcheck disable=SC2086
FLASHATTN_HYPOTHESIS_PROFILE=ci python -m pytest -q -p no:cacheprovider $tests
