"""CPU checks of the Hopper backward's CTA order and query-block walk (csrc/flash_bwd_sm90/block.h,
plain C++ built with the host compiler): over a grid, every (batch, K/V head, key block) is one
CTA's, in every order (plain, the grouped longest-first order of launch.cuh's bwd_lpt_heads,
deterministic mode's descending key blocks); each CTA's steps visit every query block that sees its
keys once per query head of its group, forward or reversed; deterministic mode keeps the forward
walk whatever the switch; the grouped order starts a group's longest CTAs first."""

from __future__ import annotations

import pytest
from repo_modules import run_cpp_probe

_PROBE = r"""
#include <cstdio>
#include <initializer_list>
#include "flash_bwd_sm90/block.h"
#include "flash_bwd_sm90/traits.h"
using namespace flashattn;
using namespace flashattn::sm90;

template <int D>
void walk(const char* name, int b, int hq, int hk, int sq, int sk, int causal, int lpt, int rev, int det) {
  using T = Sm90BwdTraits<D>;
  BwdParams p;
  p.batch = b; p.heads_q = hq; p.heads_kv = hk; p.seqlen_q = sq; p.seqlen_k = sk; p.head_dim = D;
  p.set_causal(causal ? CausalMode::kBottomRight : CausalMode::kNone);
  int dummy = 0;
  p.dq_semaphore = det ? &dummy : nullptr;
  const int n_blocks = (sk + T::kBlockN - 1) / T::kBlockN;
  const int grid = n_blocks * b * hk;
  std::printf("shape %s %d %d %d %d %d\n", name, b, hq, hk, rev, det);
  for (int cta = 0; cta < grid; ++cta) {
    const BwdBlock blk = bwd_block<T>(p, n_blocks, lpt, rev, cta);
    std::printf("cta %s %d %d %d %d %d %d %d", name, cta, blk.batch, blk.head_kv, blk.n_block, blk.m_begin,
                blk.m_steps, int(blk.reverse));
    for (int t = 0; t < blk.steps; ++t) std::printf(" %d:%d", blk.head_q(t), blk.m_block(t));
    std::printf("\n");
  }
}

int main() {
  // name, batch, heads_q, heads_kv, Sq, Sk, causal, lpt_heads, reverse, deterministic
  walk<128>("plain", 2, 4, 2, 700, 700, 1, 0, 0, 0);
  walk<128>("lpt", 2, 4, 2, 700, 700, 1, 3, 0, 0);
  walk<128>("lpt-rev", 2, 4, 2, 700, 700, 1, 3, 1, 0);
  walk<128>("rev-noncausal", 1, 2, 1, 300, 500, 0, 0, 1, 0);
  walk<128>("det-rev", 2, 4, 2, 700, 700, 1, 0, 1, 1);
  walk<256>("d256-rev", 1, 3, 3, 333, 200, 1, 2, 1, 0);
  walk<64>("d64-rev-sq-gt-sk", 1, 2, 2, 517, 130, 1, 0, 1, 0);
}
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> dict:
    """{"shape": name -> (batch, heads_q, heads_kv, reverse asked, deterministic), "cta": name -> rows}"""
    table: dict = {"shape": {}, "cta": {}}
    for line in run_cpp_probe(tmp_path_factory, "sm90_bwd_block", _PROBE):
        kind, name, *rest = line.split()
        if kind == "shape":
            b, hq, hk, rev, det = (int(x) for x in rest)
            table["shape"][name] = (b, hq, hk, bool(rev), bool(det))
            continue
        cta, batch, head_kv, n_block, m_begin, m_steps, reverse = (int(x) for x in rest[:7])
        steps = [tuple(int(x) for x in s.split(":")) for s in rest[7:]]
        table["cta"].setdefault(name, []).append(dict(cta=cta, batch=batch, head_kv=head_kv, n_block=n_block,
                                                      m_begin=m_begin, m_steps=m_steps, reverse=bool(reverse),
                                                      steps=steps))
    return table


# The probe's cases (its main()), by name.
NAMES = ["plain", "lpt", "lpt-rev", "rev-noncausal", "det-rev", "d256-rev", "d64-rev-sq-gt-sk"]


def test_the_probe_ran_every_case(probe: dict) -> None:
    assert sorted(probe["shape"]) == sorted(NAMES) and sorted(probe["cta"]) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_every_key_block_is_one_ctas(probe: dict, name: str) -> None:
    b, _, hk, _, _ = probe["shape"][name]
    rows = probe["cta"][name]
    keys = sorted((r["batch"], r["head_kv"], r["n_block"]) for r in rows)
    n_blocks = len(rows) // (b * hk)
    assert keys == sorted((bb, h, n) for bb in range(b) for h in range(hk) for n in range(n_blocks))


@pytest.mark.parametrize("name", NAMES)
def test_the_walk_visits_each_visible_query_block_once_per_head(probe: dict, name: str) -> None:
    _, hq, hk, rev, det = probe["shape"][name]
    group = hq // hk
    for r in probe["cta"][name]:
        want = [(r["head_kv"] * group + g, m) for g in range(group)
                for m in range(r["m_begin"], r["m_begin"] + r["m_steps"])]
        assert sorted(r["steps"]) == sorted(want), r
        assert r["reverse"] == (rev and not det), r
        for g in range(group):  # each head's blocks in one direction
            ms = [m for h, m in r["steps"] if h == r["head_kv"] * group + g]
            assert ms == (sorted(ms, reverse=True) if r["reverse"] else sorted(ms)), r


def test_deterministic_mode_launches_the_last_key_block_first(probe: dict) -> None:
    rows = probe["cta"]["det-rev"]
    n_blocks = max(r["n_block"] for r in rows) + 1
    assert [r["n_block"] for r in rows[:n_blocks]] == list(range(n_blocks - 1, -1, -1))


def test_grouped_order_starts_the_longest_ctas_of_a_group_first(probe: dict) -> None:
    """lpt_heads = 3 over 4 (batch, K/V head) pairs: the first three CTAs are key block 0 (under
    the causal mask the one with the most query blocks) of three different pairs."""
    rows = probe["cta"]["lpt"]
    first = rows[:3]
    assert [r["n_block"] for r in first] == [0, 0, 0]
    assert len({(r["batch"], r["head_kv"]) for r in first}) == 3
    assert first[0]["m_steps"] == max(r["m_steps"] for r in rows)
