"""lab/power_probe.py's reading of nvidia-smi's samples (no GPU): csv lines to (MHz, W, reason bits),
unfillable lines left out, and the medians with each capping reason's share of the samples."""

from __future__ import annotations

import math

from repo_modules import load_repo_module

pp = load_repo_module("lab/power_probe.py")


def test_samples_parse_with_their_reason_bits_and_skip_what_nvidia_smi_could_not_fill() -> None:
    text = "1980, 544.81, 0x0000000000000000\n1845, 699.12, 0x0000000000000004\n[N/A], [N/A], [N/A]\n1830, 70"
    assert pp.parse_samples(text) == [(1980.0, 544.81, 0), (1845.0, 699.12, 4)]


def test_the_summary_gives_medians_and_the_share_of_each_cap() -> None:
    samples = [(1980.0, 540.0, 0), (1845.0, 699.0, 0x4), (1830.0, 700.0, 0x4 | 0x80), (1815.0, 701.0, 0x4)]
    mhz, watts, capped = pp.summarize(samples)
    assert mhz == 1837.5 and watts == 699.5
    assert capped == "sw-power 75%, hw-power-brake 25%"
    assert pp.summarize([(1980.0, 300.0, 0)])[2] == "-"
    empty = pp.summarize([])
    assert math.isnan(empty[0]) and math.isnan(empty[1]) and empty[2] == "no samples"
