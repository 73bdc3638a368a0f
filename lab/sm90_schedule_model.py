#!/usr/bin/env python3
"""CPU model of the Hopper path's persistent tile schedule: how evenly the causal work spreads
over the SMs, for the static round-robin schedule the kernel uses (CTA c takes tiles c, c + grid,
...) and for a dynamic one (the next free CTA takes the next tile, as with the atomic counter of
csrc/flash_fwd_sm90/schedule.cuh, which the binding uses for causal calls with more tiles than SMs).

Tile order and L2 grouping mirror csrc/flash_fwd_sm90/tile_scheduler.h (decode_tile) and
launch.cuh (l2_group_heads; 8 MB groups for the static schedule, 16 MB for the dynamic one). Work
per tile = key blocks visited + a fixed per-tile overhead.
Balance = mean work per CTA / the busiest CTA's work (1.0 = perfect; the kernel's time follows the
busiest CTA). A model, not a measurement: it ignores L2 effects and the ping-pong overlap.

usage: python3 lab/sm90_schedule_model.py [--sms 132] [--overhead 1.5] [--budget-mb 8 16 32]
"""

from __future__ import annotations

import argparse
import heapq
import math

# (block M, block N) of the configs in traits.h, where distinct from the default.
TILE_DEFAULT = {64: (128, 128), 128: (128, 128), 256: (128, 64)}  # Sm90DefaultConfig<D>
TILE_LONG_KEYS = {64: (192, 128)}  # Sm90LongKeysConfig<D>: causal, seqlen_k >= LONG_KEYS_MIN
TILE_NON_CAUSAL = {64: (192, 128)}  # Sm90NonCausalConfig<D>: no causal mask
LONG_KEYS_MIN = 4096  # traits.h kSm90LongKeysMin
LONG_KEYS_FULL_GRID_MIN = 1536  # traits.h kSm90LongKeysFullGridMin
LONG_KEYS_GRID_HALF_WAVES = 3  # traits.h kSm90LongKeysGridHalfWaves


def tile_shape(head_dim: int, seqlen_k: int, causal: bool, batch_heads: int = 0, seqlen_q: int = 0,
               sms: int = 132) -> tuple[int, int]:
    """traits.h sm90_tile_shape: (block M, block N) of the config the launcher picks; with
    batch_heads and seqlen_q, also dispatch.cu find_launcher's long-keys rule for causal grids of
    many waves from LONG_KEYS_FULL_GRID_MIN keys (a grid of non-causal tiles filling at most half
    the SMs takes the default config instead: smaller than the grids modelled here)."""
    if not causal and head_dim in TILE_NON_CAUSAL:
        return TILE_NON_CAUSAL[head_dim]
    if causal and head_dim in TILE_LONG_KEYS:
        if seqlen_k >= LONG_KEYS_MIN:
            return TILE_LONG_KEYS[head_dim]
        block_m = TILE_LONG_KEYS[head_dim][0]
        tiles = -(-seqlen_q // block_m) * batch_heads
        if seqlen_k >= LONG_KEYS_FULL_GRID_MIN and 2 * tiles >= LONG_KEYS_GRID_HALF_WAVES * sms:
            return TILE_LONG_KEYS[head_dim]
    return TILE_DEFAULT[head_dim]


L2_GROUP_BUDGET = 8 << 20  # tile_scheduler.h kL2GroupBudgetBytes (the static schedule)
L2_GROUP_BUDGET_DYNAMIC = 16 << 20  # tile_scheduler.h kL2GroupBudgetDynamicBytes
SMS = 132  # H100 SXM


def l2_group_heads(seqlen_k: int, head_dim: int, batch_heads: int, budget: int | None = None) -> int:
    """tile_scheduler.h's l2_group_heads for Hq = Hk (the standard grid)."""
    kv_bytes_per_head = 2 * seqlen_k * head_dim * 2
    return min(batch_heads, max(1, (L2_GROUP_BUDGET if budget is None else budget) // kv_bytes_per_head))


def dynamic_schedule_pays(causal: bool, seqlen_q: int, batch_heads: int, block_m: int, sms: int = SMS) -> bool:
    """tile_scheduler.h's dynamic_schedule_pays: the binding's schedule choice."""
    m_blocks = math.ceil(seqlen_q / block_m)
    return causal and m_blocks > 1 and m_blocks * batch_heads > sms


def tile_work(seqlen: int, head_dim: int, batch: int, heads: int, causal: bool, overhead: float,
              budget: int | None = None, sms: int = SMS) -> list[float]:
    """Work of tile t for t in the kernel's tile order (Sq = Sk = seqlen, top-left causal)."""
    block_m, block_n = tile_shape(head_dim, seqlen, causal, batch * heads, seqlen, sms)
    m_blocks = math.ceil(seqlen / block_m)
    batch_heads = batch * heads
    if budget is None:  # the budget of the schedule the binding picks (launch.cuh)
        dynamic = dynamic_schedule_pays(causal, seqlen, batch_heads, block_m, sms)
        budget = L2_GROUP_BUDGET_DYNAMIC if dynamic else L2_GROUP_BUDGET
    group = l2_group_heads(seqlen, head_dim, batch_heads, budget)
    # traits.h kPartialTileFirst: the long-keys config's tiles start q_row_shift rows early under a mask.
    row_shift = m_blocks * block_m - seqlen if causal and (block_m, block_n) == TILE_LONG_KEYS.get(head_dim) else 0
    work = []
    for t in range(m_blocks * batch_heads):
        per_group = group * m_blocks
        g, within = divmod(t, per_group)
        heads_here = min(group, batch_heads - g * group)
        m_idx = within // heads_here
        m_block = m_blocks - 1 - m_idx
        # Causal tiles end at (m + 1) block_m - q_row_shift (launch.cuh: the partial tile first).
        keys = min(seqlen, (m_block + 1) * block_m - row_shift) if causal else seqlen
        work.append(math.ceil(keys / block_n) + overhead)
    return work


def static_loads(work: list[float], sms: int) -> list[float]:
    grid = min(sms, len(work))
    loads = [0.0] * grid
    for t, w in enumerate(work):
        loads[t % grid] += w
    return loads


def dynamic_loads(work: list[float], sms: int) -> list[float]:
    grid = min(sms, len(work))
    heap = [(0.0, c) for c in range(grid)]
    for w in work:
        load, c = heapq.heappop(heap)
        heapq.heappush(heap, (load + w, c))
    return [load for load, _ in heap]


def balance(loads: list[float]) -> float:
    return sum(loads) / len(loads) / max(loads)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sms", type=int, default=SMS, help=f"SM count (H100 SXM: {SMS})")
    ap.add_argument("--overhead", type=float, default=1.5, help="per-tile cost in key blocks (prologue, epilogue)")
    ap.add_argument("--budget-mb", type=int, nargs="+", default=None,
                    help="L2 group budgets to compare (dynamic schedule, causal cells only)")
    args = ap.parse_args()
    if args.budget_mb:
        print(f"dynamic-schedule balance of the causal standard grid by L2 group budget, {args.sms} SMs")
        print(f"{'D':>4} {'S':>6} " + " ".join(f"{mb:>5} MB" for mb in args.budget_mb))
        for d in (64, 128, 256):
            for s in (512, 1024, 2048, 4096, 8192, 16384):
                row = []
                for mb in args.budget_mb:
                    w = tile_work(s, d, 16384 // s, 2048 // d, True, args.overhead, budget=mb << 20)
                    row.append(f"{balance(dynamic_loads(w, args.sms)):>8.3f}")
                print(f"{d:>4} {s:>6} " + " ".join(row))
        return
    print(f"standard grid (B*S = 16k, H = 2048/D), {args.sms} SMs; balance = mean/max work per CTA")
    print(f"{'D':>4} {'S':>6} {'causal':>6} {'tiles':>6} {'static':>7} {'dynamic':>8}")
    for d in (64, 128, 256):
        for s in (512, 1024, 2048, 4096, 8192, 16384):
            for causal in (False, True):
                w = tile_work(s, d, 16384 // s, 2048 // d, causal, args.overhead, sms=args.sms)
                print(f"{d:>4} {s:>6} {int(causal):>6} {len(w):>6} "
                      f"{balance(static_loads(w, args.sms)):>7.2f} {balance(dynamic_loads(w, args.sms)):>8.2f}")


if __name__ == "__main__":
    main()
