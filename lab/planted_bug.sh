#!/usr/bin/env bash
# Mutation check of the test suite, on a GPU machine: in a scratch copy of the repository, plant
# one bug in the kernel, rebuild, run the GPU tests, and report whether they caught it.
#
# usage: lab/planted_bug.sh [BUG] [extra pytest args...]
#   BUG (default: causal):
#     causal      off-by-one causal mask: query i also sees key i + offset + 1   (common/mask.cuh)
#     kv_tail     the key-length mask lets key Sk (past the end) in             (common/mask.cuh)
#     scale       softmax scale 1% too large                                     (binding.cpp)
#     empty_rows  blocks whose rows see no key leave O unwritten (only the NaN poisoning of the
#                 outputs can see this)                                          (epilogue.cuh)
#     bwd_causal  backward: key i + offset + 1 counts as visible to query i in P  (flash_bwd/mainloop.cuh)
#     bwd_gqa     backward: every query head of a GQA group reads the group's first head's Q/dO
#                                                                                (flash_bwd/mainloop.cuh)
#     bwd90_mask  Hopper backward: key i + offset + 1 counts as visible to query i
#                                                                           (flash_bwd_sm90/mainloop.cuh)
#     bwd90_gqa   Hopper backward: every step of a GQA group walks the group's first query head
#                                                                           (flash_bwd_sm90/block.h)
#     fwd90_packed  Hopper forward, packed batches: bottom-right causal one key too far per sequence
#                                                                           (flash_fwd_sm90/packed.cuh)
#     unaligned   inputs at unaligned addresses passed on through contiguous(), which returns a
#                 contiguous view unchanged (the bug fixed on 2026-12-02)     (host_args.h)
#     list        print the bugs and exit
#     patterns    check that every bug's pattern still matches its file (no GPU needed) and exit
# Forward bugs run the whole GPU suite; bwd* bugs run the backward tests (tests/kernels/test_backward_gpu.py,
# tests/kernels/test_public_gradients.py); fwd90_packed the packed-batch tests (whose Hopper cases run
# on "auto"); unaligned the forward, backward, packed-batch and decode tests.
# env: TORCH_CUDA_ARCH_LIST (default 9.0a), MAX_JOBS (default 16), KEEP_SCRATCH=1 to keep the copy.
# exit status: 0 the suite caught the bug (tests failed), 1 it did not (tests passed),
#              2 the experiment itself went wrong (bug not applied, build failed, pytest error).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUG=${1:-causal}
[ $# -gt 0 ] && shift

# FILE and SED of bug $1 (1 if there is no such bug): the file it is planted in, the sed expression that plants it.
bug_def() {
  local f s
  case "$1" in
    causal) f=csrc/common/mask.cuh
      s='s/w\.hi_shift = w\.has_hi ? offset + window_right + 1 : 0;/w.hi_shift = w.has_hi ? offset + window_right + 2 : 0;/' ;;
    kv_tail) f=csrc/common/mask.cuh
      s='s/if (!has_hi) return seqlen_k;/if (!has_hi) return seqlen_k + 1;/' ;;
    scale) f=csrc/binding.cpp
      s='s/  p\.set_scale(scale);/  p.set_scale(scale * 1.01);/' ;;
    empty_rows) f=csrc/flash_fwd/epilogue.cuh
      s='s/for (int idx = threadIdx\.x; idx < rows \* chunks; idx += Traits::kNThreads) {/for (int idx = threadIdx.x; idx < 0 * rows * chunks; idx += Traits::kNThreads) {/' ;;
    bwd_causal) f=csrc/flash_bwd/mainloop.cuh
      s='s/(p\.causal \&\& key > query + causal_offset()))/(p.causal \&\& key > query + causal_offset() + 1))/' ;;
    bwd_gqa) f=csrc/flash_bwd/mainloop.cuh
      s='s/const int hq = head_kv \* group + t \/ m_steps;/const int hq = head_kv * group;/' ;;
    bwd90_mask) f=csrc/flash_bwd_sm90/mainloop.cuh
      s='s/window\.has_hi ? key - window\.hi_shift + 1 : INT_MIN;/window.has_hi ? key - window.hi_shift : INT_MIN;/' ;;
    bwd90_gqa) f=csrc/flash_bwd_sm90/block.h
      s='s/int head_q(int t) const { return head_q0 + (t0 + t) \/ m_steps; }/int head_q(int t) const { return head_q0; }/' ;;
    fwd90_packed) f=csrc/flash_fwd_sm90/packed.cuh
      s='s/s\.causal_offset = p\.mask_top_left ? 0 : s\.seqlen_k - s\.seqlen_q;/s.causal_offset = p.mask_top_left ? 0 : s.seqlen_k - s.seqlen_q + 1;/' ;;
    unaligned) f=csrc/host_args.h
      s='s/return aligned16(t) ? t : t\.clone(at::MemoryFormat::Contiguous);/return aligned16(t) ? t : t.contiguous();/' ;;
    *) return 1 ;;
  esac
  FILE=$f SED=$s
}
BUGS="causal kv_tail scale empty_rows bwd_causal bwd_gqa bwd90_mask bwd90_gqa fwd90_packed unaligned"

case "$BUG" in
  list)
    sed -n '6,24p' "$0"; exit 0 ;;
  patterns)  # every bug's pattern still matches its file (CPU only: tests/infra/test_planted_bugs.py)
    bad=0
    for b in $BUGS; do
      bug_def "$b"
      if [ "$(sed "$SED" "$ROOT/$FILE")" = "$(cat "$ROOT/$FILE")" ]; then
        echo "planted_bug: the pattern of '$b' no longer matches $FILE" >&2; bad=1
      else
        echo "$b: $FILE"
      fi
    done
    exit $bad ;;
  *)
    bug_def "$BUG" || { echo "planted_bug: unknown bug '$BUG' (try: $0 list)" >&2; exit 2; } ;;
esac

SCRATCH=$(mktemp -d /tmp/flashattn-planted-"$BUG"-XXXXXX)
cleanup() { [ "${KEEP_SCRATCH:-0}" = 1 ] || rm -rf "$SCRATCH"; }
trap cleanup EXIT
fail_setup() { echo "PLANTED BUG '$BUG': EXPERIMENT FAILED: $*" >&2; exit 2; }

echo "== copying $ROOT to $SCRATCH (without build outputs)"
tar -C "$ROOT" --exclude=./.git --exclude=./build --exclude='*.so' --exclude=./.hypothesis \
    --exclude=./.pytest_cache --exclude=./.devbuild --exclude=./results -cf - . | tar -C "$SCRATCH" -xf - \
  || fail_setup "copy failed"

cd "$SCRATCH" || fail_setup "no scratch dir"
[ -f "$FILE" ] || fail_setup "$FILE does not exist in this tree"
cp "$FILE" "$FILE.orig"
sed -i "$SED" "$FILE"
if cmp -s "$FILE" "$FILE.orig"; then
  fail_setup "the pattern for '$BUG' no longer matches $FILE; update this script"
fi
echo "== planted '$BUG' in $FILE:"
diff -u "$FILE.orig" "$FILE" | sed -n '3,$p' | grep '^[-+]'
rm -f "$FILE.orig"

echo "== building (TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a})"
start=$(date +%s)
TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a} MAX_JOBS=${MAX_JOBS:-16} python3 setup.py -q build_ext --inplace \
  || fail_setup "build failed"
echo "build took $(( $(date +%s) - start )) s"

export PYTHONPATH="$SCRATCH${PYTHONPATH:+:$PYTHONPATH}"
python3 - "$SCRATCH" <<'PY' || fail_setup "the scratch copy's flashattn is not the one imported, or its extension did not load, or there is no GPU"
import sys, torch, flashattn
assert torch.cuda.is_available(), 'no CUDA GPU'
assert flashattn.__file__.startswith(sys.argv[1]), flashattn.__file__
assert flashattn.extension_available(), flashattn.extension_error()
PY

# The suite's backend parameter: the portable kernels, or the Hopper backward for its own bugs.
BACKEND=portable
case "$BUG" in
  bwd90*) TESTS=(tests/kernels/test_backward_gpu.py tests/kernels/test_public_gradients.py); BACKEND=hopper ;;
  bwd*) TESTS=(tests/kernels/test_backward_gpu.py tests/kernels/test_public_gradients.py) ;;
  fwd90_packed) TESTS=(tests/kernels/test_varlen_gpu.py) ;;
  unaligned) TESTS=(tests/kernels/test_attention_gpu.py tests/kernels/test_backward_gpu.py tests/kernels/test_varlen_gpu.py
                    tests/kernels/test_kvcache.py tests/kernels/test_fp8_gpu.py) ;;
  *)     TESTS=(tests) ;;
esac
echo "== running the GPU tests of ${TESTS[*]} (stops at the first failure)"
# A bug that hangs a kernel (bwd90_gqa's dQ tickets never come) ends the run with the hung test's stack
# and status 1 after FLASHATTN_TEST_HANG_S seconds of one test (tests/pytest_flashattn.py): caught,
# inside gpu_run.sh's 280 s step with the build.
export FLASHATTN_TEST_HANG_S=${FLASHATTN_TEST_HANG_S:-90}
python3 -m pytest -x -q -m gpu -p no:cacheprovider --flashattn-backend="$BACKEND" "${TESTS[@]}" "$@"
rc=$?
case $rc in
  1) echo "PLANTED BUG '$BUG': CAUGHT (the GPU tests failed, see above)"; exit 0 ;;
  0) echo "PLANTED BUG '$BUG': NOT CAUGHT (every GPU test passed with the bug in place)"; exit 1 ;;
  5) fail_setup "no GPU tests ran (is this a GPU machine with the extension built?)" ;;
  *) fail_setup "pytest exited with status $rc (interrupted, internal or usage error)" ;;
esac
