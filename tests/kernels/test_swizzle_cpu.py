"""CPU checks of the swizzled shared-memory rows (csrc/common/swizzle.h) as the portable backward
reads them (csrc/flash_bwd/mainloop.cuh, Traits::kSwizzleQdO), built with the host compiler against
the real headers: for every tile config the traits admit (and the configs that set the switch),
every lane's ldmatrix address formed the kernel's way (the lane's chunk placed by its row once, each
later column offset applied by swizzled_col_offset) is exactly where the copy (GmemTileLoader's
placement, swizzled_chunk_128b) put the element it wants; the 8 rows of each ldmatrix phase fall in
8 distinct bank groups; and each 128-byte line of a copied row receives all 8 of its chunks."""

from __future__ import annotations

import pytest
from repo_modules import run_cpp_probe

_PROBE = r"""
#include <cstdio>
#include <cstdint>
#include "common/swizzle.h"
#include "flash_bwd/traits.h"
using namespace flashattn;

// Byte offset of element (row, col) of a swizzled tile of D-element rows, as the copy places it.
template <int D> uint32_t placed(int row, int col) {
  return row * D * 2 + swizzled_chunk_128b(col / 8, row) * 16 + (col % 8) * 2;
}
// The kernel's way (q_off): the lane's first (row, col) placed once, then the column offset
// applied by swizzled_col_offset and whole rows added (`row_elems` elements: rows times D).
template <int D> uint32_t kernel_way(int row0, int col0, int row_elems, int cols) {
  return swizzled_col_offset(placed<D>(row0, col0), cols) + row_elems * 2;
}

// One ldmatrix: lane l at (row_of(l), col_of(l)) plus row_off rows and col_off columns. Counts the
// lanes whose address formed the kernel's way is not where the copy put that element, and the
// pairs of lanes within an 8-lane phase that share a bank group.
template <int D, typename RowOf, typename ColOf>
void check_ldmatrix(RowOf row_of, ColOf col_of, int row_off, int col_off, int& bad, int& conflicts) {
  uint32_t banks[32];
  for (int lane = 0; lane < 32; ++lane) {
    const int row = row_of(lane), col = col_of(lane);
    const uint32_t got = kernel_way<D>(row, col, row_off * D, col_off);
    bad += got != placed<D>(row + row_off, col + col_off);
    banks[lane] = (got / 16) % 8;
  }
  for (int ph = 0; ph < 4; ++ph)
    for (int i = 0; i < 8; ++i)
      for (int j = i + 1; j < 8; ++j) conflicts += banks[ph * 8 + i] == banks[ph * 8 + j];
}

template <typename T> int check(const char* name) {
  constexpr int D = T::kHeadDim;
  int bad = 0, conflicts = 0;
  // Phase A, Q/dO as the B operand [n][k]: row a_col0 + lane%8 + 8*(lane/16) (+16 np), column
  // 8*((lane/8)%2) (+16 kk).
  for (int a_col0 = 0; a_col0 < T::kBlockM; a_col0 += T::kBlockM / T::kAWarpsM)
    for (int kk = 0; kk < D / 16; ++kk)
      for (int np = 0; np < (T::kANTiles + 1) / 2; ++np)
        check_ldmatrix<D>([&](int lane) { return a_col0 + lane % 8 + (lane / 16) * 8; },
                          [](int lane) { return ((lane / 8) % 2) * 8; }, np * 16, kk * 16, bad, conflicts);
  // Phase B, dO/Q transposed [k][n]: row lane%8 + 8*((lane/8)%2) (+16 kk), column b_col0 + 8*(lane/16)
  // (+16 np).
  for (int b_col0 = 0; b_col0 < D; b_col0 += D / T::kBWarpsD)
    for (int kk = 0; kk < T::kBlockM / 16; ++kk)
      for (int np = 0; np < T::kBNTiles / 2; ++np)
        check_ldmatrix<D>([](int lane) { return lane % 8 + ((lane / 8) % 2) * 8; },
                          [&](int lane) { return b_col0 + (lane / 16) * 8; }, kk * 16, np * 16, bad, conflicts);
  // The copy: every chunk of every row lands once, inside its own 128-byte line.
  int misplaced = 0;
  for (int row = 0; row < T::kBlockM; ++row) {
    int seen[64] = {0};
    for (int c = 0; c < D / 8; ++c) {
      const int at = swizzled_chunk_128b(c, row);
      misplaced += at / 8 != c / 8 || seen[at]++ != 0;
    }
  }
  std::printf("%s bad=%d conflicts=%d misplaced=%d\n", name, bad, conflicts, misplaced);
  return 0;
}

int main() {
  // The shipped config with the switch, and every large and compact geometry the traits admit it on.
  static_assert(BwdTileConfig<64, BwdTileVariant::kLarge>::Traits::kSwizzleQdO, "D=64's large tile swizzles Q/dO");
  check<BwdTileConfig<64, BwdTileVariant::kLarge>::Traits>("d64-large");
  check<BwdKernelTraits<64, 128, 64, 8, 4, 4, 4, 1, true>>("d64-compact");
  check<BwdKernelTraits<128, 128, 64, 8, 8, 4, 2, 2, true>>("d128-large");
  check<BwdKernelTraits<128, 64, 64, 8, 4, 4, 4, 1, true>>("d128-compact");
  check<BwdKernelTraits<256, 64, 64, 8, 2, 2, 4, 1, true>>("d256-large");
  check<BwdKernelTraits<256, 32, 32, 8, 2, 2, 2, 1, true>>("d256-compact");
  return 0;
}
"""


def test_swizzled_q_do_addresses_match_the_copy_and_stay_conflict_free(tmp_path_factory):
    lines = run_cpp_probe(tmp_path_factory, "swizzle", _PROBE)
    assert len(lines) == 6, lines
    for line in lines:
        name, *fields = line.split()
        values = dict(f.split("=") for f in fields)
        assert values == {"bad": "0", "conflicts": "0", "misplaced": "0"}, f"{name}: {values}"
