#!/usr/bin/env python3
"""How well L2 holds the Hopper backward's Q/dO and dq_accum tiles under a causal mask, by the CTA
order and walks of csrc/flash_bwd_sm90/block.h (the grouped longest-first order, the query blocks
walked from the last down, a GQA group's heads in turn as block.h walks them, or interleaved as
lab/ab/bwd_gqa_heads_interleaved.diff did: measured 2026-12-07, not adopted):
132 SMs run one CTA each in lab/bwd_schedule_model.py's launch order and tiles, every step takes one
time unit, each step touches the (head, query block) tile of Q and dO (80 rows, 40 KB at D=128 on
the wide config) and the same tile of dq_accum (float32, the same bytes), and L2 is
one LRU of --l2-mb (an H100 has 50 MB in two partitions; data that SMs of both read may sit in
both, so 25 MB is the pessimistic case). Prints the steps an SM runs (the grid's length, tail
included) and the share of tile touches that miss, i.e. go to DRAM. A model: no K/V, no epilogue,
equal steps; what it can say is which walks lose L2 reuse, not by how much time.
usage: python3 lab/bwd_l2_model.py [--seq 16384] [--dim 128] [--shapes 16:16:1,16:4:2,...] [--l2-mb 50,25]
(shapes Hq:Hk:group split; B = 16384 / seq as in the training grid)"""

from __future__ import annotations

import argparse
import collections

from bwd_schedule_model import query_blocks, tiles, unit_order


def model(hq: int, hk: int, split: int, interleave: bool, seq: int, dim: int, l2_mb: float,
          sms: int = 132) -> tuple[int, int, int]:
    """-> (steps an SM runs, tile touches, misses) of one causal call (B = 16384 / seq, Hq = 2048 / dim
    as in the training grid; bwd_schedule_model's tiles and launch order)."""
    bm = tiles(seq, dim, True)[0]
    group = hq // hk
    share = group // split

    def walk(pair: int, n: int) -> list[tuple[int, int, int]]:
        b, u = divmod(pair, hk * split)
        head_kv, part = divmod(u, split)
        h0 = head_kv * group + part * share
        ms = query_blocks(seq, dim, True, n)[::-1]  # bottom-right causal, Sq = Sk
        if interleave and share > 1:
            return [(b, h0 + i, m) for m in ms for i in range(share)]
        return [(b, h0 + i, m) for i in range(share) for m in ms]

    tile_bytes = bm * dim * 4  # Q + dO in 16 bits, or dq_accum in float32: the same bytes
    capacity = int(l2_mb * (1 << 20)) // tile_bytes
    cache: collections.OrderedDict = collections.OrderedDict()
    touches = misses = 0
    order = iter(unit_order(seq, dim, True, False, hk, split))
    running = {}
    for sm in range(sms):
        nxt = next(order, None)
        if nxt is not None:
            running[sm] = iter(walk(*nxt))
    t = 0
    while running:
        for sm in list(running):
            step = next(running[sm], None)
            while step is None:
                nxt = next(order, None)
                if nxt is None:
                    break
                running[sm] = iter(walk(*nxt))
                step = next(running[sm], None)
            if step is None:
                del running[sm]
                continue
            for key in (("q",) + step, ("dq",) + step):
                touches += 1
                if key in cache:
                    cache.move_to_end(key)
                else:
                    misses += 1
                    cache[key] = True
                    if len(cache) > capacity:
                        cache.popitem(last=False)
        t += 1
    return t, touches, misses


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq", type=int, default=16384)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--shapes", default="16:16:1,16:4:1,16:4:2,16:4:4,16:1:2,16:1:8")
    ap.add_argument("--l2-mb", default="50,25")
    args = ap.parse_args()
    print(f"D={args.dim} S={args.seq} causal; miss = the share of Q/dO and dq_accum tile touches not in L2")
    print(f"{'Hq:Hk':>6} {'split':>5} {'walk':>11} {'L2 MB':>5} {'steps/SM':>8} {'miss':>6}")
    for shape in args.shapes.split(","):
        hq, hk, split = (int(x) for x in shape.split(":"))
        if hq != 2048 // args.dim or hq % hk or (hq // hk) % split:
            raise SystemExit(f"--shapes {shape}: Hq must be 2048 / D = {2048 // args.dim} (the training grid's), "
                             "Hk must divide it and the split the group")
        for interleave in (False, True) if hq != hk else (False,):
            for l2 in (float(x) for x in args.l2_mb.split(",")):
                t, touches, misses = model(hq, hk, split, interleave, args.seq, args.dim, l2)
                walk = "interleaved" if interleave else "in turn"
                print(f"{f'{hq}:{hk}':>6} {split:>5} {walk:>11} {l2:>5g} {t:>8} {misses / touches:>6.3f}")


if __name__ == "__main__":
    main()
