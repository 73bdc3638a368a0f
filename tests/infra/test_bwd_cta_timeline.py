"""lab/bwd_cta_timeline.py's analysis on synthetic stamps (no GPU): a CTA's phases come back in
microseconds through its clock rate, the gap between CTAs is taken per SM (none before an SM's
first CTA), and a CTA's fixed part is counted in steady steps; CTAs without a step or a stamp are
left out."""

from __future__ import annotations

from repo_modules import load_repo_module

tl = load_repo_module("lab/bwd_cta_timeline.py")


def test_the_selftest_recovers_its_synthetic_phases(capsys) -> None:
    assert tl.selftest() == 0
    assert "selftest: ok" in capsys.readouterr().out


def _stamped(steps: int, sm: int, start_cycle: int) -> list[int]:
    s = [0] * tl.SLOTS
    s[tl.S_START] = start_cycle
    s[tl.S_KV] = start_cycle + 100
    s[tl.S_FIRST_READY] = start_cycle + 200
    s[tl.S_FIRST_DONE] = start_cycle + 500
    s[tl.S_LOOP_END] = s[tl.S_FIRST_DONE] + 1000 * (steps - 1)
    s[tl.S_END] = s[tl.S_LOOP_END] + 400
    s[tl.G_START], s[tl.G_END] = start_cycle, s[tl.S_END]  # a nanosecond a cycle
    s[tl.S_META] = (3 << 32) | steps
    s[tl.S_WHERE] = (5 << 32) | sm
    return s


def test_gaps_are_per_sm_and_unstamped_or_stepless_ctas_are_left_out() -> None:
    empty = [0] * tl.SLOTS
    stamps = [[_stamped(3, 0, 10_000), empty], [_stamped(2, 1, 10_000), empty],
              [_stamped(4, 0, 20_000), empty], [empty, empty], [_stamped(0, 1, 30_000), empty]]
    ctas = tl.ctas_of(stamps)
    assert [c["cta"] for c in ctas] == [0, 1, 2]
    by = {c["cta"]: c for c in ctas}
    assert by[0]["gap"] is None and by[1]["gap"] is None
    assert abs(by[2]["gap"] - (20_000 - by[0]["end_ns"]) / 1e3) < 1e-12  # after CTA 0 on SM 0, not CTA 1
    assert abs(by[2]["steady"] - 1.0) < 1e-12 and by[0]["head"] == 5 and by[0]["n_block"] == 3
    summary = tl.summarize(ctas, sms=2)
    assert summary["ctas"] == 3 and abs(summary["steady_us"] - 1.0) < 1e-12
