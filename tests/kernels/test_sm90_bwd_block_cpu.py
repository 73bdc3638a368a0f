"""CPU checks of the Hopper backward's CTA order and query-block walk (csrc/flash_bwd_sm90/block.h,
plain C++ built with the host compiler): over a grid, every (batch, K/V head, key block) is one
CTA's, in every order (plain, the grouped longest-first order of launch.cuh's bwd_lpt_heads,
deterministic mode's descending key blocks); each CTA's steps visit every query block that sees its
keys once per query head of its group, forward or reversed (with a GQA group split over CTAs,
BwdParams::group_split, the key block's CTAs share the group's heads exactly); deterministic mode
keeps the forward walk whatever the switch; the grouped order starts a group's longest CTAs first. Packed batches:
each CTA walks exactly its own sequence's query blocks that see its keys (tile edges, empty
sequences, both causal alignments, windows, D 64/128/256, clamped bad offsets), and the
sequences' dq_accum tiles stay inside the buffer and apart. The GQA group split's rule
(group_split.h): the smallest divisor of the group that fills the GPU; its lab form by a model of the
dispatch (bwd_group_split_model), the lab model's ends split by split. The wide config's rule
(wide_rule.h): by the lab switch's mode, the mask, the query rows of an unmasked call and the keys a
masked row sees."""

from __future__ import annotations

import collections

import pytest
from repo_modules import load_repo_module, run_cpp_probe

_PROBE = r"""
#include <cstdio>
#include <initializer_list>
#include "flash_bwd_sm90/block.h"
#include "flash_bwd_sm90/tail_split.h"
#include "flash_bwd_sm90/traits.h"
using namespace flashattn;
using namespace flashattn::sm90;

template <int D>
void walk(const char* name, int b, int hq, int hk, int sq, int sk, int causal, int lpt, int rev, int det, int split = 1,
          int tail_units = 0, int tail_split = 1) {
  using T = Sm90BwdTraits<D>;
  BwdParams p;
  p.batch = b; p.heads_q = hq; p.heads_kv = hk; p.seqlen_q = sq; p.seqlen_k = sk; p.head_dim = D;
  p.set_causal(causal ? CausalMode::kBottomRight : CausalMode::kNone);
  int dummy = 0;
  p.dq_semaphore = det ? &dummy : nullptr;
  p.group_split = split;
  p.tail_units = tail_units;
  p.tail_split = tail_split;
  const int n_blocks = (sk + T::kBlockN - 1) / T::kBlockN;
  const int grid = static_cast<int>(bwd_tail_grid(static_cast<long long>(n_blocks) * b * hk * split, tail_units, tail_split));
  std::printf("shape %s %d %d %d %d %d %d %d %d\n", name, b, hq, hk, rev, det, split, tail_units, tail_split);
  for (int cta = 0; cta < grid; ++cta) {
    const BwdBlock blk = bwd_block<T>(p, n_blocks, lpt, rev, cta);
    std::printf("cta %s %d %d %d %d %d %d %d %d", name, cta, blk.batch, blk.head_kv, blk.n_block, blk.m_begin,
                blk.m_steps, int(blk.reverse), blk.tail);
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
  walk<128>("split-mqa", 1, 8, 1, 700, 700, 1, 0, 1, 0, 4);
  walk<128>("split-lpt", 2, 8, 2, 700, 600, 1, 3, 1, 0, 2);
  walk<256>("split-d256-noncausal", 1, 6, 2, 300, 333, 0, 0, 0, 0, 3);
  // ..., group split, tail_units, tail_split: the split last wave (tail_split.h)
  // (each also as "<name>-whole": the same grid unsplit, whose walks the pieces must add up to)
  walk<128>("tail-mha", 2, 3, 3, 700, 900, 0, 0, 0, 0, 1, 5, 4);
  walk<128>("tail-mha-whole", 2, 3, 3, 700, 900, 0, 0, 0, 0, 1);
  walk<128>("tail-all-units-gqa", 1, 4, 2, 333, 300, 0, 0, 0, 0, 1, 6, 7);
  walk<128>("tail-all-units-gqa-whole", 1, 4, 2, 333, 300, 0, 0, 0, 0, 1);
  walk<256>("tail-group-split", 1, 6, 2, 300, 333, 0, 0, 0, 0, 3, 4, 3);
  walk<256>("tail-group-split-whole", 1, 6, 2, 300, 333, 0, 0, 0, 0, 3);
  walk<64>("tail-more-pieces-than-steps-per-head", 1, 4, 1, 200, 260, 0, 0, 0, 0, 1, 3, 5);
  walk<64>("tail-more-pieces-than-steps-per-head-whole", 1, 4, 1, 200, 260, 0, 0, 0, 0, 1);
  // a causal grid below half a wave: every unit split (tail_split.h bwd_tail_plan_masked), the
  // grouped CTA order, the reversed walk, pieces with no step
  walk<128>("tail-causal", 1, 2, 2, 700, 900, 1, 2, 1, 0, 1, 16, 8);
  walk<128>("tail-causal-whole", 1, 2, 2, 700, 900, 1, 2, 1, 0, 1);
  // The rule: units, steps, SMs
  for (auto c : {std::initializer_list<long long>{2048, 205, 132}, {2048, 26, 132}, {2048, 7, 132}, {4096, 256, 132},
                 {4096, 128, 132}, {2112, 205, 132}, {16, 9, 132}, {16, 2, 132}, {8, 72, 132}, {131, 300, 132},
                 {1, 1000, 132}, {200, 1, 132}}) {
    const long long* v = c.begin();
    const BwdTailPlan plan = bwd_tail_plan(v[0], static_cast<int>(v[1]), static_cast<int>(v[2]));
    const BwdTailPlan masked = bwd_tail_plan_masked(v[0], static_cast<int>(v[1]), static_cast<int>(v[2]));
    std::printf("plan %lld %lld %lld %d %d %d %d\n", v[0], v[1], v[2], plan.units, plan.split, masked.units, masked.split);
  }
}
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> dict:
    """{"shape": name -> (batch, heads_q, heads_kv, reverse asked, deterministic, split, tail_units,
    tail_split), "cta": name -> rows, "plan": (units, steps, sms) -> (tail units, tail split)}"""
    table: dict = {"shape": {}, "cta": {}, "plan": {}}
    for line in run_cpp_probe(tmp_path_factory, "sm90_bwd_block", _PROBE):
        kind, *rest = line.split()
        if kind == "plan":
            units, steps, sms, tail_units, tail_split, masked_units, masked_split = (int(x) for x in rest)
            table["plan"][(units, steps, sms)] = (tail_units, tail_split)
            table.setdefault("masked_plan", {})[(units, steps, sms)] = (masked_units, masked_split)
            continue
        name, *rest = rest
        if kind == "shape":
            b, hq, hk, rev, det, split, tail_units, tail_split = (int(x) for x in rest)
            table["shape"][name] = (b, hq, hk, bool(rev), bool(det), split, tail_units, tail_split)
            continue
        cta, batch, head_kv, n_block, m_begin, m_steps, reverse, tail = (int(x) for x in rest[:8])
        steps = [tuple(int(x) for x in s.split(":")) for s in rest[8:]]
        table["cta"].setdefault(name, []).append(dict(cta=cta, batch=batch, head_kv=head_kv, n_block=n_block,
                                                      m_begin=m_begin, m_steps=m_steps, reverse=bool(reverse),
                                                      tail=tail, steps=steps))
    return table


# The probe's cases (its main()), by name.
NAMES = ["plain", "lpt", "lpt-rev", "rev-noncausal", "det-rev", "d256-rev", "d64-rev-sq-gt-sk", "split-mqa", "split-lpt",
         "split-d256-noncausal"]
TAIL_NAMES = ["tail-mha", "tail-all-units-gqa", "tail-group-split", "tail-more-pieces-than-steps-per-head", "tail-causal"]
NAMES += TAIL_NAMES + [n + "-whole" for n in TAIL_NAMES]


def test_the_probe_ran_every_case(probe: dict) -> None:
    assert sorted(probe["shape"]) == sorted(NAMES) and sorted(probe["cta"]) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_every_key_block_is_one_ctas(probe: dict, name: str) -> None:
    """(group_split CTAs' with a split group; a unit of the split last wave, tail_split CTAs'.)"""
    b, _, hk, _, _, split, tail_units, tail_split = probe["shape"][name]
    rows = probe["cta"][name]
    units = len(rows) - tail_units * (tail_split - 1)
    n_blocks = units // (b * hk * split)
    assert n_blocks * b * hk * split == units
    count = collections.Counter((r["batch"], r["head_kv"], r["n_block"], r["tail"]) for r in rows)
    whole = sorted((bb, h, n) for (bb, h, n, t), c in count.items() for _ in range(c) if t < 0)
    pieces = [c for (_, _, _, t), c in count.items() if t >= 0]
    assert sorted(whole + [k[:3] for k in count if k[3] >= 0]) == sorted(
        (bb, h, n) for bb in range(b) for h in range(hk) for n in range(n_blocks) for _ in range(split))
    assert pieces == [tail_split] * len(pieces)


@pytest.mark.parametrize("name", NAMES)
def test_the_walk_visits_each_visible_query_block_once_per_head(probe: dict, name: str) -> None:
    """Over the CTAs of a key block (one, or group_split sharing the group's heads, each its own
    heads whole)."""
    _, hq, hk, rev, det, split, _, _ = probe["shape"][name]
    group = hq // hk
    by_key: dict = {}
    for r in probe["cta"][name]:
        by_key.setdefault((r["batch"], r["head_kv"], r["n_block"]), []).append(r)
    for ctas in by_key.values():
        r = ctas[0]
        want = [(r["head_kv"] * group + g, m) for g in range(group)
                for m in range(r["m_begin"], r["m_begin"] + r["m_steps"])]
        assert sorted(st for c in ctas for st in c["steps"]) == sorted(want), ctas
        assert all(len({h for h, _ in c["steps"]}) == group // split for c in ctas if c["steps"] and c["tail"] < 0), ctas
    for r in probe["cta"][name]:
        assert r["reverse"] == (rev and not det), r
        for g in range(group):  # each head's blocks in one direction
            ms = [m for h, m in r["steps"] if h == r["head_kv"] * group + g]
            assert ms == (sorted(ms, reverse=True) if r["reverse"] else sorted(ms)), r


@pytest.mark.parametrize("name", TAIL_NAMES)
def test_the_split_last_wave_is_the_grids_last_units_in_runs_of_steps(probe: dict, name: str) -> None:
    """The pieces are the grid's last CTAs, tail_split of them per unit in a row, numbered 0..tail_units-1
    in order; a unit's pieces walk, one after the other, exactly what its CTA walks in the unsplit
    grid (same key block, same heads, same order), each a run of about steps / tail_split (none
    empty without a mask)."""
    _, _, _, _, _, _, tail_units, tail_split = probe["shape"][name]
    rows = probe["cta"][name]
    whole = probe["cta"][name + "-whole"]
    first = len(rows) - tail_units * tail_split
    assert first == len(whole) - tail_units
    assert all(r["tail"] < 0 for r in rows[:first]) and all(r["tail"] < 0 for r in whole)
    assert [{k: v for k, v in r.items() if k != "cta"} for r in rows[:first]] == \
        [{k: v for k, v in r.items() if k != "cta"} for r in whole[:first]]
    pieces = rows[first:]
    assert [r["tail"] for r in pieces] == [i for i in range(tail_units) for _ in range(tail_split)]
    for i in range(tail_units):
        unit, w = pieces[i * tail_split:(i + 1) * tail_split], whole[first + i]
        assert all((c["batch"], c["head_kv"], c["n_block"]) == (w["batch"], w["head_kv"], w["n_block"]) for c in unit)
        assert [st for c in unit for st in c["steps"]] == w["steps"], (unit, w)
        n = len(w["steps"])
        assert [len(c["steps"]) for c in unit] == [(p + 1) * n // tail_split - p * n // tail_split for p in range(tail_split)]
        if not name.startswith("tail-causal"):
            assert all(c["steps"] for c in unit), unit


def test_the_tail_rule(probe: dict) -> None:
    """tail_split.h: the last wave's units (units mod SMs) split into at most min(steps, 64) pieces,
    only where the pieces' rounds (with their fixed cost) save >= 10% of the last wave's time."""
    plans = probe["plan"]
    for (units, steps, sms), (tail_units, tail_split) in plans.items():
        r = units % sms
        if tail_split == 1:
            assert tail_units == 0
            continue
        assert tail_units == r > 0 and 2 <= tail_split <= min(steps, 64), (units, steps, sms)
        rounds = -(-r * tail_split // sms)
        assert rounds * (-(-steps // tail_split) + 3.0) < 0.9 * (steps + 1), (units, steps, sms)
    # The standard grids: 2048 units at D=128 (15.5 waves), 4096 at D=64 (31.03 waves).
    assert plans[(2048, 205, 132)][1] > 1 and plans[(4096, 256, 132)][1] > 1
    assert plans[(2112, 205, 132)] == (0, 1)  # whole waves
    assert plans[(2048, 7, 132)] == (0, 1)  # pieces of a 7-step unit do not pay
    assert plans[(16, 2, 132)] == (0, 1) and plans[(200, 1, 132)] == (0, 1)
    assert plans[(16, 9, 132)][1] > 1 and plans[(8, 72, 132)][1] > 1  # a grid below one wave spreads out
    # Masked calls: only grids of at most half a wave, all their units, as many pieces as fit one wave.
    for (units, steps, sms), (tail_units, tail_split) in probe["masked_plan"].items():
        if tail_split == 1:
            assert tail_units == 0
            assert 2 * units > sms or steps < 2 or -(-steps // min(sms // units, steps, 64)) + 3 >= 0.9 * (steps + 1)
            continue
        assert tail_units == units and 2 * units <= sms and tail_split == min(sms // units, steps, 64)
        assert -(-steps // tail_split) + 3.0 < 0.9 * (steps + 1)
    masked = probe["masked_plan"]
    assert masked[(2048, 205, 132)] == (0, 1) and masked[(131, 300, 132)] == (0, 1)
    assert masked[(16, 9, 132)] == (16, 8) and masked[(8, 72, 132)] == (8, 16) and masked[(1, 1000, 132)] == (1, 64)


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


# ==== deterministic mode's rotated walks (block.h: BwdBlock::rotated, bwd_det_ticket) ===========

_ROTATED_PROBE = r"""
#include <cstdio>
#include "flash_bwd_sm90/block.h"
#include "flash_bwd_sm90/traits.h"
using namespace flashattn;
using namespace flashattn::sm90;

// Every CTA's walk with rotated walks on, and the ticket each step waits for: "step name cta
// batch head_kv n_block t head_q m ticket".
template <int D>
void walk(const char* name, int b, int hq, int hk, int sq, int sk) {
  using T = Sm90BwdTraits<D>;
  BwdParams p;
  p.batch = b; p.heads_q = hq; p.heads_kv = hk; p.seqlen_q = sq; p.seqlen_k = sk; p.head_dim = D;
  p.set_causal(CausalMode::kNone);
  int dummy = 0;
  p.dq_semaphore = &dummy;
  const int n_blocks = (sk + T::kBlockN - 1) / T::kBlockN, m_blocks = (sq + T::kBlockM - 1) / T::kBlockM;
  std::printf("shape %s %d %d %d %d %d\n", name, b, hq, hk, n_blocks, m_blocks);
  for (int cta = 0; cta < n_blocks * b * hk; ++cta) {
    const BwdBlock blk = bwd_block<T>(p, n_blocks, 0, 1, cta, 1);
    for (int t = 0; t < blk.steps; ++t)
      std::printf("step %s %d %d %d %d %d %d %d %d %d\n", name, cta, blk.batch, blk.head_kv, blk.n_block, t,
                  blk.head_q(t), blk.m_block(t), int(blk.rotated),
                  bwd_det_ticket(blk.rotated, blk.n_block, blk.m_block(t), n_blocks));
  }
}

int main() {
  walk<128>("d128-gqa-sq-gt-sk", 2, 4, 2, 700, 600);  // N = 5 key blocks < M = 11 query blocks
  walk<256>("d256-square", 1, 3, 3, 333, 333);        // N = M = 6
  walk<64>("d64-square", 1, 2, 1, 700, 700);          // N = M = 6, MQA 2:1
  walk<128>("d128-one-key-block", 1, 2, 2, 300, 100); // N = 1
}
"""

ROTATED_NAMES = ["d128-gqa-sq-gt-sk", "d256-square", "d64-square", "d128-one-key-block"]


@pytest.fixture(scope="module")
def rotated_probe(tmp_path_factory) -> dict:
    """{"shape": name -> (batch, heads_q, heads_kv, key blocks, query blocks), "step": name -> rows}"""
    table: dict = {"shape": {}, "step": {}}
    for line in run_cpp_probe(tmp_path_factory, "sm90_bwd_block_rotated", _ROTATED_PROBE):
        kind, name, *rest = line.split()
        values = tuple(int(x) for x in rest)
        if kind == "shape":
            table["shape"][name] = values
        else:
            cta, batch, head_kv, n, t, head_q, m, rotated, ticket = values
            table["step"].setdefault(name, []).append(dict(cta=cta, batch=batch, head_kv=head_kv, n=n, t=t,
                                                           head_q=head_q, m=m, rotated=rotated, ticket=ticket))
    return table


@pytest.mark.parametrize("name", ROTATED_NAMES)
def test_rotated_walks_visit_every_query_block_once_from_their_own(rotated_probe: dict, name: str) -> None:
    """Key block n walks each query head's blocks n, n + 1, ..., wrapping around: every block once."""
    b, hq, hk, n_blocks, m_blocks = rotated_probe["shape"][name]
    group = hq // hk
    walks: dict = {}
    for r in rotated_probe["step"][name]:
        assert r["rotated"] == 1, r
        walks.setdefault((r["batch"], r["head_kv"], r["n"]), []).append((r["head_q"], r["m"]))
    assert sorted(walks) == [(bb, h, n) for bb in range(b) for h in range(hk) for n in range(n_blocks)]
    for (_, h, n), steps in walks.items():
        want = [(h * group + g, (n + i) % m_blocks) for g in range(group) for i in range(m_blocks)]
        assert steps == want, (n, steps)


@pytest.mark.parametrize("name", ROTATED_NAMES)
def test_rotated_tickets_follow_the_order_the_walks_reach_a_query_block(rotated_probe: dict, name: str) -> None:
    """For each (batch, query head, query block) the visitors' tickets are 0..N-1 once each, in the
    order of the step at which their walks reach it (no two at the same step): the fixed order of
    the float additions, and the one in which they arrive, so a CTA rarely waits."""
    _, _, _, n_blocks, _ = rotated_probe["shape"][name]
    visitors: dict = {}
    for r in rotated_probe["step"][name]:
        visitors.setdefault((r["batch"], r["head_q"], r["m"]), []).append((r["t"], r["ticket"], r["n"]))
    for key, v in visitors.items():
        assert sorted(ticket for _, ticket, _ in v) == list(range(n_blocks)), (key, v)
        by_step = sorted(v)
        assert [ticket for _, ticket, _ in by_step] == list(range(n_blocks)), (key, v)
        assert len({t for t, _, _ in v}) == len(v), (key, v)


# ==== packed variable-length batches (block.h with kPacked) =========================================
# The kernel's BwdSeq comes from bwd_seq (csrc/common/bwd_packed.cuh, device code); the probe
# reimplements its clamp (packed_span) on the host and hands it to bwd_block as seq_of.

_PACKED_PROBE = r"""
#include <algorithm>
#include <cstdio>
#include <vector>
#include "flash_bwd_sm90/block.h"
#include "flash_bwd_sm90/traits.h"
using namespace flashattn;
using namespace flashattn::sm90;

static void span(const std::vector<int>& cu, int b, int total, int& row0, int& len) {
  row0 = std::min(std::max(cu[b], 0), total);
  len = std::min(std::max(cu[b + 1], row0), total) - row0;
}

template <int D>
void walk(const char* name, std::vector<int> cu_q, std::vector<int> cu_k, int total_q, int total_k, int hq, int hk,
          int mode, int left, int right) {
  using T = Sm90BwdTraits<D>;
  const int batch = static_cast<int>(cu_q.size()) - 1;
  int max_q = 1, max_k = 1;
  for (int b = 0; b < batch; ++b) {
    int r, l;
    span(cu_q, b, total_q, r, l); max_q = std::max(max_q, l);
    span(cu_k, b, total_k, r, l); max_k = std::max(max_k, l);
  }
  BwdParams p;
  p.batch = batch; p.heads_q = hq; p.heads_kv = hk; p.head_dim = D;
  p.set_varlen(cu_q.data(), cu_k.data(), max_q, max_k, total_q, total_k);
  p.set_mask(static_cast<CausalMode>(mode), left, right);
  auto seq_of = [&](int b) {
    BwdSeq s;
    span(cu_q, b, total_q, s.q_row0, s.seqlen_q);
    span(cu_k, b, total_k, s.k_row0, s.seqlen_k);
    s.causal_offset = p.mask_top_left ? 0 : s.seqlen_k - s.seqlen_q;
    s.seqlen_q = std::min(s.seqlen_q, p.seqlen_q);
    return s;
  };
  const int n_blocks = (max_k + T::kBlockN - 1) / T::kBlockN;
  std::printf("shape %s %d %d %d %d %d %d %d %d %d %d\n", name, batch, hq, hk, T::kBlockN, T::kBlockM, mode,
              p.window_left, p.window_right, total_q, total_k);
  for (int b = 0; b < batch; ++b) {
    const BwdSeq s = seq_of(b);
    std::printf("seq %s %d %d %d %d %d %d %d\n", name, b, s.q_row0, s.seqlen_q, s.k_row0, s.seqlen_k, s.causal_offset,
                bwd_packed_dq_block0(s.q_row0, b, T::kBlockM));
  }
  for (int cta = 0; cta < n_blocks * batch * hk; ++cta) {
    const BwdBlock blk = bwd_block<T, true>(p, n_blocks, 0, 1, cta, seq_of);
    std::printf("cta %s %d %d %d %d %d", name, cta, blk.batch, blk.head_kv, blk.n0, blk.dq_block0);
    for (int t = 0; t < blk.steps; ++t) std::printf(" %d:%d", blk.head_q(t), blk.m_block(t));
    std::printf("\n");
  }
}

int main() {
  // name, cu_seqlens_q, cu_seqlens_k, total_q, total_k, Hq, Hk, causal mode (0 none, 1 top-left,
  // 2 bottom-right), window left, right
  walk<128>("edges-br", {0, 127, 255, 256, 385, 385}, {0, 127, 300, 301, 301, 460}, 400, 470, 4, 2, 2, -1, -1);
  walk<128>("tl-window", {0, 70, 300, 301}, {0, 200, 260, 700}, 301, 700, 2, 1, 1, 40, -1);
  walk<64>("d64-none", {0, 0, 129, 400}, {0, 5, 300, 420}, 410, 430, 2, 2, 0, -1, -1);
  walk<256>("d256-br-window", {0, 65, 66, 300}, {0, 200, 201, 300}, 300, 300, 3, 3, 2, 30, 0);
  walk<128>("bad-offsets", {0, 300, 100, 500, 9999}, {0, 50, 40, 700, 800}, 600, 650, 2, 1, 2, -1, -1);
}
"""


def _visible(q: int, key: int, sq: int, sk: int, offset: int, left: int, right: int) -> bool:
    """mask.cuh's rule for one (query row, key) of a sequence: offset - left <= key - q <= offset + right."""
    if key >= sk or q >= sq:
        return False
    if left >= 0 and key < q + offset - left:
        return False
    return not (right >= 0 and key > q + offset + right)


@pytest.fixture(scope="module")
def packed_probe(tmp_path_factory) -> dict:
    table: dict = {"shape": {}, "seq": {}, "cta": {}}
    for line in run_cpp_probe(tmp_path_factory, "sm90_bwd_block_packed", _PACKED_PROBE):
        kind, name, *rest = line.split()
        if kind == "shape":
            table["shape"][name] = tuple(int(x) for x in rest)
        elif kind == "seq":
            b, q0, sq, k0, sk, off, blk0 = (int(x) for x in rest)
            table["seq"].setdefault(name, []).append(dict(b=b, q0=q0, sq=sq, k0=k0, sk=sk, off=off, blk0=blk0))
        else:
            cta, batch, head_kv, n0, blk0 = (int(x) for x in rest[:5])
            steps = [tuple(int(x) for x in s.split(":")) for s in rest[5:]]
            table["cta"].setdefault(name, []).append(dict(cta=cta, batch=batch, head_kv=head_kv, n0=n0, blk0=blk0,
                                                          steps=steps))
    return table


PACKED_NAMES = ["edges-br", "tl-window", "d64-none", "d256-br-window", "bad-offsets"]


def test_the_packed_probe_ran_every_case(packed_probe: dict) -> None:
    assert sorted(packed_probe["shape"]) == sorted(PACKED_NAMES)


@pytest.mark.parametrize("name", PACKED_NAMES)
def test_packed_walk_visits_exactly_the_query_blocks_that_see_the_keys(packed_probe: dict, name: str) -> None:
    """Each CTA of a packed batch walks, per query head of its group, exactly the query blocks of
    its own sequence that have a row seeing one of its keys (by mask.cuh's rule with the
    sequence's lengths and offset); a key block past its sequence's keys has no step."""
    batch, hq, hk, block_n, block_m, _, left, right, _, _ = packed_probe["shape"][name]
    seqs = packed_probe["seq"][name]
    group = hq // hk
    for r in packed_probe["cta"][name]:
        s = seqs[r["batch"]]
        keys = range(r["n0"], min(r["n0"] + block_n, s["sk"]))
        blocks = sorted({q // block_m for q in range(s["sq"]) for k in keys
                         if _visible(q, k, s["sq"], s["sk"], s["off"], left, right)})
        want = sorted((r["head_kv"] * group + g, m) for g in range(group) for m in blocks)
        assert sorted(r["steps"]) == want, (name, r, s)
        assert r["blk0"] == s["blk0"]


@pytest.mark.parametrize("name", PACKED_NAMES)
def test_packed_dq_tiles_never_overlap_and_stay_in_the_buffer(packed_probe: dict, name: str) -> None:
    """Sequence b's dq_accum tiles [block0, block0 + ceil(len / block_m)) lie below
    ceil(total_q / block_m) + B (flash_bwd_sm90_dq_accum_floats) whatever the offsets (clamped),
    and are disjoint from every other sequence's when the offsets keep the contract; decreasing
    offsets make spans, and so tiles, overlap, which docs/varlen.md allows (values unspecified, no
    access outside the buffers)."""
    batch, _, _, _, block_m, _, _, _, total_q, _ = packed_probe["shape"][name]
    seqs = packed_probe["seq"][name]
    contract = all(a["q0"] + a["sq"] <= b["q0"] for a, b in zip(seqs, seqs[1:]))
    assert contract == (name != "bad-offsets")
    limit = -(-total_q // block_m) + batch
    taken: dict[int, int] = {}
    for s in seqs:
        for t in range(s["blk0"], s["blk0"] + -(-s["sq"] // block_m)):
            assert 0 <= t < limit, (name, s, limit)
            assert not contract or t not in taken, (name, s, taken.get(t))
            taken[t] = s["b"]


# ==== the GQA group split's rule (csrc/flash_bwd_sm90/group_split.h) ==================================

_SPLIT_PROBE = r"""
#include <cstdio>
#include "flash_bwd_sm90/group_split.h"
using namespace flashattn::sm90;

int main() {
  const int groups[] = {1, 2, 3, 4, 6, 8, 12, 16, 32};
  const long long ctas[] = {1, 8, 16, 64, 128, 256, 512, 1024, 4096};
  for (int g : groups)
    for (long long c : ctas)
      for (int masked = 0; masked < 2; ++masked)
        std::printf("%d %lld %d %d\n", g, c, masked, bwd_group_split(g, c, masked != 0, 132));
  std::printf("waves %d\n", kBwdSplitMaskedWaves);
}
"""


@pytest.fixture(scope="module")
def split_rule(tmp_path_factory) -> dict:
    """{(group, ctas, masked): split} on a 132-SM GPU, and the masked calls' wave target."""
    table: dict = {}
    waves = 0
    for line in run_cpp_probe(tmp_path_factory, "sm90_bwd_group_split", _SPLIT_PROBE):
        parts = line.split()
        if parts[0] == "waves":
            waves = int(parts[1])
            continue
        g, c, masked, split = (int(x) for x in parts)
        table[(g, c, bool(masked))] = split
    return {"table": table, "waves": waves}


def test_group_split_is_the_smallest_divisor_that_fills_the_gpu(split_rule: dict) -> None:
    """Masked calls want waves x SMs CTAs, unmasked ones half the SMs: the split is the smallest
    divisor of the group that gets there, or the whole group; a grid already there is not split."""
    sms, waves = 132, split_rule["waves"]
    assert waves >= 2
    for (g, c, masked), split in split_rule["table"].items():
        want = waves * sms if masked else sms // 2
        assert g % split == 0, (g, c, masked, split)
        smaller = [d for d in range(1, split) if g % d == 0]
        assert all(c * d < want for d in smaller), (g, c, masked, split)
        assert c * split >= want or split == g, (g, c, masked, split)


def test_group_split_examples(split_rule: dict) -> None:
    t = split_rule["table"]
    assert t[(16, 128, True)] == 8    # MQA 16:1, B=1, S=16k, D=128, causal: 1024 CTAs
    assert t[(16, 128, False)] == 1   # the same unmasked: 128 CTAs, balanced
    assert t[(4, 512, True)] == 2     # GQA 4:1 at S=4k, B=4: 3.9 waves -> 7.8
    assert t[(8, 1024, True)] == 1    # enough CTAs already
    assert t[(1, 1, True)] == 1       # no group, nothing to split
    assert t[(3, 8, False)] == 3      # a group that has only itself and 1 as divisors


# ==== the GQA split's dispatch model (group_split.h bwd_group_split_model, FLASHATTN_BWD_GROUP_SPLIT=m) ====

_MODEL_CELLS = [  # D, S (queries = keys), Hk, causal; Hq = 2048 / D, B = 16384 / S (the standard grid's GQA)
    (128, 4096, 4, True), (128, 4096, 4, False), (128, 16384, 2, True), (128, 4096, 2, True),
    (64, 2048, 8, True), (64, 2048, 8, False), (64, 4096, 8, True), (64, 4096, 4, True),
    (128, 4096, 1, True), (128, 16384, 1, True), (64, 4096, 1, True), (64, 16384, 1, True),  # MQA
]

_MODEL_PROBE = r"""
#include <cstdio>
#include "flash_bwd_sm90/group_split.h"
using namespace flashattn::sm90;

int main() {
  int d, s, hk, causal, bm, bn;
  while (std::scanf("%d %d %d %d %d %d", &d, &s, &hk, &causal, &bm, &bn) == 6) {
    const int mb = (s + bm - 1) / bm;
    const auto steps_of = [&](int n) { return causal ? mb - (n * bn) / bm : mb; };
    BwdSplitGrid g;
    g.group = 2048 / d / hk;
    g.num_n_blocks = (s + bn - 1) / bn;
    g.pairs = static_cast<long long>(16384 / s) * hk;
    g.lpt = causal != 0;
    g.lpt_budget = 8ll << 20;
    g.head_bytes = 2ll * 2 * s * d;
    g.sm_count = 132;
    std::printf("%d %d %d %d %d %d", d, s, hk, causal, bwd_group_split_model(g, causal != 0, steps_of),
                causal ? bwd_group_split_raised(g, steps_of) : 0);
    for (int k = 1; k <= g.group; ++k)
      if (g.group % k == 0) std::printf(" %d:%.1f", k, bwd_split_model_end(g, k, steps_of));
    std::printf("\n");
  }
}
"""


@pytest.fixture(scope="module")
def split_model(tmp_path_factory) -> dict:
    """{(D, S, Hk, causal): (the model's split, {split: end in steps}, the raised rule's split or 0
    where unmasked)} from the C++ rules."""
    model = load_repo_module("lab/bwd_schedule_model.py")
    feed = "".join(f"{dd} {ss} {hk} {int(c)} {model.tiles(ss, dd, c)[0]} {model.tiles(ss, dd, c)[1]}\n"
                   for dd, ss, hk, c in _MODEL_CELLS)
    out = run_cpp_probe(tmp_path_factory, "sm90_bwd_split_model", _MODEL_PROBE, stdin=feed)
    table = {}
    for line in out:
        dd, ss, hk, c, split, raised, *ends = line.split()
        table[(int(dd), int(ss), int(hk), c == "1")] = (
            int(split), {int(k): float(v) for k, v in (e.split(":") for e in ends)}, int(raised))
    return table


def test_split_model_matches_the_lab_model(split_model: dict) -> None:
    """The C++ rule's ends are lab/bwd_schedule_model.py's (a unit's fixed cost 2 steps, a split
    unit's 1 more), shape by shape and split by split, and it takes the split that ends first."""
    model = load_repo_module("lab/bwd_schedule_model.py")
    for (d, s, hk, causal), (split, ends, _) in split_model.items():
        for k, end in ends.items():
            units = model.unit_steps(s, d, causal, False, hk, k)
            assert end == pytest.approx(model.makespan(units, 132, 2.0 + (1.0 if k > 1 else 0.0)), abs=0.05), (d, s, hk, causal, k)
        assert ends[split] <= min(ends.values()) / 0.99 + 1e-9
        assert all(ends[k] >= ends[split] * 0.99 - 1e-9 for k in ends if k > split)


def test_split_model_examples(split_model: dict) -> None:
    assert split_model[(128, 4096, 4, True)][0] == 4    # the training grid's 16:4 causal cell (the wave rule: 2)
    assert split_model[(64, 2048, 8, True)][0] == 1     # D=64 32:8 causal 2k, where a split measured a loss
    assert split_model[(128, 4096, 4, False)][0] == 1   # unmasked: every unit alike, no split pays
    assert split_model[(128, 16384, 1, True)][0] == 2   # MQA 16k: fewer than the wave rule's 8 (measured 18% slower)


def test_raised_rule(split_model: dict) -> None:
    """The default under a mask (bwd_group_split_raised): the wave rule's split, or a larger divisor
    only where the model ends 1% sooner than at the rule's, the earliest such."""
    model = load_repo_module("lab/bwd_schedule_model.py")
    for (d, s, hk, causal), (_, ends, raised) in split_model.items():
        if not causal:
            continue
        bn = model.tiles(s, d, causal)[1]
        rule = model.rule_split(2048 // d // hk, (s + bn - 1) // bn * (16384 // s) * hk, True, 132, 4)
        assert raised >= rule and raised in ends, (d, s, hk, raised, rule)
        if raised != rule:
            assert ends[raised] < ends[rule] * 0.99, (d, s, hk)
        assert all(ends[k] >= min(ends[raised], ends[rule] * 0.99) - 1e-9 for k in ends if k > rule and k != raised)


def test_raised_rule_examples(split_model: dict) -> None:
    """Measured on an H100 (2026-12-06, bf16): 4 CTAs a group at D=128 16:4 causal 4k gained 2.2% over
    the rule's 2, 16 at 16:1 4.7% over its 8, 2 at D=64 32:8 4k 2.1% over its 1; at 16k the rule's
    splits stay."""
    assert split_model[(128, 4096, 4, True)][2] == 4
    assert split_model[(128, 4096, 1, True)][2] == 16
    assert split_model[(64, 4096, 8, True)][2] == 2
    assert split_model[(128, 16384, 1, True)][2] == 8
    assert split_model[(64, 2048, 8, True)][2] == 1


# ==== the wide config's rule (csrc/flash_bwd_sm90/wide_rule.h) ========================================

_WIDE_PROBE = r"""
#include <cstdio>
#include "flash_bwd_sm90/wide_rule.h"
using namespace flashattn::sm90;

int main() {
  const int lefts[] = {-1, 0, 255, 1023, 2046, 2047, 4095};
  const int rights[] = {-1, 0, 7, 1000, 2047};
  const int seqlens[] = {300, 512, 767, 768, 1536, 2047, 2048, 16384};
  for (int mode = 0; mode <= 3; ++mode)
    for (int causal = 0; causal < 2; ++causal)
      for (int l : lefts)
        for (int r : rights)
          for (int sq : seqlens)
            for (int sk : seqlens)
              if (!causal || r == 0)  // BwdParams: a causal mask is window_right = 0
                std::printf("%d %d %d %d %d %d %d\n", mode, causal, l, r, sq, sk,
                            bwd_wide_rule(mode, causal != 0, l, r, sq, sk) ? 1 : 0);
  std::printf("keys %lld\n", kBwdWideWindowKeys);
  std::printf("queries %lld\n", kBwdWideUnmaskedQueries);
}
"""


@pytest.fixture(scope="module")
def wide_rule(tmp_path_factory) -> dict:
    """{(mode, causal, left, right, seqlen_q, seqlen_k): wide} and the two bounds."""
    table: dict = {}
    bounds: dict = {}
    for line in run_cpp_probe(tmp_path_factory, "sm90_bwd_wide_rule", _WIDE_PROBE):
        parts = line.split()
        if parts[0] in ("keys", "queries"):
            bounds[parts[0]] = int(parts[1])
            continue
        mode, causal, left, right, sq, sk, wide = (int(x) for x in parts)
        table[(mode, bool(causal), left, right, sq, sk)] = bool(wide)
    return {"table": table, **bounds}


def test_wide_rule_by_mode_mask_and_window(wide_rule: dict) -> None:
    """Mode 0 never, 3 always; 1 unmasked calls of at least `queries` query rows; 2 (the default)
    also masked calls (causal, windows) whose rows see at least `keys` keys (an open side counts
    the whole sequence)."""
    assert wide_rule["keys"] == 2048 and wide_rule["queries"] == 768
    for (mode, causal, left, right, sq, sk), wide in wide_rule["table"].items():
        masked = causal or left >= 0 or right >= 0
        if mode in (0, 3):
            want = mode == 3
        elif not masked:
            want = sq >= wide_rule["queries"]
        else:
            seen = min(sk, (sk if left < 0 else left) + (sk if right < 0 else right) + 1)
            want = mode == 2 and seen >= wide_rule["keys"]
        assert wide == want, (mode, causal, left, right, sq, sk)


def test_wide_rule_examples(wide_rule: dict) -> None:
    """The measured cells behind the bounds (H200, 2026-12-03; H100, 2026-11-27)."""
    t = wide_rule["table"]
    assert t[(2, False, -1, -1, 16384, 16384)]   # no mask: +2.4%
    assert t[(2, False, -1, -1, 768, 768)]       # no mask, 768 queries: a tie
    assert not t[(2, False, -1, -1, 512, 512)]   # no mask, 512 queries: -3.5% on 80-row steps
    assert not t[(2, False, -1, -1, 512, 16384)]  # the query rows decide without a mask
    assert t[(2, True, -1, 0, 16384, 16384)]     # causal: +3.3%
    assert t[(2, True, -1, 0, 2048, 2048)]       # causal 2k: +0.5-1.2%
    assert not t[(2, True, -1, 0, 1536, 1536)]   # causal 1.5k: -2..-3%
    assert not t[(2, True, -1, 0, 512, 512)]     # causal 512: -9%
    assert not t[(1, True, -1, 0, 16384, 16384)]  # causal, mode 1
    assert t[(2, True, 2047, 0, 16384, 16384)]   # causal + a 2048-key window: measured +2.6%
    assert not t[(2, True, 1023, 0, 16384, 16384)]  # a 1024-key window: measured 1.8% slower
    assert not t[(2, False, 1023, 7, 16384, 16384)]  # a two-sided window of 1031 keys
    assert not t[(2, False, -1, 7, 300, 300)]    # open left side, but 300 keys in all
    assert t[(2, False, -1, 7, 16384, 16384)]    # open left side over 16k keys
    assert t[(3, True, 255, 0, 512, 512)]        # mode 3: every call
    assert t[(3, False, -1, -1, 300, 300)]
    assert not t[(0, False, -1, -1, 16384, 16384)]  # mode 0: never
