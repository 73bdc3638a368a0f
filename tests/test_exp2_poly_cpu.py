"""CPU check of csrc/common/exp2_poly.h, the exponential that kernels may run on the FMA pipe
instead of the SFU (Sm90FwdTraits::kExpEmu): the header is plain host/device C++, so the very
function is compiled with the host compiler and compared with 2^x in float64."""

from __future__ import annotations

import math

import pytest
from repo_modules import run_cpp_probe

_PROBE = r"""
#include <cmath>
#include <cstdio>
#include <limits>
#include "common/exp2_poly.h"
int main() {
  for (int i = 0; i <= 260000; ++i) {  // x from 0 down to -130 in steps of 1/2000
    const float x = -static_cast<float>(i) / 2000.f;
    std::printf("%.9g %.9g\n", x, flashattn::exp2_poly(x));
  }
  std::printf("%.9g %.9g\n", -std::numeric_limits<float>::infinity(),
              flashattn::exp2_poly(-std::numeric_limits<float>::infinity()));
}
"""


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> list[tuple[float, float]]:
    out = " ".join(run_cpp_probe(tmp_path_factory, "exp2_poly", _PROBE)).split()
    return [(float(out[i]), float(out[i + 1])) for i in range(0, len(out), 2)]


def test_relative_error_is_below_half_an_fp16_ulp(table) -> None:
    worst = max(abs(y - 2.0**x) / 2.0**x for x, y in table if -125.0 <= x <= 0.0)
    assert worst < 1e-4, worst  # fp16 half ulp 4.9e-4, bf16 3.9e-3: P rounds coarser than this


def test_below_minus_125_and_minus_infinity_give_exactly_zero(table) -> None:
    assert all(y == 0.0 for x, y in table if x < -125.0)
    assert table[-1] == (-math.inf, 0.0)  # masked scores: no contribution at all


def test_it_is_2_to_the_x_not_something_close_in_shape(table) -> None:
    by_x = dict(table)
    for n in (0, 1, 7, 64, 120):  # integers: exactly representable powers of two, up to the error
        assert by_x[-float(n)] == pytest.approx(2.0**-n, rel=1e-4)
