"""CPU checks of the Hopper forward's split over the keys (csrc/flash_fwd_sm90/tile_scheduler.h,
plain C++ built with the host compiler): the tiles of a split call are every (query tile, split)
pair exactly once, and the splits of a query tile share its key blocks out exactly, each block to
one split, in consecutive runs."""

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
