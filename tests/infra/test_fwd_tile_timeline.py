"""lab/fwd_tile_timeline.py's analysis on synthetic stamps (no GPU): the phases of each tile come back
in microseconds through the CTA's clock rate, grouped by key-block count, with the gap between tiles
and the steady key block; a CTA's tiles end at its first unstamped slot."""

from __future__ import annotations

from repo_modules import load_repo_module

tl = load_repo_module("lab/fwd_tile_timeline.py")


def test_the_selftest_recovers_its_synthetic_phases(capsys) -> None:
    assert tl.selftest() == 0
    assert "selftest: ok" in capsys.readouterr().out


def test_a_tile_without_keys_is_all_epilogue_and_the_first_tile_has_no_gap() -> None:
    stamps = [[[[0] * tl.SLOTS for _ in range(tl.ROWS)] for _ in range(tl.MAX_TILES)] for _ in range(tl.MAX_CTAS)]
    s = stamps[3][0][0]
    s[tl.S_START], s[tl.S_END] = 1000, 1600
    s[tl.G_START], s[tl.G_END] = 500, 800  # half a nanosecond a cycle
    s[tl.S_META] = 7  # no key block, m_block 7
    tiles = tl.tiles_of(stamps, 0)
    assert len(tiles) == 1 and tiles[0]["cta"] == 3 and tiles[0]["m_block"] == 7 and tiles[0]["gap"] is None
    summary = tl.summarize(tiles)
    row = summary["by_blocks"][0]
    assert row["tiles"] == 1 and abs(row["epilogue"] - 0.3) < 1e-12 and abs(row["total"] - 0.3) < 1e-12
    assert tl.tiles_of(stamps, 1) == []
