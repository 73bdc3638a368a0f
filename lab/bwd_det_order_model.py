#!/usr/bin/env python3
"""CPU model of deterministic mode's dQ order in the Hopper backward under a causal mask: what the
tickets' waits and the launch order cost against the default mode (same grid, no waits).

Deterministic mode adds the dQ tiles of a query block m in a fixed order of the key blocks that see
it (csrc/flash_bwd_sm90/block.h, bwd_det_ticket): a CTA may add its tile only after every key block
before it in that order has added its own. Two orders are modelled:
  countdown  the shipped one: each (batch, head)'s key blocks launched from the last down, and at
             every query block the last key block adds first. A CTA waits only for CTAs launched
             before it, but the longest walks (key block 0 sees every query block) start last.
  chunked C  the key blocks in chunks of C (chunk j: [j C, j C + C)), chunks launched first to last
             over all heads (chunk 0 of every head, then chunk 1, ...), a chunk's key blocks from its
             last down; at a query block, the chunks' key blocks in chunk order, count-down inside a
             chunk. Still only waits for CTAs launched before (lower chunks, higher key blocks of
             its own chunk), and the longest walks start first.
The default mode is modelled as launched key block 0 first per head (its longest-first order without
the L2 groups) with no waits.

A CTA is dispatched in launch order to the first free SM (one CTA per SM), pays `--fixed` steps
(K/V load, epilogue), then walks its query blocks from its diagonal up, one step each; a step's dQ
addition may not finish before the previous key block in the order finished its own at that query
block plus `--add` steps (the reduction's round trip). Causal, Sq = Sk, one query head per K/V head.
Printed: the modelled makespan of each order over the default's (deterministic mode's cost).

usage: python3 lab/bwd_det_order_model.py [--sms 132] [--fixed 1.0] [--add 0.1] [--chunks 8,16,32]
"""

from __future__ import annotations

import argparse
import heapq

TILES = {64: (128, 128), 128: (64, 128), 256: (64, 64)}  # (query rows per step, keys per CTA); D=128: no wide config in deterministic mode


def walks(s: int, d: int) -> tuple[int, int, list[int]]:
    """(M query blocks, N key blocks, first query block of each key block's causal walk)."""
    bm, bn = TILES[d]
    m_blocks, n_blocks = -(-s // bm), -(-s // bn)
    return m_blocks, n_blocks, [(n * bn) // bm for n in range(n_blocks)]


def launch_order(order: str, chunk: int, heads: int, n_blocks: int) -> list[tuple[int, int]]:
    """(head, key block) per CTA index."""
    if order == "default":
        return [(h, n) for h in range(heads) for n in range(n_blocks)]
    if order == "countdown":
        return [(h, n_blocks - 1 - i) for h in range(heads) for i in range(n_blocks)]
    out = []
    for j0 in range(0, n_blocks, chunk):
        j1 = min(n_blocks, j0 + chunk)
        out += [(h, n) for h in range(heads) for n in range(j1 - 1, j0 - 1, -1)]
    return out


def predecessor(order: str, chunk: int, n: int, m_first: list[int], m: int, n_blocks: int) -> int | None:
    """The key block that adds its tile of query block m just before key block n (None: first).
    The key blocks that see m are a prefix 0 .. n_hi(m) (causal), and n is one of them."""
    if order == "default":
        return None
    above = n + 1 < n_blocks and m_first[n + 1] <= m  # key block n + 1 sees m
    if order == "countdown":
        return n + 1 if above else None
    j0 = n // chunk * chunk
    if above and n + 1 < j0 + chunk:
        return n + 1
    return j0 - chunk if j0 > 0 else None  # the previous chunk's last adder: its first key block


def makespan(order: str, chunk: int, s: int, d: int, heads: int, sms: int, fixed: float, add: float) -> float:
    m_blocks, n_blocks, m_first = walks(s, d)
    free = [0.0] * sms
    heapq.heapify(free)
    done: dict[tuple[int, int, int], float] = {}  # (head, key block, query block) -> addition end
    end = 0.0
    for h, n in launch_order(order, chunk, heads, n_blocks):
        t = heapq.heappop(free) + fixed
        for m in range(m_first[n], m_blocks):
            t += 1.0
            p = predecessor(order, chunk, n, m_first, m, n_blocks)
            if p is not None:
                t = max(t, done[(h, p, m)] + add)
            done[(h, n, m)] = t
        heapq.heappush(free, t)
        end = max(end, t)
    return end


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--fixed", type=float, default=1.0)
    ap.add_argument("--add", type=float, default=0.1)
    ap.add_argument("--chunks", default="8,16,32")
    a = ap.parse_args()
    chunks = [int(c) for c in a.chunks.split(",")]
    print(f"causal, B*S = 16k, H*D = 2048; deterministic makespan / default ({a.sms} SMs, fixed {a.fixed}, add {a.add})")
    print(f"{'D':>4} {'S':>6} {'countdown':>10} " + " ".join(f"{'chunk ' + str(c):>9}" for c in chunks))
    for d in (64, 128, 256):
        for s in (512, 1024, 2048, 4096, 8192, 16384):
            heads = (16384 // s) * (2048 // d)
            base = makespan("default", 0, s, d, heads, a.sms, a.fixed, a.add)
            row = [makespan("countdown", 0, s, d, heads, a.sms, a.fixed, a.add) / base]
            row += [makespan("chunked", c, s, d, heads, a.sms, a.fixed, a.add) / base for c in chunks]
            print(f"{d:>4} {s:>6} " + " ".join(f"{x:9.3f}" if i else f"{x:10.3f}" for i, x in enumerate(row)))


if __name__ == "__main__":
    main()
