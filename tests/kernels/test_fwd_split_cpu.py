"""CPU checks of the Hopper forward's split over the keys (csrc/flash_fwd_sm90/tile_scheduler.h,
and split_rule.h, plain C++ built with the host compiler): the tiles of a split call are every
(query tile, split) pair exactly once, and the splits of a query tile share its key blocks out
exactly, each block to one split, in consecutive runs; the split rule's count and merge on the
measured shapes, and its invariants over every small grid."""

from __future__ import annotations

import pytest
from repo_modules import run_cpp_probe

_PROBE = r"""
#include <cstdio>
#include <initializer_list>
#include "flash_fwd_sm90/tile_scheduler.h"
using namespace flashattn::sm90;
int main() {
  // split_blocks: begin end count-of-blocks for every split, over ranges and split counts
  for (int begin : {0, 3})
    for (int count : {0, 1, 2, 5, 16, 17, 128})
      for (int splits : {1, 2, 3, 4, 8, 16, 128}) {
        flashattn::KeyBlocks r;
        r.n_begin = begin;
        r.n_end = begin + count;
        r.full_begin = begin + 1;
        r.full_end = begin + count;
        for (int s = 0; s < splits; ++s) {
          const flashattn::KeyBlocks q = split_blocks(r, s, splits);
          std::printf("blocks %d %d %d %d %d %d %d %d\n", begin, count, splits, s, q.n_begin, q.n_end, q.full_begin,
                      q.full_end);
        }
      }
  // split_tile: t -> m_block batch head split
  for (int splits : {1, 3, 8})
    for (int t = 0; t < 4 * 2 * 3 * splits; ++t) {
      const SplitTile st = split_tile(t, splits, 4, 3, 2 * 3, 2);
      std::printf("tile %d %d %d %d %d %d\n", splits, t, st.coord.m_block, st.coord.batch, st.coord.head_q, st.split);
    }
}
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> dict:
    table: dict = {"blocks": {}, "tiles": {}}
    for line in run_cpp_probe(tmp_path_factory, "fwd_split", _PROBE):
        kind, *vals = line.split()
        v = [int(x) for x in vals]
        if kind == "blocks":
            table["blocks"].setdefault(tuple(v[:3]), []).append(tuple(v[3:]))
        else:
            table["tiles"].setdefault(v[0], []).append(tuple(v[1:]))
    return table


def test_splits_share_out_every_key_block_once(probe: dict) -> None:
    assert len(probe["blocks"]) == 2 * 7 * 7
    for (begin, count, splits), rows in probe["blocks"].items():
        assert [s for s, *_ in rows] == list(range(splits))
        covered = []
        for s, b, e, fb, fe in rows:
            assert begin <= b <= e <= begin + count, (begin, count, splits, s)
            assert (fb, fe) == (begin + 1, begin + count)  # the mask's full range stays absolute
            covered.extend(range(b, e))
        assert covered == list(range(begin, begin + count)), (begin, count, splits)
        if splits == 1:
            assert rows == [(0, begin, begin + count, begin + 1, begin + count)]
        # consecutive runs of ceil(count / splits): no split longer than that
        per = -(-count // splits)
        assert all(e - b <= per for _, b, e, *_ in rows)


def test_split_tiles_are_every_query_tile_and_split_once(probe: dict) -> None:
    for splits, rows in probe["tiles"].items():
        seen = {}
        for t, m_block, batch, head, split in rows:
            assert 0 <= m_block < 4 and 0 <= batch < 2 and 0 <= head < 3 and 0 <= split < splits
            seen.setdefault((m_block, batch, head, split), []).append(t)
        assert len(seen) == 4 * 2 * 3 * splits and all(len(ts) == 1 for ts in seen.values())
        # the splits of one query tile are neighbours in the tile order (one wave shares its Q in L2)
        for t, *_ in rows:
            base_rows = [r for r in rows if r[0] // splits == t // splits]
            assert len({r[1:4] for r in base_rows}) == 1


_RULE_PROBE = r"""
#include <cstdio>
#include "flash_fwd_sm90/split_rule.h"
using namespace flashattn::sm90;
// clusters of s CTAs fit when s <= max_fit (the occupancy query's answer, stubbed)
SplitChoice rule(long tiles, long blocks, int sms, long forced, bool combine_only, int max_fit) {
  return split_rule(SplitGrid{tiles, blocks, sms, 128}, forced, combine_only, [&](int s) { return s <= max_fit; });
}
int main() {
  // every small grid of a 132-SM GPU: tiles, key blocks, the largest cluster that fits
  for (int tiles = 1; tiles <= 70; ++tiles)
    for (int blocks = 1; blocks <= 80; ++blocks)
      for (int max_fit = 0; max_fit <= 8; ++max_fit) {
        const SplitChoice c = rule(tiles, blocks, 132, -1, false, max_fit);
        std::printf("grid %d %d %d %d %d\n", tiles, blocks, max_fit, c.num_splits, int(c.in_cluster));
      }
  CASES
}
"""

# name: (tiles, key blocks, forced (-1: the rule), combine only, largest cluster that fits) -> (splits, in a cluster)
# on 132 SMs; the B=1 H=1 D=64 shapes measured on an H200 (docs/perf-notes.md, issue 28).
RULE_CASES = {
    "S=256 (2 tiles of 2 blocks: 2 splits of 1 block lose)": ((2, 2, -1, False, 8), (1, False)),
    "S=1024 (8 tiles of 8 blocks: 8 splits of 1, clusters of 8)": ((8, 8, -1, False, 8), (8, True)),
    "S=2048 causal (16 tiles, 16 blocks; 8-CTA clusters do not fit: 6 of 3 blocks do)": ((16, 16, -1, False, 6), (6, True)),
    "S=4096 (32 tiles of 32 blocks; 4 do not fit, 3 would hold 11 blocks: the combine)": ((32, 32, -1, False, 3), (4, False)),
    "S=8192 (64 tiles of 64 blocks: 2 splits, long tiles)": ((64, 64, -1, False, 8), (2, True)),
    "two splits of short tiles lose (60 tiles of 8 blocks)": ((60, 8, -1, False, 8), (1, False)),
    "a full grid (67 tiles for 132 SMs) never splits": ((67, 64, -1, False, 8), (1, False)),
    "forced 16: more than a cluster takes, the combine": ((8, 64, 16, False, 8), (16, False)),
    "forced 5, no cluster fits: 5 through the combine, never fewer": ((8, 64, 5, False, 0), (5, False)),
    "forced 0 or 1: no split": ((8, 64, 0, False, 8), (1, False)),
    "forced beyond the blocks: one split a block": ((8, 3, 7, False, 8), (3, True)),
    "combine only (FLASHATTN_FWD_SPLIT_MERGE=combine)": ((8, 8, -1, True, 8), (8, False)),
}


@pytest.fixture(scope="module")
def rule_probe(tmp_path_factory) -> dict:
    cases = "\n  ".join(
        f'{{ const SplitChoice c = rule({t}, {b}, 132, {f}, {str(co).lower()}, {m}); '
        f'std::printf("case {i} %d %d\\n", c.num_splits, int(c.in_cluster)); }}'
        for i, ((t, b, f, co, m), _) in enumerate(RULE_CASES.values()))
    table: dict = {"grid": {}, "case": {}}
    for line in run_cpp_probe(tmp_path_factory, "fwd_split_rule", _RULE_PROBE.replace("CASES", cases)):
        kind, *vals = line.split()
        v = [int(x) for x in vals]
        if kind == "grid":
            table["grid"][tuple(v[:3])] = (v[3], bool(v[4]))
        else:
            table["case"][v[0]] = (v[1], bool(v[2]))
    return table


@pytest.mark.parametrize("name", list(RULE_CASES))
def test_the_split_rule_on_measured_shapes(rule_probe: dict, name: str) -> None:
    i = list(RULE_CASES).index(name)
    assert rule_probe["case"][i] == RULE_CASES[name][1], name


def test_the_split_rule_invariants(rule_probe: dict) -> None:
    """Over every small grid: no split where the tiles fill more than half the SMs; one wave; every
    split holds a key block; 2 splits only for tiles of 16+ blocks; a cluster only where it fits; a
    count below the wave's only to fit a cluster, with at most one key block more a split."""
    assert len(rule_probe["grid"]) == 70 * 80 * 9
    ceil = lambda a, b: -(-a // b)  # noqa: E731
    for (tiles, blocks, max_fit), (n, in_cluster) in rule_probe["grid"].items():
        where = (tiles, blocks, max_fit, n, in_cluster)
        if 2 * tiles > 132 or n == 1:
            assert (n, in_cluster) == (1, False) or 2 * tiles <= 132, where
            continue
        assert n * tiles <= 132 and n <= blocks, where
        assert ceil(blocks, ceil(blocks, n)) == n, where  # no empty split
        assert n >= 3 or (n == 2 and blocks >= 16), where
        assert not in_cluster or n <= max_fit, where
        wave = min(132 // tiles, blocks)
        full = ceil(blocks, ceil(blocks, wave))  # the rule's count before any cluster fallback
        if n < full:
            assert in_cluster and ceil(blocks, n) <= ceil(blocks, full) + 1, where
        else:
            assert n == full and in_cluster == (full <= max_fit), where
