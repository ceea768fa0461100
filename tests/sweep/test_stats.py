"""Sweep numbers: size ladder, percentiles, nccl-tests bandwidth formulas, row summaries."""

from __future__ import annotations

import math
import os

import pytest
from tests.helpers.realdata import ROOT as REALDATA_ROOT
from hypothesis import given
from hypothesis import strategies as st

from gpuhc.sweep.stats import (
    algbw_gbs,
    busbw_factor,
    busbw_gbs,
    percentile,
    size_ladder,
    slowest_per_iteration,
    summarize_size,
)

REALDATA = str(REALDATA_ROOT / "nccl-tests" / "01_all_reduce_perf_2node_16xH100_a3mega_healthy.txt")


def test_ladder_8b_to_2gib_is_29_powers_of_two():
    sizes = size_ladder(8, 2 << 30)
    assert sizes[0] == 8 and sizes[-1] == 2 << 30
    assert len(sizes) == 29
    assert all(b == 2 * a for a, b in zip(sizes, sizes[1:]))


def test_ladder_rejects_nonsense():
    with pytest.raises(ValueError):
        size_ladder(2, 8)
    with pytest.raises(ValueError):
        size_ladder(64, 8)


def test_busbw_formula_matches_nccl_tests_definition():
    # 16 ranks: busbw = algbw * 2 * 15 / 16
    assert busbw_factor(16) == pytest.approx(1.875)
    assert busbw_factor(2) == 1.0
    # 2 GiB in 12646 us on 16 ranks: nccl-tests printed algbw 169.81, busbw 318.40
    assert algbw_gbs(2147483648, 12646e-6) == pytest.approx(169.81, abs=0.01)
    assert busbw_gbs(2147483648, 12646e-6, 16) == pytest.approx(318.40, abs=0.01)


def test_percentile_interpolates_like_numpy():
    vals = [1.0, 2.0, 3.0, 4.0]
    assert percentile(vals, 50) == 2.5
    assert percentile(vals, 0) == 1.0 and percentile(vals, 100) == 4.0
    assert percentile([5.0], 95) == 5.0
    assert math.isnan(percentile([], 50))


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=50), st.floats(min_value=0, max_value=100))
def test_percentile_stays_within_range(vals, q):
    p = percentile(vals, q)
    assert min(vals) <= p <= max(vals)


def test_group_time_is_the_slowest_rank():
    per_rank = [[1.0, 5.0, 1.0], [2.0, 1.0, 1.0, 9.0]]
    assert slowest_per_iteration(per_rank) == [2.0, 5.0, 1.0]
    row = summarize_size(1 << 20, 2, [0.001, 0.002], [[0.001] * 10, [0.002] * 9 + [0.004]])
    assert row["time_us"] == 2000.0
    assert row["busbw_gbs"] == pytest.approx((1 << 20) / 0.002 / 1e9, rel=1e-3)
    assert row["p50_us"] == 2000.0 and row["p99_us"] > row["p95_us"] >= row["p50_us"]
    assert row["iters"] == 10


@pytest.mark.skipif(not os.path.exists(REALDATA), reason="reads /work/shared/realdata (absent outside this workplace)")
def test_formulas_reproduce_a_real_nccl_tests_table():
    """Reads /work/shared/realdata: every out-of-place row's algbw/busbw from its size and time."""
    rows = 0
    with open(REALDATA) as f:
        for line in f:
            parts = line.split()
            if len(parts) < 13 or not parts[0].isdigit():
                continue
            nbytes, t_us, alg, bus = int(parts[0]), float(parts[5]), float(parts[6]), float(parts[7])
            assert algbw_gbs(nbytes, t_us * 1e-6) == pytest.approx(alg, abs=0.01 + alg * 0.002)
            assert busbw_gbs(nbytes, t_us * 1e-6, 16) == pytest.approx(bus, abs=0.01 + bus * 0.002)
            rows += 1
    assert rows == 31
