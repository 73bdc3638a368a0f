#!/usr/bin/env python3
"""Small odd-shaped calls of every path, for compute-sanitizer (lab/sanitize.sh runs it under
memcheck, racecheck, synccheck and initcheck and counts the errors; docs/sanitizer.md).

Cases (each selectable with --only, a comma list of group names):
  dense     forward + backward on each backend of SANITIZE_BACKENDS (portable, auto = Hopper where
            it applies), default and deterministic, causal / full / sliding window / softcap, GQA,
            odd lengths and head dims; a causal call with more query tiles than SMs (the Hopper
            forward's dynamic schedule); rows rising past the Hopper forward's held row max (D=128);
  varlen    packed batches: forward + backward on each backend of SANITIZE_BACKENDS (the backward:
            portable, or the Hopper one's packed kernels), empty and one-row sequences, tiles past a
            sequence's end, causal and window, softcap, D 64/96/128/192/256, deterministic; a causal D=64
            batch on the long-keys config by the packed grid rule, each sequence's partial tile first;
  decode    KV cache: contiguous and paged, appends across pages, forced splits (num_splits);
  split     the Hopper forward's split over the keys (small grids; FLASHATTN_FWD_SPLITS forces the
            count: empty splits, more splits than blocks), merged in clusters and through the combine
            kernel, causal both ways, a window, D 64/96/128/192/256; skipped where the Hopper path does not run;
  fp8       the FP8 forward (Hopper): causal or not, GQA, odd
            lengths, D 64/128/256; skipped where the Hopper path does not run;
  bad       bad device-side indices with the checked mode off (memcheck only: the results are
            meaningless by contract, the point is that nothing is touched outside the tensors):
            decreasing / past-the-end cu_seqlens, out-of-range block_table entries, cache_seqlens
            + new rows past the cache, seqused_k past the pages.
Exits non-zero on a Python-level error; the sanitizer's own summary says whether the kernels were
clean.
"""

from __future__ import annotations

import argparse
import os

import torch

import flashattn
from flashattn import _ops

# SANITIZE_BACKENDS=portable (or auto) narrows the forward paths, to tell which path a report is from.
BACKENDS = os.environ.get("SANITIZE_BACKENDS", "portable,auto").split(",")
GROUPS = ("dense", "varlen", "decode", "split", "fp8", "bad")
# --quick (racecheck, synccheck, initcheck, whose runs are the slow ones): bf16 only, and the
# window and softcap cases folded into one call; every kernel flavour still runs.
QUICK = False
dev = "cuda"
I32 = torch.int32
# SANITIZE_DIMS=160,192 keeps the dense, varlen and split cases of those head dims only (a change
# to one head dim's config checked without the whole set).
DIMS = {int(x) for x in os.environ.get("SANITIZE_DIMS", "").split(",") if x}


def keep(d: int) -> bool:
    return not DIMS or d in DIMS


def rand(*shape, dtype, grad=False):
    return torch.randn(*shape, device=dev, dtype=dtype).requires_grad_(grad)


def dtypes():
    return (torch.bfloat16,) if QUICK else (torch.float16, torch.bfloat16)


def dense() -> None:
    extras = ({}, {"window_size": (9, 3), "softcap": 20.0}) if QUICK else ({}, {"window_size": (9, 3)}, {"softcap": 20.0})
    for dtype in dtypes():
        for b, sq, sk, hq, hk, d, causal in ((1, 37, 53, 4, 2, 40, True), (2, 70, 33, 2, 1, 128, True),
                                             (1, 17, 130, 3, 3, 256, False), (1, 65, 65, 2, 2, 64, False),
                                             (1, 150, 170, 4, 2, 192, True), (1, 90, 61, 2, 2, 168, False),  # the forward's D=192 config
                                             (1, 100, 130, 4, 2, 96, True), (1, 70, 90, 2, 2, 80, False),  # and its D=96 one
                                             (2, 83, 150, 4, 2, 128, False),  # the wide backward (80-query steps)
                                             (1, 200, 300, 4, 1, 128, True),  # MQA: the backward's group split
                                             (1, 333, 4200, 2, 1, 64, True),  # the forward's masked 3-warpgroup config
                                             (1, 200, 256, 2, 1, 64, True),  # the forward's small-grid config (one consumer)
                                             # the backward's split last wave (pieces of 5-9 steps), D 64/128/256
                                             (1, 600, 200, 2, 2, 64, False), (1, 700, 300, 2, 2, 128, False),
                                             (1, 400, 150, 2, 2, 256, False)):
            if not keep(d):
                continue
            q, k, v = rand(b, sq, hq, d, dtype=dtype, grad=True), rand(b, sk, hk, d, dtype=dtype, grad=True), \
                rand(b, sk, hk, d, dtype=dtype, grad=True)
            for backend in BACKENDS:
                for deterministic in (False, True):
                    for extra in extras:
                        with flashattn.use_backend(backend):
                            flashattn.set_deterministic(deterministic)
                            out = flashattn.flash_attn_func(q, k, v, causal=causal, **extra)
                            flashattn.set_deterministic(False)
                        out.float().sum().backward()
    # More query tiles than SMs under a causal mask: the Hopper forward's dynamic schedule (the tile
    # counter, the tile ring in shared memory, its own register split), and the backward's grouped
    # CTA order: 3 query blocks of 128 rows per head, one head more than a third of the SMs (45
    # heads, 135 tiles on a 132-SM H100). Only where the auto backend is asked for (the gated
    # initcheck run is portable-only: docs/sanitizer.md, TMA stores).
    if "auto" in BACKENDS:
        heads = torch.cuda.get_device_properties(0).multi_processor_count // 3 + 1
        for d in (64, 128):
            q, k, v = (rand(1, 300, heads, d, dtype=torch.bfloat16, grad=True) for _ in range(3))
            with flashattn.use_backend("auto"):
                out = flashattn.flash_attn_func(q, k, v, causal=True)
            out.float().sum().backward()
    # The Hopper forward's held row max (D=128, csrc/flash_fwd_sm90/softmax.cuh): past the first key
    # block walked, rows whose max rises by more than 2^8 (scaled down) and by more than 2^120 (their
    # scores recomputed by mma.sync) beside rows that take the common case, in one tile; and a NaN row.
    with torch.no_grad():
        q, k, v = (rand(1, 421, 2, 128, dtype=torch.bfloat16) for _ in range(3))
        q[..., 0], k[..., 0] = 1.0, 0.0
        k[:, :384, :, 0] = 3.0 * 128**0.5  # the keys before the last (partial) block score ~3 higher
        q[:, 1::3, :, 0] = 60.0  # ~180: recomputed
        q[:, 4::9, :, 0] = 4.0  # ~12: scaled down
        q[:, 7::27] = float("nan")
        for backend in BACKENDS:
            for causal in (False, True):
                with flashattn.use_backend(backend):
                    flashattn.flash_attn_func(q, k, v, causal=causal)


def varlen() -> None:
    for dtype in dtypes():
        for q_lens, k_lens, hq, hk, d in (([37, 0, 1, 70], [53, 9, 1, 66], 4, 2, 64), ([129, 5], [3, 200], 2, 2, 128),
                                          ([17, 40], [17, 41], 3, 1, 96), ([65, 3], [70, 130], 2, 1, 256),
                                          ([90, 1], [81, 140], 2, 1, 192),
                                          ([300, 9], [4100, 9], 1, 1, 64)):  # 4k keys: D=64's long-keys config
            if not keep(d):
                continue
            cu_q = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=I32, device=dev)
            cu_k = torch.tensor([0] + torch.tensor(k_lens).cumsum(0).tolist(), dtype=I32, device=dev)
            q = rand(sum(q_lens) + 3, hq, d, dtype=dtype, grad=True)  # 3 rows owned by no sequence
            k, v = rand(sum(k_lens) + 2, hk, d, dtype=dtype, grad=True), rand(sum(k_lens) + 2, hk, d, dtype=dtype, grad=True)
            for backend in BACKENDS:  # the backward: portable, or (auto) the Hopper one's packed kernels
                for deterministic in (False, True):
                    for causal, extra in ((False, {}), (True, {}), (True, {"window_size": (7, 0)}),
                                          (False, {"softcap": 10.0})):
                        flashattn.set_deterministic(deterministic)
                        with flashattn.use_backend(backend):
                            out = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(q_lens), max(k_lens),
                                                                   causal=causal, **extra)
                        flashattn.set_deterministic(False)
                        out.float().sum().backward()
    # A causal D=64 batch whose 1536+ key bound and heads take the long-keys config by the grid rule
    # (dispatch.cu packed_config_kind), each sequence's partial tile first: the forward alone (its
    # backward is the packed backward above), bf16.
    if "auto" in BACKENDS:
        lens = [1600, 700, 0, 1537]
        heads = -(-3 * torch.cuda.get_device_properties(0).multi_processor_count // (2 * 9))  # 9 tiles of 192 rows
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=I32, device=dev)
        q, k, v = (rand(sum(lens), heads, 64, dtype=torch.bfloat16) for _ in range(3))
        with flashattn.use_backend("auto"):
            flashattn.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True)


def decode() -> None:
    with torch.no_grad():
        for dtype in dtypes():
            for b, sq, hq, hk, d, sk in ((2, 1, 8, 2, 64, 75), (1, 5, 4, 4, 128, 130), (3, 2, 2, 1, 256, 40)):
                q = rand(b, sq, hq, d, dtype=dtype)
                kc, vc = rand(b, sk + 8, hk, d, dtype=dtype), rand(b, sk + 8, hk, d, dtype=dtype)
                kn, vn = rand(b, 2, hk, d, dtype=dtype), rand(b, 2, hk, d, dtype=dtype)
                lens = torch.tensor([sk - 2 - i for i in range(b)], dtype=I32, device=dev)
                for splits in (0, 1, 3):
                    flashattn.flash_attn_with_kvcache(q, kc, vc, kn, vn, cache_seqlens=lens, causal=True,
                                                      num_splits=splits)
                # Paged: 16-row pages, appends across a page boundary, a shuffled table.
                page, per_seq = 16, -(-(sk + 8) // 16)
                pool_k, pool_v = rand(b * per_seq + 1, page, hk, d, dtype=dtype), rand(b * per_seq + 1, page, hk, d, dtype=dtype)
                table = torch.randperm(b * per_seq, device=dev).to(I32).view(b, per_seq)
                plens = torch.tensor([page * 2 - 1 - i for i in range(b)], dtype=I32, device=dev)
                for splits in (0, 1, 4):
                    flashattn.flash_attn_with_kvcache(q, pool_k, pool_v, kn, vn, cache_seqlens=plens, block_table=table,
                                                      causal=True, num_splits=splits, window_size=(20, 0))
                flashattn.flash_attn_with_kvcache(q, pool_k, pool_v, cache_seqlens=plens, block_table=table,
                                                  seqused_k=plens + 1, num_splits=2)
            # Long enough for the heuristic to split the keys into runs of several blocks (kHopperSplit on
            # an H100, decode_prefer_split_config), contiguous and paged, a ragged last block.
            b, hq, hk, d, sk, page = 1, 8, 4, 128, 4500, 64
            q = rand(b, 1, hq, d, dtype=dtype)
            kc, vc = rand(b, sk, hk, d, dtype=dtype), rand(b, sk, hk, d, dtype=dtype)
            lens = torch.tensor([sk - 3], dtype=I32, device=dev)
            flashattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens)
            per_seq = -(-sk // page)
            pool_k, pool_v = rand(per_seq + 2, page, hk, d, dtype=dtype), rand(per_seq + 2, page, hk, d, dtype=dtype)
            table = torch.randperm(per_seq + 2, device=dev)[:per_seq].to(I32).view(1, per_seq)
            flashattn.flash_attn_with_kvcache(q, pool_k, pool_v, cache_seqlens=lens, block_table=table)
            # MQA at B=1 with many splits: the combine's widest CTA (16 warps share a row; D=256 in two
            # column passes), 40 splits (some warps with fewer) and 128.
            for d in (128, 256):
                q = rand(1, 1, 8, d, dtype=dtype)
                kc, vc = rand(1, 8300, 1, d, dtype=dtype), rand(1, 8300, 1, d, dtype=dtype)
                lens = torch.tensor([8290], dtype=I32, device=dev)
                for splits in (40, 128):
                    flashattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, num_splits=splits)


def _hopper() -> bool:
    return torch.cuda.get_device_capability() == (9, 0) and "9.0a" in str(flashattn.build_info().get("cuda_archs", ""))


def split() -> None:
    """Small grids on the Hopper forward: the rule's split count and forced ones."""
    if not _hopper():
        print("sanitize_small: split: skipped (no Hopper path here)")
        return
    # Up to 8 splits merge in a cluster (shared memory read across CTAs), more through the combine
    # kernel; FLASHATTN_FWD_SPLIT_MERGE=combine sends every split there.
    for merge in ("", "combine"):
        os.environ["FLASHATTN_FWD_SPLIT_MERGE"] = merge
        for forced in ("", "3", "7", "8", "64"):
            os.environ["FLASHATTN_FWD_SPLITS"] = forced
            for b, sq, sk, hq, hk, d, mode, window in ((1, 1000, 1537, 2, 1, 64, flashattn.CAUSAL_BOTTOM_RIGHT, (-1, -1)),
                                                      (1, 300, 2049, 1, 1, 128, flashattn.CAUSAL_TOP_LEFT, (-1, -1)),
                                                      (1, 129, 1100, 2, 2, 256, flashattn.CAUSAL_NONE, (300, 40)),
                                                      (1, 150, 1300, 2, 1, 192, flashattn.CAUSAL_BOTTOM_RIGHT, (-1, -1)),
                                                      (1, 200, 1500, 2, 2, 96, flashattn.CAUSAL_NONE, (-1, -1)),
                                                      # D=64 past 256 keys: the one-consumer config, split (key bound kSmallGridMaxKeys = 1024)
                                                      (1, 200, 1000, 2, 1, 64, flashattn.CAUSAL_TOP_LEFT, (-1, -1))):
                if not keep(d):
                    continue
                for dtype in dtypes():
                    q, k, v = rand(b, sq, hq, d, dtype=dtype), rand(b, sk, hk, d, dtype=dtype), rand(b, sk, hk, d, dtype=dtype)
                    torch.ops.flashattn.fwd(q, k, v, None, mode, "hopper", window[0], window[1], 0.0)
    os.environ.pop("FLASHATTN_FWD_SPLITS")
    os.environ.pop("FLASHATTN_FWD_SPLIT_MERGE")


def fp8() -> None:
    """The FP8 forward through flash_attn_func, float32 [B, Hk] descales."""
    if not _hopper():
        print("sanitize_small: fp8: skipped (no Hopper path here)")
        return
    with torch.no_grad():
        for b, sq, sk, hq, hk, d, causal in ((3, 65, 130, 4, 2, 128, True), (1, 1, 77, 2, 1, 64, False),
                                             (2, 200, 129, 2, 2, 256, True), (1, 300, 300, 8, 1, 128, False),
                                             (2, 70, 400, 2, 2, 112, True), (1, 1100, 1100, 18, 2, 256, True)):
            # (2, 70, 400, ...): D=128's third 192-key block lies past V^T's 512 keys (TMA zero fill).
            # The last case: more tiles than an H100/H200 has SMs, so D=256 runs the dynamic schedule.
            q8, k8, v8 = (torch.randn(b, s, h, d, device=dev).to(torch.float8_e4m3fn)
                          for s, h in ((sq, hq), (sk, hk), (sk, hk)))
            scales = [torch.rand(b, hk, device=dev, dtype=torch.float32) + 0.5 for _ in range(3)]
            flashattn.flash_attn_func(q8, k8, v8, causal=causal, q_descale=scales[0], k_descale=scales[1],
                                      v_descale=scales[2])


def bad() -> None:
    """Bad device-side indices, checked mode off: each call must stay inside its tensors."""
    assert not _ops.get_check_indices(), "the bad-index cases run with the checked mode off"
    dtype = torch.float16
    total_q, total_k, hq, hk, d = 40, 48, 4, 2, 64
    q, k, v = rand(total_q, hq, d, dtype=dtype), rand(total_k, hk, d, dtype=dtype), rand(total_k, hk, d, dtype=dtype)
    for cu_q, cu_k in (([0, 25, 10, 40], [0, 12, 30, 48]), ([0, 10, 25, 47], [0, 12, 30, 48]),
                       ([-5, 10, 25, 40], [0, 12, 30, 48]), ([0, 10, 25, 40], [0, 30, 12, 48]),
                       ([0, 10, 25, 40], [0, 12, 2**30, 2**31 - 1])):
        cq, ck = torch.tensor(cu_q, dtype=I32, device=dev), torch.tensor(cu_k, dtype=I32, device=dev)
        out, lse = flashattn.flash_attn_varlen_func(q, k, v, cq, ck, total_q, total_k, return_lse=True)
        for deterministic in (False, True):
            _ops.bwd_varlen(torch.randn_like(out), q, k, v, out, lse, cq, ck, total_q, total_k, d**-0.5,
                            flashattn.CAUSAL_NONE, deterministic, "auto")
    with torch.no_grad():
        b, page, per_seq, num_pages = 2, 16, 4, 9
        qd = rand(b, 1, hq, d, dtype=dtype)
        kc, vc = rand(b, page * per_seq, hk, d, dtype=dtype), rand(b, page * per_seq, hk, d, dtype=dtype)
        pool_k, pool_v = rand(num_pages, page, hk, d, dtype=dtype), rand(num_pages, page, hk, d, dtype=dtype)
        kn, vn = rand(b, 2, hk, d, dtype=dtype), rand(b, 2, hk, d, dtype=dtype)
        t = lambda rows: torch.tensor(rows, dtype=I32, device=dev)  # noqa: E731
        for splits in (1, 3):
            for lens in ([-3, 10], [63, 70], [2**31 - 1, 5]):
                flashattn.flash_attn_with_kvcache(qd, kc, vc, kn, vn, cache_seqlens=t(lens), num_splits=splits)
            flashattn.flash_attn_with_kvcache(qd, kc, vc, cache_seqlens=t([10, 10]), seqused_k=t([100, -7]),
                                              num_splits=splits)
            for lens, table, used in (([20, 40], [[0, -1, -1, -1], [4, 5, 6, -1]], None),
                                      ([5, 50], [[0, 1, 2, 3], [4, 5, 6, 12]], None),
                                      ([31, 3], [[0, 1, 9, 3], [4, 5, 6, 7]], None),
                                      ([62, 70], [[0, 1, 2, 3], [4, 5, 6, 7]], None),
                                      ([10, 3], [[2, -1, -1, -1], [4, -2**31, 2**31 - 1, -1]], [40, 64])):
                flashattn.flash_attn_with_kvcache(qd, pool_k, pool_v, kn, vn, cache_seqlens=t(lens), block_table=t(table),
                                                  seqused_k=None if used is None else t(used), num_splits=splits)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=",".join(GROUPS), help=f"comma list of {GROUPS}")
    ap.add_argument("--quick", action="store_true", help="bf16 only, window and softcap in one call")
    args = ap.parse_args()
    global QUICK
    QUICK = args.quick
    groups = [g for g in args.only.split(",") if g]
    unknown = set(groups) - set(GROUPS)
    if unknown:
        ap.error(f"unknown groups {sorted(unknown)}; choose from {GROUPS}")
    torch.manual_seed(0)
    for g in groups:
        globals()[g]()
        torch.cuda.synchronize()
        print(f"sanitize_small: {g}: all calls returned", flush=True)


if __name__ == "__main__":
    main()
