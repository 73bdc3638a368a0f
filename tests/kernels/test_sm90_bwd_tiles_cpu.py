"""CPU checks of the Hopper backward's dQ tile order (csrc/flash_bwd_sm90/traits.h, plain C++ built
with the host compiler), for every form the kernels run: D=64's query halves, D=128's column halves,
the wide config's transposed dQ, D=96's (both its configs: dQ^T over two chunk planes, the last 32
columns zeros), and the roles form at D=192 and 256. Each consumer accumulator
value, placed at its (query row, column) of the block as the consumers and the convert kernel read
it, is where dq_tile_offset_rc finds it (dq_tile_offset, the consumers' store), and every float of
the tile is written exactly once; the roles form's column map (roles_col) gives each warpgroup its
own columns, n8 slices contiguous, and at D=192 plane `wg` whole and half `wg` of plane 2, the two
pieces the MN-major operand of descriptors.h's roles_b reads."""

from __future__ import annotations

from repo_modules import run_cpp_probe

_PROBE = r"""
#include <cstdio>
#include <vector>
#include "flash_bwd_sm90/traits.h"
using namespace flashattn::sm90;

template <typename T>
void check(const char* name) {
  std::vector<int> hits(T::kDqTileFloats, 0);
  std::vector<int> owner(T::kHeadDim, -1);
  int bad = 0;
  for (int wg = 0; wg < 2; ++wg)
    for (int wtid = 0; wtid < kWarpgroupThreads; ++wtid)
      for (int j = 0; j < T::kDqRegs / 4; ++j)
        for (int v = 0; v < 4; ++v) {
          const int warp = wtid / 32, lane = wtid % 32;
          const int r = 16 * warp + lane / 4 + 8 * (v / 2);  // accumulator row
          const int c = 8 * j + 2 * (lane % 4) + v % 2;      // accumulator column
          int row, col;
          if (T::kDqTransposed) {  // dQ^T: rows are columns of dQ, columns its query rows
            row = c;
            col = kRowsPerConsumer * wg + r;
          } else if (T::kDqSplit == Sm90BwdDqSplit::kSplitQueries) {
            row = kRowsPerConsumer * wg + r;
            col = c;
          } else {
            row = r;
            col = T::dq_split_col(wg, c);  // the convert kernel's column
          }
          const int off = T::dq_tile_offset(wg, j, wtid, v);
          if (off < 0 || off >= T::kDqTileFloats || T::dq_tile_offset_rc(row, col) != off) ++bad;
          else ++hits[off];
          if (T::kRoles && col < T::kHeadDim) {
            if (owner[col] != -1 && owner[col] != wg) ++bad;
            owner[col] = wg;
          }
        }
  int once = 0;
  for (int h : hits) once += h == 1;
  int cols = 0, slices = 0, planes = 0;
  if (T::kRoles) {
    for (int o : owner) cols += o != -1;
    for (int wg = 0; wg < 2; ++wg)
      for (int c = 0; c < T::kAccN; c += 8) {
        for (int e = 1; e < 8; ++e) slices += T::roles_col(wg, c + e) != T::roles_col(wg, c) + e;
        // D = 192: plane wg whole, then half wg of plane 2
        if (T::kHeadDim == 192) {
          const int col = T::roles_col(wg, c);
          const bool ok = c < kChunkCols ? col / kChunkCols == wg
                                         : col / kChunkCols == 2 && (col % kChunkCols) / 32 == wg;
          planes += !ok;
        }
      }
  } else {
    cols = T::kHeadDim;
  }
  std::printf("%s bad=%d once=%d floats=%d cols=%d/%d slices=%d planes=%d\n", name, bad, once, T::kDqTileFloats, cols,
              T::kHeadDim, slices, planes);
}

int main() {
  check<Sm90BwdConfig<64, false>::Traits>("d64");
  check<Sm90BwdConfig<128, false>::Traits>("d128");
  check<Sm90BwdConfig<128, false, true>::Traits>("d128-wide");
  check<Sm90BwdConfig<96, false>::Traits>("d96");
  check<Sm90BwdConfig<96, false, true>::Traits>("d96-wide");
  check<Sm90BwdConfig<192, false>::Traits>("d192-roles");
  check<Sm90BwdConfig<256, false>::Traits>("d256-roles");
}
"""


def test_dq_tile_order_and_the_roles_column_map(tmp_path_factory) -> None:
    lines = run_cpp_probe(tmp_path_factory, "sm90_bwd_tiles", _PROBE)
    assert [line.split()[0] for line in lines] == ["d64", "d128", "d128-wide", "d96", "d96-wide", "d192-roles",
                                                        "d256-roles"], lines
    for line in lines:
        fields = dict(f.split("=") for f in line.split()[1:])
        assert fields["bad"] == "0", line
        assert fields["once"] == fields["floats"], line  # every float of the tile written once
        have, want = fields["cols"].split("/")
        assert have == want, line  # the roles form's warpgroups cover every column between them
        assert fields["slices"] == "0" and fields["planes"] == "0", line
