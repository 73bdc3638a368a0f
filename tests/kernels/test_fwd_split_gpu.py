"""The Hopper forward's split over the keys (csrc/flash_fwd_sm90: flash_fwd_sm90_plan's split, the
split tiles of tile_scheduler.h, and the two merges: up to 8 splits as one thread-block cluster
that merges in shared memory (epilogue.cuh stash_o_partial / merge_split_in_cluster), otherwise
float32 partials and the combine kernel of csrc/common/split_combine.cuh) on an H100: where the
query tiles fill less than half the SMs, each tile's key blocks are shared out among several CTAs.
Every split count (the rule's own, and forced ones through FLASHATTN_FWD_SPLITS, including more
splits than blocks and splits that see no key), each through both merges
(FLASHATTN_FWD_SPLIT_MERGE=combine forces the second), meets the suite's criterion against the
float64 reference, for odd lengths, both causal alignments, Sq > Sk (rows that see no key), GQA,
head dims 64/96/128/192/256, a local window and the softcap; outputs allocated from NaN-poisoned memory.
The rule splits the seed shapes (B=1 H=1) and leaves a full grid alone; a full causal grid takes
the dynamic schedule's counter, zeroed by every call. A D <= 64 grid of at most 1024 keys runs the
one-consumer small-grid config, unsplit at two key blocks or fewer, split past them; larger grids
keep the two-consumer configs."""

from __future__ import annotations

import pytest
import torch

import flashattn
from gpu_helpers import backend_unavailable_reason, poison_cuda_allocator
from numerics import assert_attention_matches
from strategies import AttentionSpec, Layout

pytestmark = pytest.mark.sm90

NONE, TOP_LEFT, BOTTOM_RIGHT = flashattn.CAUSAL_NONE, flashattn.CAUSAL_TOP_LEFT, flashattn.CAUSAL_BOTTOM_RIGHT

# batch, Sq, Sk, Hq, Hk, D, causal mode, window, softcap
CASES = [
    (1, 2048, 2048, 1, 1, 64, NONE, (-1, -1), 0.0),
    (1, 2048, 2048, 1, 1, 64, BOTTOM_RIGHT, (-1, -1), 0.0),
    (1, 1000, 1537, 2, 1, 128, TOP_LEFT, (-1, -1), 0.0),
    (1, 777, 3001, 4, 2, 256, BOTTOM_RIGHT, (-1, -1), 0.0),
    (1, 333, 2500, 2, 1, 192, NONE, (-1, -1), 0.0),
    (1, 300, 2049, 2, 1, 96, TOP_LEFT, (-1, -1), 0.0),
    (2, 300, 4099, 2, 2, 128, NONE, (700, 100), 30.0),
    (1, 1500, 700, 1, 1, 64, BOTTOM_RIGHT, (-1, -1), 0.0),
    (1, 129, 9000, 3, 1, 64, NONE, (-1, -1), 0.0),
]


def case_ids(cases) -> list[str]:
    return [f"b{b}-sq{sq}-sk{sk}-h{hq}:{hk}-d{d}-c{c}-w{w[0]}:{w[1]}-cap{cap:g}" for b, sq, sk, hq, hk, d, c, w, cap in cases]


@pytest.fixture(autouse=True)
def _hopper(device: torch.device) -> None:
    reason = backend_unavailable_reason("hopper")
    if reason:
        pytest.skip(reason)


def run(case, dtype: torch.dtype, device: torch.device):
    b, sq, sk, hq, hk, d, causal, window, softcap = case
    x = AttentionSpec(b, sq, sk, hq, hk, d, dtype, causal, None, Layout("contiguous"), Layout("contiguous"), 1.0,
                      sq * 7 + sk).make(device)
    poison_cuda_allocator()
    out, lse = torch.ops.flashattn.fwd(x.q, x.k, x.v, None, causal, "hopper", window[0], window[1], softcap)
    return x, out, lse


def forward_kernels(fn) -> set[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return {e.name for e in prof.events() if "flash_fwd_sm90" in e.name or "split_combine" in e.name}


def set_merge(monkeypatch, merge: str) -> None:
    if merge == "combine":
        monkeypatch.setenv("FLASHATTN_FWD_SPLIT_MERGE", "combine")
    else:
        monkeypatch.delenv("FLASHATTN_FWD_SPLIT_MERGE", raising=False)


@pytest.mark.parametrize("merge", ["cluster", "combine"])
@pytest.mark.parametrize("splits", ["rule", "1", "2", "3", "7", "8", "128"])
@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_split_forward_matches_reference(case, splits: str, merge: str, monkeypatch, device: torch.device) -> None:
    if splits != "rule":
        monkeypatch.setenv("FLASHATTN_FWD_SPLITS", splits)
    else:
        monkeypatch.delenv("FLASHATTN_FWD_SPLITS", raising=False)
    set_merge(monkeypatch, merge)
    for dtype in (torch.bfloat16, torch.float16):
        x, out, lse = run(case, dtype, device)
        assert_attention_matches(out, lse, x.q, x.k, x.v, x.scale, x.causal_mode, window=case[7], softcap=case[8],
                                 context=f"splits {splits}, merge {merge}, {dtype}")


def test_the_rule_splits_small_grids_only(monkeypatch, device: torch.device) -> None:
    """B=1 H=1 S=2048 (11-16 query tiles for 132 SMs) splits: with the combine kernel when forced
    (FLASHATTN_FWD_SPLIT_MERGE=combine); B=1 H=1 S=1024 (sixteen 64-row tiles of the small-grid
    config, split over their keys) as one kernel merging in clusters by default; so does B=1 H=1
    S=2048 causal, whose rule of 8 splits may not fit as 8-CTA clusters (then fewer splits that
    do); a grid that fills the SMs (B=8 H=16 S=2048) runs the kernel alone; FLASHATTN_FWD_SPLITS=1
    turns it off; more splits than a cluster takes (FLASHATTN_FWD_SPLITS=16) merge through the
    combine kernel."""
    monkeypatch.delenv("FLASHATTN_FWD_SPLITS", raising=False)
    small = torch.randn(1, 2048, 1, 64, device=device, dtype=torch.bfloat16)
    short = torch.randn(1, 1024, 1, 64, device=device, dtype=torch.bfloat16)
    big = torch.randn(8, 2048, 16, 64, device=device, dtype=torch.bfloat16)

    def kernels(x: torch.Tensor, causal: int = NONE) -> set[str]:
        return forward_kernels(lambda: torch.ops.flashattn.fwd(x, x, x, None, causal, "hopper"))

    set_merge(monkeypatch, "combine")
    for causal in (NONE, BOTTOM_RIGHT):
        names = kernels(small, causal)
        assert any("split_combine" in n for n in names) and any("flash_fwd_sm90" in n for n in names), names
    set_merge(monkeypatch, "cluster")
    names = kernels(short)
    assert not any("split_combine" in n for n in names) and any("flash_fwd_sm90" in n for n in names), names
    names = kernels(small, BOTTOM_RIGHT)
    assert not any("split_combine" in n for n in names) and any("flash_fwd_sm90" in n for n in names), names
    names = kernels(big)
    assert not any("split_combine" in n for n in names), names
    monkeypatch.setenv("FLASHATTN_FWD_SPLITS", "16")
    assert any("split_combine" in n for n in kernels(small)), names
    monkeypatch.setenv("FLASHATTN_FWD_SPLITS", "1")
    names = kernels(small)
    assert not any("split_combine" in n for n in names), names


@pytest.mark.parametrize("causal", [BOTTOM_RIGHT, TOP_LEFT])
def test_dynamic_schedule_counter_is_zeroed_every_call(causal: int, device: torch.device) -> None:
    """The other end of the grid-size rule: causal calls with more query tiles than SMs hand their
    tiles out through a counter private to the call, zeroed in stream order by each call. Three
    calls in a row (a stale counter would skip tiles and leave poisoned rows), each checked against
    the reference; the lse is a contiguous [B, Hq, Sq] tensor."""
    spec = AttentionSpec(2, 1100, 1300, 16, 4, 64, torch.bfloat16, causal, None, Layout("contiguous"),
                         Layout("contiguous"), 1.0, 11)
    x = spec.make(device)
    for call in range(3):
        poison_cuda_allocator()
        out, lse = torch.ops.flashattn.fwd(x.q, x.k, x.v, None, causal, "hopper")
        assert lse.shape == (2, 16, 1100) and lse.is_contiguous() and lse.dtype == torch.float32
        assert_attention_matches(out, lse, x.q, x.k, x.v, x.scale, causal, context=f"call {call}")


def test_auto_runs_tiny_calls_on_the_portable_path(device: torch.device) -> None:
    """'auto' runs a call of one short tile a head (Sq, Sk <= 64, D <= 64, few heads) on the
    portable kernel (flash_fwd_sm90_prefers_portable); S=128, and 'hopper' forced, stay on the
    Hopper kernel."""
    tiny = torch.randn(1, 64, 1, 64, device=device, dtype=torch.float16)
    short = torch.randn(1, 128, 1, 64, device=device, dtype=torch.float16)

    def kernels(x: torch.Tensor, backend: str) -> set[str]:
        return forward_kernels(lambda: torch.ops.flashattn.fwd(x, x, x, None, NONE, backend))

    assert not kernels(tiny, "auto"), "a tiny call under 'auto' ran the Hopper kernel"
    assert kernels(tiny, "hopper") and kernels(short, "auto")


# The one-consumer config of small grids (traits.h Sm90SmallGridConfig<64>), as the profiler names
# its kernel demangled or not.
SMALL_GRID_TRAITS = ("Sm90FwdTraits<64, 128, 2, false, 1, false, 1, 1, true>",
                     "Sm90FwdTraitsILi64ELi128ELi2ELb0ELi1ELb0ELi1ELi1ELb1EE")
# batch, Sq, Sk, Hq, Hk, D, causal mode, window, softcap: D <= 64, Sk <= 1024 (dispatch.cu
# kSmallGridMaxKeys), 64-row tiles on at most half the SMs. Up to 256 keys (two key blocks): one
# query row, one key, Sq > Sk (rows that see no key), GQA, head dims under 64; past them, split over
# the keys: odd lengths, both causal alignments, Sq > Sk, GQA, a window with the softcap.
SMALL_GRID_CASES = [
    (1, 256, 256, 1, 1, 64, NONE, (-1, -1), 0.0),
    (1, 1, 1, 1, 1, 64, NONE, (-1, -1), 0.0),
    (1, 200, 256, 2, 1, 40, BOTTOM_RIGHT, (-1, -1), 0.0),
    (1, 1000, 129, 2, 2, 64, TOP_LEFT, (-1, -1), 0.0),
    (1, 300, 200, 1, 1, 64, BOTTOM_RIGHT, (-1, -1), 0.0),
    (2, 65, 256, 3, 1, 64, NONE, (50, 10), 30.0),
    (1, 64, 256, 4, 4, 16, TOP_LEFT, (-1, -1), 0.0),
    (1, 1000, 1000, 1, 1, 64, NONE, (-1, -1), 0.0),
    (1, 513, 777, 2, 1, 48, BOTTOM_RIGHT, (-1, -1), 0.0),
    (1, 900, 300, 1, 1, 64, TOP_LEFT, (-1, -1), 0.0),
    (2, 130, 1024, 3, 3, 64, NONE, (200, 33), 25.0),
]
SMALL_GRID_KEY_BLOCK = 128  # the config's block_n: a forced split is taken past two of them


def runs_small_grid_config(names: set[str]) -> bool:
    return any(t in n for n in names for t in SMALL_GRID_TRAITS)


@pytest.mark.parametrize("case", SMALL_GRID_CASES, ids=case_ids(SMALL_GRID_CASES))
def test_small_grids_run_the_one_consumer_config(case, monkeypatch, device: torch.device) -> None:
    """A D <= 64 call of at most 1024 keys whose 64-row tiles fill at most half the SMs runs one
    consumer warpgroup a CTA (dispatch.cu small_grid_launcher): at two key blocks or fewer unsplit
    even when a split is forced, past them split (a forced split, merged by the combine kernel,
    shows as that kernel); each meets the criterion against the float64 reference in both dtypes,
    and FLASHATTN_FWD_SMALL_GRID=0 gives it the two-consumer configs, also correct."""
    splits_taken = case[2] > 2 * SMALL_GRID_KEY_BLOCK
    for env, splits, expect in (("", "", True), ("", "3", True), ("0", "", False)):
        # A forced split merging through the combine kernel: one taken shows as that kernel.
        set_merge(monkeypatch, "combine" if splits else "cluster")
        monkeypatch.setenv("FLASHATTN_FWD_SMALL_GRID", env)
        monkeypatch.setenv("FLASHATTN_FWD_SPLITS", splits)
        for dtype in (torch.bfloat16, torch.float16):
            x, out, lse = run(case, dtype, device)
            assert_attention_matches(out, lse, x.q, x.k, x.v, x.scale, x.causal_mode, window=case[7],
                                     softcap=case[8], context=f"FLASHATTN_FWD_SMALL_GRID={env!r} splits={splits!r} {dtype}")
        names = forward_kernels(lambda: run(case, torch.bfloat16, device))
        assert runs_small_grid_config(names) == expect, (env, splits, names)
        if expect and splits:
            assert any("split_combine" in n for n in names) == splits_taken, (env, splits, names)


def test_larger_grids_keep_the_two_consumer_configs(device: torch.device) -> None:
    """Past the small-grid bounds the call keeps its kind's config: 4097 keys (beyond the key bound),
    D=128, or 64-row tiles over more than half the SMs."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    for b, sq, sk, d in ((1, 256, 4097, 64), (1, 256, 256, 128), (sms // 8 + 1, 256, 256, 64)):
        q = torch.randn(b, sq, 1, d, device=device, dtype=torch.bfloat16)
        k = torch.randn(b, sk, 1, d, device=device, dtype=torch.bfloat16)
        names = forward_kernels(lambda: torch.ops.flashattn.fwd(q, k, k, None, NONE, "hopper"))
        assert names and not runs_small_grid_config(names), (b, sq, sk, d, names)


# D=64's long-keys config (traits.h Sm90LongKeysConfig<64>: 192-row tiles, three consumer warpgroups),
# as the profiler names its kernel demangled or not.
LONG_KEYS_TRAITS = ("Sm90FwdTraits<64, 128, 2, true, 1, false, 4, 3, true>",
                    "Sm90FwdTraitsILi64ELi128ELi2ELb1ELi1ELb0ELi4ELi3ELb1EE")
LONG_KEYS_GRID_HALF_WAVES = 3  # traits.h kSm90LongKeysGridHalfWaves


def test_causal_grids_of_1_5_waves_take_the_long_keys_config_from_1536_keys(device: torch.device) -> None:
    """A causal D=64 call takes the long-keys config from 4096 keys, and from 1536 keys when its
    192-row tiles fill at least 1.5 waves (dispatch.cu find_launcher, traits.h
    kSm90LongKeysGridHalfWaves); below either bound the default config serves it. The call that the
    grid rule moves meets the criterion against the float64 reference on a few of its heads."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    full = -(-LONG_KEYS_GRID_HALF_WAVES * sms // (2 * 11))  # heads whose 11 query tiles of 2048 rows fill 1.5 waves
    full_1536 = -(-LONG_KEYS_GRID_HALF_WAVES * sms // (2 * 8))  # heads whose 8 query tiles of 1536 rows fill them
    for sq, sk, heads, expect in ((2048, 2048, full, True), (1536, 1535, full_1536, False),
                                  (1536, 1536, full_1536, True), (2048, 2048, full - 1, False),
                                  (256, 4096, 1, True)):
        spec = AttentionSpec(1, sq, sk, heads, heads, 64, torch.bfloat16, BOTTOM_RIGHT, None, Layout("contiguous"),
                             Layout("contiguous"), 1.0, sq + sk + heads)
        x = spec.make(device)
        names = forward_kernels(lambda: torch.ops.flashattn.fwd(x.q, x.k, x.v, None, BOTTOM_RIGHT, "hopper"))
        took = any(t in n for n in names for t in LONG_KEYS_TRAITS)
        assert names and took == expect, (sq, sk, heads, names)
        if expect and sq == sk:
            poison_cuda_allocator()
            out, lse = torch.ops.flashattn.fwd(x.q, x.k, x.v, None, BOTTOM_RIGHT, "hopper")
            for h in (0, heads // 2, heads - 1):
                sl = slice(h, h + 1)
                assert_attention_matches(out[:, :, sl], lse[:, sl], x.q[:, :, sl], x.k[:, :, sl], x.v[:, :, sl],
                                         x.scale, BOTTOM_RIGHT, context=f"head {h} of {heads}")
