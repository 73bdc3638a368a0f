#!/usr/bin/env python3
"""CPU model of the Hopper backward's grid: one CTA per unit (a key block of a (batch, K/V head)),
one CTA per SM, CTAs dispatched in launch order to the first free SM. How much of the SMs' time
the work fills, for the standard grids (B*S = 16k tokens, H*D = 2048), causal and not, with and
without v18's split last wave (csrc/flash_bwd_sm90/tail_split.h), and in deterministic mode's order.

The order mirrors csrc/flash_bwd_sm90/block.h (bwd_block) and launch.cuh (bwd_lpt_heads: 8 MiB
groups of (batch, head) pairs under a causal mask, key block slowest inside a group; deterministic
mode: each head's key blocks from the last down); tiles are traits.h's (query rows per step, keys
per unit: D=64 128 x 128, D=128 80 x 128 where wide_rule.h takes the wide config (masked calls
from 2048 keys, unmasked ones from 768 query rows), else 64 x 128, D=256 64 x 64). A unit's time =
its steps + a fixed cost (--fixed, in steps: its K/V load and epilogue; ~2 steps at D=128 on an
H200, perf-notes 2026-12-03); a piece of the split wave adds tail_split.h's kBwdTailPieceCost.
Fill = the steps / (SMs x the last SM's end): 1.0 = no SM ever idle and no fixed cost.
--persistent: also a persistent grid (lab/ab/bwd_persistent.diff: one CTA an SM running units c,
c + SMs, ... in the same order, a static stride), its units' fixed cost --persistent-fixed (what
the next unit's loads under the epilogue do not hide), and its predicted gain over a CTA a unit.
--gqa: the GQA grids (Hq = 2048/D query heads, Hk = Hq/4 and Hq/8 at S 2k-16k, and the training grid's
16:4 at 4k and 16:2 at 16k): each split of a group over CTAs (group_split.h; a unit walks its share of
the group's query heads, its Q/dO bytes set the 8 MiB groups), its fill, its end against the MHA
twin's (the same FLOPs, Hk = Hq), and the split the rule takes (--waves, kBwdSplitMaskedWaves); a
split unit's float32 dK/dV sums cost --split-fixed more steps.
--walks: under a causal mask, how many CTAs work on the same (batch, head, query block) at once,
averaged over the call, for each query-block walk (launch.cuh bwd_reverse_m: 1 = every CTA from the
last block down, today's; 0 = from its diagonal up; 2 = the zigzag of lab/ab/bwd_zigzag_walk.diff,
the grouped order's groups alternating, the first down); the non-causal call alongside (every CTA
of a head from block 0 up).
A model, not a measurement: no L2 effects, no ticket waits, every step the same length.

usage: python3 lab/bwd_schedule_model.py [--sms 132] [--fixed 1.0] [--persistent] [--persistent-fixed 1.0]
       python3 lab/bwd_schedule_model.py --gqa [--fixed 2.0] [--split-fixed 1.0] [--waves 4]
       python3 lab/bwd_schedule_model.py --walks [--fixed 2.0]
"""

from __future__ import annotations

import argparse
import heapq

TILES = {64: (128, 128), 128: (80, 128), 256: (64, 64)}  # (query rows per step, keys per unit)
WIDE_MASKED_KEYS, WIDE_UNMASKED_QUERIES = 2048, 768  # wide_rule.h
LPT_BUDGET = 8 << 20  # block.h kBwdLptL2Bytes
PIECE_COST = 3.0  # tail_split.h kBwdTailPieceCost
MAX_SPLIT = 64  # tail_split.h kBwdTailMaxSplit
MIN_GAIN = 0.10  # tail_split.h kBwdTailMinGain


def tiles(s: int, d: int, causal: bool) -> tuple[int, int]:
    """traits.h's tile of a D x S call (S queries and keys), the wide config by wide_rule.h."""
    if d == 128 and s < (WIDE_MASKED_KEYS if causal else WIDE_UNMASKED_QUERIES):
        return 64, 128
    return TILES[d]


def tail_plan(units: int, steps: int, sms: int) -> tuple[int, int]:
    """tail_split.h bwd_tail_plan: (units split, pieces each)."""
    r = units % sms
    if units < 1 or steps < 2 or r == 0:
        return 0, 1
    best, plan = (steps + 1.0) * (1.0 - MIN_GAIN), (0, 1)
    for s in range(2, min(steps, MAX_SPLIT) + 1):
        t = -(-r * s // sms) * (-(-steps // s) + PIECE_COST)
        if t < best * 0.99:
            best, plan = t, (r, s)
    return plan


def query_blocks(s: int, d: int, causal: bool, n: int) -> range:
    """The query blocks key block n sees in a D x S call (Sq = Sk; under a causal mask from the
    block holding its first key), by tiles()."""
    bm, bn = tiles(s, d, causal)
    return range((n * bn) // bm if causal else 0, -(-s // bm))


def lpt_units(s: int, d: int, causal: bool, deterministic: bool, share: int, pairs: int) -> int:
    """launch.cuh bwd_lpt_heads: units a group of the grouped order (0: the plain order), a unit
    walking `share` query heads."""
    return max(1, min(pairs, LPT_BUDGET // (2 * 2 * share * s * d))) if causal and not deterministic else 0


def unit_order(s: int, d: int, causal: bool, deterministic: bool, hk: int = 0,
               split: int = 1) -> list[tuple[int, int]]:
    """(pair, key block) of each unit in launch order, block.h bwd_block's: pair = (batch, K/V head,
    share of the group) as batch * hk * split + head * split + share; hk K/V heads (0: as many as
    query heads), each group's query heads shared out over `split` CTAs (group_split.h)."""
    bn = tiles(s, d, causal)[1]
    b, h = 16384 // s, 2048 // d
    hk = hk or h
    share = h // hk // split  # query heads a unit walks
    nb = -(-s // bn)
    pairs = b * hk * split
    lpt = lpt_units(s, d, causal, deterministic, share, pairs)
    out = []
    for cta in range(nb * pairs):
        if lpt:
            g, j = divmod(cta, lpt * nb)
            here = min(lpt, pairs - g * lpt)
            idx, r = divmod(j, here)
            pair = g * lpt + r
        else:
            pair, idx = divmod(cta, nb)
        out.append((pair, nb - 1 - idx if deterministic else idx))
    return out


def unit_steps(s: int, d: int, causal: bool, deterministic: bool, hk: int = 0, split: int = 1) -> list[int]:
    """Steps of each unit in launch order (unit_order's units)."""
    h = 2048 // d
    share = h // (hk or h) // split
    return [share * len(query_blocks(s, d, causal, n)) for _, n in unit_order(s, d, causal, deterministic, hk, split)]


def rule_split(group: int, ctas: int, causal: bool, sms: int, waves: int) -> int:
    """group_split.h bwd_group_split."""
    want = waves * sms if causal else sms // 2
    split = 1
    while ctas * split < want and split < group:
        split += 1
        while group % split:
            split += 1
    return split


def gqa_table(sms: int, fixed: float, split_fixed: float, waves: int) -> None:
    print(f"GQA: fill = steps / (SMs x end), {sms} SMs, a unit's fixed cost {fixed} steps (+{split_fixed} when split); "
          f"x MHA = the MHA twin's end / this end; * = the rule's split ({waves} waves for masked calls)")
    print(f"{'D':>4} {'S':>6} {'Hq:Hk':>6} {'causal':>6}  " + "  ".join(f"{'s=' + str(k):>13}" for k in (1, 2, 4, 8)))
    cells = [(d, s, 2048 // d // g) for d in (64, 128) for s in (2048, 4096, 16384) for g in (4, 8)]
    cells += [(128, 4096, 4), (128, 16384, 2)]
    for d, s, hk in dict.fromkeys(cells):
        h = 2048 // d
        for causal in (True, False):
            twin = makespan(unit_steps(s, d, causal, False), sms, fixed)
            bn = tiles(s, d, causal)[1]
            rule = rule_split(h // hk, -(-s // bn) * (16384 // s) * hk, causal, sms, waves)
            row = []
            for k in (1, 2, 4, 8):
                if (h // hk) % k:
                    row.append(f"{'-':>13}")
                    continue
                units = unit_steps(s, d, causal, False, hk, k)
                end = makespan(units, sms, fixed + (split_fixed if k > 1 else 0.0))
                mark = "*" if k == rule else " "
                row.append(f"{sum(units) / (sms * end):5.3f} {twin / end:5.3f}{mark}")
            print(f"{d:>4} {s:>6} {f'{h}:{hk}':>6} {str(causal):>6}  " + "  ".join(row))


def unit_times(units: list[int], fixed: float, tail: tuple[int, int] = (0, 1)) -> list[float]:
    """Each CTA-sized piece of work in launch order: a unit's steps and fixed cost, the split last
    wave's pieces (tail_split.h) each with the piece cost on top."""
    r, s = tail
    times = [u + fixed for u in units[:len(units) - r]]
    for u in units[len(units) - r:]:
        times += [(p + 1) * u // s - p * u // s + fixed + PIECE_COST - 1 for p in range(s)]
    return times


def makespan(units: list[int], sms: int, fixed: float, tail: tuple[int, int] = (0, 1)) -> float:
    times = unit_times(units, fixed, tail)
    free = [0.0] * sms
    for t in times:
        heapq.heappush(free, heapq.heappop(free) + t)
    return max(free)


def makespan_static(units: list[int], ctas: int, fixed: float, tail: tuple[int, int] = (0, 1)) -> float:
    """A persistent grid: CTA c runs the pieces c, c + ctas, ... of unit_times back to back."""
    times = unit_times(units, fixed, tail)
    return max(sum(times[c::ctas]) for c in range(min(ctas, len(times))))


def in_flight_sharing(spans: list[tuple[float, int, list[int]]], end: float) -> float:
    """Walks (first step's time, pair, query blocks in walk order), one block a unit of time,
    sampled at every whole time up to `end`: the running walks over the distinct (pair, block) they
    work on, summed over the samples."""
    running = distinct = 0
    for now in range(int(end)):
        here = set()
        for start, pair, blocks in spans:
            k = int(now - start)
            if 0 <= k < len(blocks):
                here.add((pair, blocks[k]))
                running += 1
        distinct += len(here)
    return running / max(distinct, 1)


def walk_sharing(s: int, d: int, causal: bool, walk: int, sms: int, fixed: float) -> tuple[float, float]:
    """(end, CTAs a (pair, query block) in flight): the grid dispatched as makespan() does, each CTA
    stepping through its query blocks one a unit of time after half its fixed cost; sampled at every
    whole time, the running CTAs over the distinct (pair, block) they work on."""
    lpt = lpt_units(s, d, causal, False, 1, (16384 // s) * (2048 // d))
    free = [(0.0, i) for i in range(sms)]
    spans = []  # (first step's time, pair, query blocks in walk order)
    for pair, n in unit_order(s, d, causal, False):
        blocks = list(query_blocks(s, d, causal, n))
        if causal and (walk == 1 or (walk == 2 and pair // lpt % 2 == 0)):
            blocks.reverse()
        t, sm = heapq.heappop(free)
        spans.append((t + fixed / 2, pair, blocks))
        heapq.heappush(free, (t + fixed + len(blocks), sm))
    end = max(t for t, _ in free)
    return end, in_flight_sharing(spans, end)


def pair_sharing(s: int, d: int, sms: int, fixed: float) -> tuple[float, float, float]:
    """A lever not built: under a causal mask each CTA runs key block c walked down, then key block
    N - 1 - c walked up from its diagonal (c < N / 2), heads one after another, so that a head's
    CTAs, started together, stay at one query block through both walks. -> (end, fill, CTAs a
    (head, query block) in flight), sampled as walk_sharing does."""
    nb = -(-s // tiles(s, d, True)[1])
    heads = (16384 // s) * (2048 // d)
    free = [(0.0, i) for i in range(sms)]
    spans, work = [], 0
    for h in range(heads):
        for c in range((nb + 1) // 2):
            down = list(query_blocks(s, d, True, c))[::-1]
            o = nb - 1 - c
            up = list(query_blocks(s, d, True, o)) if o != c else []
            t, sm = heapq.heappop(free)
            spans.append((t + fixed / 2, h, down))
            if up:
                spans.append((t + fixed / 2 + len(down) + fixed, h, up))
            work += len(down) + len(up)
            heapq.heappush(free, (t + fixed * (2 if up else 1) + len(down) + len(up), sm))
    end = max(t for t, _ in free)
    return end, work / (sms * end), in_flight_sharing(spans, end)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--fixed", type=float, default=1.0)
    ap.add_argument("--persistent", action="store_true", help="also a persistent grid with a static stride")
    ap.add_argument("--persistent-fixed", type=float, default=1.0, help="its units' fixed cost, in steps")
    ap.add_argument("--gqa", action="store_true", help="the GQA grids under each group split")
    ap.add_argument("--split-fixed", type=float, default=1.0, help="a split unit's float32 dK/dV sums, in steps")
    ap.add_argument("--waves", type=int, default=4, help="group_split.h's waves for masked calls")
    ap.add_argument("--walks", action="store_true", help="CTAs on one (head, query block) at once, by walk")
    args = ap.parse_args()
    if args.walks:
        print(f"CTAs working on the same (batch, head, query block) at once, averaged over the call ({args.sms} SMs, "
              f"fixed {args.fixed} steps); walks: 1 down (today), 0 up, 2 zigzag")
        print("pairs: a CTA two key blocks, c down then N-1-c up (not built); its fill against walk 1's")
        print(f"{'D':>4} {'S':>6} {'non-causal':>10} {'walk 1':>7} {'walk 0':>7} {'walk 2':>7} {'pairs':>7} "
              f"{'fill 1':>7} {'fill pairs':>10}")
        for d in (64, 128, 256):
            for s in (1024, 4096, 16384):
                end1, share1 = walk_sharing(s, d, True, 1, args.sms, args.fixed)
                cells = [walk_sharing(s, d, False, 0, args.sms, args.fixed)[1], share1]
                cells += [walk_sharing(s, d, True, w, args.sms, args.fixed)[1] for w in (0, 2)]
                _, fill_pairs, share_pairs = pair_sharing(s, d, args.sms, args.fixed)
                fill1 = sum(unit_steps(s, d, True, False)) / (args.sms * end1)
                print(f"{d:>4} {s:>6} " + " ".join(f"{c:>{w}.1f}" for c, w in zip(cells, (10, 7, 7, 7)))
                      + f" {share_pairs:>7.1f} {fill1:>7.3f} {fill_pairs:>10.3f}")
        return
    if args.gqa:
        gqa_table(args.sms, args.fixed, args.split_fixed, args.waves)
        return
    if args.persistent:
        print(f"a CTA a unit (fixed {args.fixed} steps) against a persistent grid of {args.sms} CTAs, a static "
              f"stride (fixed {args.persistent_fixed}): fill each, gain = the first's end / the second's")
        print(f"{'D':>4} {'S':>6} {'causal':>6} {'units':>6} {'steps':>6} {'fill':>6} {'persist':>7} {'gain':>6}")
        for d in (64, 128):
            for s in (512, 1024, 2048, 4096, 8192, 16384):
                for causal in (False, True):
                    units = unit_steps(s, d, causal, False)
                    work = sum(units)
                    plan = (0, 1) if causal else tail_plan(len(units), units[0], args.sms)
                    base = makespan(units, args.sms, args.fixed, plan)
                    pers = makespan_static(units, args.sms, args.persistent_fixed, plan)
                    print(f"{d:>4} {s:>6} {str(causal):>6} {len(units):>6} {max(units):>6} {work / (args.sms * base):6.3f} "
                          f"{work / (args.sms * pers):7.3f} {base / pers:6.3f}")
        return
    print(f"fill = steps / (SMs x end), {args.sms} SMs, a unit's fixed cost {args.fixed} steps")
    print(f"{'D':>4} {'S':>6} {'causal':>6} {'units':>6} {'steps':>6} {'fill':>6} {'split':>9} {'fill':>6} "
          f"{'gain':>6} {'det fill':>8}")
    for d in (64, 128, 256):
        for s in (512, 1024, 2048, 4096, 8192, 16384):
            for causal in (False, True):
                units = unit_steps(s, d, causal, False)
                work = sum(units)
                base = makespan(units, args.sms, args.fixed)
                plan = (0, 1) if causal else tail_plan(len(units), units[0], args.sms)
                split = makespan(units, args.sms, args.fixed, plan)
                det = makespan(unit_steps(s, d, causal, True), args.sms, args.fixed)
                print(f"{d:>4} {s:>6} {str(causal):>6} {len(units):>6} {max(units):>6} {work / (args.sms * base):6.3f} "
                      f"{f'{plan[0]}x{plan[1]}':>9} {work / (args.sms * split):6.3f} {base / split:6.3f} "
                      f"{work / (args.sms * det):8.3f}")


if __name__ == "__main__":
    main()
