"""CPU checks of the Hopper path's tile schedule (csrc/flash_fwd_sm90/tile_scheduler.h, plain C++
built with the host compiler): the policy that picks the dynamic schedule, the static and
dynamic hand-outs covering every tile exactly once, and that the balance model
(lab/sm90_schedule_model.py), on which the dynamic schedule was argued, walks the kernel's
own tile order."""

from __future__ import annotations

import pytest
from repo_modules import load_repo_module, run_cpp_probe

_PROBE = r"""
#include <cstdio>
#include <initializer_list>
#include "flash_fwd_sm90/tile_scheduler.h"
#include "flash_fwd_sm90/traits.h"
using namespace flashattn::sm90;
template <int D> Sm90TileShape shape(int seqlen_k, bool causal) { return sm90_tile_shape<D>(seqlen_k, causal); }
template <typename T> void oplanes(const char* name) {
  std::printf("oplanes %s %d %d %d %d\n", name, T::kOBufPlanes, T::kChunks, T::kSmemBytes, kMaxSmemSm90);
}
int main() {
  // The TMA-store epilogue's O buffer: the shipped D=128 and D=256 configs, and a D=64 one.
  oplanes<Sm90DefaultConfig<128>::Traits>("default128");
  oplanes<Sm90DefaultConfig<256>::Traits>("default256");
  oplanes<Sm90FwdTraits<64, 128, 2, true, 1, true>>("d64-otma");
  // config kind (0 default, 1 long keys, 2 non-causal) and tile shape by instantiated head dim,
  // seqlen_k and causal
  for (int d : {64, 128, 256})
    for (int sk : {1, 4095, 4096, 65536})
      for (int causal : {0, 1}) {
        const Sm90TileShape ts = d == 64 ? shape<64>(sk, causal) : d == 128 ? shape<128>(sk, causal) : shape<256>(sk, causal);
        std::printf("kind %d %d %d %d %d %d %d\n", d, sk, causal, int(sm90_config_kind(d, sk, causal != 0)), ts.block_m,
                    ts.block_n, int(ts.partial_tile_first));
      }
  // the run-time kind (by the instantiated head dim's value) against each head dim's own rule:
  // kindof d seqlen_k causal by-value by-template
  for (int sk : {1, 1535, 1536, 4095, 4096, 65536})
    for (int causal : {0, 1}) {
      const bool c = causal != 0;
      const int by_template[5] = {int(sm90_config_kind<64>(sk, c)), int(sm90_config_kind<96>(sk, c)),
                                  int(sm90_config_kind<128>(sk, c)), int(sm90_config_kind<192>(sk, c)),
                                  int(sm90_config_kind<256>(sk, c))};
      const int dims[5] = {64, 96, 128, 192, 256};
      for (int i = 0; i < 5; ++i)
        std::printf("kindof %d %d %d %d %d\n", dims[i], sk, causal, int(sm90_config_kind(dims[i], sk, c)), by_template[i]);
    }
  // policy causal seqlen_q batch_heads sm_count -> 0/1
  for (int causal : {0, 1})
    for (long long s : {1LL, 127LL, 128LL, 129LL, 512LL, 4096LL, 16384LL})
      for (long long bh : {1LL, 8LL, 66LL, 132LL, 512LL})
        for (int sms : {78, 132})
          std::printf("policy %d %lld %lld %d %d\n", causal, s, bh, sms,
                      int(dynamic_schedule_pays(causal != 0, s, bh, 128, sms)));  // 128-row tiles
  // the static hand-out: CTA cta's tiles of n, plain and snake order
  for (int snake : {0, 1})
    for (int n : {1, 5, 131, 132, 133, 500, 1024, 4096})
      for (int grid : {1, 7, 132}) {
        const int g = grid < n ? grid : n;
        for (int cta = 0; cta < g; ++cta) {
          std::printf("static %d %d %d %d", snake, n, g, cta);
          for (int t = cta; t < n; t = static_next_tile(t, cta, g, snake != 0)) std::printf(" %d", t);
          std::printf("\n");
        }
      }
  // tile t of the standard grid -> m_block batch head n_blocks (top-left causal and not)
  for (int d : {64, 128, 256})
    for (int s : {512, 4096, 16384})
      for (int causal : {0, 1}) {
        Sm90TileShape ts = d == 64 ? shape<64>(s, causal) : d == 128 ? shape<128>(s, causal) : shape<256>(s, causal);
        const int b = 16384 / s, h = 2048 / d;
        // dispatch.cu find_launcher's grid rule: causal D=64 from kSm90LongKeysFullGridMin keys on the
        // long-keys config where its tiles fill the rule's share of 132 SMs.
        const Sm90TileShape lk = sm90_tile_shape_of<Sm90LongKeysConfig<64>::Traits>();
        if (d == 64 && causal && s >= kSm90LongKeysFullGridMin &&
            sm90_long_keys_tiles_fill_grid(static_cast<long long>((s + lk.block_m - 1) / lk.block_m) * b * h, 132))
          ts = lk;
        const int bm = ts.block_m, bn = ts.block_n, m_blocks = (s + bm - 1) / bm;
        // The groups of the schedule the binding picks for this call (launch.cuh), and the static
        // schedule's (the FP8 D=256 kernel's at causal calls).
        const bool dynamic = dynamic_schedule_pays(causal != 0, s, b * h, bm, 132);
        const int group = l2_group_heads(s, d, h, h, b, l2_group_budget_bytes(dynamic));
        const int static_group = l2_group_heads(s, d, h, h, b, l2_group_budget_bytes(false));
        std::printf("group %d %d %d %d %d %d\n", d, s, causal, int(dynamic), group, static_group);
        for (int pass = 0; pass < 2; ++pass) {
          if (pass == 1 && !(d == 256 && s == 4096 && causal)) break;
          for (int t = 0; t < m_blocks * b * h; ++t) {
            const TileCoord c = decode_tile(t, m_blocks, h, b * h, pass == 0 ? group : static_group);
            // q_row_shift as launch.cuh sets it for a dense unsplit call (the partial tile first)
            const flashattn::KeyBlocks r = block_range(c.m_block, bm, bn, s, s, 0, -1, causal ? 0 : -1,
                                                       causal && ts.partial_tile_first ? m_blocks * bm - s : 0);
            std::printf("%s %d %d %d %d %d %d %d %d %d %d\n", pass == 0 ? "tile" : "statictile", d, s, causal, t,
                        c.m_block, c.batch, c.head_q, r.count(), bm, bn);
          }
        }
      }
  // tile_rows under a shift, and block_range's key blocks from them: rows block_m seqlen_q shift m_block
  // first end n_begin n_end full_begin full_end (causal, bottom-right over seqlen_k = seqlen_q + 37)
  for (int bm : {64, 128, 192})
    for (int s : {1, 63, 64, 65, 191, 192, 193, 1000, 4096})
      for (int shifted : {0, 1}) {
        const int m_blocks = (s + bm - 1) / bm, shift = shifted ? m_blocks * bm - s : 0;
        if (shifted && shift == 0) continue;  // a whole last tile: the unshifted case again
        for (int m = 0; m < m_blocks; ++m) {
          const TileRows t = tile_rows(m, bm, s, shift);
          const flashattn::KeyBlocks r = block_range(m, bm, 128, s, s + 37, 37, -1, 0, shift);
          std::printf("rows %d %d %d %d %d %d %d %d %d %d\n", bm, s, shift, m, t.first, t.end, r.n_begin, r.n_end,
                      r.full_begin, r.full_end);
        }
      }
}
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> dict:
    out = run_cpp_probe(tmp_path_factory, "sm90_schedule", _PROBE)
    table: dict = {"policy": {}, "tiles": {}, "statictiles": {}, "group": {}, "oplanes": {}, "kind": {}, "kindof": {}, "static": {},
                   "rows": {}}
    for line in out:
        kind, *vals = line.split()
        if kind == "oplanes":
            table["oplanes"][vals[0]] = tuple(int(x) for x in vals[1:])
            continue
        vals = [int(x) for x in vals]
        if kind == "kind":
            table["kind"][tuple(vals[:3])] = tuple(vals[3:])
        elif kind == "kindof":
            table["kindof"][tuple(vals[:3])] = tuple(vals[3:])
        elif kind == "policy":
            table["policy"][tuple(vals[:4])] = bool(vals[4])
        elif kind == "group":
            table["group"][tuple(vals[:3])] = tuple(vals[3:])  # (dynamic, group, static group)
        elif kind == "rows":
            bm, s, shift, *rest = vals
            table["rows"].setdefault((bm, s, shift), []).append(tuple(rest))
        elif kind == "static":
            snake, n, g, cta, *seq = vals
            table["static"].setdefault((snake, n, g), {})[cta] = seq
        else:  # tile / statictile
            d_, s, causal, t, m_block, batch, head, n_blocks, bm, bn = vals
            table["tiles" if kind == "tile" else "statictiles"].setdefault((d_, s, causal), []).append(
                (t, m_block, batch, head, n_blocks, (bm, bn)))
    return table


def test_config_kind_by_value_follows_each_head_dims_rule(probe: dict) -> None:
    """traits.h sm90_config_kind(head_dim, ...), which the dispatcher calls with the instantiated head
    dim's value, returns that head dim's own rule (sm90_config_kind<D>) for every instantiated head dim:
    a config made distinct for D=96 or D=192 is picked without another edit."""
    assert sorted({d for d, _, _ in probe["kindof"]}) == [64, 96, 128, 192, 256]
    for (d, sk, causal), (by_value, by_template) in probe["kindof"].items():
        assert by_value == by_template, (d, sk, causal)


def test_config_kind_per_call(probe: dict) -> None:
    """traits.h sm90_config_kind: D=64 without a mask runs the three-warpgroup config (192-row
    tiles) at every length; causal D=64 the three-warpgroup masked config (192-row tiles) from
    seqlen_k 4096; everything else,
    and every D=128/256 call, the default. Only the long-keys config shifts its partial query tile
    first (kPartialTileFirst): the others' tiles are whole key blocks, which a shift cannot save."""
    default, long_keys, non_causal = 0, 1, 2
    assert len(probe["kind"]) == 3 * 4 * 2
    for (d, sk, causal), (kind, bm, bn, partial_first) in probe["kind"].items():
        assert partial_first == (kind == long_keys), (d, sk, causal)
        if d == 64 and not causal:
            assert (kind, bm, bn) == (non_causal, 192, 128), (d, sk, causal)
        elif d == 64 and sk >= 4096:
            assert (kind, bm, bn) == (long_keys, 192, 128), (d, sk, causal)
        else:
            assert kind == default and bm == 128 and bn == (64 if d == 256 else 128), (d, sk, causal)


def test_the_partial_query_tile_comes_first_and_the_tiles_own_every_row_once(probe: dict) -> None:
    """tile_rows (tile_scheduler.h) under Sm90Params::q_row_shift = tiles x block_m - seqlen_q: tile 0
    owns rows [0, block_m - shift), every later tile block_m rows ending at seqlen_q for the last; each
    tile loads block_m rows from a row >= 0 (no negative TMA coordinate) that cover the rows it owns;
    together they own every row exactly once. Without the shift, the plain tiles. block_range's key
    blocks are those the owned rows see (causal, bottom-right, seqlen_k = seqlen_q + 37)."""
    assert probe["rows"], "the probe printed no tile rows"
    for (bm, s, shift), tiles in probe["rows"].items():
        owned = []
        for i, (m, first, end, n_begin, n_end, full_begin, full_end) in enumerate(tiles):
            assert m == i
            start = 0 if m == 0 else m * bm - shift
            assert first == max(m * bm - shift, 0) and first >= 0, (bm, s, shift, m)
            assert end == min((m + 1) * bm - shift, s) and start < end <= first + bm, (bm, s, shift, m)
            owned.extend(range(start, end))
            # rows [start, end) see keys [0, row + 37 + 1): the blocks up to the last row's key
            assert (n_begin, n_end) == (0, -(-(end - 1 + 38) // 128)), (bm, s, shift, m)
            assert full_begin == 0 and full_end == (start + 38) // 128 or full_begin == full_end == n_end, (bm, s, shift, m)
        assert owned == list(range(s)), (bm, s, shift)
        if shift:
            assert tiles[-1][2] == s and (bm - shift) == s - (len(tiles) - 1) * bm, "the last tile is whole"


def test_dynamic_schedule_only_for_unequal_tiles_beyond_one_wave(probe: dict) -> None:
    for (causal, s, bh, sms), dynamic in probe["policy"].items():
        m_blocks = -(-s // 128)
        assert dynamic == (bool(causal) and m_blocks > 1 and m_blocks * bh > sms), (causal, s, bh, sms)
    # The standard grid's causal shapes all take it on an H100 (132 SMs), none of the others.
    assert probe["policy"][(1, 512, 512, 132)] and not probe["policy"][(0, 16384, 512, 132)]
    assert not probe["policy"][(1, 128, 512, 132)]  # one query block per head: equal tiles


@pytest.mark.parametrize("grid", [1, 7, 132])
def test_static_and_dynamic_hand_outs_cover_every_tile_once(probe: dict, grid: int) -> None:
    """Static: CTA c runs c, c + grid, ...; dynamic: CTA c runs c, then counter + grid values in
    whatever order the CTAs ask (schedule.cuh). Both must be a partition of the tiles."""
    for (d, s, causal), tiles in probe["tiles"].items():
        n = len(tiles)
        g = min(grid, n)
        static = sorted(t for c in range(g) for t in range(c, n, g))
        assert static == list(range(n))
        counter, taken, active = 0, [], list(range(g))
        taken.extend(active)  # first wave
        ask = 0
        while active:  # CTAs ask in a rotating order; each stops at its first index >= n
            c = active[ask % len(active)]
            t = counter + g
            counter += 1
            if t >= n:
                active.remove(c)
            else:
                taken.append(t)
                ask += 1
        assert sorted(taken) == list(range(n)), (d, s, causal, grid)
        # and every (query block, batch, head) appears once in the tile order itself
        coords = {(m, b, h) for _, m, b, h, _, _ in tiles}
        assert len(coords) == n


def test_static_schedule_partitions_the_tiles_in_both_orders(probe: dict) -> None:
    """static_next_tile (tile_scheduler.h) as compiled: each CTA's sequence, plain and snake, and
    together every tile exactly once; plain is c, c + grid, ...; snake alternates position c and
    grid - 1 - c of each round."""
    assert probe["static"], "the probe printed no static hand-out"
    for (snake, n, g), seqs in probe["static"].items():
        assert sorted(t for seq in seqs.values() for t in seq) == list(range(n)), (snake, n, g)
        for cta, seq in seqs.items():
            if snake:
                assert all(t % g == (cta if (t // g) % 2 == 0 else g - 1 - cta) for t in seq), (n, g, cta)
            else:
                assert seq == list(range(cta, n, g)), (n, g, cta)


def test_snake_order_balances_causal_rounds(probe: dict) -> None:
    """Under a causal mask (tiles of a round from long to short) the snake order's busiest CTA has
    less work than the plain order's (D=256 S=4k in the static schedule's groups: the FP8 forward's
    static causal case)."""
    tiles = probe["statictiles"][(256, 4096, 1)]
    work = [n_blocks for _, _, _, _, n_blocks, _ in tiles]
    n, g = len(work), 132
    assert n == 1024  # the probe printed the hand-outs of 1024 tiles for this

    def busiest(snake: int) -> int:
        return max(sum(work[t] for t in seq) for seq in probe["static"][(snake, n, g)].values())

    assert busiest(1) < busiest(0), (busiest(1), busiest(0))


def test_balance_model_walks_the_kernels_tile_order(probe: dict) -> None:
    model = load_repo_module("lab/sm90_schedule_model.py")
    for (d, s, causal), tiles in probe["tiles"].items():
        assert model.tile_shape(d, s, bool(causal), (16384 // s) * (2048 // d), s) == tiles[0][5], \
            "the model's tile shape is the compiled one"
        work = model.tile_work(s, d, 16384 // s, 2048 // d, bool(causal), overhead=0.0)
        kernel = [n_blocks for _, _, _, _, n_blocks, _ in tiles]
        assert work == kernel, (d, s, causal)


def test_l2_groups_fit_the_budget_and_the_model_uses_the_kernels(probe: dict) -> None:
    """A group's K/V fits the L2 budget of its schedule (8 MB static, 16 MB dynamic) or is one head,
    and the balance model groups as the kernel does."""
    model = load_repo_module("lab/sm90_schedule_model.py")
    assert model.L2_GROUP_BUDGET == 8 << 20 and model.L2_GROUP_BUDGET_DYNAMIC == 16 << 20
    seen_dynamic = False
    for (d, s, causal), (dynamic, group, static_group) in probe["group"].items():
        assert dynamic == (causal == 1), "every causal cell of the standard grid has more tiles than SMs"
        seen_dynamic |= bool(dynamic)
        batch_heads = (16384 // s) * (2048 // d)
        kv_per_head = 2 * s * d * 2
        for g, budget in ((group, model.L2_GROUP_BUDGET_DYNAMIC if dynamic else model.L2_GROUP_BUDGET),
                          (static_group, model.L2_GROUP_BUDGET)):
            assert 1 <= g <= batch_heads
            assert g == 1 or g * kv_per_head <= budget, (d, s, g)
            assert g == batch_heads or (g + 1) * kv_per_head > budget, "as many as fit"
            assert model.l2_group_heads(s, d, batch_heads, budget) == g, (d, s)
    assert seen_dynamic


def test_tma_store_epilogue_buffers_the_whole_tile_where_it_fits(probe: dict) -> None:
    """The shipped D=128 config stages all of O (one store group per tile); the shipped D=256 one
    (64-key blocks) has room for two of its four 64-column planes only, and streams O through them."""
    planes, chunks, smem, limit = probe["oplanes"]["default128"]
    assert planes == chunks == 2 and smem <= limit
    planes, chunks, smem, limit = probe["oplanes"]["default256"]
    assert (planes, chunks) == (2, 4) and limit - 16384 < smem <= limit, "two planes fit, a third would not"
    planes, chunks, _, _ = probe["oplanes"]["d64-otma"]
    assert planes == chunks == 1


_BUDGET_PROBE = r"""
#include <cstdio>
#include "flash_fwd_sm90/traits.h"
using namespace flashattn::sm90;
template <typename T, bool kDynamic> void budget(const char* name) {
  using R = RegisterSplit<kDynamic, T::kConsumerWGs>;
  std::printf("%s %d %d %d %d %d %d %d\n", name, T::kConsumerWGs, T::kThreads, T::kCtasPerSm, T::kSmemBytes,
              R::kLaunchRegs, R::kProducer, R::kConsumer);
}
int main() {
  budget<Sm90DefaultConfig<128>::Traits, false>("default128-static");
  budget<Sm90DefaultConfig<64>::Traits, true>("default64-dynamic");
  budget<Sm90LongKeysConfig<64>::Traits, true>("longkeys64-dynamic");
  budget<Sm90FwdTraits<64, 128, 2, false, 1, false, 1, 1, true>, false>("d64-1wg-static");
  budget<Sm90FwdTraits<64, 128, 2, false, 1, false, 1, 1, true>, true>("d64-1wg-dynamic");
  budget<Sm90FwdTraits<64, 128, 3, false, 1, false, 1, 1, true>, true>("d64-1wg-s3-dynamic");
  budget<Sm90FwdTraits<128, 64, 2, false, 1, false, 1, 1, true>, true>("d128-1wg-n64-dynamic");
}
"""


def test_ctas_per_sm_fit_the_register_file_and_shared_memory(tmp_path_factory) -> None:
    """Every config's CTAs per SM (one, or two for a one-consumer config) fit an SM: the registers
    the launch allocates (65536 over the CTAs' threads, in steps of 8) hold the setmaxnreg budgets,
    which use all of them, and kCtasPerSm CTAs' shared memory (plus 1 KB each the system keeps)
    fits the 228 KB."""
    rows = {}
    for line in run_cpp_probe(tmp_path_factory, "sm90_budgets", _BUDGET_PROBE):
        name, *vals = line.split()
        rows[name] = tuple(int(v) for v in vals)
    for name, (wgs, threads, ctas, smem, launch_regs, producer, consumer) in rows.items():
        assert threads == 128 * (1 + wgs), name
        assert ctas == (2 if wgs == 1 else 1), name
        assert launch_regs == 65536 // ctas // threads // 8 * 8, name
        assert producer + wgs * consumer <= (1 + wgs) * launch_regs, f"{name}: setmaxnreg asks for more than the launch"
        assert ctas * 128 * (producer + wgs * consumer) <= 65536, name
        assert ctas * (smem + 1024) <= 228 * 1024, name
    assert rows["default128-static"][4:] == (168, 24, 240)
    assert rows["d64-1wg-static"][2:3] + rows["d64-1wg-static"][4:] == (2, 128, 24, 232)
    assert rows["d64-1wg-dynamic"][4:] == (128, 32, 224)
