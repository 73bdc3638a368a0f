"""lab/bwd_schedule_model.py's GQA mode: a group split shares the same steps out over more units,
the 8 MiB groups follow a unit's Q/dO bytes, and its copy of group_split.h's rule picks the
splits the header's comment names."""

from __future__ import annotations

import pytest
from repo_modules import load_repo_module

model = load_repo_module("lab/bwd_schedule_model.py")


@pytest.mark.parametrize("d,s,hk", [(128, 4096, 4), (128, 16384, 2), (64, 2048, 8)])
@pytest.mark.parametrize("causal", [False, True])
def test_a_split_keeps_the_steps_and_multiplies_the_units(d, s, hk, causal):
    one = model.unit_steps(s, d, causal, False, hk, 1)
    group = 2048 // d // hk
    assert sum(one) == sum(model.unit_steps(s, d, causal, False))  # the MHA twin's work, its FLOPs
    for k in (2, 4):
        if group % k == 0:
            split = model.unit_steps(s, d, causal, False, hk, k)
            assert len(split) == k * len(one) and sum(split) == sum(one)
            assert max(split) * k == max(one)


def test_hk_zero_is_the_mha_grid():
    assert model.unit_steps(4096, 128, True, False, 0, 1) == model.unit_steps(4096, 128, True, False)


def test_rule_split_follows_group_split_h():
    # MQA at B=1 S=16k, D=128: 128 CTAs for 132 SMs; masked calls want 4 waves (528 CTAs): 128 x 8 = 1024.
    assert model.rule_split(16, 128, True, 132, 4) == 8
    # unmasked calls want half a wave (66 CTAs): 128 are enough, no split.
    assert model.rule_split(16, 128, False, 132, 4) == 1
    # the training grid's 16:4 at 4k: 512 CTAs, 2 x 512 = 1024 >= 528; eight waves take 4.
    assert model.rule_split(4, 512, True, 132, 4) == 2
    assert model.rule_split(4, 512, True, 132, 8) == 4
    # only divisors of the group: a group of 6 goes 1 -> 2 -> 3 -> 6.
    assert model.rule_split(6, 10, True, 132, 4) == 6
